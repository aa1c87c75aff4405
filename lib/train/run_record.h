// What a run leaves behind and says as it goes (rank 0 writes): metrics.jsonl, the
// evaluations, the checkpoints, the figure of the run, and the log of the steps (the
// window of steps each log line sums up, the console line, the status line).
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "report/tensorboard.h"
#include "train/step.h"
#include "util/progress.h"

namespace ddp_embed {

// OUTPUT_DIR/metrics.jsonl (docs/ lists its keys): one JSON object a line; with
// output.report_to ["tensorboard"], each line's numbers in OUTPUT_DIR/tensorboard's event
// files too (report/tensorboard.h).
class MetricsFile {
 public:
  // A fresh run (`resumed_step` 0) starts the files anew; a resumed one appends to
  // metrics.jsonl (its last line first cut off, with a warning, when a kill left it
  // without its newline), and writes the event files anew from its lines up to
  // `resumed_step`, so that TensorBoard shows each step once. Only where `enabled` (rank 0).
  MetricsFile(const Config& cfg, bool enabled, int64_t resumed_step);
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
  std::optional<TensorBoardWriter> tensorboard_;
};

// output.keep_best: the model of the evaluation that scored highest on one metric, kept as
// OUTPUT_DIR/best, a model folder whose embed_train.json records it ({"step", "keep_best":
// {"metric", "value"}}) and whose manifest.json (io/manifest.h) lists every other file's
// size and checksum; the end verifies it and writes it as final/ (without the manifest).
// Higher is better; a tie or NaN keeps the earlier model. The step-0 evaluation (the
// starting model) competes too. A resumed run reads that record and keeps the best it
// records, also one from a step after the checkpoint it resumes from (a run that went on
// past its checkpoint, evaluated, and was stopped): that model was evaluated on the same
// set. A fresh run (nothing to resume) starts without a best.
//
// A new best replaces the old one so that a kill at any point leaves one decidable state:
// best.tmp is written (manifest last), best -> best.old, best.tmp -> best, best.old
// removed. A resumed run finishes an interrupted replacement when best.tmp verifies, and
// otherwise rolls back to best.old, saying which in one log line.
// Rank 0 writes; a no-op on other ranks and without output.keep_best.
class BestModel {
 public:
  // resumed: finishes or rolls back an interrupted replacement, then verifies best/ and
  // reads its record. Throws ManifestError (exit 78) naming the damaged file and the fix
  // when best/ does not verify. `first_attempt` (RESTART_COUNT 0) arms the tests' kill
  // point (DDP_EMBED_TEST_DIE_BETWEEN_BEST_RENAMES, best_model.cpp).
  BestModel(const Config& cfg, bool main_rank, bool resumed, bool first_attempt);
  // After an evaluation at `step` with metrics.jsonl's names ("eval/..."): keeps the model
  // when the metric beats the best so far. Throws ConfigError naming output.keep_best and
  // the metrics there are when the evaluation has no such metric.
  void consider(const nlohmann::json& metrics, int64_t step, SentenceEmbedder& model, const Tokenizer& tokenizer,
                const ModelFolderOptions& options);
  // final/ as a verified copy of best/; false (nothing written) when there is no best
  // model. Throws ManifestError (exit 78) naming the damaged file when best/ does not
  // verify, and what to do with the last checkpoint; final/ is then not written.
  bool write_final(const std::string& final_dir) const;

 private:
  void finish_interrupted_replacement();
  void read_record();
  [[noreturn]] void fail_damaged(const std::string& what, bool at_end) const;

  std::string metric_, output_dir_, dir_;  // dir_: OUTPUT_DIR/best
  bool enabled_;
  double value_ = 0;
  int64_t step_ = -1;  // -1: none yet
  int64_t die_from_step_ = -1;  // the tests' kill point; -1: none
};

// The run's files besides the log: metrics.jsonl, evaluations, checkpoints, the figure.
// Evaluations and checkpoints between the first and the last step come when the config
// says (output.eval_every, output.save_every); the last step's are the end's.
class RunRecord {
 public:
  // `resumed_step`: the step the run resumes after (0: a fresh run).
  RunRecord(const Config& cfg, Worker& worker, ModelUnderTraining& training, const Inputs& in, int64_t total_steps,
            int64_t resumed_step);

  void write_metrics(const nlohmann::json& line) { metrics_.write(line); }

  // After step `step` (1-based): on every output.eval_every'th step but the last, with data.eval.
  bool should_evaluate(int64_t step) const;
  // On data.eval, every rank (the embedding is shared among them); a no-op without it.
  // With output.keep_best, rank 0 keeps the model when it is the best so far.
  void evaluate(int64_t step);
  // final/: the model under training, or with output.keep_best the best one (rank 0).
  void write_final_model(int64_t step);

  // After step `step`: on every output.save_every'th step but the last.
  bool should_checkpoint(int64_t step) const;
  // Every rank: under ZeRO the whole moments are assembled from every rank's shards.
  void checkpoint(const TrainPosition& pos);

  // OUTPUT_DIR/metrics.svg from metrics.jsonl (rank 0; a no-op elsewhere). A figure that
  // cannot be drawn costs a warning, never the run.
  void draw_figure() const;

 private:
  const Config& cfg_;
  Worker& worker_;
  ModelUnderTraining& training_;
  const Inputs& in_;
  int64_t total_steps_;
  MetricsFile metrics_;
  nlohmann::json run_info_;
  BestModel best_;
};

// The steps since the last log line. Losses are summed on the device and read on log
// steps only: on a GPU each read makes the host wait for the queued work.
class LogWindow {
 public:
  explicit LogWindow(const c10::Device& device);

  void add(const StepOutcome& outcome);
  int64_t steps() const { return steps_; }
  // Evaluation and checkpoint pauses are not training time.
  void restart_clock() { start_ = std::chrono::steady_clock::now(); }

  // The metrics line of the window, over all ranks (the mean loss, global real tokens,
  // the masked same-text candidates of the global batch per step), and a fresh window.
  // Every rank calls it: it holds one all-reduce.
  nlohmann::json close(ProcessGroup& pg, int64_t global_batch);

 private:
  at::Tensor loss_, masked_, guided_;  // on the device: read on log steps only
  at::Tensor sparse_;                  // a sparse encoder: the steps' sparse_terms summed; else undefined
  double tokens_ = 0, wait_ms_ = 0, guide_ms_ = 0;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

// The log of the training steps. Every step joins the window; a log step (every
// output.log_every'th, and the last) closes it into a line of metrics.jsonl and a line of
// the console log ("step 20/100 loss ... | ... pairs/s ... | ETA ..."); rank 0's status
// line on a terminal says where the run is between them.
class StepLog {
 public:
  // Made just before the first step, `first_step` steps done; `startup_s` goes into the
  // first metrics line.
  StepLog(const Config& cfg, const Worker& worker, const ModelUnderTraining& training, const BatchPlan& plan,
          RunRecord& record, int64_t first_step, int64_t total_steps, double startup_s);

  // After a step, `pos` advanced past it: the step, its batches, outcome, learning rate and
  // time (loading its batches to its verdict) join the window; on a log step, the lines.
  // Every rank calls it: closing a window is an all-reduce.
  void after_step(const TrainPosition& pos, const StepBatches& batches, const StepOutcome& outcome, double lr,
                  double step_seconds);
  // An evaluation's pause is not training time.
  void restart_clock() { window_.restart_clock(); }
  // Rank 0's status line (a no-op elsewhere): where the run is, the loss of the last
  // logged line, the throughput of the recent steps.
  void show_progress(int64_t steps_done) const;

 private:
  nlohmann::json metrics_line(const TrainPosition& pos, const StepBatches& batches, const StepOutcome& outcome,
                              double lr);

  const Config& cfg_;
  const Worker& worker_;
  const ModelUnderTraining& training_;
  const BatchPlan& plan_;
  RunRecord& record_;
  int64_t first_step_, total_steps_;
  double startup_s_;
  LogWindow window_;
  RecentStepTimes step_times_;
  double logged_loss_;
  std::chrono::steady_clock::time_point train_start_ = std::chrono::steady_clock::now();
};

}  // namespace ddp_embed
