#include "model/cross_encoder.h"

#include <c10/util/StringUtil.h>

#include "model/dropout.h"

namespace ddp_embed {
namespace {

// transformers' _init_weights for a classification head's Linear.
torch::nn::Linear rerank_linear(int64_t in, int64_t out, double std) {
  torch::nn::Linear linear(torch::nn::LinearOptions(in, out));
  at::NoGradGuard no_grad;
  linear->weight.normal_(0.0, std);
  linear->bias.zero_();
  return linear;
}

void copy_into(const at::Tensor& target, const at::Tensor& source, const std::string& name, const std::string& origin) {
  if (source.sizes() != target.sizes())
    throw WeightsError(c10::str(origin, ": ", name, " has shape ", source.sizes(), ", the model's is ", target.sizes(),
                                " (model.num_labels must be the folder's number of labels)"));
  at::NoGradGuard no_grad;
  target.copy_(source.to(target.dtype()));
}

}  // namespace

RerankHeadImpl::RerankHeadImpl(const EncoderConfig& encoder, int64_t num_labels, double dropout)
    : architecture_(encoder.architecture), num_labels_(num_labels), dropout_(dropout) {
  if (num_labels < 1) throw ModelError("model.num_labels must be at least 1, not " + std::to_string(num_labels));
  if (architecture_ == Architecture::MPNet)
    throw ModelError("a cross-encoder of MPNet (MPNetForSequenceClassification) is not implemented: MPNet trains "
                     "as an embedder (model.kind embedder)");
  const int64_t h = encoder.hidden_size();
  if (architecture_ == Architecture::Qwen3) {
    score = register_module("score", torch::nn::Linear(torch::nn::LinearOptions(h, num_labels).bias(false)));
    at::NoGradGuard no_grad;
    score->weight.normal_(0.0, encoder.qwen3.initializer_range);
    return;
  }
  const double std = encoder.bert.initializer_range;
  if (architecture_ == Architecture::XlmRoberta) {
    dense = register_module("dense", rerank_linear(h, h, std));
    out_proj = register_module("out_proj", rerank_linear(h, num_labels, std));
  } else {
    pooler = register_module("pooler", rerank_linear(h, h, std));
    classifier = register_module("classifier", rerank_linear(h, num_labels, std));
  }
}

at::Tensor RerankHeadImpl::forward(const at::Tensor& pooled) {
  if (pooled.dim() != 2) throw ModelError(c10::str("RerankHead: pooled must be [n, hidden], not ", pooled.sizes()));
  if (score) return score(pooled);
  if (dense) {
    at::Tensor x = fast_dropout(pooled, dropout_, is_training());
    x = at::tanh(dense(x));
    return out_proj(fast_dropout(x, dropout_, is_training()));
  }
  return classifier(fast_dropout(at::tanh(pooler(pooled)), dropout_, is_training()));
}

NamedTensors RerankHeadImpl::file_tensors() const {
  if (score) return {{"score.weight", score->weight}};
  if (dense)
    return {{"classifier.dense.weight", dense->weight}, {"classifier.dense.bias", dense->bias},
            {"classifier.out_proj.weight", out_proj->weight}, {"classifier.out_proj.bias", out_proj->bias}};
  return {{"bert.pooler.dense.weight", pooler->weight}, {"bert.pooler.dense.bias", pooler->bias},
          {"classifier.weight", classifier->weight}, {"classifier.bias", classifier->bias}};
}

std::string RerankHeadImpl::encoder_prefix() const {
  switch (architecture_) {
    case Architecture::Bert: break;
    case Architecture::XlmRoberta: return "roberta.";
    case Architecture::Qwen3:
    case Architecture::ModernBert: return "model.";
    case Architecture::MPNet: return "mpnet.";
    case Architecture::Gemma3: return "model.";  // never built: SentenceEmbedder refuses a Gemma 3 head
  }
  return "bert.";
}

std::string RerankHeadImpl::architecture() const {
  switch (architecture_) {
    case Architecture::Bert: break;
    case Architecture::XlmRoberta: return "XLMRobertaForSequenceClassification";
    case Architecture::Qwen3: return "Qwen3ForSequenceClassification";
    case Architecture::MPNet: return "MPNetForSequenceClassification";
    case Architecture::ModernBert: return "ModernBertForSequenceClassification";
    case Architecture::Gemma3: return "Gemma3TextForSequenceClassification";  // never built, as above
  }
  return "BertForSequenceClassification";
}

void RerankHeadImpl::load_file_tensors(const NamedTensors& tensors, const std::string& origin, bool& pooler_loaded) {
  pooler_loaded = false;
  for (const auto& [name, target] : file_tensors()) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
    const bool is_pooler = name.rfind("bert.pooler.", 0) == 0;
    if (it == tensors.end()) {
      if (is_pooler) continue;
      throw WeightsError(origin + ": the classification head's " + name + " is missing (a " + architecture() +
                         " folder has it)");
    }
    copy_into(target, it->second, name, origin);
    pooler_loaded = pooler_loaded || is_pooler;
  }
}

void RerankHeadImpl::load_pooler(const NamedTensors& carried) {
  if (!pooler) return;
  for (const auto& [name, tensor] : carried) {
    if (name == "pooler.dense.weight") copy_into(pooler->weight, tensor, name, "model.init");
    if (name == "pooler.dense.bias") copy_into(pooler->bias, tensor, name, "model.init");
  }
}

}  // namespace ddp_embed
