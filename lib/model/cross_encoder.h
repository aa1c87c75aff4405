// A reranker's head (model.kind "cross_encoder"): the encoder reads a (query, document)
// pair as one sequence (tokenize/pair_template.h) and the head turns its pooled token into
// model.num_labels logits, as transformers' *ForSequenceClassification does, with its
// parameter names, so that a cross-encoder folder loads by name and ours loads in
// transformers and sentence-transformers' CrossEncoder:
//
//   BERT   (BertForSequenceClassification)     [CLS] → pooler.dense → tanh → dropout → classifier
//          file names  bert.pooler.dense.{weight,bias}  classifier.{weight,bias}
//   XLM-R  (XLMRobertaForSequenceClassification, RobertaClassificationHead)
//          <s> → dropout → dense → tanh → dropout → out_proj
//          file names  classifier.dense.{weight,bias}  classifier.out_proj.{weight,bias}
//   Qwen3  (Qwen3ForSequenceClassification)  the last token whose id is not config.json's
//          pad_token_id (the last real token without one) → score (no bias)
//          file name   score.weight
//
// The encoder's tensors go under bert. / roberta. / model. in the same file. A new head
// is initialized as transformers initializes one (weights N(0, initializer_range), biases
// 0); BERT's pooler is the init folder's when it has one. An MPNet encoder takes no head
// (the constructor's ModelError).
#pragma once

#include <cstdint>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/encoder_config.h"
#include "model/model_error.h"
#include "model/weights.h"

namespace ddp_embed {

class RerankHeadImpl : public torch::nn::Module {
 public:
  // num_labels >= 1 (else a ModelError); dropout: the head's (transformers:
  // classifier_dropout, else hidden_dropout_prob; Qwen3's has none).
  RerankHeadImpl(const EncoderConfig& encoder, int64_t num_labels, double dropout);

  // pooled: the encoder's last hidden state at the token the head reads (the first; Qwen3:
  // see above), [n, H] → logits [n, num_labels].
  at::Tensor forward(const at::Tensor& pooled);

  int64_t num_labels() const { return num_labels_; }
  // The head's tensors under the names a *ForSequenceClassification file gives them, and
  // the prefix of the encoder's tensors there ("bert." / "roberta.").
  NamedTensors file_tensors() const;
  std::string encoder_prefix() const;
  // transformers' architecture name ("BertForSequenceClassification", ...).
  std::string architecture() const;
  // Fills the head from a folder's tensors by their file names (file_tensors' names).
  // The BERT pooler may be absent (it keeps its initialization: `pooler_loaded` false);
  // any other missing tensor, or one of another shape, is a WeightsError naming `origin`.
  void load_file_tensors(const NamedTensors& tensors, const std::string& origin, bool& pooler_loaded);
  // Only BERT's pooler, from a bi-encoder folder's carried pooler.dense.* (model_folder.h).
  void load_pooler(const NamedTensors& carried);

  // BERT: pooler and classifier; XLM-R: dense and out_proj; Qwen3: score (the others null).
  torch::nn::Linear pooler{nullptr}, classifier{nullptr}, dense{nullptr}, out_proj{nullptr}, score{nullptr};

 private:
  Architecture architecture_;
  int64_t num_labels_;
  double dropout_;
};
TORCH_MODULE(RerankHead);

}  // namespace ddp_embed
