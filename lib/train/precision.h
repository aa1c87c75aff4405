// Mixed-precision training (train.precision):
//
//   fp32  everything in float32.
//   bf16  the forward pass under autocast to bfloat16 (matrix products in bf16, the ops
//         autocast keeps in fp32 in fp32). Same exponent range as fp32: no loss scaling.
//   fp16  autocast to float16 and dynamic loss scaling (LossScaler below): fp16 gradients
//         of small values would underflow to zero, so the loss is multiplied by a large
//         scale before backward and the gradients divided by it before the update.
//
// In every mode the parameters (master weights), their gradients and the optimizer
// state stay fp32 — autocast casts weights per operation — and so do checkpoints and
// the saved model. The contrastive loss is computed in fp32 (model/loss.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <ATen/ATen.h>

#include "compat/torch_compat.h"
#include "config/choices.h"  // Precision
#include "optim/flat_adamw.h"

namespace ddp_embed {

// The forward pass of one micro-batch in `precision` on `device`: autocast while alive
// (bf16 or fp16), nothing for fp32. Backward runs outside of it, as with torch.autocast.
class AutocastScope {
 public:
  AutocastScope(Precision precision, const c10::Device& device);

 private:
  std::optional<compat::AutocastGuard> guard_;
};

// Dynamic loss scaling for fp16, the rule of torch.cuda.amp.GradScaler: start at
// `initial_scale`; a step whose gradients are not finite (they overflowed at this scale)
// is skipped and the scale halved; after `growth_interval` finite steps in a row the
// scale doubles. A default-constructed scaler is disabled: scale 1, the loss unchanged.
class LossScaler {
 public:
  struct State {
    double scale = 1;
    int64_t good_steps = 0;  // finite steps since the scale last changed
  };

  LossScaler() = default;
  LossScaler(double initial_scale, int64_t growth_interval);

  bool enabled() const { return enabled_; }
  double scale() const { return state_.scale; }
  // loss × scale, to call backward on (the loss itself when disabled).
  at::Tensor scale_loss(const at::Tensor& loss) const;
  // The verdict on a step's gradients: adjusts the scale as above (disabled: nothing).
  void update(bool gradients_finite);

  // For checkpoints: a resumed run continues with the same scale and count.
  State state() const { return state_; }
  void load_state(const State& s);

 private:
  bool enabled_ = false;
  int64_t growth_interval_ = 2000;
  State state_;
};

struct UpdateOutcome {
  double grad_norm = 0;   // of the true (unscaled) gradients, before clipping
  bool applied = false;   // false: the gradients were not finite and the step was skipped
  double loss_scale = 1;  // the scale the gradients carried
};

// The parameter update of a training step, from gradients already averaged over the
// ranks. The averaged gradients are the same on every rank, and an inf or NaN of any
// rank is in them, so every rank reaches the same verdict without a collective of its own.
//   norm = |grads| / scale (one number read back from the device);
//   not finite: skip the step (the scaler backs off);
//   else: grads × clip(norm) / scale in one pass (unscale and clip together), AdamW step.
// With fp32/bf16 (scale 1) this is exactly clipping and stepping.
UpdateOutcome update_parameters(FlatAdamW& optimizer, LossScaler& scaler, double max_grad_norm, double lr);

}  // namespace ddp_embed
