// Bucketed gradient sync, overlapped with backward (grad_sync.h). Three parts: the
// buckets (grad_buckets.h), what is done with a full bucket (bucket_reduction.h: all-reduce
// to every rank, or reduce into the owners' shards), and this file: when buckets go out.
//
// Where the hook sits, and why. Tensor::register_hook on a leaf parameter runs on the
// gradient *arriving* at it, before AccumulateGrad adds it to .grad — with gradient
// accumulation (or a parameter used twice) that is not the value to synchronize. Instead we
// attach a post-hook to each parameter's AccumulateGrad node (the "grad accumulator", the
// mechanism PyTorch's own reducer uses): it runs right after .grad has been updated, so
// .grad then holds the sum over all micro-steps so far. Hence:
//   - micro-steps with sync off: the hook returns at once; .grad accumulates as usual;
//   - the step with sync on: the hook hands the accumulated .grad to its bucket (nothing
//     to copy where the bucket is a view of it) and, when the bucket is complete,
//     launches its collective;
//   - finish(): launches what backward did not complete, waits, and delivers the averages.
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
#include "parallel/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "parallel/bucket_reduction.h"

namespace ddp_embed {

struct GradSync::State {
  ProcessGroup* pg = nullptr;
  BucketLayout layout;
  std::unique_ptr<BucketReduction> reduction;  // all_reduce_average, until reduce_into_shards()
  bool to_shards = false;
  // Kept alive so that the hooks stay registered (a shared_ptr in older LibTorch, an
  // intrusive_ptr in newer).
  std::vector<decltype(torch::autograd::impl::grad_accumulator(at::Tensor()))> accumulators;
  std::vector<char> ready;      // per parameter, this step
  std::size_t next_launch = 0;  // buckets [0, next_launch) are launched this step
  bool sync = true;
  std::string error;  // raised by finish(): hooks must not throw through the engine
  std::mutex mu;
  StepStats last;

  void name_buckets() {
    for (std::size_t b = 0; b < layout.buckets.size(); ++b)
      layout.buckets[b].name = bucket_name(layout.buckets[b], b, layout.buckets.size(), reduction->collective());
  }

  void launch_ready_in_order() {
    while (next_launch < layout.buckets.size() && layout.buckets[next_launch].pending == 0) {
      Bucket& b = layout.buckets[next_launch++];
      reduction->launch(layout, b);
      b.launched = true;
    }
  }

  // The post-hook of parameter i's AccumulateGrad: .grad is final for this backward.
  void on_grad_accumulated(std::size_t i) {
    std::lock_guard<std::mutex> lock(mu);
    if (!sync || !error.empty()) return;
    if (!layout.params[i].grad().defined()) return;
    try {
      Bucket& b = layout.buckets[layout.bucket_of[i]];
      if (b.launched)
        throw DistError("parameter #" + std::to_string(i) + " received another gradient after " + b.name +
                        " was sent (backward ran twice with sync on before finish()?)");
      at::NoGradGuard no_grad;
      reduction->take(layout, i);
      if (!ready[i]) {
        ready[i] = 1;
        --b.pending;
      }
      launch_ready_in_order();
      reduction->progress(layout, next_launch);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }

  void reset_step() {
    next_launch = 0;
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : layout.buckets) {
      b.pending = b.params.size();
      b.launched = false;
      b.work.clear();
    }
    reduction->reset(layout);
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
  if (!pg.communicates()) return;
  std::vector<at::Tensor> synced;
  for (const auto& p : params) {
    // A tensor listed twice (tied weights) is synchronized once.
    const bool seen = std::any_of(synced.begin(), synced.end(), [&](const at::Tensor& q) { return q.is_same(p); });
    if (p.requires_grad() && !seen) synced.push_back(p);
  }
  for (std::size_t k = 0; k < synced.size(); ++k)
    if (!synced[k].is_leaf()) throw DistError("GradSync: parameter #" + std::to_string(k) + " is not a leaf tensor");
  s.layout = cut_into_buckets(std::move(synced), bucket_bytes);
  s.reduction = all_reduce_average(pg);
  s.name_buckets();
  s.ready.assign(s.layout.params.size(), 0);
  // The hooks.
  std::weak_ptr<State> weak = state_;
  for (std::size_t i = 0; i < s.layout.params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(s.layout.params[i]);
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
  if (!s.pg->communicates() || !s.sync) return;
  const auto t0 = std::chrono::steady_clock::now();
  StepStats st;
  st.buckets = s.layout.buckets.size();
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
    for (std::size_t b = s.next_launch; b < s.layout.buckets.size(); ++b) {
      for (std::size_t i : s.layout.buckets[b].params)
        if (!s.ready[i]) s.reduction->take(s.layout, i);
      s.layout.buckets[b].pending = 0;
    }
    s.launch_ready_in_order();
    s.reduction->wait_all(s.layout);
  } catch (...) {
    s.reset_step();
    throw;
  }
  st.wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& b : s.layout.buckets) st.bytes += static_cast<std::uint64_t>(b.numel * b.value_bytes);
  s.last = st;
  s.reduction->deliver(s.layout);
  s.reset_step();
}

void GradSync::reduce_into_shards(const std::vector<at::Tensor>& whole, const std::vector<at::Tensor>& own) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.pg->communicates()) return;
  if (s.to_shards) throw DistError("GradSync::reduce_into_shards: called twice");
  s.reduction = ddp_embed::reduce_into_shards(*s.pg, s.layout, whole, own);
  s.to_shards = true;
  s.name_buckets();
}

bool GradSync::reduces_into_shards() const { return state_->to_shards; }

std::size_t GradSync::num_buckets() const { return state_->layout.buckets.size(); }

bool GradSync::buckets_are_gradient_views() const {
  return !state_->layout.buckets.empty() && state_->layout.buckets.front().views;
}

std::vector<std::size_t> GradSync::bucket_param_counts() const {
  std::vector<std::size_t> out;
  for (const auto& b : state_->layout.buckets) out.push_back(b.params.size());
  return out;
}

const GradSync::StepStats& GradSync::last_step() const { return state_->last; }

}  // namespace ddp_embed
