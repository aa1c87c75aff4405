#include "data/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace ddp_embed {

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t n) {
  // Rejection sampling: drop the top partial range so every value is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = next();
  } while (x >= limit);
  return x % n;
}

uint64_t mix_hash(uint64_t a, uint64_t b, uint64_t c) {
  SplitMix64 g(a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL ^ c);
  g.next();
  return g.next();
}

BatchPlan::BatchPlan(int64_t dataset_size, int64_t global_batch, int world_size,
                     int accum_steps, bool shuffle, bool drop_last, uint64_t seed)
    : size_(dataset_size),
      global_batch_(global_batch),
      world_(world_size),
      accum_(accum_steps),
      shuffle_(shuffle),
      seed_(seed) {
  const int64_t parts = int64_t(world_size) * accum_steps;
  if (global_batch <= 0 || parts <= 0 || global_batch % parts != 0)
    throw std::invalid_argument(
        "train.batch_size (" + std::to_string(global_batch) + ") must be divisible by WORLD_SIZE (" +
        std::to_string(world_size) + ") x train.grad_accum_steps (" + std::to_string(accum_steps) + ")");
  micro_batch_ = global_batch / parts;
  if (dataset_size < global_batch && drop_last)
    throw std::invalid_argument("the training set has " + std::to_string(dataset_size) +
                                " pairs, fewer than one global batch (train.batch_size = " +
                                std::to_string(global_batch) + ")");
  if (dataset_size <= 0) throw std::invalid_argument("the training set is empty");
  steps_per_epoch_ = drop_last ? dataset_size / global_batch
                               : (dataset_size + global_batch - 1) / global_batch;
}

const std::vector<int64_t>& BatchPlan::permutation(int64_t epoch) const {
  // Called from the loader thread only, but guard it: a plan is cheap to share.
  std::lock_guard<std::mutex> lock(cache_mutex_);
  if (cached_epoch_ != epoch) {
    cached_permutation_.resize(size_);
    std::iota(cached_permutation_.begin(), cached_permutation_.end(), int64_t{0});
    if (shuffle_) {
      SplitMix64 rng(seed_ + uint64_t(epoch));
      for (int64_t i = size_ - 1; i > 0; --i)  // Fisher-Yates
        std::swap(cached_permutation_[i], cached_permutation_[rng.below(uint64_t(i) + 1)]);
    }
    cached_epoch_ = epoch;
  }
  return cached_permutation_;
}

std::vector<int64_t> BatchPlan::global_batch(int64_t epoch, int64_t step) const {
  const auto& perm = permutation(epoch);
  std::vector<int64_t> out(global_batch_);
  for (int64_t k = 0; k < global_batch_; ++k) out[k] = perm[(step * global_batch_ + k) % size_];
  return out;
}

std::vector<int64_t> BatchPlan::micro_batch(int64_t epoch, int64_t step, int accum,
                                            int rank) const {
  const auto& perm = permutation(epoch);
  const int64_t first = step * global_batch_ + (int64_t(accum) * world_ + rank) * micro_batch_;
  std::vector<int64_t> out(micro_batch_);
  for (int64_t k = 0; k < micro_batch_; ++k) out[k] = perm[(first + k) % size_];
  return out;
}

}  // namespace ddp_embed
