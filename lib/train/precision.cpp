#include "train/precision.h"

#include <cmath>
#include <stdexcept>

namespace ddp_embed {

AutocastScope::AutocastScope(Precision precision, const c10::Device& device) {
  if (precision == Precision::Fp32) return;
  const at::ScalarType dtype = precision == Precision::Bf16 ? at::kBFloat16 : at::kHalf;
  guard_.emplace(device.type(), compat::AutocastState{true, dtype});
}

LossScaler::LossScaler(double initial_scale, int64_t growth_interval)
    : enabled_(true), growth_interval_(growth_interval) {
  if (!(initial_scale > 0) || !std::isfinite(initial_scale))
    throw std::invalid_argument("the initial loss scale must be positive and finite");
  if (growth_interval < 1) throw std::invalid_argument("the loss scale growth interval must be at least 1");
  state_.scale = initial_scale;
}

at::Tensor LossScaler::scale_loss(const at::Tensor& loss) const {
  return enabled_ ? loss * state_.scale : loss;
}

void LossScaler::update(bool gradients_finite) {
  if (!enabled_) return;
  if (!gradients_finite) {
    state_.scale *= 0.5;
    state_.good_steps = 0;
  } else if (++state_.good_steps >= growth_interval_) {
    state_.scale *= 2;
    state_.good_steps = 0;
  }
}

void LossScaler::load_state(const State& s) {
  if (!(s.scale > 0) || !std::isfinite(s.scale) || s.good_steps < 0)
    throw std::invalid_argument("loss scaler state: scale " + std::to_string(s.scale) + ", good steps " +
                                std::to_string(s.good_steps) + " is not valid");
  state_ = s;
}

namespace {
// torch.nn.utils.clip_grad_norm_'s factor: shrink to max_norm when above it.
double clip_factor(double norm, double max_norm) {
  return max_norm > 0 && norm > max_norm ? max_norm / (norm + 1e-6) : 1.0;
}
}  // namespace

UpdateOutcome update_parameters(FlatAdamW& optimizer, LossScaler& scaler, double max_grad_norm, double lr) {
  UpdateOutcome out;
  out.loss_scale = scaler.scale();
  out.grad_norm = optimizer.grad_norm() / out.loss_scale;
  out.applied = std::isfinite(out.grad_norm);
  scaler.update(out.applied);
  if (!out.applied) return out;
  const double factor = clip_factor(out.grad_norm, max_grad_norm) / out.loss_scale;
  if (factor != 1.0) optimizer.scale_grads(factor);
  optimizer.step(lr);
  return out;
}

}  // namespace ddp_embed
