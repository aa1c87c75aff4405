// The two bucket reductions (bucket_reduction.h).
//
// CUDA (NCCL). take() runs in the hook, on the autograd engine's thread for the device,
// with the stream of the backward ops current: the copy into the bucket is queued on that
// stream, and ProcessGroupNCCL makes its communication stream wait for the current stream
// before the collective, so the collective reads the finished copy. PendingCollective::wait()
// makes the current stream wait for the collective, so what is queued after it (the
// division, the copies back into .grad, the fold into a shard) sees the result; the host
// does not block.
#include "parallel/bucket_reduction.h"

#include <sys/mman.h>

#include <algorithm>

#include <ATen/ATen.h>

#include "optim/shard_range.h"

namespace ddp_embed {
namespace {

// ---- stages 0 and 1: every rank gets the average of every bucket ---------------------------

class AllReduceAverage : public BucketReduction {
 public:
  explicit AllReduceAverage(ProcessGroup& pg) : pg_(pg) {}

  std::string collective() const override { return "all-reduce"; }

  void take(BucketLayout& l, std::size_t i) override {
    if (l.grad_is_slot(i)) return;  // autograd accumulated into the bucket itself
    const at::Tensor& g = l.params[i].grad();
    if (!g.defined()) {
      l.slot(i).zero_();
      return;
    }
    if (g.is_sparse())
      throw DistError("parameter #" + std::to_string(i) + " has a sparse gradient; GradSync needs dense ones");
    l.slot(i).copy_(g);
  }

  void launch(BucketLayout& /*l*/, Bucket& b) override { b.work.push_back(pg_.allreduce_sum_async(b.flat, b.name)); }

  void wait_all(BucketLayout& l) override {
    for (auto& b : l.buckets)
      for (auto& w : b.work) w.wait();
  }

  void deliver(BucketLayout& l) override {
    for (auto& b : l.buckets) b.flat.div_(pg_.world_size());
    for (std::size_t i = 0; i < l.params.size(); ++i) {
      if (l.grad_is_slot(i)) continue;  // averaged in place
      const at::Tensor avg = l.slot(i);
      at::Tensor& g = l.params[i].mutable_grad();
      if (g.defined()) {
        g.copy_(avg);
      } else {
        g = avg.clone();  // no gradient here, but other ranks had one: every rank ends equal
      }
    }
  }

 private:
  ProcessGroup& pg_;
};

// ---- ZeRO-2: each rank gets the average of its shard ---------------------------------------
//
// The buckets stay the same stretches of the optimizer's flat buffers, but no longer
// their memory: the whole buffers are gone, each bucket gets a buffer of its own when its
// first gradient arrives, and each .grad is copied into it and freed at once. Once a
// bucket's reduces are done, the rank's part of the sums, divided by the world size, is
// added into its shard and the bucket's buffer is freed ("folded"): as soon as the hook
// sees the reduces done, and at the latest when the next bucket is launched (one bucket
// in flight), so a rank holds its shard, two buckets and the .grads of the bucket being
// filled. Accumulation adds each micro-step's averages into the shard. The word
// embedding's gradient arrives sparse (only the batch's rows) and is scattered into the
// bucket.

// Buckets in flight before the hook waits for the oldest: one on the network while the
// next fills. Each is a transient buffer of up to dist.bucket_mb.
constexpr std::size_t kShardBucketsInFlight = 1;

// A bucket's buffer: on the CPU straight from the kernel and unmapped when freed. The
// process's malloc tuning (util/malloc_tuning.h) keeps freed heap memory for reuse, so a
// buffer that lives for a part of backward would otherwise stay in the resident set
// between steps, and the memory ZeRO-2 saves would not show. Elsewhere from the device's
// caching allocator.
at::Tensor transient_buffer(int64_t numel, const at::TensorOptions& options) {
  const std::size_t bytes = std::size_t(numel) * options.dtype().itemsize();
  if (options.device().is_cpu() && bytes > 0) {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) return at::from_blob(p, {numel}, [bytes](void* q) { munmap(q, bytes); }, options);
  }
  return at::empty({numel}, options);
}

// This rank's shard of one flat gradient buffer.
struct GradientShard {
  at::Tensor own;     // shard_range(whole, rank, world) of the buffer
  int64_t whole = 0;  // the buffer's length
};

class ReduceIntoShards : public BucketReduction {
 public:
  ReduceIntoShards(ProcessGroup& pg, std::vector<GradientShard> shards) : pg_(pg), shards_(std::move(shards)) {}

  std::string collective() const override { return "reduce"; }

  void take(BucketLayout& l, std::size_t i) override {
    Bucket& b = l.buckets[l.bucket_of[i]];
    if (!b.flat.defined()) b.flat = transient_buffer(b.numel, shards_[b.buffer].own.options());
    at::Tensor dst = l.slot(i);
    const at::Tensor& g = l.params[i].grad();
    if (!g.defined() || g.is_sparse()) dst.zero_();
    if (g.defined()) g.is_sparse() ? dst.add_(g) : dst.copy_(g);
    l.params[i].mutable_grad() = at::Tensor();
  }

  void launch(BucketLayout& /*l*/, Bucket& b) override {
    for (int owner = 0; owner < pg_.world_size(); ++owner) {
      const ShardRange o = overlap(b, owner);
      if (o.size > 0)
        b.work.push_back(pg_.reduce_sum_async(b.flat.narrow(0, o.begin - b.lo, o.size), owner,
                                              b.name + " into rank " + std::to_string(owner) + "'s shard"));
    }
  }

  // Folds, in order, the launched buckets whose reduces are done, and those beyond
  // kShardBucketsInFlight whether done or not (waiting for them).
  void progress(BucketLayout& l, std::size_t launched) override {
    auto done = [](const Bucket& b) {
      return std::all_of(b.work.begin(), b.work.end(), [](const PendingCollective& w) { return w.done(); });
    };
    while (next_fold_ < launched && (next_fold_ + kShardBucketsInFlight < launched || done(l.buckets[next_fold_])))
      fold(l.buckets[next_fold_++]);
  }

  void wait_all(BucketLayout& l) override {
    for (std::size_t b = next_fold_; b < l.buckets.size(); ++b) fold(l.buckets[b]);
    next_fold_ = l.buckets.size();
  }

  void reset(BucketLayout& l) override {
    next_fold_ = 0;
    for (auto& b : l.buckets) b.flat = at::Tensor();
  }

 private:
  // Where bucket b's stretch of its buffer meets `rank`'s shard (size 0: nowhere).
  ShardRange overlap(const Bucket& b, int rank) const {
    const ShardRange r = shard_range(shards_[b.buffer].whole, rank, pg_.world_size());
    const int64_t from = std::max(b.lo, r.begin), to = std::min(b.lo + b.numel, r.begin + r.size);
    return {from, std::max<int64_t>(0, to - from)};
  }

  // The bucket's reduces are done: this rank's part of the sums, averaged, joins its
  // shard, and the bucket's memory is freed.
  void fold(Bucket& b) {
    for (auto& w : b.work) w.wait();
    const int rank = pg_.rank(), world = pg_.world_size();
    const ShardRange o = overlap(b, rank);
    if (o.size > 0) {
      GradientShard& sh = shards_[b.buffer];
      const int64_t mine = shard_range(sh.whole, rank, world).begin;
      sh.own.narrow(0, o.begin - mine, o.size).add_(b.flat.narrow(0, o.begin - b.lo, o.size), 1.0 / world);
    }
    b.work.clear();
    b.flat = at::Tensor();
  }

  ProcessGroup& pg_;
  std::vector<GradientShard> shards_;  // one per flat buffer, in BucketLayout::buffers' order
  std::size_t next_fold_ = 0;          // buckets [0, next_fold_) are in the shards this step
};

}  // namespace

std::unique_ptr<BucketReduction> all_reduce_average(ProcessGroup& pg) {
  return std::make_unique<AllReduceAverage>(pg);
}

std::unique_ptr<BucketReduction> reduce_into_shards(ProcessGroup& pg, BucketLayout& layout,
                                                     const std::vector<at::Tensor>& whole,
                                                     const std::vector<at::Tensor>& own) {
  if (layout.buckets.empty() || !layout.buckets.front().views)
    throw DistError("ZeRO-2 needs every gradient to be a view of the optimizer's flat buffers, and one is not");
  if (whole.size() != own.size())
    throw DistError("ZeRO-2: " + std::to_string(whole.size()) + " gradient buffers but " +
                    std::to_string(own.size()) + " shards");
  std::vector<GradientShard> shards(layout.buffers.size());
  for (std::size_t k = 0; k < whole.size(); ++k) {
    const auto at = std::find(layout.buffers.begin(), layout.buffers.end(), whole[k].storage().unsafeGetStorageImpl());
    const ShardRange mine = shard_range(whole[k].numel(), pg.rank(), pg.world_size());
    const std::string which = "ZeRO-2: gradient buffer " + std::to_string(k);
    if (at == layout.buffers.end() || whole[k].storage_offset() != 0)
      throw DistError(which + " is not one the parameters' gradients lie in");
    if (own[k].numel() != mine.size || !own[k].is_contiguous() || own[k].scalar_type() != whole[k].scalar_type())
      throw DistError(which + ": the shard has " + std::to_string(own[k].numel()) + " values, rank " +
                      std::to_string(pg.rank()) + " owns " + std::to_string(mine.size));
    shards[std::size_t(at - layout.buffers.begin())] = {own[k], whole[k].numel()};
  }
  for (const auto& sh : shards)
    if (!sh.own.defined()) throw DistError("ZeRO-2: a flat buffer of the gradients was given no shard");
  for (auto& b : layout.buckets) {
    b.flat = at::Tensor();  // no longer a view of the whole buffer: its memory can go
    b.views = false;
  }
  return std::make_unique<ReduceIntoShards>(pg, std::move(shards));
}

}  // namespace ddp_embed
