// The sentence-embedding model: an encoder (BERT, XLM-RoBERTa or Qwen3: model/encoder.h)
// → pooling (cls | mean | lasttoken) → optional Linear(hidden, projection_dim), with the
// contrastive loss computed inside forward() so that the training step (and gradient
// averaging) sees one module call per micro-batch.
//
// Parameter names: bert.<Hugging Face BertModel names> (BERT and XLM-R) or
// qwen3.<Qwen3Model names>, and projection.{weight,bias}.
// Saved as a sentence-transformers folder, the BERT goes to model.safetensors without
// the "bert." prefix and the projection to 2_Dense/model.safetensors as linear.* (an
// identity-activation Dense), e.g. with weights.h:
//   save_module(*embedder->bert, dir + "/model.safetensors");
//   save_module(*embedder->projection, dir + "/2_Dense/model.safetensors", "linear.");
//   load_module(*embedder->projection, path, LoadOptions{{"linear."}});
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/bert.h"
#include "model/encoder.h"
#include "model/qwen3.h"
#include "model/loss.h"

namespace ddp_embed {

// One padded batch of token sequences.
struct EncoderInput {
  at::Tensor ids;   // int64 [n, L]
  at::Tensor mask;  // [n, L], 1 = real token, 0 = padding
  bool defined() const { return ids.defined(); }
};

class SentenceEmbedderImpl : public torch::nn::Module {
 public:
  // projection_dim 0: no projection, embeddings are the pooled hidden states. A negative
  // one is a ModelError, as are inputs below whose ids and mask are not one [n, L] shape
  // (and a forward whose queries and positives differ in number).
  SentenceEmbedderImpl(const EncoderConfig& config, int64_t projection_dim, Pooling pooling);
  SentenceEmbedderImpl(const BertConfig& config, int64_t projection_dim, Pooling pooling)
      : SentenceEmbedderImpl(encoder_config(config), projection_dim, pooling) {}

  // Pooled (and projected) embeddings [n, D], with gradient, in the current mode.
  at::Tensor embed(const EncoderInput& input);

  // The training loss for a micro-batch of pairs: embeds queries, positives and (if
  // neg.defined()) hard negatives, which join the positives as further candidates for
  // every query, and returns pair_loss() of them (model/loss.h): with `exchange` the
  // candidates of all ranks, with `labels` the same-text mask and the teacher's scores.
  PairLoss forward(const EncoderInput& query, const EncoderInput& pos, const EncoderInput& neg,
                   const LossConfig& loss, const CandidateExchange& exchange = {},
                   const CandidateLabels& labels = {});

  // forward's second half: the loss of embedded queries [n, D], positives [n, D] and
  // hard negatives ([k, D], or undefined). GradCache (train/gradcache.h) calls it on
  // embeddings computed beforehand, so every loss feature reaches it too.
  static PairLoss loss_of_embeddings(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg,
                                     const LossConfig& loss, const CandidateExchange& exchange = {},
                                     const CandidateLabels& labels = {});

  // Embeddings for inference: eval mode (no dropout) and no autograd, the previous mode
  // restored afterwards. Not normalized.
  at::Tensor encode_batch(const EncoderInput& input);

  int64_t embedding_dim() const;
  Pooling pooling() const { return pooling_; }

  // The encoder, whichever it is; and the same module by its type (the other one null).
  TextEncoderImpl& encoder() const { return *encoder_; }
  BertModel bert{nullptr};
  Qwen3Model qwen3{nullptr};
  torch::nn::Linear projection{nullptr};  // null without projection

 private:
  std::shared_ptr<TextEncoderImpl> encoder_;
  Pooling pooling_;
};
TORCH_MODULE(SentenceEmbedder);

}  // namespace ddp_embed
