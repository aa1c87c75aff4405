// Data parallelism, applied in one place. The model and the optimizer know nothing of the
// other ranks: DataParallel ties them to the process group the way the "dist" config says,
// and gives the training step the few calls it makes around backward:
//
//   DataParallel dp(*model, optimizer, pg, cfg.dist);   // logs how gradients and state lie
//   for micro-step a of A:
//     auto hold = dp.prepare_micro_step(a, A);          // accumulate only, or sync in backward
//     loss = model->forward(batch, dp.candidate_exchange(cross_rank)).loss; loss.backward();
//     wait_ms += dp.finish_micro_step(a, A);            // the averaged gradients are in place
//   update_parameters(optimizer, ...);                  // norm, clipping, AdamW: over all ranks
//
// What construction sets up, by dist.zero_stage (ZeRO: parallel/zero.h):
//   all  every rank takes rank 0's initial parameters where they differ (a checksum
//        first: no broadcast of identical weights); GradSync (grad_sync.h) hooks the
//        gradients into buckets of dist.bucket_mb that go out while backward runs
//   0    each bucket is all-reduced: every rank holds whole averaged gradients and
//        whole AdamW moments (PyTorch's DistributedDataParallel)
//   1    as 0, and the optimizer updates this rank's shard of each flat buffer, then
//        broadcasts it: AdamW's moments are 1/N per rank
//   2    as 1, and each bucket is reduced into the ranks that own its stretch: gradients
//        are 1/N per rank too, so every micro-step syncs (no whole gradient to
//        accumulate in) and the gradient norm sums the shards' squares over the ranks
// With one process and no process group nothing is synchronized and every call here
// costs nothing; in a group of one (dist.backend named under ddp-launch) every collective
// runs, on one rank.
#pragma once

#include <memory>
#include <string>

#include <torch/nn/module.h>

#include "config/train_config.h"  // DistConfig
#include "model/loss.h"
#include "optim/flat_adamw.h"
#include "parallel/grad_sync.h"
#include "parallel/process_group.h"

namespace ddp_embed {

class DataParallel {
 public:
  // After the model is on its device and `optimizer` owns its parameters; both, and pg,
  // must outlive this. Every rank constructs it together (it holds collectives).
  DataParallel(torch::nn::Module& model, FlatAdamW& optimizer, ProcessGroup& pg, const DistConfig& dist);

  // Whether the backward of micro-step `index` (0-based) of `count` synchronizes gradients:
  // the last one; every one under ZeRO-2.
  bool syncs(int index, int count) const;
  // Before that backward: a guard that holds the sync off for the micro-steps that only
  // accumulate into .grad (an empty guard for those that sync).
  [[nodiscard]] GradSync::NoSync prepare_micro_step(int index, int count);
  // A backward inside a syncing micro-step that must only accumulate (GradCache's chunks
  // but the last): the sync held off while the guard lives.
  [[nodiscard]] GradSync::NoSync defer_sync();
  // After micro-step `index`'s backward(s): waits for its gradient sync, if it had one,
  // and returns the milliseconds spent waiting (communication backward did not hide).
  double finish_micro_step(int index, int count);

  // Cross-rank negatives: the differentiable all-gather of every rank's candidates and
  // the plain one of their text hashes, or no exchange when `wanted` is false or there
  // is no process group.
  CandidateExchange candidate_exchange(bool wanted) const;

 private:
  ProcessGroup& pg_;
  int zero_stage_ = 0;
  std::unique_ptr<GradSync> grad_sync_;
};

}  // namespace ddp_embed
