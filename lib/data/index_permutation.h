// A shuffled order of n items that costs no memory: the i-th index of a pseudo-random
// permutation of [0, n), computed on its own in a few dozen instructions. A shuffled
// vector of indices would take 8 bytes an item — 800 MB per worker for 100M pairs —
// while this takes 48 bytes whatever n.
//
// How: a balanced Feistel network on the smallest even number of bits 2k with 2^2k >= n
// is a bijection of [0, 2^2k); "cycle walking" (apply it again while the result is >= n)
// turns it into a bijection of [0, n), on average fewer than 4 rounds since 2^2k < 4n.
// Four rounds with keys drawn from the seed (SplitMix64) mix well enough for batching;
// this is not cryptography. The same seed gives the same order on every platform.
#pragma once

#include <cstdint>

namespace ddp_embed {

class IndexPermutation {
 public:
  IndexPermutation(uint64_t n, uint64_t seed);

  uint64_t size() const { return n_; }
  // The i-th element of the permutation, i < size(): every value in [0, n) exactly once.
  uint64_t operator()(uint64_t i) const;

 private:
  uint64_t feistel(uint64_t x) const;

  uint64_t n_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
  uint64_t keys_[4] = {};
};

}  // namespace ddp_embed
