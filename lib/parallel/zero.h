// ZeRO (Rajbhandari et al. 2020; DeepSpeed's "zero_optimization": {"stage": 1 | 2}):
// what every rank of plain data parallelism replicates, sharded over the ranks instead.
//
// Stage 1: AdamW's two moment buffers, twice the model's size in float32.
//   every rank      all-reduces the gradients as before (grad_sync.h): whole gradients
//                   everywhere, so the gradient norm and clipping need nothing new;
//   rank r          keeps the moments of shard r of each flat parameter buffer only
//                   (FlatAdamW::shard) and updates that shard of the parameters;
//   share_shards    then gives every rank every other rank's updated shard: a broadcast
//                   per shard, in place, the parameters' size in all.
// Stage 2: the gradients too (FlatAdamW::shard_gradients, GradSync::reduce_into_shards).
//   every rank      sends each gradient bucket, as backward completes it, to the ranks
//                   whose shards it overlaps (a reduce per owner: the reduce-scatter of
//                   the bucket) and frees it; every micro-step, since no rank keeps a
//                   whole gradient to accumulate in;
//   rank r          adds its part of the sums, averaged, into its gradient shard; the
//                   norm adds the shards' squares up over the ranks; the update and
//                   share_shards are stage 1's.
//
// Each rank's update of its shard is the same arithmetic on the same values as the
// unsharded update of those elements, so the parameters stay those of plain data
// parallelism (stage 2: to the order of additions, see test_zero.cpp). Checkpoints hold
// whole moments (FlatAdamW::state), so a run saved at one stage and world size resumes
// at any other.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/core/Tensor.h>

#include "optim/shard_range.h"
#include "parallel/process_group.h"

namespace ddp_embed {

// In place, for each flat buffer: every rank's shard (shard_range over pg's ranks) takes
// the values its owner holds. Every rank calls it with the same buffers.
void share_shards(ProcessGroup& pg, const std::vector<at::Tensor>& flat_buffers);

}  // namespace ddp_embed
