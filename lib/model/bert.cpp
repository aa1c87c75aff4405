#include "model/bert.h"

#include <cmath>
#include <limits>

#include <ATen/Dispatch.h>
#include <c10/util/StringUtil.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/modules/container/modulelist.h>

#include "compat/torch_compat.h"
#include "model/activation_checkpoint.h"
#include "model/attention.h"
#include "model/dropout.h"
#include "model/hf_config_table.h"
#include "model/hf_module_parts.h"
#include "model/encoder.h"

namespace ddp_embed {

DropoutMask cpu_dropout_mask(at::IntArrayRef sizes, double p) {
  constexpr int64_t kLevels = int64_t{1} << 15;
  const int64_t threshold = std::llround(p * kLevels);  // drop where uniform < threshold
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  const at::Tensor bits = at::empty({(n + 1) / 2}, at::TensorOptions().dtype(at::kInt)).random_();  // [0, 2^31)
  const at::Tensor uniform = at::cat({bits.bitwise_and(kLevels - 1), bits.__rshift__(16)}).narrow(0, 0, n);
  return {uniform.lt(threshold).view(sizes), static_cast<double>(kLevels) / static_cast<double>(kLevels - threshold)};
}

at::Tensor fast_dropout(const at::Tensor& x, double p, bool training) {
  if (!training || p <= 0) return x;
  if (!x.device().is_cpu()) return at::dropout(x, p, /*train=*/true);  // fused on GPUs
  // masked_fill keeps the bool mask for backward; the scale is a scalar: x * scale
  // exactly, as a float mask of (scale or 0) gave.
  const DropoutMask mask = cpu_dropout_mask(x.sizes(), p);
  return x.masked_fill(mask.dropped, 0.0).mul_(mask.scale);
}

namespace {

void check_mask_fits(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  if (input_ids.dim() != 2 || attention_mask.sizes() != input_ids.sizes())
    throw ModelError(c10::str("BertModel: attention_mask ", attention_mask.sizes(), " does not match input_ids ",
                              input_ids.sizes(), " (both [batch, length])"));
}

// ---- config.json: its one table ---------------------------------------------------------

const HfConfigTable<BertConfig>& bert_hf_table() {
  using F = HfField<BertConfig>;
  static const HfConfigTable<BertConfig> table{
      {F{"vocab_size", &BertConfig::vocab_size, HfBound::Positive},
       F{"hidden_size", &BertConfig::hidden_size, HfBound::Positive},
       F{"num_hidden_layers", &BertConfig::num_layers, HfBound::Positive},
       F{"num_attention_heads", &BertConfig::num_heads, HfBound::Positive},
       F{"intermediate_size", &BertConfig::intermediate_size, HfBound::Positive},
       F{"max_position_embeddings", &BertConfig::max_position, HfBound::Positive},
       F{"type_vocab_size", &BertConfig::type_vocab_size, HfBound::Positive},
       F{"layer_norm_eps", &BertConfig::layer_norm_eps, HfBound::Positive},
       F{"hidden_dropout_prob", &BertConfig::hidden_dropout},
       F{"attention_probs_dropout_prob", &BertConfig::attention_dropout},
       F{"pad_token_id", &BertConfig::pad_token_id},
       F{"initializer_range", &BertConfig::initializer_range}},
      {HfFixed{"hidden_act", "gelu", "only the exact erf GELU, \"gelu\", is implemented"},
       HfFixed{"position_embedding_type", "absolute", "only absolute positions are implemented"}}};
  return table;
}

}  // namespace

BertConfig bert_config_from_hf_json(const std::string& path) {
  return bert_config_from_hf_json(read_config_json(path), path);
}

BertConfig bert_config_from_hf_json(const nlohmann::json& j, const std::string& origin) {
  if (!j.is_object()) throw ModelError(origin + ": a config must be a JSON object");
  const auto type = j.find("model_type");
  const std::string model_type = type != j.end() && type->is_string() ? type->get<std::string>() : "bert";
  if (model_type != "bert" && model_type != "xlm-roberta")
    throw ModelError(origin + ": model_type \"" + model_type + "\" is not a BERT (bert | xlm-roberta)");
  BertConfig c;  // transformers' BertConfig defaults: BERT-base
  c.vocab_size = 30522;
  c.hidden_size = 768;
  c.num_layers = 12;
  c.num_heads = 12;
  c.intermediate_size = 3072;
  c.max_position = 512;
  if (model_type == "xlm-roberta") {
    c.flavor = BertFlavor::XlmRoberta;
    c.pad_token_id = 1;
  }
  read_hf_fields(j, bert_hf_table(), c, origin);
  validate_bert_config(c, origin);
  return c;
}

nlohmann::json bert_config_to_hf_json(const BertConfig& c) {
  const bool xlmr = c.flavor == BertFlavor::XlmRoberta;
  nlohmann::json j = write_hf_fields(bert_hf_table(), c);
  j["architectures"] = {xlmr ? "XLMRobertaModel" : "BertModel"};
  j["model_type"] = xlmr ? "xlm-roberta" : "bert";
  if (xlmr) {  // what XLM-R's tokenizer puts first and last
    j["bos_token_id"] = 0;
    j["eos_token_id"] = 2;
  }
  return j;
}

void validate_bert_config(const BertConfig& c, const std::string& origin) {
  check_hf_fields(bert_hf_table(), c, origin);
  if (c.hidden_size % c.num_heads != 0)
    throw ModelError(origin + ": hidden_size " + std::to_string(c.hidden_size) +
                     " is not a multiple of num_attention_heads " + std::to_string(c.num_heads));
  if (c.pad_token_id < 0 || c.pad_token_id >= c.vocab_size)
    throw ModelError(origin + ": pad_token_id " + std::to_string(c.pad_token_id) + " is outside the vocabulary");
  if (c.max_length() < 1)
    throw ModelError(origin + ": max_position_embeddings " + std::to_string(c.max_position) +
                     " leaves no position after the padding index " + std::to_string(c.pad_token_id));
  for (double p : {c.hidden_dropout, c.attention_dropout})
    if (!(p >= 0 && p < 1)) throw ModelError(origin + ": dropout " + std::to_string(p) + " is not in [0, 1)");
}

// ---- modules ----------------------------------------------------------------------------

BertEmbeddingsImpl::BertEmbeddingsImpl(const BertConfig& c)
    : dropout_(c.hidden_dropout), flavor_(c.flavor), pad_token_id_(c.pad_token_id) {
  using torch::nn::EmbeddingOptions;
  word_embeddings = register_module(
      "word_embeddings",
      torch::nn::Embedding(EmbeddingOptions(c.vocab_size, c.hidden_size).padding_idx(c.pad_token_id)));
  // XLM-R's padding position (pad_token_id) is transformers' padding_idx: zero, never trained.
  auto positions = EmbeddingOptions(c.max_position, c.hidden_size);
  if (c.flavor == BertFlavor::XlmRoberta) positions.padding_idx(c.pad_token_id);
  position_embeddings = register_module("position_embeddings", torch::nn::Embedding(positions));
  token_type_embeddings =
      register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module(
      "LayerNorm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
}

at::Tensor BertEmbeddingsImpl::forward(const at::Tensor& input_ids, const at::Tensor& token_types) {
  if (input_ids.dim() != 2)
    throw ModelError(c10::str("BertEmbeddings: input_ids must be [batch, length], not ", input_ids.sizes()));
  const int64_t length = input_ids.size(1);
  const int64_t max_position = position_embeddings->weight.size(0);
  const int64_t offset = flavor_ == BertFlavor::XlmRoberta ? pad_token_id_ + 1 : 0;
  if (length + offset > max_position)
    throw ModelError("sequence length " + std::to_string(length) + " exceeds the " +
                     std::to_string(max_position - offset) + " positions of max_position_embeddings " +
                     std::to_string(max_position));
  if (token_types.defined() && token_types.sizes() != input_ids.sizes())
    throw ModelError(c10::str("BertEmbeddings: token_types ", token_types.sizes(), " must be input_ids' shape ",
                              input_ids.sizes()));
  // A pair's segments gather their rows; a single text's are all row 0, added once.
  const at::Tensor type_row =
      token_types.defined() ? token_type_embeddings(token_types) : token_type_embeddings->weight[0];
  if (flavor_ == BertFlavor::XlmRoberta) {
    // transformers' create_position_ids_from_input_ids: each token that is not the padding
    // id counts, from pad + 1; padding (and a literal <pad> in the text) sits at pad itself.
    const at::Tensor counted = input_ids.ne(pad_token_id_).to(at::kLong);
    const at::Tensor position_ids = counted.cumsum(1) * counted + pad_token_id_;
    at::Tensor x = word_embeddings(input_ids) + position_embeddings(position_ids) + type_row;
    return fast_dropout(LayerNorm(x), dropout_, is_training());
  }
  if (token_types.defined()) {  // transformers' order: words + types, then positions
    at::Tensor x = word_embeddings(input_ids) + type_row + position_embeddings->weight.slice(0, 0, length);
    return fast_dropout(LayerNorm(x), dropout_, is_training());
  }
  // Token types are all 0, so their embedding is one row: add it to the [L, H]
  // positions once instead of gathering a [B, L, H] tensor of copies.
  const at::Tensor position_and_type = position_embeddings->weight.slice(0, 0, length) + type_row;
  at::Tensor x = word_embeddings(input_ids) + position_and_type;
  return fast_dropout(LayerNorm(x), dropout_, is_training());
}

BertLayerImpl::BertLayerImpl(const BertConfig& c)
    : num_heads_(c.num_heads), hidden_dropout_(c.hidden_dropout), attention_dropout_(c.attention_dropout) {
  using Linear = AdaptableLinear;
  const auto layer_norm = [&] {
    return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
  };
  // Constructed in Hugging Face's order: the default-init random draws then match.
  auto attention = register_module("attention", std::make_shared<NameScope>());
  auto self = attention->register_module("self", std::make_shared<NameScope>());
  query = self->register_module("query", Linear(c.hidden_size, c.hidden_size));
  key = self->register_module("key", Linear(c.hidden_size, c.hidden_size));
  value = self->register_module("value", Linear(c.hidden_size, c.hidden_size));
  auto attention_output = attention->register_module("output", std::make_shared<NameScope>());
  attention_dense = attention_output->register_module("dense", Linear(c.hidden_size, c.hidden_size));
  attention_norm = attention_output->register_module("LayerNorm", layer_norm());
  auto intermediate = register_module("intermediate", std::make_shared<NameScope>());
  intermediate_dense = intermediate->register_module("dense", Linear(c.hidden_size, c.intermediate_size));
  auto output = register_module("output", std::make_shared<NameScope>());
  output_dense = output->register_module("dense", Linear(c.intermediate_size, c.hidden_size));
  output_norm = output->register_module("LayerNorm", layer_norm());
}

namespace {

class GeluThenLinear : public torch::autograd::Function<GeluThenLinear> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& pre, const at::Tensor& weight,
                            const at::Tensor& bias) {
    ctx->save_for_backward({pre, weight});
    return at::linear(at::gelu(pre), weight, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &pre = saved[0], &weight = saved[1];
    const at::Tensor grad = grad_outputs[0].reshape({-1, weight.size(0)});
    const at::Tensor pre_rows = pre.reshape({-1, pre.size(-1)});
    at::Tensor grad_pre, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0))
      grad_pre = at::gelu_backward(at::matmul(grad, weight), pre_rows).view(pre.sizes());
    if (ctx->needs_input_grad(1)) grad_weight = at::matmul(grad.t(), at::gelu(pre_rows));
    if (ctx->needs_input_grad(2)) grad_bias = grad.sum(0);
    return {grad_pre, grad_weight, grad_bias};
  }
};

}  // namespace

at::Tensor gelu_then_linear(const at::Tensor& pre, const at::Tensor& weight, const at::Tensor& bias) {
  return GeluThenLinear::apply(pre, weight, bias);
}

at::Tensor BertLayerImpl::forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& out_rows) {
  const bool first_only = out_rows.defined();
  const int64_t hidden = x.size(1);
  const int64_t head_dim = hidden / num_heads_;
  // [rows, H] → [rows, heads, head_dim], a view.
  const auto split_heads = [&](const at::Tensor& t) { return t.view({t.size(0), num_heads_, head_dim}); };
  // The rows whose output we want: every real token, or one token of each sequence.
  const at::Tensor rows = first_only ? x.index_select(0, out_rows) : x;
  const bool training = is_training();
  AttentionCall call;
  call.one_query_per_sequence = first_only;
  call.dropout_p = training ? attention_dropout_ : 0.0;
  call.recompute_padded = recompute_attention;
  call.mode = attention_mode;
  const at::Tensor context =
      attention(split_heads(query(rows)), split_heads(key(x)), split_heads(value(x)), layout, call)
          .view({rows.size(0), hidden});
  const at::Tensor a = attention_norm(fast_dropout(attention_dense(context), hidden_dropout_, training) + rows);
  const at::Tensor pre = intermediate_dense(a);
  // gelu_then_linear keeps only `pre` for backward; with an adapter, under autocast or in
  // half precision, autograd's composition (exact erf GELU, as "gelu" in HF).
  const bool lean = training && !output_dense->adapted() && output_dense->bias.defined() &&
                    (pre.scalar_type() == at::kFloat || pre.scalar_type() == at::kDouble) &&
                    !compat::autocast_state(pre.device().type()).enabled;
  const at::Tensor out = lean ? gelu_then_linear(pre, output_dense->weight, output_dense->bias)
                              : output_dense(at::gelu(pre));
  return output_norm(fast_dropout(out, hidden_dropout_, training) + a);
}

BertModelImpl::BertModelImpl(const BertConfig& c) : config_(c), encoder_config_(ddp_embed::encoder_config(c)) {
  validate_bert_config(config_);
  embeddings = register_module("embeddings", BertEmbeddings(config_));
  auto encoder = register_module("encoder", std::make_shared<NameScope>());
  auto layer_list = encoder->register_module("layer", torch::nn::ModuleList());
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    layers_.push_back(BertLayer(config_));
    layer_list->push_back(layers_.back());
  }
  // transformers' BertModel(config) also builds a pooler Linear(H, H) here and initializes
  // it last: consume the same random numbers so a seed gives the same weights as there.
  const int64_t h = config_.hidden_size;
  const double bound = 1.0 / std::sqrt(static_cast<double>(h));
  {
    at::NoGradGuard no_grad;
    at::empty({h, h}).uniform_(-bound, bound);  // its kaiming_uniform_ weight
    at::empty({h}).uniform_(-bound, bound);     // its bias
  }
  init_weights();
  {
    at::NoGradGuard no_grad;
    at::empty({h, h}).normal_(0.0, config_.initializer_range);  // its weight, re-initialized
  }
}

void BertModelImpl::init_weights() {
  at::NoGradGuard no_grad;
  const double std = config_.initializer_range;
  // modules() visits depth-first in registration order: the leaves come in the same
  // order as in transformers' post-order apply(), so the draws match.
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* linear = dynamic_cast<torch::nn::LinearImpl*>(m.get())) {
      linear->weight.normal_(0.0, std);
      if (linear->bias.defined()) linear->bias.zero_();
    } else if (auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get())) {
      embedding->weight.normal_(0.0, std);
      if (const auto& pad = embedding->options.padding_idx()) embedding->weight[*pad].zero_();
    } else if (auto* norm = dynamic_cast<torch::nn::LayerNormImpl*>(m.get())) {
      norm->weight.fill_(1.0);
      norm->bias.zero_();
    }
  }
}

at::Tensor BertModelImpl::run_layer(size_t i, const at::Tensor& x, const TokenLayout& layout,
                                   const at::Tensor& out_rows) {
  return layer_maybe_checkpointed(checkpoint_layers_, layers_[i], x, layout, out_rows);
}

at::Tensor BertModelImpl::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  check_mask_fits(input_ids, attention_mask);
  const TokenLayout layout(attention_mask);
  at::Tensor x = layout.pack(embeddings(input_ids));
  for (size_t i = 0; i < layers_.size(); ++i) x = run_layer(i, x, layout, /*out_rows=*/{});
  return layout.unpack(x);
}

at::Tensor BertModelImpl::forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                                         const at::Tensor& token_types) {
  check_mask_fits(input_ids, attention_mask);
  const TokenLayout layout(attention_mask);
  at::Tensor x = layout.pack(embeddings(input_ids, token_types));
  if (p == Pooling::Mean) {
    for (size_t i = 0; i < layers_.size(); ++i) x = run_layer(i, x, layout, /*out_rows=*/{});
    return layout.mean(x);  // packed from the embeddings to the pooling
  }
  // cls reads position 0, which sees its whole text: the last layer computes it alone. (A
  // last token sees its whole text too.)
  for (size_t i = 0; i < layers_.size(); ++i)
    x = run_layer(i, x, layout, i + 1 == layers_.size() ? layout.rows_of(p) : at::Tensor());
  return x;  // [B, H]: the last layer computed the pooled token alone
}

nlohmann::json BertModelImpl::hf_config_json() const { return bert_config_to_hf_json(config_); }

at::Tensor BertModelImpl::forward_cls(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return forward_pooled(input_ids, attention_mask, Pooling::Cls);
}

}  // namespace ddp_embed
