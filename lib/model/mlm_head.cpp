// The masked-language-model head (mlm_head.h), initialized as transformers initializes a new
// one (weights N(0, initializer_range), biases 0, the LayerNorm 1 and 0) and filled from a
// *ForMaskedLM file by name.
#include "model/mlm_head.h"

#include <algorithm>
#include <utility>

#include <c10/util/StringUtil.h>

namespace ddp_embed {

MlmHeadImpl::MlmHeadImpl(const EncoderConfig& encoder, at::Tensor word_embeddings)
    : architecture_(encoder.architecture), word_embeddings_(std::move(word_embeddings)) {
  if (architecture_ != Architecture::Bert && architecture_ != Architecture::XlmRoberta)
    throw ModelError("a masked-language-model head is implemented for BERT and XLM-RoBERTa encoders only");
  const BertConfig& c = encoder.bert;
  if (word_embeddings_.dim() != 2 || word_embeddings_.size(0) != c.vocab_size || word_embeddings_.size(1) != c.hidden_size)
    throw ModelError(c10::str("MlmHead: the word embeddings are ", word_embeddings_.sizes(), ", the config says [",
                              c.vocab_size, ", ", c.hidden_size, "]"));
  dense = register_module("dense", torch::nn::Linear(c.hidden_size, c.hidden_size));
  norm = register_module(
      "norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps)));
  bias = register_parameter("bias", at::zeros({c.vocab_size}));
  at::NoGradGuard no_grad;
  dense->weight.normal_(0.0, c.initializer_range);
  dense->bias.zero_();
}

at::Tensor MlmHeadImpl::forward(const at::Tensor& hidden) { return vocabulary_head().logits(hidden); }

NamedTensors MlmHeadImpl::file_tensors() const {
  if (architecture_ == Architecture::Bert)
    return {{"cls.predictions.transform.dense.weight", dense->weight},
            {"cls.predictions.transform.dense.bias", dense->bias},
            {"cls.predictions.transform.LayerNorm.weight", norm->weight},
            {"cls.predictions.transform.LayerNorm.bias", norm->bias},
            {"cls.predictions.bias", bias}};
  return {{"lm_head.dense.weight", dense->weight},
          {"lm_head.dense.bias", dense->bias},
          {"lm_head.layer_norm.weight", norm->weight},
          {"lm_head.layer_norm.bias", norm->bias},
          {"lm_head.bias", bias}};
}

std::string MlmHeadImpl::architecture() const {
  return architecture_ == Architecture::Bert ? "BertForMaskedLM" : "XLMRobertaForMaskedLM";
}

std::string MlmHeadImpl::encoder_prefix() const { return architecture_ == Architecture::Bert ? "bert." : "roberta."; }

void MlmHeadImpl::load_file_tensors(const NamedTensors& tensors, const std::string& origin) {
  const std::string model = architecture();
  for (const auto& [name, target] : file_tensors()) {
    const auto it = std::find_if(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == name; });
    if (it == tensors.end())
      throw WeightsError(origin + ": the masked-language-model head's " + name + " is missing: a sparse model starts " +
                         "from a " + model + " folder (transformers' AutoModelForMaskedLM.save_pretrained writes one) " +
                         "or from a sparse folder");
    if (it->second.sizes() != target.sizes())
      throw WeightsError(c10::str(origin, ": ", name, " has shape ", it->second.sizes(), ", the model's is ",
                                  target.sizes()));
    at::NoGradGuard no_grad;
    target.copy_(it->second.to(target.dtype()));
  }
}

VocabularyHead MlmHeadImpl::vocabulary_head() {
  VocabularyHead h;
  h.transform = [this](const at::Tensor& hidden) { return norm(at::gelu(dense(hidden))); };
  h.transform_params = {dense->weight, dense->bias, norm->weight, norm->bias};
  h.weight = word_embeddings_;
  h.bias = bias;
  return h;
}

}  // namespace ddp_embed
