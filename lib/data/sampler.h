// Which pairs each rank trains on at each step — the sampling that makes a run's result
// independent of how a global batch is spread over workers and accumulation steps.
//
// Epoch e is a permutation of the dataset drawn from `seed + e` (identity without
// shuffle). Consecutive chunks of `global_batch` indices form global batches; global
// batch g is cut into world × accum equal micro-batches, and micro-batch a·world + r
// goes to rank r at accumulation step a. So any two runs with the same world × accum
// see the same micro-batches. The tail that does not fill a global batch is dropped
// (drop_last) or filled by wrapping around to the start of the same permutation.
//
// The position in training is (epoch, step in epoch), counted in global batches: it does
// not depend on the world size, so a checkpoint resumes at any world size.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace ddp_embed {

// A portable 64-bit generator (splitmix64): the same numbers on every platform and
// standard library, unlike std::shuffle or std::uniform_int_distribution.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  uint64_t below(uint64_t n);  // uniform in [0, n), n > 0, without modulo bias

 private:
  uint64_t state_;
};

// A deterministic hash of a few integers: per-sample choices (which positive this epoch)
// that do not depend on the order samples are visited in.
uint64_t mix_hash(uint64_t a, uint64_t b, uint64_t c = 0);

class BatchPlan {
 public:
  BatchPlan(int64_t dataset_size, int64_t global_batch, int world_size, int accum_steps,
            bool shuffle, bool drop_last, uint64_t seed);

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t micro_batch_size() const { return micro_batch_; }

  // Dataset indices of global batch `step` of `epoch` (global_batch of them).
  std::vector<int64_t> global_batch(int64_t epoch, int64_t step) const;
  // Dataset indices of the micro-batch rank `rank` trains on at accumulation step `accum`.
  std::vector<int64_t> micro_batch(int64_t epoch, int64_t step, int accum, int rank) const;

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;

  int64_t size_, global_batch_, micro_batch_, steps_per_epoch_;
  int world_, accum_;
  bool shuffle_;
  uint64_t seed_;
  mutable std::mutex cache_mutex_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> cached_permutation_;
};

}  // namespace ddp_embed
