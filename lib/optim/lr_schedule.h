// The learning-rate schedule (train.schedule, train.warmup_steps).
#pragma once

#include <cstdint>

#include "config/choices.h"  // Schedule

namespace ddp_embed {

// Learning rate at optimizer step `step` (0-based): linear warmup from 0 over
// warmup_steps, then `schedule` (linear to 0 | cosine to 0 | constant) until total_steps.
double learning_rate(double peak, Schedule schedule, int64_t warmup_steps, int64_t total_steps, int64_t step);

}  // namespace ddp_embed
