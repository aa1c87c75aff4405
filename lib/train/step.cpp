#include "train/step.h"

#include <cmath>

#include "train/gradcache.h"
#include "util/log.h"

namespace ddp_embed {

StepOutcome train_step(StepContext& c, StepBatches& batches, int64_t step, double lr) {
  const int accum = c.cfg.train.grad_accum_steps;
  DataParallel& dp = *c.t.data_parallel;
  // Dropout masks from (seed, rank, step): a resumed run draws exactly the same ones.
  torch::manual_seed(mix_hash(c.cfg.train.seed, uint64_t(c.w.pg->rank()), uint64_t(step)));
  StepOutcome out;
  out.loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(c.w.device));
  out.masked = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(c.w.device));
  for (int a = 0; a < accum; ++a) {
    PairBatch& b = batches.micro[size_t(a)];
    if (c.faults) c.faults->on_micro_batch(step + 1, c.w.pg->rank(), b.indices);
    move_to(b, c.w.device);
    const auto hold = dp.prepare_micro_step(a, accum);  // only accumulate, or sync as backward runs
    // The loss whose gradient is accumulated: a share of the step's.
    auto prepare_loss = [&](const at::Tensor& micro_batch_loss) {
      at::Tensor loss = micro_batch_loss / double(accum);
      return c.faults ? c.faults->on_loss(step + 1, loss) : loss;
    };
    at::Tensor loss;
    if (c.cfg.train.gradcache_chunk > 0) {
      loss = gradcache_forward_backward(c.t.model, b, {c.cfg.train.gradcache_chunk, c.w.precision, c.w.device},
                                        c.cfg.loss, c.exchange, prepare_loss, c.t.loss_scaler, &dp, &out.masked);
    } else {
      {
        AutocastScope autocast(c.w.precision, c.w.device);  // the forward only; backward runs outside it
        const PairLoss pair = c.t.model->forward(b.query, b.pos, b.neg, c.cfg.loss, c.exchange, b.labels);
        loss = prepare_loss(pair.loss);
        out.masked += pair.masked;
      }
      c.t.loss_scaler.scale_loss(loss).backward();
    }
    out.loss += loss.detach().to(at::kDouble);
    out.real_tokens += double(b.real_tokens);
    out.comm_wait_ms += dp.finish_micro_step(a, accum);
  }
  // The gradients are averaged over the ranks, so the verdict (finite or not) and the
  // norm are the same on every rank: every rank skips or steps together.
  out.update = update_parameters(c.t.optimizer, c.t.loss_scaler, c.cfg.train.max_grad_norm, lr);
  c.t.optimizer.zero_grad();
  return out;
}

void judge_update(const StepOutcome& out, int64_t step, const Config& cfg, const LossScaler& scaler,
                  int* bad_steps_in_a_row) {
  if (out.update.applied) {
    *bad_steps_in_a_row = 0;
  } else if (out.update.loss_scale > 1) {
    spdlog::info("step {}: fp16 gradients overflowed at loss scale {:g}; step skipped, scale now {:g}", step,
                 out.update.loss_scale, scaler.scale());
  } else {
    ++*bad_steps_in_a_row;
    spdlog::warn("step {}: non-finite {} — step skipped ({} in a row, limit train.max_bad_steps = {})", step,
                 std::isfinite(out.loss.item<double>()) ? "gradient" : "loss", *bad_steps_in_a_row,
                 cfg.train.max_bad_steps);
    if (*bad_steps_in_a_row >= cfg.train.max_bad_steps)
      throw std::runtime_error(fmt::format("step {}: {} non-finite steps in a row; stopping (the last good "
                                           "checkpoint is kept)", step, *bad_steps_in_a_row));
  }
}

void advance(TrainPosition& pos, const StepBatches& batches, const BatchPlan& plan, const LossScaler& scaler) {
  ++pos.step;
  pos.epoch = batches.epoch;
  pos.step_in_epoch = batches.step_in_epoch + 1;
  if (pos.step_in_epoch == plan.steps_per_epoch()) {
    pos.step_in_epoch = 0;
    ++pos.epoch;
  }
  pos.loss_scale = scaler.state().scale;
  pos.loss_scale_good_steps = scaler.state().good_steps;
}

}  // namespace ddp_embed
