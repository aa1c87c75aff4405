// One worker's training run, read top to bottom: run_training strings the phases
// together, each in a file of its own:
//
//   worker.h      the process: rank, log files, threads, device, process group
//   trainee.h     the inputs (init folder, tokenizer, pairs), the model with its
//                 optimizer and data parallelism, the checkpoint it resumes from
//   step.h        one step: micro-batches forward and backward, gradient sync, update
//   run_record.h  what the run leaves behind: metrics.jsonl, evaluations, checkpoints
//
// and this file: the loop (step, log line, evaluation, checkpoint, stop signal) and the
// end (the last evaluation and checkpoint, the model folder, the figure).
#include "train/trainer.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <exception>
#include <functional>

#include "data/batch_plan.h"
#include "model/model_folder.h"
#include "optim/lr_schedule.h"
#include "report/metrics_plot.h"
#include "train/batches.h"
#include "train/fault_injection.h"
#include "train/run_record.h"
#include "train/step.h"
#include "train/step_profiler.h"
#include "train/trainee.h"
#include "train/worker.h"
#include "util/log.h"
#include "util/process_info.h"
#include "util/progress.h"

using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// SIGTERM / SIGUSR1 (a preemption notice, forwarded by ddp-launch or sent by SLURM):
// finish the step, checkpoint, exit 0. The handler only sets a flag.
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// ---- progress and the figure of the run ------------------------------------------------------

// The ETA is the mean time of the last kEtaWindow steps times the steps left; the first
// kWarmupSteps of a process (allocations, first-touch of the weights) are left out.
constexpr size_t kWarmupSteps = 2, kEtaWindow = 50;

// Rank 0's status line on a terminal (a no-op elsewhere): where the run is, the loss of
// the last logged line, the throughput of the recent steps.
void show_progress(int64_t step, int64_t total, double logged_loss, double pairs_per_s, double elapsed_s,
                   double eta_s) {
  StatusLine& status = console_status();
  if (!status.enabled()) return;
  const std::string loss = std::isnan(logged_loss) ? "loss -" : fmt::format("loss {:.4f}", logged_loss);
  const std::string rate = std::isnan(pairs_per_s) ? "- pairs/s" : fmt::format("{:.1f} pairs/s", pairs_per_s);
  status.update(format_progress_line({"step", step, total, loss + " | " + rate, elapsed_s, eta_s}, status.width()));
}

// OUTPUT_DIR/metrics.svg from OUTPUT_DIR/metrics.jsonl (rank 0). A figure that cannot be
// drawn costs a warning, never the run.
void write_run_figure(const std::string& output_dir) {
  try {
    const PlotSummary plot = plot_metrics_file(output_dir + "/metrics.jsonl", output_dir + "/metrics.svg");
    spdlog::info("figure of the run: {}", plot.output);
  } catch (const std::exception& e) {
    spdlog::warn("no figure of the run: {}", e.what());
  }
}

// metrics.jsonl's "source" (the source of the window's last step) and "steps_per_source"
// (each source's steps up to `pos`, over the whole run). Derived from the plan, which
// knows every step's source, so a resumed run counts exactly as an uninterrupted one.
nlohmann::json source_counts(const BatchPlan& plan, const TrainPosition& pos, const StepBatches& last) {
  const std::vector<int64_t> counts = plan.steps_per_source(pos.epoch, pos.step_in_epoch);
  nlohmann::json per_source = nlohmann::json::object();
  for (size_t s = 0; s < counts.size(); ++s) per_source[plan.sources()[s].name] = counts[s];
  return {{"source", last.source_name}, {"steps_per_source", per_source}};
}

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

// ---- the end ---------------------------------------------------------------------------

// The last evaluation and checkpoint; rank 0 writes the model folder and the figure.
void finish_run(const Config& cfg, Worker& w, Trainee& t, const Inputs& in, RunRecord& record,
                const TrainPosition& pos) {
  console_status().clear();
  record.evaluate(pos.step);
  if (cfg.output.save_every > 0) record.checkpoint(pos);
  if (w.main_rank()) {
    const std::string final_dir = cfg.output.dir + "/final";
    save_model_folder(final_dir, t.model, *in.tokenizer, output_folder_options(cfg, in),
                      {{"step", pos.step}, {"config", config_to_json(cfg)}});
    spdlog::info("model written to {} (peak RSS {:.0f} MB)", final_dir, peak_rss_mb());
    write_run_figure(cfg.output.dir);
  }
  w.pg->barrier();
}

}  // namespace

// The run: set-up, resume, the step loop (step, log, evaluate, checkpoint, stop signal),
// the end. The files named at the top hold the details.
int run_training(const Config& cfg) {
  const auto t_start = Clock::now();
  Worker w = set_up_worker(cfg);
  ProcessGroup& pg = *w.pg;
  std::signal(SIGTERM, on_stop_signal);
  std::signal(SIGUSR1, on_stop_signal);
  Inputs in = load_inputs(cfg, w);
  const BatchPlan plan = make_batch_plan(cfg, in.train, pg.world_size());
  for (const std::string& line : plan.describe()) spdlog::info("{}", line);
  const int64_t total_steps = cfg.train.max_steps > 0 ? cfg.train.max_steps : plan.steps_per_epoch() * cfg.train.epochs;
  Trainee t = build_trainee(cfg, w, in, total_steps, plan.micro_batch_size());
  TrainPosition pos = resume(cfg, pg, t);
  RunRecord record(cfg, w, t, in, /*resumed=*/pos.step > 0);
  if (pos.step == 0) record.evaluate(0);

  // Process start -> first step: loading the libraries, the model, the data, the
  // rendezvous and the first evaluation.
  const double since_process_start = seconds_since_process_start();
  const double startup_s =
      since_process_start > 0 ? since_process_start : std::chrono::duration<double>(Clock::now() - t_start).count();
  spdlog::info("start-up took {:.2f}s (peak RSS {:.0f} MB); training", startup_s, peak_rss_mb());

  const std::unique_ptr<FaultInjection> faults = FaultInjection::from_env(w.env.restart_count);
  StepContext step_context{cfg, w, t, t.data_parallel->candidate_exchange(cfg.loss.cross_rank_negatives),
                           faults.get()};
  t.model->train();
  BatchLoader loader(in.train, plan, pg.rank(), cfg.train.grad_accum_steps, negatives_per_source(cfg, in.train.sources.size()),
                     cfg.train.seed, pos.epoch, pos.step_in_epoch, total_steps - pos.step, /*pin=*/w.device.is_cuda());
  LogWindow window(w.device);
  const int64_t first_step = pos.step;
  const auto train_start = Clock::now();
  RecentStepTimes step_times(kWarmupSteps, kEtaWindow);
  double logged_loss = std::nan("");
  int bad_steps_in_a_row = 0;
  StatusLineScope status_line;  // erased when the run ends, also by an exception
  // A run stopped by an error still leaves its figure: the steps before a failure (a
  // loss turning NaN) are what one wants to see.
  const OnException figure_on_error([&] {
    if (w.main_rank()) write_run_figure(cfg.output.dir);
  });
  auto show_progress_now = [&] {
    show_progress(pos.step, total_steps, logged_loss, double(cfg.train.batch_size) / step_times.mean_seconds(),
                  std::chrono::duration<double>(Clock::now() - train_start).count(),
                  step_times.eta_seconds(total_steps - pos.step));
  };
  // output.profile_steps: rank 0 records that many steps, after two of warm-up if the run is long enough.
  const int64_t profile_steps = w.main_rank() ? std::min(cfg.output.profile_steps, total_steps - first_step) : 0;
  StepProfiler profiler(profile_steps, std::max(first_step, std::min(first_step + 2, total_steps - profile_steps)),
                        cfg.output.dir + "/profile-rank0.json");

  while (pos.step < total_steps) {
    profiler.before_step(pos.step);
    const auto step_begin = Clock::now();
    if (faults) faults->before_step(pg.rank(), pos.step);
    StepBatches batches = loader.next();
    const double lr = learning_rate(t.peak_lr, cfg.train.schedule, cfg.train.warmup_steps, total_steps, pos.step);
    const StepOutcome step = train_step(step_context, batches, pos.step, lr);
    judge_update(step, pos.step + 1, cfg, t.loss_scaler, &bad_steps_in_a_row);
    step_times.add(std::chrono::duration<double>(Clock::now() - step_begin).count());
    advance(pos, batches, plan, t.loss_scaler);
    if (const std::string profile = profiler.after_step(pos.step); !profile.empty()) spdlog::info("{}", profile);
    window.add(step);

    const bool last = pos.step == total_steps;
    if (pos.step % cfg.output.log_every == 0 || last) {
      const int64_t window_steps = window.steps();
      nlohmann::json line = window.close(pg, cfg.train.batch_size);
      logged_loss = line["loss"];
      line.update({{"step", pos.step}, {"epoch", pos.epoch}, {"lr", lr}, {"grad_norm", step.update.grad_norm},
                   {"peak_rss_mb", peak_rss_mb()}});
      if (w.device.is_cuda()) line["peak_gpu_mb"] = compat::cuda_peak_allocated_mb(w.device.index());
      if (t.loss_scaler.enabled()) line["loss_scale"] = t.loss_scaler.scale();
      // The first line also says how long start-up took (process start → first step).
      if (pos.step - first_step == window_steps) line["startup_s"] = startup_s;
      if (plan.batches_have_sources()) line.update(source_counts(plan, pos, batches));
      record.write_metrics(line);
      show_progress_now();  // before the log line, which draws the status line again below it
      // With several sources the line names the source of its step.
      const std::string source = plan.sources().size() > 1 && batches.source >= 0 ? " [" + batches.source_name + "]" : "";
      spdlog::info("step {}/{}{} loss {:.4f} lr {:.2e} grad_norm {:.3f} masked {:g} | {:.1f} pairs/s {:.0f} tok/s "
                   "{:.0f} ms/step | ETA {}", pos.step, total_steps, source, logged_loss, lr, step.update.grad_norm,
                   double(line["masked_negatives"]),
                   double(line["pairs_per_s"]), double(line["tokens_per_s"]), double(line["step_ms"]),
                   format_duration(step_times.eta_seconds(total_steps - pos.step)));
    }
    if (in.eval && cfg.output.eval_every > 0 && pos.step % cfg.output.eval_every == 0 && !last) {
      record.evaluate(pos.step);
      window.restart_clock();
    }
    if (cfg.output.save_every > 0 && pos.step % cfg.output.save_every == 0 && !last) record.checkpoint(pos);
    show_progress_now();

    // A stop signal on any rank: every rank checkpoints at the same step and exits 0.
    if (pg.allreduce_max_int(g_stop_signal.load()) != 0 && !last) {
      spdlog::warn("stop signal received: checkpointing at step {} and exiting", pos.step);
      if (cfg.output.checkpoint_on_signal) record.checkpoint(pos);
      if (w.main_rank()) write_run_figure(cfg.output.dir);
      return 0;
    }
  }
  finish_run(cfg, w, t, in, record, pos);
  return 0;
}

}  // namespace ddp_embed
