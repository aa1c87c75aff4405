// The contrastive loss of queries against an explicit candidate matrix, computed by
// pair_loss, the function training runs (model/loss.h): tests state their candidates as
// one matrix, pair_loss takes them as the trainer hands them over.
#pragma once

#include <vector>

#include <ATen/ATen.h>

#include "model/loss.h"

namespace loss_support {

// pair_loss (loss.type `type` at `temperature`, the whole embedding) of queries q [n, D]
// against candidates c [M, D], q's positives at rows offset .. offset + n - 1 of c. The
// rows after them are this rank's hard negatives; the rows before them an earlier rank's
// candidates, handed over as the cross-rank gather hands them (so their gradients reach
// c too).
inline at::Tensor loss_against(const at::Tensor& q, const at::Tensor& c, int64_t offset, ddp_embed::LossType type,
                               double temperature) {
  ddp_embed::LossConfig loss;
  loss.type = type;
  loss.temperature = temperature;
  const int64_t n = q.size(0), after = c.size(0) - offset - n;
  const at::Tensor pos = c.narrow(0, offset, n), neg = after > 0 ? c.narrow(0, offset + n, after) : at::Tensor();
  if (offset == 0) return ddp_embed::pair_loss(q, pos, neg, {}, loss).loss;
  ddp_embed::CandidateLabels labels;
  labels.rank_rows = {offset, n + after};
  const ddp_embed::CandidateExchange earlier_rank{
      [&](const at::Tensor& local, const std::vector<int64_t>&) { return at::cat({c.narrow(0, 0, offset), local}); },
      {}, 1};
  return ddp_embed::pair_loss(q, pos, neg, labels, loss, earlier_rank).loss;
}

}  // namespace loss_support
