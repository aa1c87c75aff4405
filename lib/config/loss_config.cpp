// The loss config's derived values (config/loss_config.h): what the step and the data
// loader read from loss.* beyond the keys themselves.
#include <algorithm>
#include <string>

#include "config/loss_config.h"

namespace ddp_embed {

LossConfig loss_at_step(const LossConfig& loss, int64_t step, int64_t total_steps) {
  LossConfig out = loss;
  if (!loss.sparse_encoder || !(loss.sparse.warmup_ratio > 0)) return out;
  // sentence-transformers: warmup_steps = int(total × ratio), at least 1; at the beginning
  // of a step, global_step (the steps done) against it.
  const int64_t warmup = std::max<int64_t>(1, int64_t(double(total_steps) * loss.sparse.warmup_ratio));
  const int64_t done = step - 1;
  if (done >= warmup) return out;
  const double ratio = double(done) / double(warmup);
  const double factor = loss.sparse.schedule == RegularizerSchedule::Linear ? ratio : ratio * ratio;
  out.sparse.document_regularizer_weight *= factor;
  out.sparse.query_regularizer_weight *= factor;
  return out;
}

double margin_mse_weight(const LossConfig& loss) {
  return loss.type == LossType::MarginMse ? 1.0 : loss.margin_mse.weight;
}

std::string teacher_scores_key(const LossConfig& loss) {
  if (loss.distill.weight > 0) return "loss.distill";
  if (loss.type == LossType::MarginMse) return "loss.type \"margin_mse\"";
  if (loss.margin_mse.weight > 0) return "loss.margin_mse";
  return "";
}

}  // namespace ddp_embed
