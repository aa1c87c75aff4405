// How a flat buffer of n values is cut among `world` ranks: the partition that ZeRO's
// optimizer shards (optim/flat_adamw.h) and gradient shards (parallel/grad_sync.h) share.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ddp_embed {

struct ShardRange {
  int64_t begin = 0, size = 0;
};

// Shards start at multiples of this many values. Why: ATen's CPU kernels (the fused AdamW
// among them) run whole SIMD vectors over a tensor and scalar code over its last few
// values, and the scalar code rounds otherwise (a moment's last bit, on the AVX2 and
// AVX-512 paths). A shard that starts at a multiple of every path's vector length (16
// floats on AVX-512, 8 on AVX2 and on the plain path) puts the scalar tail on the
// whole buffer's last values only, so a rank's update of its shard is the unsharded
// update bit for bit on every CPU, at any size and world size.
inline constexpr int64_t kShardAlignment = 64;

// Rank `rank`'s stretch of a buffer of n values cut into `world` contiguous shards of
// ceil(n / world) values rounded up to a multiple of kShardAlignment (the last ones
// shorter, possibly empty).
inline ShardRange shard_range(int64_t n, int rank, int world) {
  const int64_t per = ((n + world - 1) / world + kShardAlignment - 1) / kShardAlignment * kShardAlignment;
  const int64_t begin = std::min(n, per * rank);
  return {begin, std::min(per, n - begin)};
}

}  // namespace ddp_embed
