// The terms that follow a teacher's scores of each query's own candidates (its group:
// its positive, then its hard negatives, -1 past the last): FlagEmbedding's kl_div
// distillation (loss.distill) and sentence-transformers' MarginMSELoss (loss.margin_mse).
#include "compat/torch_compat.h"
#include "model/loss_parts.h"

namespace ddp_embed {
namespace {

using loss_parts::sizes_text;

// The score of each query with each of its own scored candidates (groups[i]: rows of
// `candidates`), [n, G] in the loss dtype: their cosine, or a sparse encoder's dot product.
// Checks the shapes both terms need; `who` names the caller in the error.
at::Tensor own_candidate_scores(const char* who, const at::Tensor& q, const at::Tensor& candidates,
                                const at::Tensor& groups, const at::Tensor& teacher_scores, bool dot_products) {
  const int64_t n = q.dim() == 2 ? q.size(0) : -1;
  if (n <= 0 || candidates.dim() != 2 || candidates.size(1) != q.size(1) || !groups.defined() || groups.dim() != 2 ||
      groups.size(0) != n || groups.size(1) < 1 || groups.scalar_type() != at::kLong || !teacher_scores.defined() ||
      teacher_scores.sizes() != groups.sizes())
    throw ModelError(std::string(who) + " needs q [n, D], candidates [m, D], groups int64 [n, G] and teacher scores " +
                     "[n, G], got " + sizes_text(q) + ", " + sizes_text(candidates) + ", " + sizes_text(groups) + ", " +
                     sizes_text(teacher_scores));
  const at::ScalarType dtype = loss_parts::loss_dtype(q, candidates);
  const at::Tensor rows = groups.clamp_min(0).reshape({-1});
  const auto unit = [&](const at::Tensor& x) {
    return dot_products ? x.to(dtype) : loss_parts::normalize_rows(x.to(dtype));
  };
  const at::Tensor c = unit(candidates).index_select(0, rows).view({n, groups.size(1), -1});
  return at::matmul(c, unit(q).unsqueeze(2)).squeeze(2);
}

}  // namespace

// With student_ij = cos(q_i, c_groups[i][j]) / temperature (a dot product with
// `dot_products`) and teacher_ij =
// softmax_j(teacher_scores_ij / teacher_temperature) over row i's valid entries, the mean
// over i of -sum_j teacher_ij log_softmax_j(student_i): the cross-entropy of the student
// under the teacher, KL(teacher || student) plus the teacher's entropy (the same gradient).
at::Tensor distillation_loss(const at::Tensor& q, const at::Tensor& candidates, const at::Tensor& groups,
                             const at::Tensor& teacher_scores, double temperature, double teacher_temperature,
                             bool dot_products) {
  if (!(temperature > 0) || !(teacher_temperature > 0)) throw ModelError("distillation needs positive temperatures");
  compat::NoAutocast no_autocast;
  const at::Tensor student =
      own_candidate_scores("distillation_loss", q, candidates, groups, teacher_scores, dot_products) / temperature;
  const at::Tensor valid = groups >= 0;  // [n, G]
  const double inf = loss_parts::kInf;
  const at::Tensor log_student = at::log_softmax(student.masked_fill(~valid, -inf), 1);
  const at::Tensor scaled = teacher_scores.to(student.scalar_type()) / teacher_temperature;
  const at::Tensor teacher = at::softmax(scaled.masked_fill(~valid, -inf), 1).detach();
  // An entry past a query's last candidate has teacher 0 and student -inf: left out
  // (0 * -inf would be NaN).
  const at::Tensor cross = at::where(valid, teacher * log_student, at::zeros({}, student.options()));
  return -cross.sum(1).mean();
}

// With s_ij = cos(q_i, c_groups[i][j]) (unscaled; a dot product with `dot_products`) and
// t_ij the teacher's, the mean over the (i, j >= 1) that exist of
// ((s_i0 - s_ij) - (t_i0 - t_ij))^2: a query with fewer hard negatives adds the margins it
// has (sentence-transformers' MSELoss over equal groups is the same mean).
at::Tensor margin_mse_loss(const at::Tensor& q, const at::Tensor& candidates, const at::Tensor& groups,
                           const at::Tensor& teacher_scores, bool dot_products) {
  compat::NoAutocast no_autocast;
  const at::Tensor student =
      own_candidate_scores("margin_mse_loss", q, candidates, groups, teacher_scores, dot_products);  // [n, G]
  const int64_t g = groups.size(1);
  if (g == 1) throw ModelError("MarginMSE needs hard negatives (data.negatives_per_query > 0)");
  const at::Tensor valid = groups.narrow(1, 1, g - 1) >= 0;  // [n, G - 1]: the hard negatives that exist
  const at::Tensor predicted = student.narrow(1, 0, 1) - student.narrow(1, 1, g - 1);
  const at::Tensor teacher = teacher_scores.to(student.scalar_type()).detach();
  const at::Tensor target = teacher.narrow(1, 0, 1) - teacher.narrow(1, 1, g - 1);
  // A margin past a query's last hard negative is left out (its target is NaN).
  const at::Tensor squared =
      at::where(valid, (predicted - target.nan_to_num(0)).pow(2), at::zeros({}, student.options()));
  return squared.sum() / valid.sum().clamp_min(1).to(student.scalar_type());
}

}  // namespace ddp_embed
