#include "train/step.h"

#include <cmath>

#include "train/gradcache.h"
#include "train/guide.h"
#include "util/log.h"

namespace ddp_embed {

std::function<at::Tensor(const at::Tensor&)> accumulation_share(int accum_steps) {
  return [accum_steps](const at::Tensor& micro_batch_loss) { return micro_batch_loss / double(accum_steps); };
}

StepOutcome train_step(StepContext& context, StepBatches& batches, int64_t step, double lr) {
  const Config& cfg = context.config;
  const Worker& worker = context.worker;
  ModelUnderTraining& training = context.training;
  DataParallel& dp = *training.data_parallel;
  const int accum = cfg.train.grad_accum_steps;
  // loss.sparse's regularizer weights rise over their warm-up; everything else as configured.
  const LossConfig loss_config = loss_at_step(cfg.loss, step, context.total_steps);
  // Dropout masks from (seed, rank, steps done before this one): a resumed run draws
  // exactly the same ones.
  torch::manual_seed(mix_hash(cfg.train.seed, uint64_t(worker.pg->rank()), uint64_t(step - 1)));
  StepOutcome out;
  out.loss = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(worker.device));
  out.masked = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(worker.device));
  out.guided = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(worker.device));
  for (int micro_step = 0; micro_step < accum; ++micro_step) {
    PairBatch& micro = batches.micro[size_t(micro_step)];
    move_to(micro, worker.device);
    const auto hold = dp.prepare_micro_step(micro_step, accum);  // only accumulate, or sync as backward runs
    // loss.guide: the frozen guide's embeddings of the batch, in its labels, before the loss.
    if (context.guide) out.guide_ms += context.guide->embed_into(micro, cfg.train.gradcache_chunk);
    at::Tensor loss;  // this micro-batch's share of the step's loss
    if (micro.rerank.defined() && cfg.train.gradcache_chunk > 0) {  // a cross-encoder, its pairs in chunks
      loss = gradcache_rerank_forward_backward(training.model, micro.rerank,
                                               {cfg.train.gradcache_chunk, worker.precision, worker.device},
                                               cfg.loss.cross_encoder, context.exchange, context.loss_share,
                                               training.loss_scaler, &dp);
    } else if (micro.rerank.defined()) {  // a cross-encoder: the pairs scored, the reranking loss
      {
        AutocastScope autocast(worker.precision, worker.device);  // the forward only
        const RerankPart& r = micro.rerank;
        loss = context.loss_share(
            training.model->forward_rerank(r.pairs, r.group_rows, r.labels, cfg.loss.cross_encoder, r.divisor,
                                           context.exchange));
      }
      training.loss_scaler.scale_loss(loss).backward();
    } else if (cfg.train.gradcache_chunk > 0) {
      loss = gradcache_forward_backward(training.model, micro, {cfg.train.gradcache_chunk, worker.precision, worker.device},
                                        loss_config, context.exchange, context.loss_share, training.loss_scaler, &dp,
                                        &out.masked, &out.guided, &out.sparse_terms);
    } else {
      {
        AutocastScope autocast(worker.precision, worker.device);  // the forward only; backward runs outside it
        const PairLoss pair =
            training.model->forward(micro.query, micro.pos, micro.neg, loss_config, context.exchange, micro.labels);
        loss = context.loss_share(pair.loss);
        out.masked += pair.masked;
        out.guided += pair.guided;
        if (pair.sparse_terms.defined())
          out.sparse_terms = out.sparse_terms.defined() ? out.sparse_terms + pair.sparse_terms : pair.sparse_terms;
      }
      training.loss_scaler.scale_loss(loss).backward();
    }
    out.loss += loss.detach().to(at::kDouble);
    out.real_tokens += double(micro.real_tokens);
    out.comm_wait_ms += dp.finish_micro_step(micro_step, accum);
  }
  if (out.sparse_terms.defined()) out.sparse_terms = out.sparse_terms / double(accum);
  // The gradients are averaged over the ranks, so the verdict (finite or not) and the
  // norm are the same on every rank: every rank skips or steps together.
  out.update = update_parameters(training.optimizer, training.loss_scaler, cfg.train.max_grad_norm, lr);
  training.optimizer.zero_grad();
  return out;
}

void SkippedSteps::check(int64_t step, const StepOutcome& outcome) {
  last_step_ = step;
  if (!outcome.update.applied && first_skipped_ == 0) first_skipped_ = step;
  if (outcome.update.applied) {
    bad_in_a_row_ = 0;
    ++applied_;
    if (outcome.update.grad_norm != 0) {
      zero_in_a_row_ = 0;
      ++moved_;
    } else {
      if (zero_in_a_row_++ == 0) zero_from_ = step;
      if (zero_in_a_row_ >= max_bad_steps_) throw_nothing_trains(zero_from_, step);
    }
  } else if (outcome.update.loss_scale > 1) {
    spdlog::info("step {}: fp16 gradients overflowed at loss scale {:g}; step skipped, scale now {:g}", step,
                 outcome.update.loss_scale, scaler_.scale());
  } else {
    ++bad_in_a_row_;
    spdlog::warn("step {}: non-finite {} — step skipped ({} in a row, limit train.max_bad_steps = {})", step,
                 std::isfinite(outcome.loss.item<double>()) ? "gradient" : "loss", bad_in_a_row_, max_bad_steps_);
    if (bad_in_a_row_ >= max_bad_steps_)
      throw std::runtime_error(fmt::format("step {}: {} non-finite steps in a row; stopping (the last good "
                                           "checkpoint is kept)", step, bad_in_a_row_));
  }
}

// The loss is constant: its gradient is exactly 0 on every rank (it is all-reduced), so
// every rank stops here at the same step.
void SkippedSteps::throw_nothing_trains(int64_t first, int64_t last) const {
  const std::string steps = first == last ? fmt::format("step {}", last) : fmt::format("steps {} to {}", first, last);
  if (guide_.model)
    throw ConfigError(fmt::format(
        "{}: the gradient is exactly 0, the loss does not change with the weights: nothing trains. loss.guide.margin "
        "{:g} (\"{}\") masks every negative the guide rates within the margin of the positive, and here that is "
        "every negative of every query: lower loss.guide.margin (0, the default, masks what the guide rates above "
        "the positive)", steps, guide_.margin, choice_name(guide_.margin_strategy)));
  throw std::runtime_error(fmt::format(
      "{}: the gradient is exactly 0, the loss does not change with the weights: nothing trains (every negative "
      "masked as the positive's text? the pairs all one text?)", steps));
}

void SkippedSteps::require_some_trained(int64_t steps) const {
  if (steps == 0) return;
  if (applied_ > 0 && moved_ == 0) throw_nothing_trains(zero_from_, last_step_);
  if (applied_ > 0) return;
  throw std::runtime_error(fmt::format(
      "every one of this run's {} steps was skipped (a non-finite loss or gradients, from step {} on): nothing was "
      "trained, so no final model is written. The first warning above says which; a learning rate, loss.temperature "
      "or loss scale far off, or a data set that gives NaN, make every step fail",
      steps, first_skipped_));
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
