// A sparse encoder's vocabulary head: transformers' masked-language-model head, with its
// parameter names, so that a *ForMaskedLM folder (what SPLADE training starts from, and what
// sentence-transformers' SparseEncoder saves) loads by name:
//
//   BERT   (BertForMaskedLM's BertLMPredictionHead)   dense → GELU → LayerNorm → decoder + bias
//          file names  cls.predictions.transform.dense.{weight,bias}
//                      cls.predictions.transform.LayerNorm.{weight,bias}   cls.predictions.bias
//   XLM-R  (XLMRobertaForMaskedLM's XLMRobertaLMHead)  dense → GELU → layer_norm → decoder + bias
//          file names  lm_head.dense.{weight,bias}  lm_head.layer_norm.{weight,bias}  lm_head.bias
//
// The decoder's weight is the word-embedding matrix (tie_word_embeddings, both models'
// default, and the reason transformers' files carry no decoder weight of their own): the
// head holds the encoder's tensor, not a copy, and does not register it as its own. Its
// gradient through the head reaches it where the head is called (model/splade_pooling.h
// takes it among the parameters). The head's logits over a batch's tokens are the largest
// tensor of sparse training; see splade_pooling.h for why they are made a chunk at a time.
#pragma once

#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "config/encoder_config.h"
#include "model/splade_pooling.h"
#include "model/weights.h"

namespace ddp_embed {

class MlmHeadImpl : public torch::nn::Module {
 public:
  // encoder: a BERT or an XLM-R (any other is a ModelError naming the architecture);
  // word_embeddings: its [vocab, hidden] word-embedding weight, shared, not copied.
  MlmHeadImpl(const EncoderConfig& encoder, at::Tensor word_embeddings);
  // hidden [n, H] → logits [n, vocab].
  at::Tensor forward(const at::Tensor& hidden);
  // The head's own tensors under a *ForMaskedLM file's names.
  NamedTensors file_tensors() const;
  // Fills the head from a folder's tensors by file_tensors' names. A missing tensor, or one
  // of another shape, is a WeightsError naming `origin` and saying how to get a head.
  void load_file_tensors(const NamedTensors& tensors, const std::string& origin);
  // transformers' class of an encoder with this head ("BertForMaskedLM",
  // "XLMRobertaForMaskedLM"), and the prefix its file puts before the encoder's names.
  std::string architecture() const;
  std::string encoder_prefix() const;
  // The head as splade_pool takes it: the transform (dense → GELU → LayerNorm) with its
  // parameters, the decoder's weight (the word embeddings) and the bias. It refers to this
  // module, which must outlive the pooling's backward.
  VocabularyHead vocabulary_head();

  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  at::Tensor bias;  // [vocab]

 private:
  Architecture architecture_;
  at::Tensor word_embeddings_;
};
TORCH_MODULE(MlmHead);

}  // namespace ddp_embed
