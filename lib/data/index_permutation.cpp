#include "data/index_permutation.h"

#include <stdexcept>

#include "util/hash.h"

namespace ddp_embed {

IndexPermutation::IndexPermutation(uint64_t n, uint64_t seed) : n_(n) {
  if (n == 0) throw std::invalid_argument("IndexPermutation of no items");
  while (half_bits_ < 32 && (uint64_t(1) << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = (uint64_t(1) << half_bits_) - 1;
  uint64_t state = seed;
  for (auto& key : keys_) key = mix64(state += 0x9E3779B97F4A7C15ULL);
}

// The round function's core is splitmix64's finalizer (util/hash.h: mix64).
uint64_t IndexPermutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t key : keys_) {
    const uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t IndexPermutation::operator()(uint64_t i) const {
  if (n_ == 1) return 0;
  uint64_t x = i;
  do {
    x = feistel(x);
  } while (x >= n_);  // cycle walking: stays inside [0, n), a bijection there too
  return x;
}

}  // namespace ddp_embed
