#include "model/loss.h"

#include <cmath>
#include <stdexcept>

#include "compat/torch_compat.h"

namespace ddp_embed {
namespace {

// x / max(|x|, eps) row by row, as torch.nn.functional.normalize: a zero row stays zero.
at::Tensor normalize_rows(const at::Tensor& x) { return x / x.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12); }

std::string sizes_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace

bool is_known_loss_type(const std::string& type) { return type == "pairwise_sigmoid" || type == "infonce"; }

at::Tensor contrastive_loss(const at::Tensor& q, const at::Tensor& candidates, int64_t positive_offset,
                            const std::string& type, double temperature) {
  if (!is_known_loss_type(type))
    throw std::invalid_argument("unknown loss type \"" + type + "\" (pairwise_sigmoid | infonce)");
  if (!(temperature > 0) || !std::isfinite(temperature))
    throw std::invalid_argument("loss temperature must be positive, not " + std::to_string(temperature));
  if (q.dim() != 2 || candidates.dim() != 2 || q.size(1) != candidates.size(1))
    throw std::invalid_argument("contrastive_loss needs q [B, D] and candidates [M, D], got " + sizes_text(q) +
                                " and " + sizes_text(candidates));
  const int64_t batch = q.size(0), num_candidates = candidates.size(0);
  if (batch == 0) throw std::invalid_argument("contrastive_loss of an empty batch");
  if (positive_offset < 0 || positive_offset + batch > num_candidates)
    throw std::invalid_argument("positives " + std::to_string(positive_offset) + ".." +
                                std::to_string(positive_offset + batch) + " are not all among the " +
                                std::to_string(num_candidates) + " candidates");
  if (type == "pairwise_sigmoid" && num_candidates < 2)
    throw std::invalid_argument("pairwise_sigmoid needs at least one negative (2 candidates)");

  // fp32 (or fp64) whatever autocast would do: similarities divided by a small
  // temperature and their exponentials do not survive half precision.
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype =
      q.scalar_type() == at::kDouble && candidates.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const at::Tensor s =
      at::matmul(normalize_rows(q.to(dtype)), normalize_rows(candidates.to(dtype)).t()) / temperature;  // [B, M]
  const at::Tensor positives =
      at::arange(positive_offset, positive_offset + batch, at::TensorOptions().dtype(at::kLong).device(s.device()))
          .unsqueeze(1);  // [B, 1]

  if (type == "infonce") return -at::log_softmax(s, 1).gather(1, positives).mean();

  // softplus(s_ij - s_iP(i)) = -log sigmoid(d_ij); the positive's own column is
  // softplus(0) and is zeroed out of the sum rather than masked with a huge value.
  const at::Tensor terms = at::softplus(s - s.gather(1, positives));
  const at::Tensor negatives = at::ones_like(s).scatter_(1, positives, 0.0);
  return (terms * negatives).sum() / static_cast<double>(batch * (num_candidates - 1));
}

}  // namespace ddp_embed
