// ModernBERT (modernbert.h): its config.json as one table plus what the table cannot say
// (layer_types, the rope thetas of each layer type), and the layers on packed tokens.
#include "model/modernbert.h"

#include <cmath>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "model/activation_checkpoint.h"
#include "model/attention.h"
#include "model/dropout.h"
#include "model/hf_config_table.h"
#include "model/hf_module_parts.h"

namespace ddp_embed {
namespace {

// config.json as one table: what it reads and writes back (layer_types and the rope thetas
// are code, in the reader below).
const HfConfigTable<ModernBertConfig>& modernbert_hf_table() {
  using C = ModernBertConfig;
  using F = HfField<C>;
  static const HfConfigTable<C> table{
      {F{"vocab_size", &C::vocab_size, HfBound::Positive},
       F{"hidden_size", &C::hidden_size, HfBound::Positive},
       F{"intermediate_size", &C::intermediate_size, HfBound::Positive},
       F{"num_hidden_layers", &C::num_layers, HfBound::Positive},
       F{"num_attention_heads", &C::num_heads, HfBound::Positive},
       F{"max_position_embeddings", &C::max_position, HfBound::Positive},
       F{"norm_eps", &C::norm_eps, HfBound::Positive},
       F{"initializer_range", &C::initializer_range, HfBound::NonNegative},
       F{"initializer_cutoff_factor", &C::initializer_cutoff_factor, HfBound::Positive},
       F{"embedding_dropout", &C::embedding_dropout, HfBound::NonNegative},
       F{"attention_dropout", &C::attention_dropout, HfBound::NonNegative},
       F{"mlp_dropout", &C::mlp_dropout, HfBound::NonNegative},
       F{"local_attention", &C::local_attention, HfBound::Positive},
       F{"global_attn_every_n_layers", &C::global_attn_every_n_layers, HfBound::Positive},
       F{"pad_token_id", &C::pad_token_id},
       F{"cls_token_id", &C::cls_token_id},
       F{"sep_token_id", &C::sep_token_id},
       F{"bos_token_id", &C::bos_token_id},
       F{"eos_token_id", &C::eos_token_id},
       F{"tie_word_embeddings", &C::tie_word_embeddings},
       F{"classifier_pooling", &C::classifier_pooling},
       F{"classifier_activation", &C::classifier_activation},
       F{"classifier_dropout", &C::classifier_dropout, HfBound::NonNegative},
       F{"classifier_bias", &C::classifier_bias},
       F{"decoder_bias", &C::decoder_bias}},
      {HfFixed{"hidden_activation", "gelu", "embed-train's ModernBERT feed-forward is GeGLU with exact GELU, \"gelu\""},
       HfFixed{"attention_bias", false, "embed-train's ModernBERT has no attention biases"},
       HfFixed{"mlp_bias", false, "embed-train's ModernBERT has no feed-forward biases"},
       HfFixed{"norm_bias", false, "embed-train's ModernBERT LayerNorms have no bias"}}};
  return table;
}

constexpr const char* kModernBertLayerTypes[] = {"full_attention", "sliding_attention"};

// rope_parameters.<layer type>: its rope_type must be "default"; its rope_theta, if given,
// goes to `theta`.
void read_modernbert_rope_of_type(const nlohmann::json& p, const std::string& where, double& theta) {
  if (p.is_null()) return;
  if (!p.is_object()) throw ModelError(where + " must be an object, not " + p.dump());
  for (const char* key : {"rope_type", "type"}) {
    const auto t = p.find(key);
    if (t != p.end() && !t->is_null() && *t != "default")
      throw ModelError(where + "." + key + " " + t->dump() +
                       " is not implemented (embed-train's ModernBERT has the default rotary positions)");
  }
  read_number(p, "rope_theta", theta, where);
  for (const auto& [key, value] : p.items())
    if (key != "rope_type" && key != "type" && key != "rope_theta" && !value.is_null())
      throw ModelError(where + "." + key + " is not implemented (embed-train's ModernBERT has the default rotary "
                       "positions, rope_type and rope_theta only)");
}

// x [n, heads, head_dim] rotated by its tokens' angles (cos, sin [n, head_dim], fp32):
// transformers' apply_rotary_pos_emb, computed in fp32 and returned in x's dtype.
at::Tensor rotated_in_fp32(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return rotate_half_pairs(x.to(at::kFloat), cos, sin).to(x.scalar_type());
}

// PyTorch's trunc_normal_(w, 0, std, -cutoff std, cutoff std): uniform in the normal's
// cumulative distribution between the cuts, mapped back through the inverse error function.
void truncated_normal_(const at::Tensor& w, double std, double cutoff) {
  const auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double low = cdf(-cutoff), high = cdf(cutoff);
  w.uniform_(2 * low - 1, 2 * high - 1).erfinv_().mul_(std * std::sqrt(2.0)).clamp_(-cutoff * std, cutoff * std);
}

}  // namespace

ModernBertConfig modernbert_config_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  ModernBertConfig c;  // transformers' ModernBertConfig defaults where a key is missing
  read_hf_fields(j, modernbert_hf_table(), c, origin);
  // Rotary thetas: rope_parameters' per layer type (transformers 5), else the older
  // global_rope_theta / local_rope_theta; rope_scaling, which transformers would apply to
  // both, is not implemented.
  read_number(j, "global_rope_theta", c.global_rope_theta, origin);
  read_number(j, "local_rope_theta", c.local_rope_theta, origin);
  if (const auto it = j.find("rope_scaling"); it != j.end() && !it->is_null())
    throw ModelError(origin + ": rope_scaling " + it->dump() +
                     " is not implemented (embed-train's ModernBERT has the default rotary positions)");
  if (const auto it = j.find("rope_parameters"); it != j.end() && !it->is_null()) {
    const std::string where = origin + ": rope_parameters";
    if (!it->is_object()) throw ModelError(where + " must be an object, not " + it->dump());
    for (const auto& [key, value] : it->items())
      if (key != kModernBertLayerTypes[0] && key != kModernBertLayerTypes[1])
        throw ModelError(where + "." + key + " is not implemented (ModernBERT's rope_parameters are one object a "
                         "layer type, \"full_attention\" and \"sliding_attention\")");
    read_modernbert_rope_of_type(it->value(kModernBertLayerTypes[0], nlohmann::json()), where + "." + kModernBertLayerTypes[0], c.global_rope_theta);
    read_modernbert_rope_of_type(it->value(kModernBertLayerTypes[1], nlohmann::json()), where + "." + kModernBertLayerTypes[1], c.local_rope_theta);
  }
  if (const auto types = j.find("layer_types"); types != j.end() && !types->is_null()) {
    if (!types->is_array()) throw ModelError(origin + ": layer_types must be a list, not " + types->dump());
    for (size_t i = 0; i < types->size(); ++i) {
      if (!(*types)[i].is_string())
        throw ModelError(origin + ": layer_types[" + std::to_string(i) + "] must be a string, not " +
                         (*types)[i].dump());
      c.layer_types.push_back((*types)[i].get<std::string>());
    }
  } else if (c.global_attn_every_n_layers > 0) {
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back(i % c.global_attn_every_n_layers != 0 ? kModernBertLayerTypes[1] : kModernBertLayerTypes[0]);
  }
  validate_modernbert_config(c, origin);
  return c;
}

nlohmann::json modernbert_config_to_hf_json(const ModernBertConfig& c) {
  std::vector<std::string> layer_types = c.layer_types;
  if (layer_types.empty())
    for (int64_t i = 0; i < c.num_layers; ++i) layer_types.push_back(c.local(i) ? kModernBertLayerTypes[1] : kModernBertLayerTypes[0]);
  nlohmann::json j = write_hf_fields(modernbert_hf_table(), c);
  j["architectures"] = {"ModernBertModel"};
  j["model_type"] = "modernbert";
  j["layer_types"] = layer_types;
  j["rope_parameters"] = {{kModernBertLayerTypes[0], {{"rope_type", "default"}, {"rope_theta", c.global_rope_theta}}},
                          {kModernBertLayerTypes[1], {{"rope_type", "default"}, {"rope_theta", c.local_rope_theta}}}};
  // The older keys too, for transformers releases before rope_parameters (5 reads the above).
  j["global_rope_theta"] = c.global_rope_theta;
  j["local_rope_theta"] = c.local_rope_theta;
  return j;
}

void validate_modernbert_config(const ModernBertConfig& c, const std::string& origin) {
  check_hf_fields(modernbert_hf_table(), c, origin);
  if (c.hidden_size % c.num_heads != 0)
    throw ModelError(origin + ": hidden_size " + std::to_string(c.hidden_size) +
                     " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  if ((c.hidden_size / c.num_heads) % 2 != 0)
    throw ModelError(origin + ": hidden_size / num_attention_heads " + std::to_string(c.hidden_size / c.num_heads) +
                     " must be even (rotary positions rotate pairs)");
  if (!(c.global_rope_theta > 0)) throw ModelError(origin + ": global_rope_theta must be positive");
  if (!(c.local_rope_theta > 0)) throw ModelError(origin + ": local_rope_theta must be positive");
  // Every text is cut at max_position_embeddings tokens, so a wider window bounds nothing:
  // more likely a mistaken config than a model meant to be global, so it is refused.
  if (c.local_attention > c.max_position)
    throw ModelError(origin + ": local_attention " + std::to_string(c.local_attention) +
                     " is larger than max_position_embeddings " + std::to_string(c.max_position) +
                     " (a local layer's window must fit in the longest text)");
  if (!c.layer_types.empty() && static_cast<int64_t>(c.layer_types.size()) != c.num_layers)
    throw ModelError(origin + ": layer_types has " + std::to_string(c.layer_types.size()) +
                     " entries for num_hidden_layers " + std::to_string(c.num_layers) + " (one a layer)");
  for (size_t i = 0; i < c.layer_types.size(); ++i)
    if (c.layer_types[i] != kModernBertLayerTypes[0] && c.layer_types[i] != kModernBertLayerTypes[1])
      throw ModelError(origin + ": layer_types[" + std::to_string(i) + "] \"" + c.layer_types[i] +
                       "\" is not implemented (a ModernBERT layer is \"full_attention\" or \"sliding_attention\")");
}

// ---- modules ----------------------------------------------------------------------------

BiasFreeLayerNormImpl::BiasFreeLayerNormImpl(int64_t size, double eps) : eps_(eps) {
  weight = register_parameter("weight", at::ones({size}));
}

at::Tensor BiasFreeLayerNormImpl::forward(const at::Tensor& x) {
  return at::layer_norm(x, {weight.size(0)}, weight, /*bias=*/{}, eps_);
}

ModernBertLayerImpl::ModernBertLayerImpl(const ModernBertConfig& c, size_t index)
    : is_local(c.local(index)),
      num_heads_(c.num_heads),
      head_dim_(c.hidden_size / c.num_heads),
      half_window_(c.half_window()),
      attention_dropout_(c.attention_dropout),
      mlp_dropout_(c.mlp_dropout) {
  using torch::nn::LinearOptions;
  const auto linear = [](int64_t in, int64_t out) { return AdaptableLinear(LinearOptions(in, out).bias(false)); };
  if (index > 0) attn_norm = register_module("attn_norm", BiasFreeLayerNorm(c.hidden_size, c.norm_eps));
  auto attn = register_module("attn", std::make_shared<NameScope>());
  Wqkv = attn->register_module("Wqkv", linear(c.hidden_size, 3 * c.hidden_size));
  attn_Wo = attn->register_module("Wo", linear(c.hidden_size, c.hidden_size));
  mlp_norm = register_module("mlp_norm", BiasFreeLayerNorm(c.hidden_size, c.norm_eps));
  auto mlp = register_module("mlp", std::make_shared<NameScope>());
  Wi = mlp->register_module("Wi", linear(c.hidden_size, 2 * c.intermediate_size));
  mlp_Wo = mlp->register_module("Wo", linear(c.intermediate_size, c.hidden_size));
}

at::Tensor ModernBertLayerImpl::forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos,
                                        const at::Tensor& sin, const at::Tensor& out_rows) {
  const bool some_rows = out_rows.defined();
  const bool training = is_training();
  const int64_t tokens = x.size(0), hidden = x.size(1);
  const at::Tensor h = attn_norm ? attn_norm(x) : x;
  // Wqkv's output is [q | k | v], each [heads, head_dim] (transformers' view(..., 3, heads, head_dim)).
  const at::Tensor qkv = Wqkv(h).view({tokens, 3, num_heads_, head_dim_});
  at::Tensor q = qkv.select(1, 0), q_cos = cos, q_sin = sin;
  if (some_rows) {
    q = q.index_select(0, out_rows);
    q_cos = cos.index_select(0, out_rows);
    q_sin = sin.index_select(0, out_rows);
  }
  q = rotated_in_fp32(q, q_cos, q_sin);
  const at::Tensor k = rotated_in_fp32(qkv.select(1, 1), cos, sin);
  const at::Tensor v = qkv.select(1, 2);
  AttentionCall call;
  // transformers' bidirectional sliding mask: key j seen when |i - j| <= local_attention / 2.
  if (is_local) call.window_left = call.window_right = half_window_;
  call.one_query_per_sequence = some_rows;
  call.dropout_p = training ? attention_dropout_ : 0.0;
  call.recompute_padded = recompute_attention;
  call.mode = attention_mode;
  const int64_t rows = q.size(0);
  const at::Tensor context = attention(q, k, v, layout, call).reshape({rows, hidden});
  const at::Tensor a =
      (some_rows ? x.index_select(0, out_rows) : x) + fast_dropout(attn_Wo(context), attention_dropout_, training);
  const std::vector<at::Tensor> input_gate = Wi(mlp_norm(a)).chunk(2, -1);
  return a + mlp_Wo(fast_dropout(at::gelu(input_gate[0]) * input_gate[1], mlp_dropout_, training));
}

ModernBertModelImpl::ModernBertModelImpl(const ModernBertConfig& c) {
  validate_modernbert_config(c);
  encoder_config_.architecture = Architecture::ModernBert;
  encoder_config_.modernbert = c;
  auto embeddings = register_module("embeddings", std::make_shared<NameScope>());
  tok_embeddings = embeddings->register_module("tok_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  embeddings_norm = embeddings->register_module("norm", BiasFreeLayerNorm(c.hidden_size, c.norm_eps));
  auto layer_list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layers_.push_back(ModernBertLayer(c, static_cast<size_t>(i)));
    layer_list->push_back(layers_.back());
  }
  final_norm = register_module("final_norm", BiasFreeLayerNorm(c.hidden_size, c.norm_eps));
  at::NoGradGuard no_grad;
  const double out_std = c.initializer_range / std::sqrt(2.0 * static_cast<double>(c.num_layers));
  truncated_normal_(tok_embeddings->weight, c.initializer_range, c.initializer_cutoff_factor);
  for (auto& layer : layers_) {
    truncated_normal_(layer->Wqkv->weight, c.initializer_range, c.initializer_cutoff_factor);
    truncated_normal_(layer->Wi->weight, c.initializer_range, c.initializer_cutoff_factor);
    truncated_normal_(layer->attn_Wo->weight, out_std, c.initializer_cutoff_factor);
    truncated_normal_(layer->mlp_Wo->weight, out_std, c.initializer_cutoff_factor);
  }
}

nlohmann::json ModernBertModelImpl::hf_config_json() const { return modernbert_config_to_hf_json(config()); }

at::Tensor ModernBertModelImpl::run(const at::Tensor& input_ids, const TokenLayout& layout,
                                    const at::Tensor& out_rows, int64_t layers) {
  const ModernBertConfig& c = config();
  check_ids_fit("ModernBertModel", input_ids, layout, c.max_position);
  const at::Tensor flat_ids = input_ids.reshape({-1});
  at::Tensor x = tok_embeddings(layout.dense ? flat_ids : flat_ids.index_select(0, layout.token_index));
  x = fast_dropout(embeddings_norm(x), c.embedding_dropout, is_training());

  // Rotary factors of each real token for each theta.
  const int64_t head_dim = c.hidden_size / c.num_heads;
  const auto global = rotary_factors(layout, head_dim, c.global_rope_theta);
  const auto local =
      c.local_rope_theta == c.global_rope_theta ? global : rotary_factors(layout, head_dim, c.local_rope_theta);

  for (size_t i = 0; i < size_t(layers); ++i) {
    const at::Tensor rows = i + 1 == size_t(layers) ? out_rows : at::Tensor();
    ModernBertLayer layer = layers_[i];
    const at::Tensor& cos = layer->is_local ? local.first : global.first;
    const at::Tensor& sin = layer->is_local ? local.second : global.second;
    x = layer_maybe_checkpointed(checkpoint_layers_, layer, x, layout, cos, sin, rows);
  }
  return layers == int64_t(layers_.size()) ? final_norm(x) : x;
}

at::Tensor ModernBertModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return hidden_after(input_ids, attention_mask, config().num_layers);
}

at::Tensor ModernBertModelImpl::hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                             int64_t layers) {
  check_layer_count("ModernBertModel", layers, config().num_layers);
  const TokenLayout layout(attention_mask);
  return layout.unpack(run(input_ids, layout, {}, layers));
}

at::Tensor ModernBertModelImpl::forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                               Pooling p, const at::Tensor& token_types) {
  if (token_types.defined()) throw ModelError("ModernBERT has no token types: its inputs take none");
  const TokenLayout layout(attention_mask);
  // The first token is the only output cls reads: the last layer computes it alone
  // (attention.h puts that one query at position 0, inside its window in a local layer).
  // A bidirectional layer's last token has no such shortcut with a window: every row.
  if (p == Pooling::Cls) return run(input_ids, layout, layout.rows_of(p), config().num_layers);
  const at::Tensor x = run(input_ids, layout, {}, config().num_layers);
  return p == Pooling::Mean ? layout.mean(x) : x.index_select(0, layout.rows_of(p));
}

}  // namespace ddp_embed
