// One training step, the hot loop's body, and what the loop keeps of it:
//
//   train_step    each micro-batch forward (the loss computed in forward) and backward,
//                 the gradients synchronized through the data-parallel seam, the update
//   SkippedSteps  a skipped step (fp16 overflow, a non-finite gradient) said, counted
//   advance       the position a checkpoint records after the step
//
// Step numbers are 1-based, as the log, metrics.jsonl and the DDP_EMBED_TEST_* variables
// say them: step n is the run's n-th optimizer step, and after it TrainPosition::step (the
// count of steps done) is n.
#pragma once

#include <cstdint>
#include <functional>
#include <utility>

#include "data/batch_plan.h"
#include "data/sampler.h"
#include "model/loss.h"
#include "train/batches.h"
#include "train/checkpoint.h"
#include "train/setup.h"
#include "train/worker.h"

namespace ddp_embed {

class GuideEncoder;  // train/guide.h

// What a step needs besides its batches, fixed for the run.
struct StepContext {
  const Config& config;
  Worker& worker;
  ModelUnderTraining& training;
  CandidateExchange exchange;  // cross-rank negatives, when on
  // A micro-batch's loss -> the loss whose gradient it accumulates: its share of the
  // step's (÷ train.grad_accum_steps), as torchtitan's rescale_accumulated_loss. Set once
  // for the run; the tests' fault injection wraps it (train/fault_injection.h).
  std::function<at::Tensor(const at::Tensor& micro_batch_loss)> loss_share;
  GuideEncoder* guide = nullptr;  // loss.guide's frozen encoder (train/guide.h); null without one
  int64_t total_steps = 0;        // the run's: loss.sparse's warm-up is a share of them (loss_at_step)
};

// The loss share of train.grad_accum_steps micro-batches a step: loss / accum_steps.
std::function<at::Tensor(const at::Tensor&)> accumulation_share(int accum_steps);

struct StepOutcome {
  at::Tensor loss;  // the step's loss on this rank, summed on the device (double)
  at::Tensor masked;  // same-text candidates masked out of this rank's queries' negatives (int64, device)
  at::Tensor guided;  // those the guide masked besides (int64, device)
  at::Tensor sparse_terms;  // a sparse encoder: PairLoss::sparse_terms, the mean over micro-batches; else undefined
  double guide_ms = 0;  // the guide's share of the step: embedding the batch (train/guide.h)
  UpdateOutcome update;
  double real_tokens = 0;
  double comm_wait_ms = 0;
};

// Step `step` (1-based) on this rank's micro-batches, at learning rate `lr`.
StepOutcome train_step(StepContext& context, StepBatches& batches, int64_t step, double lr);

// The step as the loop calls it: train_step on the run's context, or a decorator around
// that (the tests' faults, train/fault_injection.h).
using StepFunction = std::function<StepOutcome(StepBatches& batches, int64_t step, double lr)>;

// The verdict on each step's update, said and counted. A step skipped for an fp16
// overflow (the scaler has halved the scale) is routine; a non-finite step at loss scale 1
// counts toward train.max_bad_steps in a row, and that many stop the run. So does a step
// whose gradient is exactly 0 (the loss does not depend on the weights: with loss.guide,
// every negative masked), a step that trains nothing.
class SkippedSteps {
 public:
  // `guide`: the run's loss.guide, named when steps train nothing.
  SkippedSteps(int max_bad_steps, const LossScaler& scaler, GuideConfig guide = {})
      : max_bad_steps_(max_bad_steps), scaler_(scaler), guide_(std::move(guide)) {}
  // After step `step` (1-based): an applied update ends a run of bad steps; a skipped one
  // is said in the log. Throws std::runtime_error at the train.max_bad_steps'th bad step
  // in a row; at the train.max_bad_steps'th step in a row with a gradient of 0, ConfigError
  // naming loss.guide.margin with a guide, else std::runtime_error.
  void check(int64_t step, const StepOutcome& outcome);
  // At the end of a run of `steps` steps: throws std::runtime_error when every one was
  // skipped (non-finite or fp16 overflows, fewer in a row than train.max_bad_steps), and
  // as check() does when every one had a gradient of 0: the model learnt nothing in the
  // run, and a final folder would pass it off as trained.
  void require_some_trained(int64_t steps) const;

 private:
  [[noreturn]] void throw_nothing_trains(int64_t first, int64_t last) const;

  int max_bad_steps_;
  const LossScaler& scaler_;
  GuideConfig guide_;
  int bad_in_a_row_ = 0;
  int zero_in_a_row_ = 0;    // applied steps with a gradient of exactly 0
  int64_t zero_from_ = 0;    // the first of them, and the last step checked: for the message
  int64_t last_step_ = 0;
  int64_t applied_ = 0;
  int64_t moved_ = 0;          // applied steps with a gradient other than 0
  int64_t first_skipped_ = 0;  // the first skipped step, for the message
};

// The position after a finished step: the epoch and batch the next one starts from, and
// the fp16 loss scale, as a checkpoint records them.
void advance(TrainPosition& pos, const StepBatches& batches, const BatchPlan& plan, const LossScaler& scaler);

}  // namespace ddp_embed
