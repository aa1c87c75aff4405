// Bucketed, overlapped gradient all-reduce (grad_sync.h).
//
// Where the hook sits, and why. Tensor::register_hook on a leaf parameter runs on the
// gradient *arriving* at it, before AccumulateGrad adds it to .grad — with gradient
// accumulation (or a parameter used twice) that is not the value to all-reduce. Instead we
// attach a post-hook to each parameter's AccumulateGrad node (the "grad accumulator", the
// mechanism PyTorch's own reducer uses): it runs right after .grad has been updated, so
// .grad then holds the sum over all micro-steps so far. Hence:
//   - micro-steps with sync off: the hook returns at once; .grad accumulates as usual;
//   - the step with sync on: the hook copies the accumulated .grad into the parameter's
//     slice of its bucket and, when the bucket is complete, launches its all-reduce (SUM);
//   - finish(): launches what backward did not complete, waits, divides by the world size
//     and copies the averages back into .grad.
// We hold the accumulator nodes (a parameter keeps only a weak reference to its own, so
// without ours a later forward could build a fresh one without our hook). Hooks reach the
// state through a weak_ptr: after the GradSync is gone they do nothing.
//
// Launch order. Gloo and NCCL match collectives by issue order, so every rank must launch
// the buckets in the same order even if its backward completes them in another (a
// parameter unused on one rank, a different graph): bucket b is launched only after
// buckets 0..b-1, and finish() launches the rest in order. Parameters that got no gradient
// in this backward are filled with their accumulated .grad from earlier micro-steps, or
// zeros, so every rank sends every bucket every step.
//
// CUDA (NCCL). The hook runs on the autograd engine's thread for that device, with the
// stream of the backward ops current; the copy into the bucket is queued on that stream,
// and ProcessGroupNCCL makes its communication stream wait for the current stream before
// the all-reduce, so the all-reduce reads the finished copy. PendingCollective::wait() in
// finish() makes the current stream wait for the all-reduce, so the division and copies
// back into .grad (queued after it) see the result; the host does not block.
#include "dist/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

namespace ddp_embed {

namespace {
struct Bucket {
  at::Tensor flat;                  // all gradients of the bucket, one after the other
  std::vector<std::size_t> params;  // indices into State::params
  std::vector<int64_t> offsets;     // element offset of each in flat
  std::size_t pending = 0;          // parameters whose gradient is not in flat yet (this step)
  bool launched = false;
  PendingCollective work;
  std::string name;
};
}  // namespace

struct GradSync::State {
  ProcessGroup* pg = nullptr;
  std::vector<at::Tensor> params;
  // Kept alive so that the hooks stay registered (a shared_ptr in older LibTorch, an
  // intrusive_ptr in newer).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(at::Tensor()))> accumulators;
  std::vector<std::size_t> bucket_of, slot_of;  // per parameter
  std::vector<char> ready;                      // per parameter, this step
  std::vector<Bucket> buckets;
  std::size_t next_launch = 0;  // buckets [0, next_launch) are launched this step
  bool sync = true;
  std::string error;  // raised by finish(): hooks must not throw through the engine
  std::mutex mu;
  StepStats last;

  at::Tensor slot(std::size_t i) {
    Bucket& b = buckets[bucket_of[i]];
    const at::Tensor& p = params[i];
    return b.flat.narrow(0, b.offsets[slot_of[i]], p.numel()).view(p.sizes());
  }

  void launch(std::size_t b) {
    Bucket& bk = buckets[b];
    bk.work = pg->allreduce_sum_async(bk.flat, bk.name);
    bk.launched = true;
  }

  void launch_ready_in_order() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
  }

  // The post-hook of parameter i's AccumulateGrad: .grad is final for this backward.
  void on_grad_accumulated(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!sync || !error.empty()) return;
    const at::Tensor& g = params[i].grad();
    if (!g.defined()) return;
    try {
      if (g.is_sparse()) throw DistError("parameter #" + std::to_string(i) + " has a sparse gradient; GradSync needs dense ones");
      Bucket& b = buckets[bucket_of[i]];
      if (b.launched)
        throw DistError("parameter #" + std::to_string(i) + " received another gradient after " + b.name +
                        " was sent (backward ran twice with sync on before finish()?)");
      at::NoGradGuard no_grad;
      slot(i).copy_(g);
      if (!ready[i]) {
        ready[i] = 1;
        --b.pending;
      }
      launch_ready_in_order();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }

  void reset_step() {
    next_launch = 0;
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.launched = false;
      b.work = PendingCollective();
    }
  }
};

namespace {
struct AccumulatedHook : public torch::autograd::FunctionPostHook {
  AccumulatedHook(std::weak_ptr<GradSync::State> s, std::size_t i) : state(std::move(s)), index(i) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list& /*inputs*/) override {
    if (auto s = state.lock()) s->on_grad_accumulated(index);
    return outputs;
  }
  std::weak_ptr<GradSync::State> state;
  std::size_t index;
};
}  // namespace

GradSync::GradSync(ProcessGroup& pg, const std::vector<at::Tensor>& params, std::size_t bucket_bytes)
    : state_(std::make_shared<State>()) {
  State& s = *state_;
  s.pg = &pg;
  if (pg.world_size() == 1) return;
  for (const auto& p : params) {
    // A tensor listed twice (tied weights) is synchronized once.
    const bool seen = std::any_of(s.params.begin(), s.params.end(), [&](const at::Tensor& q) { return q.is_same(p); });
    if (p.requires_grad() && !seen) s.params.push_back(p);
  }
  const std::size_t n = s.params.size();
  s.bucket_of.assign(n, 0);
  s.slot_of.assign(n, 0);
  s.ready.assign(n, 0);

  // Reverse registration order ≈ the order backward finishes the gradients: the first
  // buckets fill (and start communicating) while backward still works on the early layers.
  std::size_t cur_bytes = 0;
  for (std::size_t k = n; k-- > 0;) {
    const at::Tensor& p = s.params[k];
    if (!p.is_leaf()) throw DistError("GradSync: parameter #" + std::to_string(k) + " is not a leaf tensor");
    const std::size_t bytes = static_cast<std::size_t>(p.numel()) * p.element_size();
    bool fresh = s.buckets.empty() || cur_bytes + bytes > bucket_bytes;
    if (!fresh) {
      const at::Tensor& first = s.params[s.buckets.back().params.front()];
      fresh = first.device() != p.device() || first.scalar_type() != p.scalar_type();  // one dtype per bucket
    }
    if (fresh) {
      s.buckets.emplace_back();
      cur_bytes = 0;
    }
    Bucket& b = s.buckets.back();
    s.bucket_of[k] = s.buckets.size() - 1;
    s.slot_of[k] = b.params.size();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    cur_bytes += bytes;
  }
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& bk = s.buckets[b];
    const at::Tensor& first = s.params[bk.params.front()];
    const int64_t total = bk.offsets.back() + s.params[bk.params.back()].numel();
    bk.flat = at::zeros({total}, first.options().requires_grad(false));
    std::ostringstream name;
    name << "gradient all-reduce of bucket " << b + 1 << "/" << s.buckets.size() << " (" << bk.params.size()
         << " parameters, " << static_cast<double>(total * first.element_size()) / (1 << 20) << " MiB)";
    bk.name = name.str();
    bk.pending = bk.params.size();
  }
  // The hooks.
  std::weak_ptr<State> weak = state_;
  for (std::size_t i = 0; i < n; ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.params[i]);
    if (!acc) throw DistError("GradSync: parameter #" + std::to_string(i) + " has no gradient accumulator");
    acc->add_post_hook(std::make_unique<AccumulatedHook>(weak, i));
    s.accumulators.push_back(std::move(acc));
  }
}

GradSync::~GradSync() = default;

void GradSync::set_sync(bool on) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->sync = on;
}

bool GradSync::sync_enabled() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->sync;
}

GradSync::NoSync::NoSync(GradSync& g) : g_(&g), prev_(g.sync_enabled()) { g.set_sync(false); }
GradSync::NoSync::NoSync(NoSync&& o) noexcept : g_(o.g_), prev_(o.prev_) { o.g_ = nullptr; }
GradSync::NoSync::~NoSync() {
  if (g_) g_->set_sync(prev_);
}

void GradSync::finish() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pg->world_size() == 1 || !s.sync) return;
  const auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.buckets = s.buckets.size();
  st.launched_before_finish = s.next_launch;
  if (!s.error.empty()) {
    std::string e = s.error;
    s.error.clear();
    s.reset_step();
    throw DistError("gradient sync on rank " + std::to_string(s.pg->rank()) + ": " + e);
  }
  at::NoGradGuard no_grad;
  try {
    // Buckets backward did not complete: the missing gradients count as what .grad holds
    // (earlier micro-steps) or zero. Then launch in order, like every other rank.
    for (std::size_t b = s.next_launch; b < s.buckets.size(); ++b) {
      for (std::size_t i : s.buckets[b].params) {
        if (s.ready[i]) continue;
        const at::Tensor& g = s.params[i].grad();
        if (g.defined()) {
          s.slot(i).copy_(g);
        } else {
          s.slot(i).zero_();
        }
      }
      s.buckets[b].pending = 0;
    }
    s.launch_ready_in_order();
    for (auto& b : s.buckets) {
      b.work.wait();
      st.bytes += static_cast<std::uint64_t>(b.flat.numel()) * b.flat.element_size();
    }
  } catch (...) {
    s.reset_step();
    throw;
  }
  st.wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (auto& b : s.buckets) b.flat.div_(s.pg->world_size());
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    at::Tensor avg = s.slot(i);
    at::Tensor& g = s.params[i].mutable_grad();
    if (g.defined()) {
      g.copy_(avg);
    } else {
      g = avg.clone();  // no gradient here, but other ranks had one: every rank ends equal
    }
  }
  s.last = st;
  s.reset_step();
}

std::size_t GradSync::num_buckets() const { return state_->buckets.size(); }

std::vector<std::size_t> GradSync::bucket_param_counts() const {
  std::vector<std::size_t> out;
  for (const auto& b : state_->buckets) out.push_back(b.params.size());
  return out;
}

const GradSync::StepStats& GradSync::last_step() const { return state_->last; }

}  // namespace ddp_embed
