#include "parallel/zero.h"

#include <algorithm>

namespace ddp_embed {

void share_shards(ProcessGroup& pg, const std::vector<at::Tensor>& flat_buffers) {
  const int world = pg.world_size();
  if (!pg.communicates()) return;
  // One broadcast per buffer and owner, of the shard in place: packing the buffers'
  // shards into one message would need a shard-sized copy on every rank.
  for (const at::Tensor& flat : flat_buffers)
    for (int owner = 0; owner < world; ++owner) {
      const ShardRange r = shard_range(flat.numel(), owner, world);
      std::vector<at::Tensor> shard{flat.narrow(0, r.begin, r.size)};
      pg.broadcast_(shard, owner);
    }
}

}  // namespace ddp_embed
