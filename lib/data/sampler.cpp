#include "data/sampler.h"

#include "util/hash.h"

namespace ddp_embed {

uint64_t SplitMix64::next() {
  return mix64(state_ += 0x9E3779B97F4A7C15ULL);
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

}  // namespace ddp_embed
