// Faults that the tests inject into a real training run, so that a real multi-process
// job can be made to fail at a chosen point. Chosen by environment variables, read once:
//   DDP_EMBED_TEST_DIE_AT_STEP=R:S   rank R kills itself (SIGKILL) after S steps, in the
//                                    first attempt only (RESTART_COUNT 0);
//   DDP_EMBED_TEST_NAN_STEPS=S1,S2   the loss of steps S1, S2, ... (1-based) becomes NaN;
//   DDP_EMBED_TEST_SAMPLE_LOG=FILE   each rank R appends "step rank index..." per
//                                    micro-batch to FILE.rankR.
// (DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS, a pause inside a checkpoint write, lives with the
// writer in train/checkpoint.cpp.)
//
// FaultInjection::from_env() is null when none is set: a normal run holds no hook and
// its step loop asks nothing but `if (faults)`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

namespace ddp_embed {

class FaultInjection {
 public:
  static std::unique_ptr<FaultInjection> from_env(int restart_count);

  // Before step `step` (0-based) begins: SIGKILL if this is the chosen rank and step.
  void before_step(int rank, int64_t step) const;
  // Each micro-batch of step `step` (1-based, as logged), with its dataset indices.
  void on_micro_batch(int64_t step, int rank, const std::vector<int64_t>& indices) const;
  // The loss of step `step` (1-based), NaN where chosen.
  at::Tensor on_loss(int64_t step, const at::Tensor& loss) const;

 private:
  int die_rank_ = -1;
  int64_t die_step_ = -1;
  std::vector<int64_t> nan_steps_;
  std::string sample_log_;
};

}  // namespace ddp_embed
