// The contrastive losses computed inside the model's forward (loss.type in
// docs/config.md): one function for in-batch, cross-rank and hard negatives.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <ATen/ATen.h>

namespace ddp_embed {

struct LossSettings {
  std::string type = "pairwise_sigmoid";  // pairwise_sigmoid | infonce (contrastive_loss below)
  double temperature = 0.05;
};

// Cross-rank negatives: when all_gather is set, the loss compares each query with the
// candidates (positives, then hard negatives) of every rank. all_gather maps this rank's
// [n, D] to [world * n, D], the ranks' blocks in rank order, differentiable (the
// data-parallel seam provides it: parallel/data_parallel.h); every rank must have the
// same n. The local positives then start at row rank * n.
struct CandidateExchange {
  std::function<at::Tensor(const at::Tensor&)> all_gather;
  int64_t rank = 0;
};

// Query i's positive is candidates[positive_offset + i]; every other row of
// `candidates` is one of its negatives. This covers
//   in-batch negatives:   candidates = p [B, D], offset 0;
//   cross-rank negatives: candidates = all ranks' p gathered in rank order, offset rank * B;
//   hard negatives:       further rows (after the positives, or after each rank's block).
// With s_ij = cos(q_i, c_j) / temperature and P(i) = positive_offset + i:
//   "pairwise_sigmoid": mean over i and j != P(i) of softplus(s_ij - s_iP(i))
//                       (= -log sigmoid(d_ij), d_ij = s_iP(i) - s_ij, without underflow);
//   "infonce":          mean over i of cross-entropy(softmax(s_i), P(i)).
// Cosines use x / max(|x|, 1e-12), so a zero vector gives cos 0, not NaN. Everything
// runs in fp32 (fp64 for fp64 inputs), with autocast off, whatever q's dtype. Returns a
// scalar. Throws std::invalid_argument for bad shapes, offsets, type or temperature.
at::Tensor contrastive_loss(const at::Tensor& q /*[B, D]*/, const at::Tensor& candidates /*[M, D]*/,
                            int64_t positive_offset, const std::string& type, double temperature);

// Whether `type` names a loss contrastive_loss() knows.
bool is_known_loss_type(const std::string& type);

}  // namespace ddp_embed
