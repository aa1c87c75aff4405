// Seeded randomness that is the same on every platform: the generator and the hash the
// batch plan (data/batch_plan.h) and the per-pair choices (which positive this epoch, the
// dropout masks of a step) are drawn from.
#pragma once

#include <cstdint>

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

}  // namespace ddp_embed
