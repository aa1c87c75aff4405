// ZeRO stage 1 (Rajbhandari et al. 2020; DeepSpeed's "zero_optimization": {"stage": 1}):
// AdamW's two moment buffers, twice the model's size in float32, are sharded over the
// ranks instead of replicated.
//
//   every rank      all-reduces the gradients as before (grad_sync.h): whole gradients
//                   everywhere, so the gradient norm and clipping need nothing new;
//   rank r          keeps the moments of shard r of each flat parameter buffer only
//                   (FlatAdamW::shard) and updates that shard of the parameters;
//   share_shards    then gives every rank every other rank's updated shard: a broadcast
//                   per shard, in place, the parameters' size in all.
//
// Each rank's update of its shard is the same arithmetic on the same values as the
// unsharded update of those elements, so the parameters stay those of plain data
// parallelism. Checkpoints hold whole moments (FlatAdamW::state), so a run saved at
// one stage and world size resumes at any other.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "parallel/process_group.h"

namespace ddp_embed {

struct ShardRange {
  int64_t begin = 0, size = 0;
};

// Rank `rank`'s stretch of a buffer of n values cut into `world` contiguous shards of
// ceil(n / world) values (the last ones shorter, possibly empty).
ShardRange shard_range(int64_t n, int rank, int world);

// In place, for each flat buffer: every rank's shard (shard_range over pg's ranks) takes
// the values its owner holds. Every rank calls it with the same buffers.
void share_shards(ProcessGroup& pg, const std::vector<at::Tensor>& flat_buffers);

}  // namespace ddp_embed
