// How a flat buffer of n values is cut among `world` ranks: the partition that ZeRO's
// optimizer shards (optim/flat_adamw.h) and gradient shards (parallel/grad_sync.h) share.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ddp_embed {

struct ShardRange {
  int64_t begin = 0, size = 0;
};

// Rank `rank`'s stretch of a buffer of n values cut into `world` contiguous shards of
// ceil(n / world) values (the last ones shorter, possibly empty).
inline ShardRange shard_range(int64_t n, int rank, int world) {
  const int64_t per = (n + world - 1) / world;
  const int64_t begin = std::min(n, per * rank);
  return {begin, std::min(per, n - begin)};
}

}  // namespace ddp_embed
