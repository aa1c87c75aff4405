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
//
// ZeRO-2 (reduce_into_shards). The buckets stay the same stretches of the optimizer's flat
// buffers, but no longer their memory: the whole buffers are gone, each bucket gets a
// buffer of its own when its first gradient arrives, and each .grad is copied into it and
// freed at once. A complete bucket is sent as one reduce (SUM) per rank whose shard it
// overlaps, to that rank; once the reduces are done, the rank's part of the sums, divided
// by the world size, is added into its shard and the bucket's buffer is freed: as soon as
// the hook sees them done, and at the latest when the next bucket is launched (one bucket
// in flight at a time), so a rank holds its shard, two buckets and the .grads of the
// bucket being filled, never a whole gradient.
// On the CPU those transient buffers are mapped from the kernel and unmapped when freed:
// the process's malloc tuning (model/malloc_tuning.h) keeps freed heap memory for reuse,
// so a buffer that lives for a part of backward would otherwise stay in the resident set
// between steps, and the memory ZeRO-2 saves would not show.
// Accumulation adds each micro-step's averages into the shard. The word embedding's
// gradient arrives sparse (only the rows of the batch) and is scattered into the bucket.
#include "parallel/grad_sync.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <sstream>
#include <string>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "parallel/zero.h"

namespace ddp_embed {

namespace {
struct Bucket {
  at::Tensor flat;                  // all gradients of the bucket, one after the other
  int64_t numel = 0;                // flat's length
  int64_t value_bytes = 4;          // flat's element size
  std::vector<std::size_t> params;  // indices into State::params
  std::vector<int64_t> offsets;     // element offset of each in flat
  bool views = false;               // flat is the parameters' gradients themselves
  std::size_t buffer = 0;           // with views (and ZeRO-2): the flat gradient buffer it is cut from,
  int64_t lo = 0;                   //   and where: [lo, lo + numel)
  std::size_t pending = 0;          // parameters whose gradient is not in flat yet (this step)
  bool launched = false;
  std::vector<PendingCollective> work;  // the all-reduce, or ZeRO-2's reduces to the owners
  std::string name;
};

// ZeRO-2: this rank's shard of one flat gradient buffer.
struct GradientShard {
  at::Tensor own;     // shard_range(whole, rank, world) of the buffer
  int64_t whole = 0;  // the buffer's length
};

// A ZeRO-2 bucket buffer: on the CPU straight from the kernel (see "On the CPU" above),
// elsewhere from the device's caching allocator.
at::Tensor transient_buffer(int64_t numel, const at::TensorOptions& options) {
  const std::size_t bytes = std::size_t(numel) * options.dtype().itemsize();
  if (options.device().is_cpu() && bytes > 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
      return at::from_blob(p, {numel}, [bytes](void* q) { munmap(q, bytes); }, options);
  }
  return at::empty({numel}, options);
}

// Buckets in flight under ZeRO-2 before the hook waits for the oldest: one on the network
// while the next fills. Each is a transient buffer of up to bucket_mb.
constexpr std::size_t kShardBucketsInFlight = 1;

std::string bucket_name(const Bucket& b, std::size_t index, std::size_t count, bool to_shards) {
  std::ostringstream name;
  name << (to_shards ? "gradient reduce" : "gradient all-reduce") << " of bucket " << index + 1 << "/" << count
       << " (" << b.params.size() << " parameters, " << static_cast<double>(b.numel * b.value_bytes) / (1 << 20) << " MiB)";
  return name.str();
}
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
  std::vector<const c10::StorageImpl*> buffers;  // with views: the flat gradient buffers, by first appearance
  std::size_t next_launch = 0;  // buckets [0, next_launch) are launched this step
  // ZeRO-2 (reduce_into_shards): one shard per buffer; buckets [0, next_fold) are in them.
  bool to_shards = false;
  std::vector<GradientShard> shards;
  std::size_t next_fold = 0;
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

  // ZeRO-2: where bucket b's stretch of its buffer meets `rank`'s shard (size 0: nowhere).
  ShardRange overlap(const Bucket& b, int rank) const {
    const ShardRange r = shard_range(shards[b.buffer].whole, rank, pg->world_size());
    const int64_t from = std::max(b.lo, r.begin), to = std::min(b.lo + b.numel, r.begin + r.size);
    return {from, std::max<int64_t>(0, to - from)};
  }

  // ZeRO-2: the bucket's own memory, from its first gradient until it is folded.
  void ensure_memory(Bucket& b) {
    if (!b.flat.defined()) b.flat = transient_buffer(b.numel, shards[b.buffer].own.options());
  }

  // ZeRO-2: parameter i's gradient (or zeros) into its slot, and .grad freed.
  void move_into_slot(std::size_t i) {
    ensure_memory(buckets[bucket_of[i]]);
    at::Tensor dst = slot(i);
    const at::Tensor& g = params[i].grad();
    if (!g.defined() || g.is_sparse()) dst.zero_();
    if (g.defined()) g.is_sparse() ? dst.add_(g) : dst.copy_(g);
    params[i].mutable_grad() = at::Tensor();
  }

  void launch(std::size_t b) {
    Bucket& bk = buckets[b];
    if (!to_shards) {
      bk.work.push_back(pg->allreduce_sum_async(bk.flat, bk.name));
    } else {
      for (int owner = 0; owner < pg->world_size(); ++owner) {
        const ShardRange o = overlap(bk, owner);
        if (o.size > 0)
          bk.work.push_back(pg->reduce_sum_async(bk.flat.narrow(0, o.begin - bk.lo, o.size), owner,
                                                 bk.name + " into rank " + std::to_string(owner) + "'s shard"));
      }
    }
    bk.launched = true;
  }

  // ZeRO-2: folds, in order, the launched buckets whose reduces are done, and those
  // beyond kShardBucketsInFlight whether done or not (waiting for them).
  void fold_finished_buckets() {
    auto done = [](const Bucket& b) {
      return std::all_of(b.work.begin(), b.work.end(), [](const PendingCollective& w) { return w.done(); });
    };
    while (next_fold < next_launch && (next_fold + kShardBucketsInFlight < next_launch || done(buckets[next_fold])))
      fold(next_fold++);
  }

  // ZeRO-2: bucket b's reduces are done; this rank's part of the sums, averaged, joins
  // its shard, and the bucket's memory is freed.
  void fold(std::size_t b) {
    Bucket& bk = buckets[b];
    for (auto& w : bk.work) w.wait();
    const int rank = pg->rank(), world = pg->world_size();
    const ShardRange o = overlap(bk, rank);
    if (o.size > 0) {
      GradientShard& sh = shards[bk.buffer];
      const int64_t mine = shard_range(sh.whole, rank, world).begin;
      sh.own.narrow(0, o.begin - mine, o.size).add_(bk.flat.narrow(0, o.begin - bk.lo, o.size), 1.0 / world);
    }
    bk.work.clear();
    bk.flat = at::Tensor();
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
      if (g.is_sparse() && !to_shards)
        throw DistError("parameter #" + std::to_string(i) + " has a sparse gradient; GradSync needs dense ones");
      Bucket& b = buckets[bucket_of[i]];
      if (b.launched)
        throw DistError("parameter #" + std::to_string(i) + " received another gradient after " + b.name +
                        " was sent (backward ran twice with sync on before finish()?)");
      at::NoGradGuard no_grad;
      if (to_shards) {
        move_into_slot(i);
      } else if (!grad_is_slot(i)) {
        slot(i).copy_(g);
      }
      if (!ready[i]) {
        ready[i] = 1;
        --b.pending;
      }
      launch_ready_in_order();
      if (to_shards) fold_finished_buckets();
    } catch (const std::exception& e) {
      error = e.what();
    }
  }

  void reset_step() {
    next_launch = 0;
    next_fold = 0;
    std::fill(ready.begin(), ready.end(), 0);
    for (auto& b : buckets) {
      b.pending = b.params.size();
      b.launched = false;
      b.work.clear();
      if (to_shards) b.flat = at::Tensor();
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
    b.numel = b.offsets.back() + s.params[b.params.back()].numel();
    b.value_bytes = first.element_size();
    b.flat = at::zeros({b.numel}, first.options().requires_grad(false));
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
  for (std::size_t k = 0; k < pieces.size(); ++k) {
    auto& in_buffer = pieces[k];
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
        b.buffer = k;
        b.lo = lo;
        b.numel = hi - lo;
        b.value_bytes = element;
      }
    }
  }
  auto earliest = [](const Bucket& b) { return *std::min_element(b.params.begin(), b.params.end()); };
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const Bucket& a, const Bucket& b) { return earliest(a) > earliest(b); });
  s.buckets = std::move(buckets);
  s.buffers = std::move(buffers);
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
    bk.name = bucket_name(bk, b, s.buckets.size(), false);
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
        if (s.to_shards) {
          s.move_into_slot(i);
          continue;
        }
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
    for (std::size_t b = 0; b < s.buckets.size(); ++b) {
      if (s.to_shards) {
        if (b >= s.next_fold) s.fold(b);
      } else {
        for (auto& w : s.buckets[b].work) w.wait();
      }
      st.bytes += static_cast<std::uint64_t>(s.buckets[b].numel * s.buckets[b].value_bytes);
    }
  } catch (...) {
    s.reset_step();
    throw;
  }
  st.wait_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  s.last = st;
  if (s.to_shards) {  // the averages are in the shards; no .grad is left
    s.reset_step();
    return;
  }
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
  s.reset_step();
}

void GradSync::reduce_into_shards(const std::vector<at::Tensor>& whole, const std::vector<at::Tensor>& own) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.pg->world_size() == 1) return;
  if (s.to_shards) throw DistError("GradSync::reduce_into_shards: called twice");
  if (s.buckets.empty() || !s.buckets.front().views)
    throw DistError("ZeRO-2 needs every gradient to be a view of the optimizer's flat buffers, and one is not");
  if (whole.size() != own.size())
    throw DistError("ZeRO-2: " + std::to_string(whole.size()) + " gradient buffers but " +
                    std::to_string(own.size()) + " shards");
  std::vector<GradientShard> shards(s.buffers.size());
  for (std::size_t k = 0; k < whole.size(); ++k) {
    const auto at = std::find(s.buffers.begin(), s.buffers.end(), whole[k].storage().unsafeGetStorageImpl());
    const ShardRange mine = shard_range(whole[k].numel(), s.pg->rank(), s.pg->world_size());
    const std::string which = "ZeRO-2: gradient buffer " + std::to_string(k);
    if (at == s.buffers.end() || whole[k].storage_offset() != 0)
      throw DistError(which + " is not one the parameters' gradients lie in");
    if (own[k].numel() != mine.size || !own[k].is_contiguous() || own[k].scalar_type() != whole[k].scalar_type())
      throw DistError(which + ": the shard has " + std::to_string(own[k].numel()) + " values, rank " +
                      std::to_string(s.pg->rank()) + " owns " + std::to_string(mine.size));
    shards[std::size_t(at - s.buffers.begin())] = {own[k], whole[k].numel()};
  }
  for (const auto& sh : shards)
    if (!sh.own.defined()) throw DistError("ZeRO-2: a flat buffer of the gradients was given no shard");
  s.shards = std::move(shards);
  s.to_shards = true;
  for (std::size_t b = 0; b < s.buckets.size(); ++b) {
    Bucket& bk = s.buckets[b];
    bk.flat = at::Tensor();  // no longer a view of the whole buffer: its memory can go
    bk.views = false;
    bk.name = bucket_name(bk, b, s.buckets.size(), true);
  }
}

bool GradSync::reduces_into_shards() const { return state_->to_shards; }

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
