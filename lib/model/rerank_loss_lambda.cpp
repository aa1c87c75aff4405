// sentence-transformers' LambdaLoss on a reranker's rows, as its forward computes it: each
// row sorted by the (activated) logits, the grades gathered in that order, every ordered
// pair (i, j) of positions with grade_i > grade_j (any two valid ones for ndcg_loss1), and
// with k one of them within the top k, adds -weight_ij · log σ(sigma · (s_i − s_j)) (over
// ln 2 for reduction_log binary); the weights follow from the gains (2^grade − 1) / maxDCG
// and the discounts log2(1 + position). Where the class pads ragged lists with logit
// -1e16 and grade -inf, the rows here carry `valid`: an entry past a row's last sorts
// after every real one and joins no pair, so the width of the rows changes nothing.
#include <cmath>
#include <limits>
#include <string>

#include "model/model_error.h"
#include "model/rerank_loss.h"
#include "model/rerank_loss_parts.h"

namespace ddp_embed {
namespace {

// The pairs LambdaLoss counts, bool [n, G, G] over positions of the predicted order:
// `valid_sorted` and `grades_sorted` the rows' validity and grades in that order.
at::Tensor rerank_loss_lambda_pairs(const at::Tensor& valid_sorted, const at::Tensor& grades_sorted,
                               const CrossEncoderLossConfig& config) {
  const int64_t width = valid_sorted.size(1);
  at::Tensor pairs = valid_sorted.unsqueeze(2) & valid_sorted.unsqueeze(1);
  if (config.weighting != LambdaWeighting::NdcgLoss1)
    pairs = pairs & (grades_sorted.unsqueeze(2) > grades_sorted.unsqueeze(1));
  if (config.k > 0 && config.k < width) {
    const at::Tensor top = at::arange(width, valid_sorted.options().dtype(at::kLong)) < config.k;
    pairs = pairs & (top.unsqueeze(1) | top.unsqueeze(0)).unsqueeze(0);
  }
  return pairs;
}

// The weighting scheme's weights, [n, G, G] or broadcastable to it, from the gains [n, G]
// and the discounts [1, G] (positions of the predicted order).
at::Tensor rerank_loss_lambda_weights(const at::Tensor& gain, const at::Tensor& discount,
                                 const CrossEncoderLossConfig& config) {
  const at::Tensor gain_gaps = (gain.unsqueeze(2) - gain.unsqueeze(1)).abs();
  // LambdaRank: |1/D_i − 1/D_j| · |G_i − G_j|.
  const auto lambda_rank = [&] {
    const at::Tensor inverse = discount.pow(-1.0);
    return (inverse.unsqueeze(2) - inverse.unsqueeze(1)).abs() * gain_gaps;
  };
  // NDCG-Loss2: |1/D(|i−j|) − 1/D(|i−j|+1)| · |G_i − G_j| (positions counted from 1), 0 on
  // the diagonal; D(m) = log2(1 + m).
  const auto ndcg_loss2 = [&] {
    const int64_t width = gain.size(1);
    const at::Tensor pos = at::arange(width, gain.options());
    const at::Tensor gap = (pos.unsqueeze(1) - pos.unsqueeze(0)).abs();
    const at::Tensor deltas = ((1.0 + gap).log2().pow(-1.0) - (2.0 + gap).log2().pow(-1.0)).abs();
    return at::where(gap > 0, deltas, at::zeros({}, gain.options())).unsqueeze(0) * gain_gaps;
  };
  switch (config.weighting) {
    case LambdaWeighting::None:
      return at::ones({}, gain.options());
    case LambdaWeighting::NdcgLoss1:
      return (gain / discount).unsqueeze(2);
    case LambdaWeighting::NdcgLoss2:
      return ndcg_loss2();
    case LambdaWeighting::LambdaRank:
      return lambda_rank();
    case LambdaWeighting::NdcgLoss2pp:
      return config.mu * ndcg_loss2() + lambda_rank();
  }
  throw ModelError("loss.cross_encoder.weighting: unknown scheme");
}

}  // namespace

namespace rerank_parts {

at::Tensor lambda_sum(const at::Tensor& scores, const at::Tensor& valid, const at::Tensor& labels,
                      const CrossEncoderLossConfig& config) {
  const int64_t width = scores.size(1);
  const double inf = std::numeric_limits<double>::infinity();
  const at::Tensor zero = at::zeros({}, scores.options());
  const auto [sorted, order] = at::sort(scores.masked_fill(~valid, -inf), /*dim=*/1, /*descending=*/true);
  const at::Tensor grades = at::where(valid, labels, at::full({}, -inf, labels.options())).detach();
  const at::Tensor valid_sorted = valid.gather(1, order);
  const at::Tensor grades_sorted = grades.gather(1, order);
  const at::Tensor pairs = rerank_loss_lambda_pairs(valid_sorted, grades_sorted, config);

  const int64_t k = config.k > 0 && config.k < width ? config.k : width;
  const at::Tensor discount = (1.0 + at::arange(1, width + 1, scores.options())).log2().unsqueeze(0);  // [1, G]
  const at::Tensor ideal = std::get<0>(at::sort(grades, 1, /*descending=*/true)).clamp_min(0);
  const at::Tensor max_dcg = ((at::pow(2.0, ideal) - 1) / discount).narrow(1, 0, k).sum(1).clamp_min(config.eps);
  const at::Tensor gain = (at::pow(2.0, grades_sorted.clamp_min(0)) - 1) / max_dcg.unsqueeze(1);
  const at::Tensor weights = rerank_loss_lambda_weights(gain, discount, config);

  // Differences of pairs left out are set to 0 before log σ: the padding's -inf would make
  // NaN gradients through it.
  const at::Tensor gaps = at::where(pairs, sorted.unsqueeze(2) - sorted.unsqueeze(1), zero).clamp(-1e8, 1e8);
  at::Tensor terms = weights * at::log_sigmoid(config.sigma * gaps);
  if (config.reduction_log == LambdaLog::Binary) terms = terms / std::log(2.0);
  return -at::where(pairs, terms, zero).sum();
}

}  // namespace rerank_parts

at::Tensor rerank_lambda_units(const RerankGroups& groups, const CrossEncoderLossConfig& config) {
  const at::Tensor& valid = groups.valid;
  if (!valid.defined() || valid.dim() != 2 || valid.scalar_type() != at::kBool || !groups.labels.defined() ||
      groups.labels.sizes() != valid.sizes())
    throw ModelError("rerank_lambda_units needs valid bool [n, G] and labels [n, G]");
  const int64_t width = valid.size(1);
  at::Tensor order = at::arange(width, valid.options().dtype(at::kLong)).expand({valid.size(0), width});
  if (config.k > 0 && config.k < width) {  // the top k by the logits: their order matters
    if (!groups.logits.defined() || groups.logits.sizes() != valid.sizes())
      throw ModelError("rerank_lambda_units with loss.cross_encoder.k = " + std::to_string(config.k) +
                       " needs the logits [n, G]: the pairs counted depend on their order");
    const double inf = std::numeric_limits<double>::infinity();
    const at::Tensor scores = rerank_parts::activated_scores(groups.logits.detach(), config).masked_fill(~valid, -inf);
    order = std::get<1>(at::sort(scores, 1, /*descending=*/true));
  }
  const at::Tensor grades = groups.labels.to(at::kDouble).masked_fill(~valid, 0);
  return rerank_loss_lambda_pairs(valid.gather(1, order), grades.gather(1, order), config).sum();
}

}  // namespace ddp_embed
