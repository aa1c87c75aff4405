// One training step, the hot loop's body:
//
//   train_step    each micro-batch forward (the loss computed in forward) and backward,
//                 the gradients synchronized through the data-parallel seam, the update
//   judge_update  a skipped step (fp16 overflow, a non-finite gradient) said, counted
//   advance       the position a checkpoint records after the step
#pragma once

#include <cstdint>

#include "data/batch_plan.h"
#include "data/sampler.h"
#include "model/loss.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/fault_injection.h"
#include "train/trainee.h"
#include "train/worker.h"

namespace ddp_embed {

// What a step needs besides its batches, fixed for the run.
struct StepContext {
  const Config& cfg;
  Worker& w;
  Trainee& t;
  CandidateExchange exchange;    // cross-rank negatives, when on
  const FaultInjection* faults;  // null outside the tests
};

struct StepOutcome {
  at::Tensor loss;  // the step's loss on this rank, summed on the device (double)
  at::Tensor masked;  // same-text candidates masked out of this rank's queries' negatives (int64, device)
  UpdateOutcome update;
  double real_tokens = 0;
  double comm_wait_ms = 0;
};

// `step` is 0-based.
StepOutcome train_step(StepContext& c, StepBatches& batches, int64_t step, double lr);

// A skipped step: an fp16 overflow (the scaler has halved the scale) is routine; a
// non-finite step at loss scale 1 counts toward train.max_bad_steps in a row, and that
// many stop the run (throws). `step` is 1-based.
void judge_update(const StepOutcome& out, int64_t step, const Config& cfg, const LossScaler& scaler,
                  int* bad_steps_in_a_row);

// The position after a finished step: the epoch and batch the next one starts from, and
// the fp16 loss scale, as a checkpoint records them.
void advance(TrainPosition& pos, const StepBatches& batches, const BatchPlan& plan, const LossScaler& scaler);

}  // namespace ddp_embed
