// One worker's training run, read top to bottom: run_training strings the phases
// together, each in a file of its own:
//
//   worker.h           the process: rank, log files, threads, device, process group
//   setup.h            the inputs (init folder, tokenizer, pairs), the model under
//                      training with its optimizer and data parallelism, the checkpoint
//                      it resumes from
//   step.h             one step: micro-batches forward and backward, gradient sync, update
//   fault_injection.h  the tests' faults, a decorator around the step
//   run_record.h       what the run leaves behind: metrics.jsonl, evaluations,
//                      checkpoints, the figure; and the log of the steps
//
// and this file: the loop and the end (the last evaluation and checkpoint, the model
// folder, the figure). The loop's body is fenced as llm.c's is: the step above the line,
// and below it what is said and kept of it, each part deciding for itself when it acts.
#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <exception>
#include <functional>
#include <optional>
#include <nlohmann/json.hpp>

#include "data/batch_plan.h"
#include "model/model_folder.h"
#include "optim/lr_schedule.h"
#include "train/batches.h"
#include "train/fault_injection.h"
#include "train/guide.h"
#include "train/run_record.h"
#include "train/step.h"
#include "train/step_profiler.h"
#include "train/setup.h"
#include "train/worker.h"
#include "util/log.h"
#include "util/process_info.h"
#include "util/progress.h"

using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// SIGTERM / SIGUSR1 (a preemption notice, forwarded by ddp-launch or sent by SLURM):
// finish the step, checkpoint, exit 0. SIGUSR2 (ddp-launch, an elastic job whose nodes
// change): finish the step, checkpoint, exit kExitMembershipChange, to be started again at
// the new world size. The handlers only set a flag.
enum class Stop { none = 0, for_membership = 1, for_good = 2 };  // a stop outranks a membership change
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int) { g_stop_signal.store(int(Stop::for_good)); }
extern "C" void on_membership_signal(int) {
  int none = int(Stop::none);
  g_stop_signal.compare_exchange_strong(none, int(Stop::for_membership));
}

class StopSignal {
 public:
  // Catches SIGTERM, SIGUSR1 and SIGUSR2 from now on.
  StopSignal() {
    std::signal(SIGTERM, on_stop_signal);
    std::signal(SIGUSR1, on_stop_signal);
    std::signal(SIGUSR2, on_membership_signal);
  }
  // The strongest any rank has received. Every rank calls it after every step (one
  // all-reduce), so that all stop at the same step.
  Stop received(ProcessGroup& pg) const { return Stop(pg.allreduce_max_int(g_stop_signal.load())); }
};

// Runs an action when its scope is left by an exception (not when left normally).
class OnException {
 public:
  explicit OnException(std::function<void()> action)
      : action_(std::move(action)), exceptions_before_(std::uncaught_exceptions()) {}
  OnException(const OnException&) = delete;
  OnException& operator=(const OnException&) = delete;
  ~OnException() {
    if (std::uncaught_exceptions() > exceptions_before_) action_();
  }

 private:
  std::function<void()> action_;
  int exceptions_before_;
};

// ---- the set-up of the loop -------------------------------------------------------------

// Process start -> first step: loading the libraries, the model, the data, the rendezvous
// and the first evaluation. Logged, and returned for the first metrics line.
double log_startup_time(Clock::time_point run_start) {
  const double since_process_start = seconds_since_process_start();
  const double startup_s = since_process_start > 0 ? since_process_start : seconds_since(run_start);
  spdlog::info("start-up took {:.2f}s (peak RSS {:.0f} MB); training", startup_s, peak_rss_mb());
  return startup_s;
}

// output.profile_steps: rank 0 records that many steps, after two of warm-up if the run is
// long enough.
StepProfiler make_profiler(const Config& cfg, const Worker& worker, int64_t first_step, int64_t total_steps) {
  const int64_t steps = worker.main_rank() ? std::min(cfg.output.profile_steps, total_steps - first_step) : 0;
  return StepProfiler(steps, std::max(first_step, std::min(first_step + 2, total_steps - steps)),
                      cfg.output.dir + "/profile-rank0.json", worker.device.is_cuda());
}

// ---- the end ----------------------------------------------------------------------------

// A stop signal: every rank checkpoints at the same step (output.checkpoint_on_signal)
// and the run exits 0, to be resumed; for a membership change always with the checkpoint
// (the next round resumes from it), and exit kExitMembershipChange. A checkpoint just
// written at this step is not written again.
int stop_for_signal(const Config& cfg, RunRecord& record, const TrainPosition& pos, Stop stop) {
  const bool membership = stop == Stop::for_membership;
  spdlog::warn("{}: checkpointing at step {} and exiting",
               membership ? "the job's nodes change (SIGUSR2)" : "stop signal received", pos.step);
  if ((membership || cfg.output.checkpoint_on_signal) && !record.should_checkpoint(pos.step)) record.checkpoint(pos);
  record.draw_figure();
  return membership ? kExitMembershipChange : 0;
}

// The last evaluation and checkpoint; rank 0 writes the model folder and the figure.
int finish_run(const Config& cfg, Worker& worker, RunRecord& record, const TrainPosition& pos) {
  console_status().clear();
  record.evaluate(pos.step);
  if (cfg.output.save_every > 0) record.checkpoint(pos);
  record.write_final_model(pos.step);  // with output.keep_best, the best evaluation's model
  record.draw_figure();
  worker.pg->barrier();
  return 0;
}

}  // namespace

// The run: set-up, resume, the step loop, the end. The files named at the top hold the
// details.
int run_training(const Config& given) {
  const auto run_start = Clock::now();
  const StopSignal stop_signal;
  Worker worker = set_up_worker(given);
  const Config cfg = for_this_world(given, worker);  // an elastic job's accumulation follows the world size
  ProcessGroup& pg = *worker.pg;
  Inputs in = load_inputs(cfg, worker);
  const BatchPlan plan = make_batch_plan(cfg, in.train, pg.world_size());
  for (const std::string& line : plan.describe()) spdlog::info("{}", line);
  const int64_t total_steps = cfg.train.max_steps > 0 ? cfg.train.max_steps : plan.steps_per_epoch() * cfg.train.epochs;
  ModelUnderTraining training = build_model_under_training(cfg, worker, in, total_steps, plan.micro_batch_size());
  TrainPosition pos = resume(cfg, pg, training);
  // loss.guide: the frozen guide, beside the model and no part of it.
  std::unique_ptr<GuideEncoder> guide;
  if (cfg.loss.guide.model) {
    guide = std::make_unique<GuideEncoder>(cfg.loss.guide, worker.device, worker.precision);
    spdlog::info("{}", guide->describe());
  }
  const int64_t first_step = pos.step;  // steps before it were trained by an earlier run
  RunRecord record(cfg, worker, training, in, total_steps, /*resumed_step=*/pos.step);
  if (const nlohmann::json change = note_membership_change(worker, pos.step); !change.is_null())
    record.write_metrics(change);
  if (pos.step == 0) record.evaluate(0);
  const double startup_s = log_startup_time(run_start);

  // The ranks exchange candidates for cross_rank_negatives, and a reranker's lambda with a
  // top k its counts of pairs (model/embedder.h forward_rerank).
  const bool exchange = cfg.loss.cross_rank_negatives ||
                        (cfg.model.kind == ModelKind::CrossEncoder && cfg.loss.cross_encoder.type == RerankLoss::Lambda &&
                         cfg.loss.cross_encoder.k > 0);
  StepContext step_context{cfg, worker, training, training.data_parallel->candidate_exchange(exchange),
                           accumulation_share(cfg.train.grad_accum_steps), guide.get(), total_steps};
  const StepFunction train = with_test_faults(
      [&step_context](StepBatches& batches, int64_t step, double lr) {
        return train_step(step_context, batches, step, lr);
      },
      step_context, worker.env.restart_count);
  training.model->train();
  // A cross-encoder reads its pairs joined (train/rerank_batches.h).
  std::optional<RerankBatching> rerank;
  if (cfg.model.kind == ModelKind::CrossEncoder) {
    rerank = make_rerank_batching(*in.tokenizer, cfg.tokenizer.max_length, cfg.loss.cross_encoder,
                                  cfg.model.num_labels);
    check_rerank_data(in.train, *rerank, negatives_per_source(cfg, in.train.sources.size()));
  }
  BatchLoader loader(in.train, plan, pg.rank(), cfg.train.grad_accum_steps,
                     negatives_per_source(cfg, in.train.sources.size()), cfg.train.seed, pos.epoch, pos.step_in_epoch,
                     total_steps - pos.step, /*pin=*/worker.device.is_cuda(), /*prefetch=*/4,
                     rerank ? &*rerank : nullptr);
  SkippedSteps skipped_steps(cfg.train.max_bad_steps, training.loss_scaler, cfg.loss.guide);
  StepLog log(cfg, worker, training, plan, record, /*first_step=*/pos.step, total_steps, startup_s);
  StepProfiler profiler = make_profiler(cfg, worker, /*first_step=*/pos.step, total_steps);
  StatusLineScope status_line;  // erased when the run ends, also by an exception
  // A run stopped by an error still leaves its figure: the steps before a failure (a
  // loss turning NaN) are what one wants to see.
  const OnException figure_on_error([&] { record.draw_figure(); });

  while (pos.step < total_steps) {
    const int64_t step = pos.step + 1;  // 1-based, as the log says it
    profiler.before_step(pos.step);
    // ---- the step: its batches in, the parameters updated (or the step skipped) ----
    const auto step_begin = Clock::now();
    StepBatches batches = loader.next();
    const double lr = learning_rate(training.peak_lr, cfg.train.schedule, cfg.train.warmup_steps, total_steps, pos.step);
    const StepOutcome outcome = train(batches, step, lr);
    skipped_steps.check(step, outcome);  // throws at train.max_bad_steps in a row
    const double step_seconds = seconds_since(step_begin);
    advance(pos, batches, plan, training.loss_scaler);
    // ---- what is said and kept of it ----
    profiler.after_step(pos.step);
    log.after_step(pos, batches, outcome, lr, step_seconds);
    if (record.should_evaluate(step)) {
      record.evaluate(step);
      log.restart_clock();
    }
    if (record.should_checkpoint(step)) record.checkpoint(pos);
    log.show_progress(pos.step);
    if (const Stop stop = stop_signal.received(pg); stop != Stop::none && step < total_steps)
      return stop_for_signal(cfg, record, pos, stop);
  }
  skipped_steps.require_some_trained(total_steps - first_step);  // throws when every step was skipped
  return finish_run(cfg, worker, record, pos);
}

}  // namespace ddp_embed
