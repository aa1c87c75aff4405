// Gradient averaging across ranks, overlapped with backward: the C++ counterpart of
// PyTorch's DistributedDataParallel reducer (LibTorch has none).
//
//   GradSync sync(pg, model->parameters(), bucket_bytes);   // after the model is on its device
//   for each accumulation micro-step a:
//     auto guard = (a + 1 < accum) ? sync.no_sync() : GradSync::NoSync{};   // or set_sync()
//     loss.backward();                 // buckets start all-reducing while backward runs
//   sync.finish();                     // waits; every param.grad = mean over ranks
//   optimizer.step();
//
// Parameters are grouped into flat buckets of about bucket_bytes, in reverse registration
// order (roughly the order in which backward produces their gradients). Where the
// gradients already lie in flat buffers (the optimizer's), the buckets are stretches of
// those buffers and nothing is copied (PyTorch's gradient_as_bucket_view; grad_buckets.h).
// When the last gradient of a bucket has been accumulated, the bucket's all-reduce is
// launched at once, in bucket order on every rank. Without a process group (one process
// that asked for no group of one): everything is a no-op.
//
// ZeRO-2 (reduce_into_shards): instead of every rank receiving every average, each
// bucket's stretch of a flat buffer is summed into the rank that owns it (zero.h's
// shards), and every .grad is freed as soon as its bucket holds it. A rank then keeps
// 1/N of the gradients, plus at most two buckets in flight. The two ways are the two
// strategies of bucket_reduction.h. The trainer reaches all of this through
// data_parallel.h, which picks the way from dist.zero_stage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_group.h"

namespace ddp_embed {

class GradSync {
 public:
  struct StepStats {
    std::size_t buckets = 0;                 // buckets all-reduced in the step
    std::size_t launched_before_finish = 0;  // ... of which launched while backward still ran
    double wait_ms = 0;                      // time finish() spent waiting: exposed communication (Gloo;
                                             // over NCCL the host only queues the stream's wait)
    std::uint64_t bytes = 0;                 // gradient bytes all-reduced (or reduced) by this rank
  };

  // params: the model's parameters in registration order (those without requires_grad are
  // ignored). They must be leaves, on their final device and dtype. pg must outlive this.
  GradSync(ProcessGroup& pg, const std::vector<at::Tensor>& params, std::size_t bucket_bytes);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;

  // Off: backward only accumulates into .grad (accumulation micro-steps but the last).
  void set_sync(bool on);
  bool sync_enabled() const;

  // Turns sync off while alive, restores the previous setting afterwards. A
  // default-constructed guard does nothing.
  class NoSync {
   public:
    NoSync() = default;
    explicit NoSync(GradSync& g);
    NoSync(NoSync&& o) noexcept;
    NoSync& operator=(NoSync&&) = delete;
    ~NoSync();

   private:
    GradSync* g_ = nullptr;
    bool prev_ = true;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }

  // After the (last) backward of a step with sync on: launches the buckets that backward
  // did not complete (parameters without a gradient count as zeros), waits for all of them
  // (DistError naming the bucket on failure or timeout) and writes the averaged gradients
  // into every parameter's .grad. With sync off it does nothing.
  void finish();

  // ZeRO-2, once, after construction and before the first backward (the buckets must have
  // been cut from the optimizer's flat gradient buffers: buckets_are_gradient_views()).
  // whole: those buffers (identifying which bucket lies in which); own: this rank's shard
  // of each (shard_range), where finish() adds the gradients averaged over the ranks. From
  // then on backward leaves no .grad behind: the callers drop `whole` and every .grad view
  // of it. finish() must run after every backward with sync on (every micro-step).
  void reduce_into_shards(const std::vector<at::Tensor>& whole, const std::vector<at::Tensor>& own);
  bool reduces_into_shards() const;

  std::size_t num_buckets() const;
  // Whether the buckets are the gradients' own memory (every .grad was a view of a flat
  // buffer, as FlatAdamW arranges), so that nothing is copied in or out.
  bool buckets_are_gradient_views() const;
  std::vector<std::size_t> bucket_param_counts() const;
  const StepStats& last_step() const;

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ddp_embed
