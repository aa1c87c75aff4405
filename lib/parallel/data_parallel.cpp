// The data-parallel seam (data_parallel.h): the only reader of dist.zero_stage.
#include "parallel/data_parallel.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>

#include "parallel/zero.h"

namespace ddp_embed {
namespace {

// Every rank has built the same model (the same seed, the same init folder): a checksum
// confirms it, 8 bytes a rank. Only where it does not (an init folder that differs
// between machines) are rank 0's parameters broadcast, with a warning.
void make_initial_parameters_agree(torch::nn::Module& model, ProcessGroup& pg) {
  std::vector<at::Tensor> params = model.parameters();
  const std::vector<int> differ = pg.ranks_differing_from_rank0(tensors_checksum(params));
  if (differ.empty()) return;
  std::string ranks;
  for (int r : differ) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  spdlog::warn("the initial parameters of rank(s) {} differ from rank 0's (an init folder that is not the same "
               "on every machine?); every rank now takes rank 0's",
               ranks);
  torch::NoGradGuard no_grad;
  pg.broadcast_(params, 0);
  pg.check_same(tensors_checksum(params), "the initial parameters");
}

}  // namespace

DataParallel::DataParallel(torch::nn::Module& model, FlatAdamW& optimizer, ProcessGroup& pg, const DistConfig& dist)
    : pg_(pg), zero_stage_(dist.zero_stage) {
  if (zero_stage_ >= 1 && pg.communicates())
    optimizer.shard(pg.rank(), pg.world_size(), [&pg](const std::vector<at::Tensor>& flat) { share_shards(pg, flat); });
  make_initial_parameters_agree(model, pg);
  grad_sync_ = std::make_unique<GradSync>(pg, model.parameters(), size_t(dist.bucket_mb * 1024 * 1024));
  if (zero_stage_ == 2 && pg.communicates()) {
    // The optimizer keeps this rank's shard of the gradients and GradSync reduces into it;
    // the whole gradient buffers (the last reference is `whole`) go when this block ends.
    const std::vector<at::Tensor> whole = optimizer.gradient_buffers();
    optimizer.shard_gradients([&pg](const at::Tensor& t) { pg.allreduce_sum_(t); });
    grad_sync_->reduce_into_shards(whole, optimizer.gradient_buffers());
  }
  if (pg.communicates())
    spdlog::info("gradient sync: {} buckets of up to {} MB{}", grad_sync_->num_buckets(), dist.bucket_mb,
                 grad_sync_->reduces_into_shards()          ? ", each reduced into the ranks' shards (ZeRO-2)"
                 : grad_sync_->buckets_are_gradient_views() ? ", cut from the optimizer's gradient buffers (no copies)"
                                                            : "");
  const std::string of_the_whole = fmt::format(" (ZeRO-{}: 1/{} of the whole)", zero_stage_, pg.world_size());
  spdlog::info("optimizer state: {:.1f} MB on this rank{}{}; gradients: {:.1f} MB on this rank{}",
               double(optimizer.state_bytes()) / 1e6, optimizer.offloaded() ? ", in host memory (offloaded)" : "",
               optimizer.sharded() ? of_the_whole : "",
               double(optimizer.gradient_bytes()) / 1e6, optimizer.gradients_sharded() ? of_the_whole : "");
}

bool DataParallel::syncs(int index, int count) const {
  // Stages 0 and 1 all-reduce the sum of the micro-steps' gradients once, after the last;
  // ZeRO-2 keeps no whole gradient, so every micro-step's backward reduces into the shards.
  return index + 1 == count || zero_stage_ == 2;
}

GradSync::NoSync DataParallel::prepare_micro_step(int index, int count) {
  return syncs(index, count) ? GradSync::NoSync{} : grad_sync_->no_sync();
}

GradSync::NoSync DataParallel::defer_sync() { return grad_sync_->no_sync(); }

double DataParallel::finish_micro_step(int index, int count) {
  if (!syncs(index, count)) return 0;
  grad_sync_->finish();
  return grad_sync_->last_step().wait_ms;
}

CandidateExchange DataParallel::candidate_exchange(bool wanted) const {
  if (!wanted || !pg_.communicates()) return {};
  ProcessGroup* pg = &pg_;
  // The candidates' text hashes go along without gradient: the loss masks duplicates
  // among every rank's candidates (model/loss.h).
  return {[pg](const at::Tensor& x, const std::vector<int64_t>& rows) { return all_gather_with_grad(*pg, x, rows); },
          [pg](const at::Tensor& ids, const std::vector<int64_t>& rows) { return pg->all_gather_rows(ids, rows); },
          pg_.rank()};
}

}  // namespace ddp_embed
