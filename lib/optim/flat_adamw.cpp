#include "optim/flat_adamw.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/linalg_vector_norm.h>

namespace ddp_embed {
namespace {

// The checkpoint names of group i's moments: "adamw.<i>.exp_avg", "adamw.<i>.exp_avg_sq".
std::string moment_name(size_t group, bool first_moment) {
  return "adamw." + std::to_string(group) + (first_moment ? ".exp_avg" : ".exp_avg_sq");
}

}  // namespace

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
      members_.push_back(p);
    }
    params_.push_back(flat);
    grads_.push_back(flat_grad);
    weight_decay_.push_back(g.weight_decay);
  }
}

void FlatAdamW::shard(int rank, int world, ShareShards share) {
  if (!exp_avg_.empty()) throw std::logic_error("FlatAdamW::shard after the moments were allocated");
  if (!share) throw std::invalid_argument("FlatAdamW::shard needs a way to share the shards");
  rank_ = rank;
  world_ = world;
  share_ = std::move(share);
}

void FlatAdamW::offload_to_host(int64_t chunk_values) {
  if (!exp_avg_.empty()) throw std::logic_error("FlatAdamW::offload_to_host after the moments were allocated");
  if (chunk_values <= 0) throw std::invalid_argument("FlatAdamW::offload_to_host: chunk_values must be positive");
  // A multiple of 64 values: ATen's CPU kernel runs whole SIMD vectors over a tensor and
  // scalar code, which rounds differently, over its last few values. Chunks that start
  // at multiples of every vector width leave the scalar tail where the whole buffer's is.
  offload_chunk_ = (chunk_values + 63) / 64 * 64;
}

ShardRange FlatAdamW::own_range(size_t i) const {
  return shard_range(params_[i].numel(), rank_, world_);  // the whole buffer while world_ is 1
}

void FlatAdamW::shard_gradients(SumOverRanks sum) {
  if (!sharded()) return;
  if (gradients_sharded()) throw std::logic_error("FlatAdamW::shard_gradients called twice");
  sum_over_ranks_ = std::move(sum);
  torch::NoGradGuard no_grad;
  for (auto& p : members_) p.mutable_grad() = torch::Tensor();
  for (size_t i = 0; i < grads_.size(); ++i) grads_[i] = torch::zeros({own_range(i).size}, grads_[i].options());
}

torch::Tensor FlatAdamW::own_grad(size_t i) const {
  if (gradients_sharded()) return grads_[i];
  const ShardRange own = own_range(i);
  return grads_[i].narrow(0, own.begin, own.size);
}

int64_t FlatAdamW::gradient_bytes() const {
  int64_t bytes = 0;
  for (const auto& g : grads_) bytes += g.numel() * int64_t(g.element_size());
  return bytes;
}

int64_t FlatAdamW::state_bytes() const {
  int64_t bytes = 0;
  for (size_t i = 0; i < params_.size(); ++i) bytes += 2 * own_range(i).size * int64_t(params_[i].element_size());
  return bytes;
}

void FlatAdamW::allocate_moments() const {
  if (!exp_avg_.empty()) return;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto options = offloaded() ? params_[i].options().device(torch::kCPU) : params_[i].options();
    exp_avg_.push_back(torch::zeros({own_range(i).size}, options));
    exp_avg_sq_.push_back(torch::zeros({own_range(i).size}, options));
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
  if (gradients_sharded()) sum_over_ranks_(sq);  // each rank has squared its shard only
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
    const ShardRange own = own_range(i);
    if (own.size == 0) continue;
    if (offloaded()) {
      step_on_host(i, own, lr);
      continue;
    }
    // The kernel reads the step count from a tensor (PyTorch keeps one per parameter).
    const at::Tensor step = at::full({}, double(steps_), params_[i].options().dtype(at::kFloat));
    at::_fused_adamw_({params_[i].narrow(0, own.begin, own.size)}, {own_grad(i)},
                      {exp_avg_[i]}, {exp_avg_sq_[i]}, {}, {step}, lr, beta1_, beta2_, weight_decay_[i], eps_,
                      /*amsgrad=*/false, /*maximize=*/false);
  }
  if (sharded()) share_(params_);
}

// Synchronous copies through pinned buffers: a GPU's copy engines move about 25-50 GB/s
// each way, so a 4B model's step spends about a second in transfers and about as long in
// the host's kernel. Overlapping the next chunk's copies with this chunk's update
// (two staging sets, non_blocking copies on a side stream) would hide most of the former;
// it needs a GPU to measure, and is left for then.
void FlatAdamW::step_on_host(size_t i, ShardRange own, double lr) {
  if (!host_params_.defined()) {
    int64_t largest = 0;
    for (size_t j = 0; j < params_.size(); ++j) largest = std::max(largest, own_range(j).size);
    const auto staging = torch::TensorOptions()
                             .dtype(params_[i].scalar_type())
                             .pinned_memory(params_[i].is_cuda());  // pinned: DMA, no bounce buffer
    host_params_ = at::empty({std::min(offload_chunk_, largest)}, staging);
    host_grads_ = at::empty({std::min(offload_chunk_, largest)}, staging);
  }
  const torch::Tensor params = params_[i].narrow(0, own.begin, own.size), grads = own_grad(i);
  const at::Tensor step = at::full({}, double(steps_), at::TensorOptions().dtype(at::kFloat));
  for (int64_t begin = 0; begin < own.size; begin += offload_chunk_) {
    const int64_t n = std::min(offload_chunk_, own.size - begin);
    torch::Tensor p = host_params_.narrow(0, 0, n), g = host_grads_.narrow(0, 0, n);
    p.copy_(params.narrow(0, begin, n));
    g.copy_(grads.narrow(0, begin, n));
    at::_fused_adamw_({p}, {g}, {exp_avg_[i].narrow(0, begin, n)}, {exp_avg_sq_[i].narrow(0, begin, n)}, {}, {step},
                      lr, beta1_, beta2_, weight_decay_[i], eps_, /*amsgrad=*/false, /*maximize=*/false);
    params.narrow(0, begin, n).copy_(p);
  }
}

int64_t FlatAdamW::num_parameters() const {
  int64_t n = 0;
  for (auto& p : params_) n += p.numel();
  return n;
}

FlatAdamW::NamedTensors FlatAdamW::state(bool keep) const {
  torch::NoGradGuard no_grad;
  allocate_moments();
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    for (const torch::Tensor* moment : {&exp_avg_[i], &exp_avg_sq_[i]}) {
      torch::Tensor whole = *moment;
      if (sharded()) {
        // Assembled one moment at a time where the collectives run (the parameters'
        // device), then moved to the host: one buffer-sized temporary on the device, not
        // the whole state on every rank (61 GB a GPU for 8B at ZeRO-2).
        const ShardRange own = own_range(i);
        whole = torch::zeros_like(params_[i]);
        whole.narrow(0, own.begin, own.size).copy_(*moment);
        share_({whole});
        whole = keep ? whole.to(torch::kCPU) : torch::Tensor();
      }
      if (keep) out.emplace_back(moment_name(i, moment == &exp_avg_[i]), whole);
    }
  return out;
}

void FlatAdamW::load_state(const NamedTensors& named, int64_t steps) {
  torch::NoGradGuard no_grad;
  allocate_moments();
  auto find = [&](const std::string& name) -> const torch::Tensor& {
    for (auto& [n, t] : named)
      if (n == name) return t;
    throw std::runtime_error("optimizer state: missing tensor " + name);
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    for (auto* dst : {&exp_avg_[i], &exp_avg_sq_[i]}) {
      const std::string name = moment_name(i, dst == &exp_avg_[i]);
      const auto& src = find(name);
      if (src.numel() != params_[i].numel())
        throw std::runtime_error("optimizer state: " + name + " has " + std::to_string(src.numel()) +
                                 " values, the model needs " + std::to_string(params_[i].numel()));
      const ShardRange own = own_range(i);
      dst->copy_(src.reshape({-1}).narrow(0, own.begin, own.size));
    }
  }
  steps_ = steps;
}

}  // namespace ddp_embed
