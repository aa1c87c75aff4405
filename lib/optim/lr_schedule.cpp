#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace ddp_embed {

double learning_rate(double peak, Schedule schedule, int64_t warmup_steps, int64_t total_steps, int64_t step) {
  if (warmup_steps > 0 && step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
  if (schedule == Schedule::Constant) return peak;
  const double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, double(step - warmup_steps) / span);
  if (schedule == Schedule::Cosine) return peak * 0.5 * (1 + std::cos(M_PI * progress));
  return peak * (1 - progress);  // Schedule::Linear
}

}  // namespace ddp_embed
