// The model embed-train trains, of either kind (model.kind):
//  - a sentence embedder: an encoder (BERT, XLM-RoBERTa, MPNet or Qwen3: model/encoder.h) →
//    pooling (cls | mean | lasttoken) → optional Dense layers (one Linear(hidden,
//    projection_dim) of model.projection_dim, or the init folder's chain, as EmbeddingGemma's
//    768 → 3072 → 768 without biases), with the contrastive loss computed inside forward() so that the training step (and gradient
//    averaging) sees one module call per micro-batch;
//  - a cross-encoder (reranker): the encoder reads each (query, document) pair joined
//    (tokenize/pair_template.h), a classification head (model/cross_encoder.h) scores it,
//    and forward_rerank() returns the reranking loss (model/rerank_loss.h) of the scores;
//  - a sparse encoder (SPLADE): the encoder's last hidden states through its masked-language-
//    model head (model/mlm_head.h), pooled into one weight per vocabulary entry
//    (model/splade_pooling.h): embed() gives [n, vocabulary], and forward() the same
//    contrastive loss on them (loss.type "splade": dot products, FLOPS regularizers).
// One class for all three, so that everything around the model (data parallelism, AdamW's
// groups, checkpoints, LoRA, precision) serves the two alike.
//
// Parameter names: bert.<Hugging Face BertModel names> (BERT and XLM-R) or
// qwen3.<Qwen3Model names>, mpnet.<MPNetModel names>, modernbert.<ModernBertModel names>
// or gemma3.<Gemma3TextModel names>, and the Dense layers' projection.{weight,bias} (the
// first), projection_2.*, projection_3.*, ... (the k-th of a chain).
// Saved as a sentence-transformers folder, the BERT goes to model.safetensors without
// the "bert." prefix and the k-th Dense layer to <k+1>_Dense/model.safetensors as linear.*
// (an identity-activation Dense), e.g. with weights.h:
//   save_module(*embedder->bert, dir + "/model.safetensors");
//   save_module(*embedder->dense[0], dir + "/2_Dense/model.safetensors", "linear.");
//   load_module(*embedder->dense[0], path, LoadOptions{{"linear."}});
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "model/bert.h"
#include "model/cross_encoder.h"
#include "model/encoder.h"
#include "model/gemma3.h"
#include "model/qwen3.h"
#include "model/loss.h"
#include "model/mpnet.h"
#include "model/mlm_head.h"
#include "model/modernbert.h"
#include "model/rerank_loss.h"
#include "model/splade_pooling.h"

namespace ddp_embed {

// One padded batch of token sequences.
struct EncoderInput {
  at::Tensor ids;   // int64 [n, L]
  at::Tensor mask;  // [n, L], 1 = real token, 0 = padding
  at::Tensor types{};  // int64 [n, L]: token types of joined pairs (a cross-encoder's); undefined = all 0
  bool defined() const { return ids.defined(); }
};

// One Dense module after pooling: Linear(in_features, out_features), with or without its
// bias, identity activation (sentence-transformers' Dense, as model/model_folder.h reads it).
struct DenseShape {
  int64_t in_features = 0, out_features = 0;
  bool bias = true;
};

class SentenceEmbedderImpl : public torch::nn::Module {
 public:
  // projection_dim 0: no projection, embeddings are the pooled hidden states; otherwise one
  // Dense layer, Linear(hidden, projection_dim) with a bias. A negative one is a ModelError,
  // as are inputs below whose ids and mask are not one [n, L] shape (and a forward whose
  // queries and positives differ in number).
  SentenceEmbedderImpl(const EncoderConfig& config, int64_t projection_dim, Pooling pooling);
  // A chain of Dense layers, each taking the one before's output (the first the hidden
  // size): ModelError naming the layer whose shape does not follow.
  SentenceEmbedderImpl(const EncoderConfig& config, const std::vector<DenseShape>& dense, Pooling pooling);
  SentenceEmbedderImpl(const BertConfig& config, int64_t projection_dim, Pooling pooling)
      : SentenceEmbedderImpl(encoder_config(config), projection_dim, pooling) {}
  // A cross-encoder of `num_labels` outputs: a RerankHead on the first token, its dropout
  // the encoder's hidden dropout. ModelError for an MPNet, a ModernBERT or a Gemma 3 encoder
  // (their ...ForSequenceClassification heads are not implemented: model/cross_encoder.h).
  struct CrossEncoderShape {
    int64_t num_labels = 1;
  };
  SentenceEmbedderImpl(const EncoderConfig& config, CrossEncoderShape shape);

  // A sparse encoder: a BERT or XLM-R encoder (else a ModelError), its masked-LM head
  // (new, as transformers initializes one, until load_folder_weights fills it) and SPLADE
  // pooling with `reduce` and `activation`, the head run on `chunk_tokens` tokens at a time.
  struct SparseShape {
    SpladeReduce reduce = SpladeReduce::Max;
    SpladeActivation activation = SpladeActivation::Relu;
    int64_t chunk_tokens = 256;
    // > 0: encode_batch keeps each vector's largest this many entries (the rest 0), as
    // SparseEncoder.encode does with max_active_dims; embed (training) keeps every entry.
    int64_t max_active_dims = 0;
  };
  SentenceEmbedderImpl(const EncoderConfig& config, SparseShape shape);

  bool is_cross_encoder() const { return static_cast<bool>(head); }
  bool is_sparse() const { return static_cast<bool>(mlm); }
  const SparseShape& sparse_shape() const { return sparse_; }
  // encode and eval's --max-active-dims: k > 0, or 0 for every entry.
  void set_max_active_dims(int64_t k) { sparse_.max_active_dims = k; }

  // Pooled (and projected) embeddings [n, D], with gradient, in the current mode; a sparse
  // encoder's SPLADE vectors [n, vocabulary] (every entry >= 0).
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

  // A cross-encoder's logits of joined pairs (ids, mask and types of one [n, L] shape):
  // [n, num_labels], with gradient, in the current mode. ModelError on a bi-encoder.
  at::Tensor score(const EncoderInput& pairs);
  // score() for inference: eval mode, no autograd, the mode restored afterwards.
  at::Tensor score_batch(const EncoderInput& pairs);
  // The training loss of a cross-encoder micro-batch: score() of the pairs, gathered into
  // each query's group (`group_rows` int64 [q, G]: row i's candidates' pair rows, its
  // positive first, -1 past its last; `labels` float [q, G] or undefined) and
  // rerank_loss() of them (its sum over units / divisor). Divisor 0: lambda with a top k,
  // whose pairs follow the logits' order: this rank's count, and with `exchange` every
  // rank's (all_gather_ids; every rank calls it). A classifier (num_labels C > 1): one
  // pair a group (G 1), `labels` its class, rerank_class_loss of its C logits.
  at::Tensor forward_rerank(const EncoderInput& pairs, const at::Tensor& group_rows, const at::Tensor& labels,
                            const CrossEncoderLossConfig& loss, double divisor,
                            const CandidateExchange& exchange = {});
  // forward_rerank's second half: the loss of the pairs' logits [P] ([P, C] for a
  // classifier). GradCache
  // (train/gradcache.h) calls it on logits computed beforehand.
  static at::Tensor rerank_loss_of_logits(const at::Tensor& logits, const at::Tensor& group_rows,
                                          const at::Tensor& labels, const CrossEncoderLossConfig& loss, double divisor,
                                          const CandidateExchange& exchange = {});

  int64_t embedding_dim() const;
  Pooling pooling() const { return pooling_; }

  // The encoder, whichever it is; and the same module by its type (the other one null).
  TextEncoderImpl& encoder() const { return *encoder_; }
  BertModel bert{nullptr};
  Qwen3Model qwen3{nullptr};
  MPNetModel mpnet{nullptr};
  ModernBertModel modernbert{nullptr};
  Gemma3Model gemma3{nullptr};
  std::vector<torch::nn::Linear> dense;  // the Dense layers in order; none without projection
  RerankHead head{nullptr};               // a cross-encoder's; null for an embedder
  MlmHead mlm{nullptr};                   // a sparse encoder's vocabulary head; null otherwise

 private:
  // The encoder the config describes, as bert, qwen3, mpnet or modernbert.
  void register_encoder(const EncoderConfig& config);

  // A sparse encoder's embed(): the real tokens' hidden states packed, then splade_pool.
  at::Tensor embed_sparse(const EncoderInput& input);

  std::shared_ptr<TextEncoderImpl> encoder_;
  Pooling pooling_;
  SparseShape sparse_;
};
TORCH_MODULE(SentenceEmbedder);

}  // namespace ddp_embed
