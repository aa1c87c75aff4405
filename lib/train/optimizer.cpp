#include "train/optimizer.h"

#include <cmath>
#include <stdexcept>

#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>

namespace ddp_embed {

FlatAdamW::FlatAdamW(std::vector<Group> groups, double beta1, double beta2, double eps)
    : beta1_(beta1), beta2_(beta2), eps_(eps) {
  torch::NoGradGuard no_grad;
  for (auto& g : groups) {
    if (g.params.empty()) continue;
    int64_t total = 0;
    for (auto& p : g.params) total += p.numel();
    auto opts = g.params.front().options().requires_grad(false);
    auto flat = torch::empty({total}, opts);
    auto flat_grad = torch::zeros({total}, opts);
    int64_t offset = 0;
    for (auto& p : g.params) {
      const int64_t n = p.numel();
      auto view = flat.narrow(0, offset, n).view(p.sizes());
      view.copy_(p);
      p.set_data(view);
      // A defined gradient is accumulated into in place by autograd, so the gradient
      // stays a view of the flat buffer.
      p.mutable_grad() = flat_grad.narrow(0, offset, n).view(p.sizes());
      offset += n;
    }
    params_.push_back(flat);
    grads_.push_back(flat_grad);
    weight_decay_.push_back(g.weight_decay);
  }
}

void FlatAdamW::allocate_moments() const {
  if (!exp_avg_.empty()) return;
  for (const auto& p : params_) {
    exp_avg_.push_back(torch::zeros_like(p));
    exp_avg_sq_.push_back(torch::zeros_like(p));
  }
}

void FlatAdamW::zero_grad() {
  for (auto& g : grads_) g.zero_();
}

double FlatAdamW::grad_norm() const {
  if (grads_.empty()) return 0;
  // The groups' sums of squares are added up on the device (in double, in group order),
  // so that a GPU is synchronized with once, not once per group.
  torch::NoGradGuard no_grad;
  torch::Tensor sq = torch::zeros({}, grads_.front().options().dtype(torch::kDouble));
  // linalg_vector_norm reads the buffer once (accumulating in double on the CPU); pow(2)
  // would first write a model-sized temporary.
  for (auto& g : grads_) sq += at::linalg_vector_norm(g, 2).to(torch::kDouble).square();
  return std::sqrt(sq.item<double>());
}

void FlatAdamW::scale_grads(double factor) {
  torch::NoGradGuard no_grad;
  for (auto& g : grads_) g.mul_(factor);
}

// One pass over each flat buffer with ATen's fused AdamW kernel (the kernel behind
// PyTorch's AdamW(fused=True)): p *= 1 - lr * wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g²;
// p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps). The unfused ops read and wrote
// the whole model about eight times a step and held two model-sized temporaries.
void FlatAdamW::step(double lr) {
  torch::NoGradGuard no_grad;
  allocate_moments();
  ++steps_;
  for (size_t i = 0; i < params_.size(); ++i) {
    // The kernel reads the step count from a tensor (PyTorch keeps one per parameter).
    const at::Tensor step = at::full({}, double(steps_), params_[i].options().dtype(at::kFloat));
    at::_fused_adamw_({params_[i]}, {grads_[i]}, {exp_avg_[i]}, {exp_avg_sq_[i]}, {}, {step}, lr, beta1_, beta2_,
                      weight_decay_[i], eps_, /*amsgrad=*/false, /*maximize=*/false);
  }
}

int64_t FlatAdamW::num_parameters() const {
  int64_t n = 0;
  for (auto& p : params_) n += p.numel();
  return n;
}

std::vector<std::pair<std::string, torch::Tensor>> FlatAdamW::state() const {
  allocate_moments();
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (size_t i = 0; i < params_.size(); ++i) {
    out.emplace_back("adamw." + std::to_string(i) + ".exp_avg", exp_avg_[i]);
    out.emplace_back("adamw." + std::to_string(i) + ".exp_avg_sq", exp_avg_sq_[i]);
  }
  return out;
}

void FlatAdamW::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& named,
                           int64_t steps) {
  torch::NoGradGuard no_grad;
  allocate_moments();
  auto find = [&](const std::string& name) -> const torch::Tensor& {
    for (auto& [n, t] : named)
      if (n == name) return t;
    throw std::runtime_error("optimizer state: missing tensor " + name);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto* dst : {&exp_avg_[i], &exp_avg_sq_[i]}) {
      const std::string name = "adamw." + std::to_string(i) + (dst == &exp_avg_[i] ? ".exp_avg" : ".exp_avg_sq");
      const auto& src = find(name);
      if (src.numel() != dst->numel())
        throw std::runtime_error("optimizer state: " + name + " has " + std::to_string(src.numel()) +
                                 " values, the model needs " + std::to_string(dst->numel()));
      dst->copy_(src.reshape({-1}));
    }
  }
  steps_ = steps;
}

double learning_rate(double peak, const std::string& schedule, int64_t warmup_steps,
                     int64_t total_steps, int64_t step) {
  if (warmup_steps > 0 && step < warmup_steps) return peak * double(step + 1) / double(warmup_steps);
  if (schedule == "constant") return peak;
  const double span = double(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, double(step - warmup_steps) / span);
  if (schedule == "cosine") return peak * 0.5 * (1 + std::cos(M_PI * progress));
  return peak * (1 - progress);  // linear
}

}  // namespace ddp_embed
