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
// Buckets as views of the gradients (PyTorch's gradient_as_bucket_view). When every
// parameter's .grad is already a view of a flat buffer (FlatAdamW makes them so: one
// buffer per parameter group), the buckets are cut from those buffers instead of being
// buffers of their own: autograd accumulates straight into the bucket, the hook has nothing
// to copy, and finish() divides in place and copies nothing back. That saves a model-sized
// buffer (91 MB for MiniLM-L6) and two passes over it per step. A bucket is then a run of
// parameters that lie side by side in one buffer; the layout is checked, and any parameter
// whose .grad was replaced later (no longer the bucket's memory) is copied as before.
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
#include "parallel/grad_sync.h"

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
  bool views = false;               // flat is the parameters' gradients themselves
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

  // Whether .grad of parameter i is its slot of the bucket (a view layout, .grad not replaced).
  bool grad_is_slot(std::size_t i) {
    const Bucket& b = buckets[bucket_of[i]];
    const at::Tensor& g = params[i].grad();
    return b.views && g.defined() &&
           g.data_ptr() == static_cast<char*>(b.flat.data_ptr()) + b.offsets[slot_of[i]] * b.flat.element_size();
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
      if (!grad_is_slot(i)) slot(i).copy_(g);
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

namespace {

// Buckets of their own: parameters in reverse registration order (≈ the order backward
// finishes their gradients, so the first buckets fill and start communicating while
// backward still works on the early layers), a new bucket whenever bucket_bytes is reached
// or the device or dtype changes.
void layout_with_copies(GradSync::State& s, std::size_t bucket_bytes) {
  std::size_t cur_bytes = 0;
  for (std::size_t k = s.params.size(); k-- > 0;) {
    const at::Tensor& p = s.params[k];
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
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + s.params[b.params.back()].numel());
    b.params.push_back(k);
    cur_bytes += bytes;
  }
  for (auto& b : s.buckets) {
    const at::Tensor& first = s.params[b.params.front()];
    b.flat = at::zeros({b.offsets.back() + s.params[b.params.back()].numel()}, first.options().requires_grad(false));
  }
}

// Buckets cut from the flat buffers the gradients already live in (see "Buckets as views"
// above). Returns false, with nothing changed, unless every .grad is defined, contiguous,
// of its parameter's dtype, and the gradients in each buffer tile a stretch of it with no
// gap or overlap. Within a buffer, parameters go from the highest offset down (reverse
// registration order when the buffer was filled in registration order); buckets of all
// buffers are then launched in the order backward completes them: a bucket is complete
// when its earliest-registered parameter is, so by that index, highest first. Every rank
// computes the same order from the same model.
bool layout_as_views(GradSync::State& s, std::size_t bucket_bytes) {
  struct Piece {
    std::size_t param;
    int64_t offset;  // in elements, in the buffer
  };
  std::vector<const c10::StorageImpl*> buffers;  // in order of first appearance: deterministic
  std::vector<std::vector<Piece>> pieces;
  for (std::size_t i = 0; i < s.params.size(); ++i) {
    const at::Tensor& p = s.params[i];
    const at::Tensor& g = p.grad();
    if (!g.defined() || g.is_sparse() || !g.is_contiguous() || g.scalar_type() != p.scalar_type() ||
        g.sizes() != p.sizes())
      return false;
    const c10::StorageImpl* buffer = g.storage().unsafeGetStorageImpl();
    const auto at = std::find(buffers.begin(), buffers.end(), buffer);
    if (at == buffers.end()) {
      buffers.push_back(buffer);
      pieces.push_back({{i, g.storage_offset()}});
    } else {
      pieces[at - buffers.begin()].push_back({i, g.storage_offset()});
    }
  }
  std::vector<Bucket> buckets;
  for (auto& in_buffer : pieces) {
    std::sort(in_buffer.begin(), in_buffer.end(), [](const Piece& a, const Piece& b) { return a.offset > b.offset; });
    for (std::size_t j = 0; j + 1 < in_buffer.size(); ++j)  // tiled: each ends where the one above starts
      if (in_buffer[j + 1].offset + s.params[in_buffer[j + 1].param].numel() != in_buffer[j].offset) return false;
    const at::Tensor& any_grad = s.params[in_buffer.front().param].grad();
    const int64_t element = any_grad.element_size();
    int64_t lo = 0, hi = 0;  // the stretch of the bucket being filled
    for (std::size_t j = 0; j < in_buffer.size(); ++j) {
      const Piece& piece = in_buffer[j];
      const int64_t n = s.params[piece.param].numel();
      if (j == 0 || static_cast<std::size_t>((hi - piece.offset) * element) > bucket_bytes) {
        buckets.emplace_back();
        hi = piece.offset + n;
      }
      lo = piece.offset;
      Bucket& b = buckets.back();
      b.params.push_back(piece.param);
      b.offsets.push_back(piece.offset);  // made relative to the bucket below
      const bool last_of_bucket = j + 1 == in_buffer.size() ||
                                  static_cast<std::size_t>((hi - in_buffer[j + 1].offset) * element) > bucket_bytes;
      if (last_of_bucket) {
        b.flat = at::empty({0}, any_grad.options()).set_(any_grad.storage(), lo, {hi - lo}, {1});
        for (auto& o : b.offsets) o -= lo;
        b.views = true;
      }
    }
  }
  auto earliest = [](const Bucket& b) { return *std::min_element(b.params.begin(), b.params.end()); };
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const Bucket& a, const Bucket& b) { return earliest(a) > earliest(b); });
  s.buckets = std::move(buckets);
  return true;
}

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
  for (std::size_t k = 0; k < n; ++k)
    if (!s.params[k].is_leaf()) throw DistError("GradSync: parameter #" + std::to_string(k) + " is not a leaf tensor");
  at::NoGradGuard no_grad;

  if (!layout_as_views(s, bucket_bytes)) layout_with_copies(s, bucket_bytes);
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& bk = s.buckets[b];
    for (std::size_t slot = 0; slot < bk.params.size(); ++slot) {
      s.bucket_of[bk.params[slot]] = b;
      s.slot_of[bk.params[slot]] = slot;
    }
    std::ostringstream name;
    name << "gradient all-reduce of bucket " << b + 1 << "/" << s.buckets.size() << " (" << bk.params.size()
         << " parameters, " << static_cast<double>(bk.flat.numel() * bk.flat.element_size()) / (1 << 20)
         << " MiB)";
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
        if (s.ready[i] || s.grad_is_slot(i)) continue;
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
    if (s.grad_is_slot(i)) continue;  // already averaged in place
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

bool GradSync::buckets_are_gradient_views() const {
  return !state_->buckets.empty() && state_->buckets.front().views;
}

std::vector<std::size_t> GradSync::bucket_param_counts() const {
  std::vector<std::size_t> out;
  for (const auto& b : state_->buckets) out.push_back(b.params.size());
  return out;
}

const GradSync::StepStats& GradSync::last_step() const { return state_->last; }

}  // namespace ddp_embed
