// MPNet (model/mpnet.h): transformers' MPNetModel on the packed real tokens, its relative
// position bias made once a forward and handed to every layer's attention (model/attention.h
// adds it to each text's scores, its top-left block for the text's length).
#include "model/mpnet.h"

#include <algorithm>
#include <cmath>

#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include "compat/torch_compat.h"
#include "model/activation_checkpoint.h"
#include "model/attention.h"
#include "model/bert.h"  // gelu_then_linear
#include "model/dropout.h"
#include "model/hf_config_table.h"
#include "model/hf_module_parts.h"

namespace ddp_embed {
namespace {

const HfConfigTable<MPNetConfig>& mpnet_hf_table() {
  using F = HfField<MPNetConfig>;
  static const HfConfigTable<MPNetConfig> table{
      {F{"vocab_size", &MPNetConfig::vocab_size, HfBound::Positive},
       F{"hidden_size", &MPNetConfig::hidden_size, HfBound::Positive},
       F{"num_hidden_layers", &MPNetConfig::num_layers, HfBound::Positive},
       F{"num_attention_heads", &MPNetConfig::num_heads, HfBound::Positive},
       F{"intermediate_size", &MPNetConfig::intermediate_size, HfBound::Positive},
       F{"max_position_embeddings", &MPNetConfig::max_position, HfBound::Positive},
       F{"relative_attention_num_buckets", &MPNetConfig::relative_attention_num_buckets, HfBound::Positive},
       F{"layer_norm_eps", &MPNetConfig::layer_norm_eps, HfBound::Positive},
       F{"hidden_dropout_prob", &MPNetConfig::hidden_dropout},
       F{"attention_probs_dropout_prob", &MPNetConfig::attention_dropout},
       F{"initializer_range", &MPNetConfig::initializer_range},
       F{"bos_token_id", &MPNetConfig::bos_token_id},
       F{"eos_token_id", &MPNetConfig::eos_token_id},
       F{"tie_word_embeddings", &MPNetConfig::tie_word_embeddings}},
      {HfFixed{"hidden_act", "gelu", "only the exact erf GELU, \"gelu\", is implemented"},
       HfFixed{"pad_token_id", MPNetConfig::kPaddingIndex,
               "transformers' MPNetEmbeddings pads at 1 whatever the config says"}}};
  return table;
}

void check_ids_and_mask(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  if (input_ids.dim() != 2 || attention_mask.sizes() != input_ids.sizes())
    throw ModelError(c10::str("MPNetModel: attention_mask ", attention_mask.sizes(), " does not match input_ids ",
                              input_ids.sizes(), " (both [batch, length])"));
}

}  // namespace

MPNetConfig mpnet_config_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw ModelError(origin + ": a config must be a JSON object");
  MPNetConfig c;  // transformers' MPNetConfig defaults where a key is missing
  c.max_position = 512;
  c.layer_norm_eps = 1e-12;
  read_hf_fields(j, mpnet_hf_table(), c, origin);
  validate_mpnet_config(c, origin);
  return c;
}

nlohmann::json mpnet_config_to_hf_json(const MPNetConfig& c) {
  nlohmann::json j = write_hf_fields(mpnet_hf_table(), c);
  j["architectures"] = {"MPNetModel"};
  j["model_type"] = "mpnet";
  return j;
}

void validate_mpnet_config(const MPNetConfig& c, const std::string& origin) {
  check_hf_fields(mpnet_hf_table(), c, origin);
  if (c.hidden_size % c.num_heads != 0)
    throw ModelError(origin + ": hidden_size " + std::to_string(c.hidden_size) +
                     " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  if (c.relative_attention_num_buckets < MPNetConfig::kBuckets)
    throw ModelError(origin + ": relative_attention_num_buckets " + std::to_string(c.relative_attention_num_buckets) +
                     " is below 32 (transformers' MPNet looks up 32 buckets whatever the config says)");
  if (c.vocab_size <= MPNetConfig::kPaddingIndex)
    throw ModelError(origin + ": vocab_size " + std::to_string(c.vocab_size) + " has no padding id 1");
  if (c.max_length() < 1)
    throw ModelError(origin + ": max_position_embeddings " + std::to_string(c.max_position) +
                     " leaves no position after the padding index 1");
  for (double p : {c.hidden_dropout, c.attention_dropout})
    if (!(p >= 0 && p < 1)) throw ModelError(origin + ": dropout " + std::to_string(p) + " is not in [0, 1)");
}

at::Tensor mpnet_relative_buckets(int64_t length, const c10::Device& device) {
  // transformers' relative_position_bucket(memory - context, num_buckets=32,
  // max_distance=128), the same ops in the same dtypes so that the float rounding at the
  // bucket edges is theirs.
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor context = at::arange(length, longs).unsqueeze(1);
  const at::Tensor memory = at::arange(length, longs).unsqueeze(0);
  at::Tensor n = -(memory - context);
  constexpr int64_t half = MPNetConfig::kBuckets / 2;  // 16 a direction
  constexpr int64_t max_exact = half / 2;
  constexpr double max_distance = 128;
  at::Tensor ret = n.lt(0).to(at::kLong) * half;
  n = n.abs();
  const at::Tensor is_small = n.lt(max_exact);
  at::Tensor val_if_large =
      max_exact + (at::log(n.to(at::kFloat) / static_cast<double>(max_exact)) /
                   std::log(max_distance / static_cast<double>(max_exact)) * static_cast<double>(half - max_exact))
                      .to(at::kLong);
  val_if_large = at::min(val_if_large, at::full_like(val_if_large, half - 1));
  return ret + at::where(is_small, n, val_if_large);
}

// ---- modules ----------------------------------------------------------------------------

MPNetEmbeddingsImpl::MPNetEmbeddingsImpl(const MPNetConfig& c) : dropout_(c.hidden_dropout) {
  using torch::nn::EmbeddingOptions;
  constexpr int64_t pad = MPNetConfig::kPaddingIndex;
  word_embeddings = register_module(
      "word_embeddings", torch::nn::Embedding(EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(pad)));
  position_embeddings = register_module(
      "position_embeddings", torch::nn::Embedding(EmbeddingOptions(c.max_position, c.hidden_size).padding_idx(pad)));
  LayerNorm = register_module(
      "LayerNorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
}

at::Tensor MPNetEmbeddingsImpl::forward(const at::Tensor& input_ids) {
  if (input_ids.dim() != 2)
    throw ModelError(c10::str("MPNetEmbeddings: input_ids must be [batch, length], not ", input_ids.sizes()));
  constexpr int64_t pad = MPNetConfig::kPaddingIndex;
  const int64_t length = input_ids.size(1);
  const int64_t max_position = position_embeddings->weight.size(0);
  if (length + pad + 1 > max_position)
    throw ModelError("sequence length " + std::to_string(length) + " exceeds the " +
                     std::to_string(max_position - pad - 1) + " positions of max_position_embeddings " +
                     std::to_string(max_position));
  // create_position_ids_from_input_ids: each token that is not the padding id counts, from
  // pad + 1; padding (and a literal <pad> in the text) sits at pad itself.
  const at::Tensor counted = input_ids.ne(pad).to(at::kLong);
  const at::Tensor position_ids = counted.cumsum(1) * counted + pad;
  const at::Tensor x = word_embeddings(input_ids) + position_embeddings(position_ids);
  return fast_dropout(LayerNorm(x), dropout_, is_training());
}

MPNetLayerImpl::MPNetLayerImpl(const MPNetConfig& c)
    : num_heads_(c.num_heads), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  const auto layer_norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
  };
  auto attention = register_module("attention", std::make_shared<NameScope>());
  auto attn = attention->register_module("attn", std::make_shared<NameScope>());
  q = attn->register_module("q", AdaptableLinear(c.hidden_size, c.hidden_size));
  k = attn->register_module("k", AdaptableLinear(c.hidden_size, c.hidden_size));
  v = attn->register_module("v", AdaptableLinear(c.hidden_size, c.hidden_size));
  o = attn->register_module("o", AdaptableLinear(c.hidden_size, c.hidden_size));
  attention_norm = attention->register_module("LayerNorm", layer_norm());
  auto intermediate = register_module("intermediate", std::make_shared<NameScope>());
  intermediate_dense = intermediate->register_module("dense", AdaptableLinear(c.hidden_size, c.intermediate_size));
  auto output = register_module("output", std::make_shared<NameScope>());
  output_dense = output->register_module("dense", AdaptableLinear(c.intermediate_size, c.hidden_size));
  output_norm = output->register_module("LayerNorm", layer_norm());
}

at::Tensor MPNetLayerImpl::forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& position_bias,
                                   const at::Tensor& out_rows) {
  const bool first_only = out_rows.defined();
  const int64_t hidden = x.size(1);
  const int64_t head_dim = hidden / num_heads_;
  const auto split_heads = [&](const at::Tensor& t) { return t.view({t.size(0), num_heads_, head_dim}); };
  const at::Tensor rows = first_only ? x.index_select(0, out_rows) : x;
  const bool training = is_training();
  AttentionCall call;
  call.one_query_per_sequence = first_only;  // the first token: its row of the bias
  call.bias = position_bias;
  call.dropout_p = training ? attention_dropout_ : 0.0;
  call.recompute_padded = recompute_attention;
  call.mode = attention_mode;
  const at::Tensor context =
      attention(split_heads(q(rows)), split_heads(k(x)), split_heads(v(x)), layout, call).view({rows.size(0), hidden});
  // MPNetAttention: LayerNorm(dropout(o(context)) + input); then BERT's feed-forward.
  const at::Tensor a = attention_norm(fast_dropout(o(context), hidden_dropout_, training) + rows);
  const at::Tensor pre = intermediate_dense(a);
  const bool lean = training && !output_dense->adapted() && output_dense->bias.defined() &&
                    (pre.scalar_type() == at::kFloat || pre.scalar_type() == at::kDouble) &&
                    !compat::autocast_state(pre.device().type()).enabled;
  const at::Tensor out = lean ? gelu_then_linear(pre, output_dense->weight, output_dense->bias)
                              : output_dense(at::gelu(pre));
  return output_norm(fast_dropout(out, hidden_dropout_, training) + a);
}

MPNetModelImpl::MPNetModelImpl(const MPNetConfig& c) {
  validate_mpnet_config(c);
  encoder_config_.architecture = Architecture::MPNet;
  encoder_config_.mpnet = c;
  embeddings = register_module("embeddings", MPNetEmbeddings(c));
  auto encoder = register_module("encoder", std::make_shared<NameScope>());
  auto layer_list = encoder->register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    layers_.push_back(MPNetLayer(c));
    layer_list->push_back(layers_.back());
  }
  relative_attention_bias = encoder->register_module(
      "relative_attention_bias", torch::nn::Embedding(c.relative_attention_num_buckets, c.num_heads));
  at::NoGradGuard no_grad;
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) {
      linear->weight.normal_(0.0, c.initializer_range);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get())) {
      embedding->weight.normal_(0.0, c.initializer_range);
      if (const auto& pad = embedding->options.padding_idx()) embedding->weight[*pad].zero_();
    } else if (auto* norm = dynamic_cast<torch::nn::LayerNormImpl*>(m.get())) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  }
}

nlohmann::json MPNetModelImpl::hf_config_json() const { return mpnet_config_to_hf_json(config()); }

at::Tensor MPNetModelImpl::position_bias(int64_t length) const {
  const at::Tensor& table = relative_attention_bias->weight;  // [buckets, heads]
  const at::Tensor buckets = mpnet_relative_buckets(length, table.device());
  return at::embedding(table, buckets).permute({2, 0, 1});  // [heads, L, L]
}

at::Tensor MPNetModelImpl::run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows,
                               int64_t layers) {
  at::Tensor x = layout.pack(embeddings(input_ids));
  // Once a forward, as MPNetEncoder computes it; every layer adds the same bias.
  const at::Tensor bias = position_bias(std::max<int64_t>(layout.length, 1));
  for (size_t i = 0; i < size_t(layers); ++i) {
    const at::Tensor rows = i + 1 == size_t(layers) ? out_rows : at::Tensor();
    MPNetLayer layer = layers_[i];
    if (!checkpoint_layers_ || !at::GradMode::is_enabled()) {
      x = layer(x, layout, bias, rows);
      continue;
    }
    // The bias goes through checkpointed() as its own input: its gradient reaches
    // relative_attention_bias, which is no parameter of the layer.
    const auto block = [layer, layout, rows](const at::Tensor& h, const at::Tensor& b) mutable {
      return layer->forward(h, layout, b, rows);
    };
    x = checkpointed(*layer, block, x, bias);
  }
  return x;
}

at::Tensor MPNetModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return hidden_after(input_ids, attention_mask, config().num_layers);
}

at::Tensor MPNetModelImpl::hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                        int64_t layers) {
  check_layer_count("MPNetModel", layers, config().num_layers);
  check_ids_and_mask(input_ids, attention_mask);
  const TokenLayout layout(attention_mask);
  return layout.unpack(run(input_ids, layout, {}, layers));
}

at::Tensor MPNetModelImpl::forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                                          const at::Tensor& token_types) {
  if (token_types.defined()) throw ModelError("MPNet has no token types: its inputs take none");
  check_ids_and_mask(input_ids, attention_mask);
  const TokenLayout layout(attention_mask);
  // cls: the first token sees its whole text, and attention gives one query a sequence the
  // bias row of position 0, so the last layer computes it alone. A last token would need
  // its own row: every row, then the pick.
  if (p == Pooling::Cls) return run(input_ids, layout, layout.rows_of(p), config().num_layers);
  const at::Tensor x = run(input_ids, layout, {}, config().num_layers);
  return p == Pooling::Mean ? layout.mean(x) : x.index_select(0, layout.rows_of(p));
}

}  // namespace ddp_embed
