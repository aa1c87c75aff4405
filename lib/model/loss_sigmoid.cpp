// pairwise_sigmoid: with s_ij = cos(q_i, c_j) / temperature and P(i) query i's positive,
// the mean over the pairs (i, j) that remain (j != P(i), not masked) of
// softplus(s_ij - s_iP(i)) = -log sigmoid(s_iP(i) - s_ij), without underflow.
#include "compat/torch_compat.h"
#include "model/loss_parts.h"

namespace ddp_embed::loss_parts {

// The mean runs over the pairs of every rank's queries: with W ranks each rank's share of
// the loss is its sum divided by (that count / W), so that the mean over ranks, and the
// averaged gradient, are those of one process holding every rank's queries. Each rank
// has n queries and the same M candidates, so W n (M - 1) pairs less those masked anywhere.
at::Tensor sigmoid_divisor(const Candidates& c, const at::Tensor& masked, bool guided, int64_t n,
                           const CandidateExchange& exchange) {
  const int64_t ranks = int64_t(c.starts.size()), m = c.rows.size(0);
  at::Tensor masked_everywhere;
  if (!masked.defined()) {
    masked_everywhere = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(c.rows.device()));
  } else if (ranks == 1) {
    masked_everywhere = masked.sum();
  } else if (!guided) {  // the same-text mask alone: every rank's positives' texts are here
    masked_everywhere = same_text_pairs_everywhere(c, n);
  } else {  // the guide's mask depends on the other ranks' guide queries: each rank counts its own
    if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with a guide need all_gather_ids");
    masked_everywhere = exchange.all_gather_ids(masked.sum().reshape({1}), {}).sum();
  }
  return (double(ranks * n * (m - 1)) - masked_everywhere.to(at::kDouble)) / double(ranks);
}

at::Tensor pairwise_sigmoid_loss(const at::Tensor& q, const at::Tensor& candidates, int64_t positive_offset,
                                 double temperature, const at::Tensor& masked, const at::Tensor& divisor) {
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_dtype(q, candidates);
  const at::Tensor s = at::matmul(normalize_rows(q.to(dtype)), normalize_rows(candidates.to(dtype)).t()) / temperature;
  const at::Tensor positives = rows_from(positive_offset, q.size(0), s.device()).unsqueeze(1);  // [n, 1]
  // The positive's own column is softplus(0): zeroed out of the sum, as the masked pairs
  // are, rather than pushed away with a huge value.
  const at::Tensor terms = at::softplus(s - s.gather(1, positives));
  at::Tensor negatives = at::ones_like(s).scatter_(1, positives, 0.0);
  if (masked.defined()) negatives.masked_fill_(masked, 0.0);
  return (terms * negatives).sum() / divisor.to(dtype).clamp_min(1);  // every pair masked: 0, not 0/0
}

}  // namespace ddp_embed::loss_parts
