// What the gradient sync (grad_sync.h) does with a bucket of gradients: the two ways to
// synchronize them. Private to lib/parallel.
//
//   all_reduce_average    ZeRO stages 0 and 1. Each bucket is all-reduced (SUM); once all
//                         are done every rank divides by the world size, and every .grad
//                         holds the average over the ranks: whole gradients everywhere.
//   reduce_into_shards    ZeRO-2. Each bucket is sent as one reduce (SUM) per rank whose
//                         shard of the flat gradient buffer it overlaps, to that rank; the
//                         rank adds its part of the sums, averaged, into its shard. The
//                         .grads are freed as the bucket takes them, so a rank holds 1/N of
//                         the gradients plus the buckets in flight, never a whole gradient.
//
// The sync itself (hooks, the order of launches, finish) is the same for both.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "parallel/grad_buckets.h"

namespace ddp_embed {

class BucketReduction {
 public:
  virtual ~BucketReduction() = default;

  // The collective, as bucket names say it: "all-reduce" or "reduce".
  virtual std::string collective() const = 0;
  // Parameter i's gradient (zeros where it has none) into its slot of its bucket.
  virtual void take(BucketLayout& layout, std::size_t i) = 0;
  // The bucket is complete: start sending it.
  virtual void launch(BucketLayout& layout, Bucket& b) = 0;
  // During backward, after a launch (buckets [0, launched) are on their way).
  virtual void progress(BucketLayout& /*layout*/, std::size_t /*launched*/) {}
  // In finish(), every bucket launched: waits until every bucket's result has arrived.
  virtual void wait_all(BucketLayout& layout) = 0;
  // Then: the averages where the optimizer reads them.
  virtual void deliver(BucketLayout& /*layout*/) {}
  // The step is over, or failed: forget its buckets' transient memory.
  virtual void reset(BucketLayout& /*layout*/) {}
};

std::unique_ptr<BucketReduction> all_reduce_average(ProcessGroup& pg);

// whole: the flat gradient buffers the buckets were cut from (layout.buckets are views
// of them); own: this rank's shard of each (shard_range). Checks that they fit the
// layout and lets the buckets' memory go (the callers drop `whole`).
std::unique_ptr<BucketReduction> reduce_into_shards(ProcessGroup& pg, BucketLayout& layout,
                                                     const std::vector<at::Tensor>& whole,
                                                     const std::vector<at::Tensor>& own);

}  // namespace ddp_embed
