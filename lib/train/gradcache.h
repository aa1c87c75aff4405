// GradCache (Gao et al. 2021; sentence-transformers' CachedMultipleNegativesRankingLoss):
// the contrastive loss of a micro-batch of any size, trained with the activation memory
// of `chunk` sequences (train.gradcache_chunk). Three passes over the micro-batch:
//
//   1. embed   every sequence, `chunk` at a time, with autograd off; keep the embeddings
//              ([n, D], a few KB) and, per chunk, the state of the device's generator;
//   2. loss    the loss of the whole micro-batch on the kept embeddings, as leaves (with
//              cross-rank and hard negatives, masks, Matryoshka sizes and distillation:
//              exactly as forward computes it), and by
//              backward its gradient with respect to every embedding;
//   3. replay  each chunk again with autograd on, its generator state restored (the same
//              dropout masks as in pass 1), and backpropagate its rows of that gradient
//              into the parameters.
//
// By the chain rule the parameters receive the gradient of the whole micro-batch's loss,
// as if it had been embedded in one piece with the masks pass 1 drew; activation memory
// is one chunk's, for one more forward pass of compute. A chunk is padded to its own
// longest sequence, which changes the result by rounding only (padding is masked out).
// The gradients are synchronized in the last chunk's backward; the chunks before only
// accumulate (DataParallel::defer_sync), as accumulation micro-steps do.
#pragma once

#include <functional>

#include "model/embedder.h"
#include "parallel/data_parallel.h"
#include "train/batches.h"
#include "train/precision.h"

namespace ddp_embed {

struct GradCacheSettings {
  int64_t chunk = 0;  // sequences per forward, > 0
  Precision precision = Precision::Fp32;
  c10::Device device{c10::kCPU};
};

// Runs the three passes on `batch` (already on the device). `prepare_loss` maps the
// micro-batch's loss to the one whose gradient is accumulated (the trainer divides by the
// accumulation steps there); `scaler` scales it for backward (fp16). `dp` may be null
// (no gradient sync). Returns the prepared loss, detached; adds the number of masked
// same-text candidates (PairLoss::masked) to `*masked` and of those the guide masked
// besides (PairLoss::guided) to `*guided` when given. The guide's embeddings, when there
// is one, are in batch.labels already (train/guide.h embeds them chunk by chunk too).
at::Tensor gradcache_forward_backward(SentenceEmbedder& model, const PairBatch& batch, const GradCacheSettings& settings,
                                      const LossConfig& loss, const CandidateExchange& exchange,
                                      const std::function<at::Tensor(const at::Tensor&)>& prepare_loss,
                                      const LossScaler& scaler, DataParallel* dp, at::Tensor* masked = nullptr,
                                      at::Tensor* guided = nullptr, at::Tensor* sparse_terms = nullptr);

// The same three passes for a cross-encoder's micro-batch (train/rerank_batches.h): its
// joined pairs scored `settings.chunk` at a time, the reranking loss on the kept logits
// (SentenceEmbedderImpl::rerank_loss_of_logits), each chunk scored again and its logits'
// gradient pushed through. Every reranking loss is a function of the logits alone, so
// the parameters receive the whole micro-batch's gradient. Returns the prepared loss.
at::Tensor gradcache_rerank_forward_backward(SentenceEmbedder& model, const RerankPart& batch,
                                             const GradCacheSettings& settings, const CrossEncoderLossConfig& loss,
                                             const CandidateExchange& exchange,
                                             const std::function<at::Tensor(const at::Tensor&)>& prepare_loss,
                                             const LossScaler& scaler, DataParallel* dp);

}  // namespace ddp_embed
