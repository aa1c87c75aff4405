// Gemma 3's text encoder (model/gemma3.h): its config.json through one table, its modules, and
// the forward pass on packed tokens, held to transformers' Gemma3TextModel by
// tests/torch/test_gemma.cpp.
#include "model/gemma3.h"

#include <cmath>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "model/activation_checkpoint.h"
#include "model/attention.h"
#include "model/hf_config_table.h"
#include "model/hf_module_parts.h"

namespace ddp_embed {
namespace {

// config.json as one table (the rope thetas, the window, layer_types and
// use_bidirectional_attention are code, in the reader below).
const HfConfigTable<Gemma3Config>& gemma3_hf_table() {
  using F = HfField<Gemma3Config>;
  static const HfConfigTable<Gemma3Config> table{
      {F{"vocab_size", &Gemma3Config::vocab_size, HfBound::Positive},
       F{"hidden_size", &Gemma3Config::hidden_size, HfBound::Positive},
       F{"intermediate_size", &Gemma3Config::intermediate_size, HfBound::Positive},
       F{"num_hidden_layers", &Gemma3Config::num_layers, HfBound::Positive},
       F{"num_attention_heads", &Gemma3Config::num_heads, HfBound::Positive},
       F{"num_key_value_heads", &Gemma3Config::num_kv_heads, HfBound::Positive},
       F{"head_dim", &Gemma3Config::head_dim, HfBound::Positive},
       F{"rms_norm_eps", &Gemma3Config::rms_norm_eps, HfBound::Positive},
       F{"max_position_embeddings", &Gemma3Config::max_position, HfBound::Positive},
       F{"initializer_range", &Gemma3Config::initializer_range},
       F{"tie_word_embeddings", &Gemma3Config::tie_word_embeddings},
       F{"query_pre_attn_scalar", &Gemma3Config::query_pre_attn_scalar, HfBound::Positive},
       F{"pad_token_id", &Gemma3Config::pad_token_id},
       F{"bos_token_id", &Gemma3Config::bos_token_id},
       F{"eos_token_id", &Gemma3Config::eos_token_id}},
      {HfFixed{"hidden_activation", "gelu_pytorch_tanh", "Gemma 3's feed-forward is GeGLU, \"gelu_pytorch_tanh\""},
       HfFixed{"attention_bias", false, "Gemma 3's projections have no biases"},
       HfFixed{"attention_dropout", 0.0, "attention dropout is 0 in Gemma 3"},
       HfFixed{"attn_logit_softcapping", nullptr, "embed-train's Gemma 3 has no attention logit softcapping"},
       HfFixed{"final_logit_softcapping", nullptr, "an encoder has no final logits to softcap"}}};
  return table;
}

// One rope_parameters entry (transformers 5: {"rope_type", "rope_theta"}) into `theta`.
void read_gemma3_rope(const nlohmann::json& entry, double& theta, const std::string& where) {
  if (entry.is_null()) return;
  if (!entry.is_object()) throw ModelError(where + " must be an object, not " + entry.dump());
  const auto type = entry.find("rope_type") != entry.end() ? entry.find("rope_type") : entry.find("type");
  if (type != entry.end() && !type->is_null() && *type != "default")
    throw ModelError(where + ".rope_type " + type->dump() +
                     " is not implemented (embed-train's Gemma 3 has the default rotary positions, no scaling)");
  read_number(entry, "rope_theta", theta, where);
}


}  // namespace

Gemma3Config gemma3_config_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw ModelError(origin + ": a config must be a JSON object");
  // A causal Gemma 3 (the default) would need the causal masks; refused before anything else.
  const auto bidirectional = j.find("use_bidirectional_attention");
  if (bidirectional == j.end() || bidirectional->is_null() || *bidirectional != true)
    throw ModelError(origin + ": use_bidirectional_attention " +
                     (bidirectional == j.end() ? std::string("absent (false)") : bidirectional->dump()) +
                     " is not implemented (embed-train's Gemma 3 is EmbeddingGemma's bidirectional encoder: true)");
  Gemma3Config c;
  read_hf_fields(j, gemma3_hf_table(), c, origin);
  // The window: 4096 when the key is missing; null would give transformers no sliding mask.
  if (const auto it = j.find("sliding_window"); it != j.end()) {
    if (it->is_null()) throw ModelError(origin + ": sliding_window null is not implemented (Gemma 3 has a window)");
    read_number(j, "sliding_window", c.sliding_window, origin);
  }
  if (const auto types = j.find("layer_types"); types != j.end() && !types->is_null()) {
    if (!types->is_array()) throw ModelError(origin + ": layer_types must be a list, not " + types->dump());
    for (size_t i = 0; i < types->size(); ++i) {
      if (!(*types)[i].is_string())
        throw ModelError(origin + ": layer_types[" + std::to_string(i) + "] must be a string, not " +
                         (*types)[i].dump());
      c.layer_types.push_back((*types)[i].get<std::string>());
    }
  } else {
    // Gemma3TextConfig.__post_init__: every sliding_window_pattern-th layer is global.
    int64_t pattern = 6;
    read_number(j, "sliding_window_pattern", pattern, origin);
    if (pattern < 1)
      throw ModelError(origin + ": sliding_window_pattern must be positive, not " + std::to_string(pattern));
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
  }
  // transformers 4.x: rope_theta, rope_local_base_freq and rope_scaling (for the global
  // layers); 5: rope_parameters per layer type.
  read_number(j, "rope_theta", c.rope_theta_full, origin);
  read_number(j, "rope_local_base_freq", c.rope_theta_sliding, origin);
  if (const auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
    read_gemma3_rope(*it, c.rope_theta_full, origin + ": rope_scaling");
  if (const auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    if (!it->is_object()) throw ModelError(origin + ": rope_parameters must be an object, not " + it->dump());
    for (const auto& [key, value] : it->items()) {
      const std::string where = origin + ": rope_parameters." + key;
      if (key == "full_attention") read_gemma3_rope(value, c.rope_theta_full, where);
      else if (key == "sliding_attention") read_gemma3_rope(value, c.rope_theta_sliding, where);
      else throw ModelError(where + " is not implemented (Gemma 3's entries are full_attention and sliding_attention)");
    }
  }
  validate_gemma3_config(c, origin);
  return c;
}

nlohmann::json gemma3_config_to_hf_json(const Gemma3Config& c) {
  const std::vector<std::string> layer_types =
      c.layer_types.empty() ? std::vector<std::string>(static_cast<size_t>(c.num_layers), "full_attention")
                            : c.layer_types;
  nlohmann::json j = write_hf_fields(gemma3_hf_table(), c);
  j["architectures"] = {"Gemma3TextModel"};
  j["model_type"] = "gemma3_text";
  j["use_bidirectional_attention"] = true;
  j["sliding_window"] = c.sliding_window;
  j["layer_types"] = layer_types;
  j["rope_parameters"] = {{"full_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_theta_full}}},
                          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", c.rope_theta_sliding}}}};
  return j;
}

void validate_gemma3_config(const Gemma3Config& c, const std::string& origin) {
  check_hf_fields(gemma3_hf_table(), c, origin);
  if (c.hidden_size % c.num_heads != 0)
    throw ModelError(origin + ": hidden_size " + std::to_string(c.hidden_size) +
                     " is not a multiple of num_attention_heads " + std::to_string(c.num_heads) +
                     " (transformers' Gemma3TextConfig refuses it)");
  if (c.num_heads % c.num_kv_heads != 0)
    throw ModelError(origin + ": num_attention_heads " + std::to_string(c.num_heads) +
                     " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  if (c.head_dim % 2 != 0) throw ModelError(origin + ": head_dim " + std::to_string(c.head_dim) + " must be even");
  if (!(c.rope_theta_full > 0) || !(c.rope_theta_sliding > 0))
    throw ModelError(origin + ": every rope_theta must be positive");
  if (c.pad_token_id >= c.vocab_size)
    throw ModelError(origin + ": pad_token_id " + std::to_string(c.pad_token_id) + " is not below vocab_size " +
                     std::to_string(c.vocab_size));
  if (!c.layer_types.empty() && static_cast<int64_t>(c.layer_types.size()) != c.num_layers)
    throw ModelError(origin + ": layer_types has " + std::to_string(c.layer_types.size()) +
                     " entries for num_hidden_layers " + std::to_string(c.num_layers) + " (one a layer)");
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    const std::string where = origin + ": layer_types[" + std::to_string(i) + "] \"" + c.layer_types[i] + "\"";
    if (c.layer_types[i] != "full_attention" && c.layer_types[i] != "sliding_attention")
      throw ModelError(where + " is not implemented (a Gemma 3 layer is \"full_attention\" or \"sliding_attention\")");
    if (c.layer_types[i] == "sliding_attention" && c.sliding_window < 1)
      throw ModelError(where + ": sliding_window " + std::to_string(c.sliding_window) + " must be at least 1");
  }
}

// ---- modules ----------------------------------------------------------------------------

Gemma3RMSNormImpl::Gemma3RMSNormImpl(int64_t size, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::zeros({size}));
}

at::Tensor Gemma3RMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return (normed * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
}

Gemma3LayerImpl::Gemma3LayerImpl(const Gemma3Config& c, size_t index)
    : num_heads_(c.num_heads),
      num_kv_heads_(c.num_kv_heads),
      head_dim_(c.head_dim),
      window_(c.sliding(index) ? c.window_half_width() : -1),
      query_factor_(std::sqrt(static_cast<double>(c.head_dim) / static_cast<double>(c.query_pre_attn_scalar))) {
  using torch::nn::LinearOptions;
  const auto linear = [](int64_t in, int64_t out) { return AdaptableLinear(LinearOptions(in, out).bias(false)); };
  const auto rms = [&](int64_t size) { return Gemma3RMSNorm(size, c.rms_norm_eps); };
  auto self_attn = register_module("self_attn", std::make_shared<NameScope>());
  q_proj = self_attn->register_module("q_proj", linear(c.hidden_size, c.num_heads * c.head_dim));
  k_proj = self_attn->register_module("k_proj", linear(c.hidden_size, c.num_kv_heads * c.head_dim));
  v_proj = self_attn->register_module("v_proj", linear(c.hidden_size, c.num_kv_heads * c.head_dim));
  o_proj = self_attn->register_module("o_proj", linear(c.num_heads * c.head_dim, c.hidden_size));
  q_norm = self_attn->register_module("q_norm", rms(c.head_dim));
  k_norm = self_attn->register_module("k_norm", rms(c.head_dim));
  auto mlp = register_module("mlp", std::make_shared<NameScope>());
  gate_proj = mlp->register_module("gate_proj", linear(c.hidden_size, c.intermediate_size));
  up_proj = mlp->register_module("up_proj", linear(c.hidden_size, c.intermediate_size));
  down_proj = mlp->register_module("down_proj", linear(c.intermediate_size, c.hidden_size));
  input_layernorm = register_module("input_layernorm", rms(c.hidden_size));
  post_attention_layernorm = register_module("post_attention_layernorm", rms(c.hidden_size));
  pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", rms(c.hidden_size));
  post_feedforward_layernorm = register_module("post_feedforward_layernorm", rms(c.hidden_size));
}

at::Tensor Gemma3LayerImpl::forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos,
                                    const at::Tensor& sin, const at::Tensor& out_rows) {
  const bool some_rows = out_rows.defined();
  const int64_t tokens = x.size(0);
  const at::Tensor h = input_layernorm(x);
  const at::Tensor h_rows = some_rows ? h.index_select(0, out_rows) : h;
  const at::Tensor cos_rows = some_rows ? cos.index_select(0, out_rows) : cos;
  const at::Tensor sin_rows = some_rows ? sin.index_select(0, out_rows) : sin;

  const int64_t rows = h_rows.size(0);
  at::Tensor q = rotate_half_pairs(q_norm(q_proj(h_rows).view({rows, num_heads_, head_dim_})), cos_rows, sin_rows);
  // attention() divides by sqrt(head_dim); Gemma divides by sqrt(query_pre_attn_scalar).
  // EmbeddingGemma's two are equal (256): no multiplication then.
  if (query_factor_ != 1.0) q = q * query_factor_;
  const at::Tensor k = rotate_half_pairs(k_norm(k_proj(h).view({tokens, num_kv_heads_, head_dim_})), cos, sin);
  const at::Tensor v = v_proj(h).view({tokens, num_kv_heads_, head_dim_});
  AttentionCall call;
  // transformers' bidirectional sliding mask: key j seen when |i - j| < sliding_window // 2 + 1.
  if (window_ >= 0) call.window_left = call.window_right = window_;
  call.one_query_per_sequence = some_rows;
  call.recompute_padded = recompute_attention;
  call.mode = attention_mode;
  const at::Tensor context = attention(q, k, v, layout, call).reshape({rows, num_heads_ * head_dim_});

  const at::Tensor a = (some_rows ? x.index_select(0, out_rows) : x) + post_attention_layernorm(o_proj(context));
  const at::Tensor g = pre_feedforward_layernorm(a);
  const at::Tensor ff = down_proj(at::gelu(gate_proj(g), "tanh") * up_proj(g));
  return a + post_feedforward_layernorm(ff);
}

Gemma3ModelImpl::Gemma3ModelImpl(const Gemma3Config& c) {
  validate_gemma3_config(c);
  encoder_config_.architecture = Architecture::Gemma3;
  encoder_config_.gemma3 = c;
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  auto layer_list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layers_.push_back(Gemma3Layer(c, static_cast<size_t>(i)));
    layer_list->push_back(layers_.back());
  }
  norm = register_module("norm", Gemma3RMSNorm(c.hidden_size, c.rms_norm_eps));
  at::NoGradGuard no_grad;
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) linear->weight.normal_(0.0, c.initializer_range);
    if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get()))
      embedding->weight.normal_(0.0, c.initializer_range);
  }
  if (c.pad_token_id >= 0) embed_tokens->weight[c.pad_token_id].zero_();
}

nlohmann::json Gemma3ModelImpl::hf_config_json() const { return gemma3_config_to_hf_json(config()); }

at::Tensor Gemma3ModelImpl::run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows,
                                int64_t layers) {
  const Gemma3Config& c = config();
  check_ids_fit("Gemma3Model", input_ids, layout, c.max_position);
  const at::Tensor flat_ids = input_ids.reshape({-1});
  at::Tensor x = embed_tokens(layout.dense ? flat_ids : flat_ids.index_select(0, layout.token_index));
  // Gemma3TextScaledWordEmbedding: × sqrt(hidden_size), that factor in the weights' dtype.
  x = x * at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), x.options());

  // Rotary factors of each real token for each theta.
  const auto full = rotary_factors(layout, c.head_dim, c.rope_theta_full);
  const auto sliding = rotary_factors(layout, c.head_dim, c.rope_theta_sliding);

  for (int64_t i = 0; i < layers; ++i) {
    const at::Tensor rows = i + 1 == c.num_layers ? out_rows : at::Tensor();
    Gemma3Layer layer = layers_[static_cast<size_t>(i)];
    const at::Tensor cos = layer->sliding() ? sliding.first : full.first;
    const at::Tensor sin = layer->sliding() ? sliding.second : full.second;
    x = layer_maybe_checkpointed(checkpoint_layers_, layer, x, layout, cos, sin, rows);
  }
  return layers == c.num_layers ? norm(x) : x;
}

at::Tensor Gemma3ModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return hidden_after(input_ids, attention_mask, config().num_layers);
}

at::Tensor Gemma3ModelImpl::hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                         int64_t layers) {
  check_layer_count("Gemma3Model", layers, config().num_layers);
  const TokenLayout layout(attention_mask);
  return layout.unpack(run(input_ids, layout, {}, layers));
}

at::Tensor Gemma3ModelImpl::forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                                           const at::Tensor& token_types) {
  if (token_types.defined()) throw ModelError("Gemma 3 has no token types: its inputs take none");
  const TokenLayout layout(attention_mask);
  const int64_t layers = config().num_layers;
  // The first token (cls) alone on the last layer: attention.h puts one query a sequence at
  // its first position when not causal.
  if (p == Pooling::Cls) return run(input_ids, layout, layout.rows_of(p), layers);
  const at::Tensor x = run(input_ids, layout, {}, layers);
  return p == Pooling::Mean ? layout.mean(x) : x.index_select(0, layout.rows_of(p));
}

}  // namespace ddp_embed
