#include "model/qwen3.h"

#include <cmath>
#include <limits>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "compat/torch_compat.h"
#include "model/activation_checkpoint.h"
#include "model/attention.h"
#include "model/hf_config_table.h"
#include "model/hf_module_parts.h"

namespace ddp_embed {
namespace {

// config.json as one table: what it reads and writes back (the window and layer_types,
// rope_parameters and the defaults that follow other keys are code, in the reader below).
const HfConfigTable<Qwen3Config>& qwen3_hf_table() {
  using F = HfField<Qwen3Config>;
  static const HfConfigTable<Qwen3Config> table{
      {F{"vocab_size", &Qwen3Config::vocab_size, HfBound::Positive},
       F{"hidden_size", &Qwen3Config::hidden_size, HfBound::Positive},
       F{"intermediate_size", &Qwen3Config::intermediate_size, HfBound::Positive},
       F{"num_hidden_layers", &Qwen3Config::num_layers, HfBound::Positive},
       F{"num_attention_heads", &Qwen3Config::num_heads, HfBound::Positive},
       F{"num_key_value_heads", &Qwen3Config::num_kv_heads, HfBound::Positive},
       F{"head_dim", &Qwen3Config::head_dim, HfBound::Positive},
       F{"rms_norm_eps", &Qwen3Config::rms_norm_eps, HfBound::Positive},
       F{"max_position_embeddings", &Qwen3Config::max_position, HfBound::Positive},
       F{"initializer_range", &Qwen3Config::initializer_range},
       F{"tie_word_embeddings", &Qwen3Config::tie_word_embeddings},
       F{"max_window_layers", &Qwen3Config::max_window_layers}},
      {HfFixed{"hidden_act", "silu", "Qwen3's feed-forward is SwiGLU, \"silu\""},
       HfFixed{"attention_bias", false, "Qwen3's projections have no biases"},
       HfFixed{"attention_dropout", 0.0, "attention dropout is 0 in Qwen3"}}};
  return table;
}


}  // namespace

Qwen3Config qwen3_config_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw ModelError(origin + ": a config must be a JSON object");
  Qwen3Config c;  // transformers' Qwen3Config defaults where a key is missing
  c.vocab_size = 151936;
  c.hidden_size = 4096;
  c.intermediate_size = 22016;
  c.num_layers = 32;
  c.num_heads = 32;
  c.num_kv_heads = 32;
  c.head_dim = 128;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  // num_key_value_heads is num_attention_heads unless it is given.
  if (const auto heads = j.find("num_attention_heads"); heads != j.end() && heads->is_number_integer())
    c.num_kv_heads = heads->get<int64_t>();
  read_hf_fields(j, qwen3_hf_table(), c, origin);
  read_number(j, "pad_token_id", c.pad_token_id, origin);
  read_number(j, "rope_theta", c.rope_theta, origin);
  // Sliding-window layers as transformers' Qwen3Config.__post_init__ makes them: the window
  // exists only with use_sliding_window true (sliding_window 4096 when the key is missing;
  // null: none), and without layer_types the layers from max_window_layers on slide, when
  // there is a window.
  bool use_sliding_window = false;
  if (const auto it = j.find("use_sliding_window"); it != j.end() && !it->is_null()) {
    if (!it->is_boolean()) throw ModelError(origin + ": use_sliding_window must be true or false, not " + it->dump());
    use_sliding_window = it->get<bool>();
  }
  if (use_sliding_window) {
    const auto it = j.find("sliding_window");
    int64_t window = 4096;
    read_number(j, "sliding_window", window, origin);
    // Below 1 a sliding layer's token would not see itself: no model transformers can run.
    if (it != j.end() && !it->is_null() && window < 1)
      throw ModelError(origin + ": sliding_window " + std::to_string(window) +
                       " must be at least 1 (a sliding layer's token sees itself and the sliding_window - 1 "
                       "tokens before it)");
    c.sliding_window = it != j.end() && it->is_null() ? 0 : window;
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
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back(c.sliding_window > 0 && i >= c.max_window_layers ? "sliding_attention"
                                                                                : "full_attention");
  }
  // transformers 5 writes rope_parameters {"rope_type", "rope_theta"}; earlier releases
  // rope_theta and rope_scaling.
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) continue;
    const std::string where = origin + ": " + key;
    if (!it->is_object()) throw ModelError(where + " must be an object, not " + it->dump());
    const auto type = it->find("rope_type") != it->end() ? it->find("rope_type") : it->find("type");
    if (type != it->end() && !type->is_null() && *type != "default")
      throw ModelError(where + ".rope_type " + type->dump() +
                       " is not implemented (embed-train's Qwen3 has the default rotary positions)");
    read_number(*it, "rope_theta", c.rope_theta, where);
  }
  validate_qwen3_config(c, origin);
  return c;
}

nlohmann::json qwen3_config_to_hf_json(const Qwen3Config& c) {
  // A config made in code may leave layer_types empty: every layer full.
  const std::vector<std::string> layer_types =
      c.layer_types.empty() ? std::vector<std::string>(static_cast<size_t>(c.num_layers), "full_attention")
                            : c.layer_types;
  nlohmann::json j = write_hf_fields(qwen3_hf_table(), c);
  j["architectures"] = {"Qwen3Model"};
  j["model_type"] = "qwen3";
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", c.rope_theta}};
  // The window and each layer's type as read, so that transformers builds the same layers
  // (it reads layer_types as they are, max_window_layers only without them).
  j["use_sliding_window"] = c.sliding_window > 0;
  j["sliding_window"] = c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  j["layer_types"] = layer_types;
  j["bos_token_id"] = 151643;
  j["eos_token_id"] = 151643;
  j["pad_token_id"] = c.pad_token_id >= 0 ? nlohmann::json(c.pad_token_id) : nlohmann::json(nullptr);
  return j;
}

void validate_qwen3_config(const Qwen3Config& c, const std::string& origin) {
  check_hf_fields(qwen3_hf_table(), c, origin);
  if (c.num_heads % c.num_kv_heads != 0)
    throw ModelError(origin + ": num_attention_heads " + std::to_string(c.num_heads) +
                     " is not a multiple of num_key_value_heads " + std::to_string(c.num_kv_heads));
  if (c.head_dim % 2 != 0) throw ModelError(origin + ": head_dim " + std::to_string(c.head_dim) + " must be even");
  if (!(c.rope_theta > 0)) throw ModelError(origin + ": rope_theta must be positive");
  if (c.sliding_window < 0)
    throw ModelError(origin + ": sliding_window " + std::to_string(c.sliding_window) + " must be at least 1");
  // Every text is cut at max_position_embeddings tokens, so a wider window bounds nothing:
  // more likely a mistaken config than a model meant to be global, so it is refused.
  if (c.sliding_window > c.max_position)
    throw ModelError(origin + ": sliding_window " + std::to_string(c.sliding_window) +
                     " is larger than max_position_embeddings " + std::to_string(c.max_position) +
                     " (a sliding layer's window must fit in the longest text)");
  if (!c.layer_types.empty() && static_cast<int64_t>(c.layer_types.size()) != c.num_layers)
    throw ModelError(origin + ": layer_types has " + std::to_string(c.layer_types.size()) +
                     " entries for num_hidden_layers " + std::to_string(c.num_layers) + " (one a layer)");
  for (size_t i = 0; i < c.layer_types.size(); ++i) {
    const std::string where = origin + ": layer_types[" + std::to_string(i) + "] \"" + c.layer_types[i] + "\"";
    if (c.layer_types[i] != "full_attention" && c.layer_types[i] != "sliding_attention")
      throw ModelError(where + " is not implemented (a Qwen3 layer is \"full_attention\" or \"sliding_attention\")");
    // transformers gives such a layer no window and refuses to build its mask.
    if (c.layer_types[i] == "sliding_attention" && c.sliding_window == 0)
      throw ModelError(where + " has no window: it needs use_sliding_window true and a sliding_window");
  }
}

// ---- modules ----------------------------------------------------------------------------

RMSNormImpl::RMSNormImpl(int64_t size, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::ones({size}));
}

at::Tensor RMSNormImpl::forward(const at::Tensor& x) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

Qwen3LayerImpl::Qwen3LayerImpl(const Qwen3Config& c, size_t index)
    : num_heads_(c.num_heads),
      num_kv_heads_(c.num_kv_heads),
      head_dim_(c.head_dim),
      window_left_(c.sliding(index) ? c.sliding_window - 1 : -1) {
  using torch::nn::LinearOptions;
  const auto linear = [](int64_t in, int64_t out) { return AdaptableLinear(LinearOptions(in, out).bias(false)); };
  auto self_attn = register_module("self_attn", std::make_shared<NameScope>());
  q_proj = self_attn->register_module("q_proj", linear(c.hidden_size, c.num_heads * c.head_dim));
  k_proj = self_attn->register_module("k_proj", linear(c.hidden_size, c.num_kv_heads * c.head_dim));
  v_proj = self_attn->register_module("v_proj", linear(c.hidden_size, c.num_kv_heads * c.head_dim));
  o_proj = self_attn->register_module("o_proj", linear(c.num_heads * c.head_dim, c.hidden_size));
  q_norm = self_attn->register_module("q_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
  k_norm = self_attn->register_module("k_norm", RMSNorm(c.head_dim, c.rms_norm_eps));
  auto mlp = register_module("mlp", std::make_shared<NameScope>());
  gate_proj = mlp->register_module("gate_proj", linear(c.hidden_size, c.intermediate_size));
  up_proj = mlp->register_module("up_proj", linear(c.hidden_size, c.intermediate_size));
  down_proj = mlp->register_module("down_proj", linear(c.intermediate_size, c.hidden_size));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

at::Tensor Qwen3LayerImpl::forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& out_rows) {
  const bool some_rows = out_rows.defined();
  const int64_t tokens = x.size(0);
  const at::Tensor h = input_layernorm(x);
  const at::Tensor h_rows = some_rows ? h.index_select(0, out_rows) : h;
  const at::Tensor cos_rows = some_rows ? cos.index_select(0, out_rows) : cos;
  const at::Tensor sin_rows = some_rows ? sin.index_select(0, out_rows) : sin;

  // Per token: project, normalize each head, rotate; then attention on the packed tokens,
  // the grouped key/value heads as they are.
  const int64_t rows = h_rows.size(0);
  const at::Tensor q = rotate_half_pairs(q_norm(q_proj(h_rows).view({rows, num_heads_, head_dim_})), cos_rows, sin_rows);
  const at::Tensor k = rotate_half_pairs(k_norm(k_proj(h).view({tokens, num_kv_heads_, head_dim_})), cos, sin);
  const at::Tensor v = v_proj(h).view({tokens, num_kv_heads_, head_dim_});
  AttentionCall call;
  call.causal = true;
  // transformers' sliding causal mask: key j seen when i - sliding_window < j <= i. One query
  // a sequence stands at its last position (attention.h), where the window ends.
  if (window_left_ >= 0) {
    call.window_left = window_left_;
    call.window_right = 0;
  }
  call.one_query_per_sequence = some_rows;
  call.recompute_padded = recompute_attention;
  call.mode = attention_mode;
  const at::Tensor context = attention(q, k, v, layout, call).reshape({rows, num_heads_ * head_dim_});

  const at::Tensor a = (some_rows ? x.index_select(0, out_rows) : x) + o_proj(context);
  const at::Tensor g = post_attention_layernorm(a);
  return a + down_proj(at::silu(gate_proj(g)) * up_proj(g));
}

Qwen3ModelImpl::Qwen3ModelImpl(const Qwen3Config& c) {
  validate_qwen3_config(c);
  encoder_config_.architecture = Architecture::Qwen3;
  encoder_config_.qwen3 = c;
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  auto layer_list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layers_.push_back(Qwen3Layer(c, static_cast<size_t>(i)));
    layer_list->push_back(layers_.back());
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  at::NoGradGuard no_grad;
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) linear->weight.normal_(0.0, c.initializer_range);
    if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get()))
      embedding->weight.normal_(0.0, c.initializer_range);
  }
}

nlohmann::json Qwen3ModelImpl::hf_config_json() const { return qwen3_config_to_hf_json(config()); }

at::Tensor Qwen3ModelImpl::run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows) {
  const Qwen3Config& c = config();
  check_ids_fit("Qwen3Model", input_ids, layout, c.max_position);
  const at::Tensor flat_ids = input_ids.reshape({-1});
  at::Tensor x = embed_tokens(layout.dense ? flat_ids : flat_ids.index_select(0, layout.token_index));

  const auto [cos, sin] = rotary_factors(layout, c.head_dim, c.rope_theta);

  for (size_t i = 0; i < layers_.size(); ++i) {
    const at::Tensor rows = i + 1 == layers_.size() ? out_rows : at::Tensor();
    Qwen3Layer layer = layers_[i];
    x = layer_maybe_checkpointed(checkpoint_layers_, layer, x, layout, cos, sin, rows);
  }
  return norm(x);
}

at::Tensor Qwen3ModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  const TokenLayout layout(attention_mask);
  return layout.unpack(run(input_ids, layout, {}));
}

at::Tensor Qwen3ModelImpl::forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                                          const at::Tensor& token_types) {
  if (token_types.defined()) throw ModelError("Qwen3 has no token types: its inputs take none");
  const TokenLayout layout(attention_mask);
  // The last token is the only output read: the last layer computes it alone (over its
  // whole text, or its window in a sliding layer: attention.h puts its one query last). The
  // first token (cls) sees itself only, so it and the mean take every row.
  if (p == Pooling::LastToken) return run(input_ids, layout, layout.rows_of(p));
  const at::Tensor x = run(input_ids, layout, {});
  return p == Pooling::Mean ? layout.mean(x) : x.index_select(0, layout.rows_of(p));
}

}  // namespace ddp_embed
