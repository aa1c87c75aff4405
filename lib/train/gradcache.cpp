#include "train/gradcache.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "model/activation_checkpoint.h"

namespace ddp_embed {
namespace {

// Rows [start, start + count) of a part, cut to the longest of them (padding is on the
// right, so the columns after it are padding in every row).
EncoderInput chunk_of(const EncoderInput& part, int64_t start, int64_t count) {
  const at::Tensor mask = part.mask.narrow(0, start, count);
  const int64_t longest = std::max<int64_t>(1, mask.sum(1).max().item<int64_t>());
  return {part.ids.narrow(0, start, count).narrow(1, 0, longest), mask.narrow(1, 0, longest),
          part.types.defined() ? part.types.narrow(0, start, count).narrow(1, 0, longest) : at::Tensor()};
}

struct Chunk {
  size_t part;  // 0 queries, 1 positives, 2 hard negatives
  int64_t start, count;
  EncoderInput input;          // its rows, cut to their longest (views of the batch)
  at::Tensor generator_state;  // before pass 1 embedded it
};

}  // namespace

at::Tensor gradcache_forward_backward(SentenceEmbedder& model, const PairBatch& batch, const GradCacheSettings& settings,
                                      const LossConfig& loss, const CandidateExchange& exchange,
                                      const std::function<at::Tensor(const at::Tensor&)>& prepare_loss,
                                      const LossScaler& scaler, DataParallel* dp, at::Tensor* masked,
                                      at::Tensor* guided, at::Tensor* sparse_terms) {
  std::vector<const EncoderInput*> parts = {&batch.query, &batch.pos};
  if (batch.neg.defined()) parts.push_back(&batch.neg);

  // Pass 1: the embeddings, no graph kept.
  std::vector<Chunk> chunks;
  std::vector<std::vector<at::Tensor>> pieces(parts.size());
  {
    at::NoGradGuard no_grad;
    AutocastScope autocast(settings.precision, settings.device);
    for (size_t p = 0; p < parts.size(); ++p) {
      const int64_t rows = parts[p]->ids.size(0);
      for (int64_t start = 0; start < rows; start += settings.chunk) {
        const int64_t count = std::min(settings.chunk, rows - start);
        Chunk c{p, start, count, chunk_of(*parts[p], start, count), generator_state(settings.device)};
        pieces[p].push_back(model->embed(c.input));
        chunks.push_back(std::move(c));
      }
    }
  }

  // Pass 2: the loss of the whole micro-batch, and its gradient at each embedding.
  std::vector<at::Tensor> embedded;
  for (auto& piece : pieces) embedded.push_back(at::cat(piece).detach().requires_grad_(true));
  at::Tensor prepared;
  {
    AutocastScope autocast(settings.precision, settings.device);
    const PairLoss pair = SentenceEmbedderImpl::loss_of_embeddings(
        embedded[0], embedded[1], embedded.size() > 2 ? embedded[2] : at::Tensor(), loss, exchange, batch.labels);
    prepared = prepare_loss(pair.loss);
    if (masked) *masked += pair.masked;
    if (guided) *guided += pair.guided;
    if (sparse_terms && pair.sparse_terms.defined())
      *sparse_terms = sparse_terms->defined() ? *sparse_terms + pair.sparse_terms : pair.sparse_terms;
  }
  scaler.scale_loss(prepared).backward();

  // Pass 3: each chunk again, with the masks of pass 1, its gradient pushed through it.
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    const bool last = i + 1 == chunks.size();
    std::optional<GradSync::NoSync> hold;
    if (dp && !last) hold.emplace(dp->defer_sync());
    at::Tensor again;
    {
      ReplayRandomness same_masks(settings.device, c.generator_state);
      AutocastScope autocast(settings.precision, settings.device);
      again = model->embed(c.input);
    }
    again.backward(embedded[c.part].grad().narrow(0, c.start, c.count).to(again.scalar_type()));
  }
  return prepared.detach();
}

at::Tensor gradcache_rerank_forward_backward(SentenceEmbedder& model, const RerankPart& batch,
                                             const GradCacheSettings& settings, const CrossEncoderLossConfig& loss,
                                             const CandidateExchange& exchange,
                                             const std::function<at::Tensor(const at::Tensor&)>& prepare_loss,
                                             const LossScaler& scaler, DataParallel* dp) {
  // Pass 1: every pair's logit, no graph kept.
  const int64_t rows = batch.pairs.ids.size(0);
  std::vector<Chunk> chunks;
  std::vector<at::Tensor> pieces;
  {
    at::NoGradGuard no_grad;
    AutocastScope autocast(settings.precision, settings.device);
    for (int64_t start = 0; start < rows; start += settings.chunk) {
      const int64_t count = std::min(settings.chunk, rows - start);
      Chunk c{0, start, count, chunk_of(batch.pairs, start, count), generator_state(settings.device)};
      pieces.push_back(model->score(c.input).squeeze(1));
      chunks.push_back(std::move(c));
    }
  }

  // Pass 2: the loss of the whole micro-batch, and its gradient at each logit.
  const at::Tensor logits = at::cat(pieces).detach().requires_grad_(true);
  at::Tensor prepared;
  {
    AutocastScope autocast(settings.precision, settings.device);
    prepared = prepare_loss(SentenceEmbedderImpl::rerank_loss_of_logits(logits, batch.group_rows, batch.labels, loss,
                                                                        batch.divisor, exchange));
  }
  scaler.scale_loss(prepared).backward();

  // Pass 3: each chunk again, with the masks of pass 1, its logits' gradient pushed through.
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Chunk& c = chunks[i];
    std::optional<GradSync::NoSync> hold;
    if (dp && i + 1 < chunks.size()) hold.emplace(dp->defer_sync());
    at::Tensor again;
    {
      ReplayRandomness same_masks(settings.device, c.generator_state);
      AutocastScope autocast(settings.precision, settings.device);
      again = model->score(c.input).squeeze(1);
    }
    again.backward(logits.grad().narrow(0, c.start, c.count).to(again.scalar_type()));
  }
  return prepared.detach();
}

}  // namespace ddp_embed
