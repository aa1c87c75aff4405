// What a run leaves behind and says as it goes (rank 0 writes): metrics.jsonl, the
// evaluations, the checkpoints, and the window of steps each log line sums up.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "train/step.h"

namespace ddp_embed {

// OUTPUT_DIR/metrics.jsonl (docs/ lists its keys): one JSON object a line.
class MetricsFile {
 public:
  // A fresh run starts the file anew; a resumed one appends to it.
  MetricsFile(const std::string& path, bool enabled, bool append);
  void write(const nlohmann::json& line);

 private:
  std::ofstream out_;
};

class RunRecord {
 public:
  RunRecord(const Config& cfg, Worker& w, Trainee& t, const Inputs& in, bool resumed);

  void write_metrics(const nlohmann::json& line) { metrics_.write(line); }
  // On data.eval, every rank (the embedding is shared among them); a no-op without it.
  void evaluate(int64_t step);
  // Every rank: under ZeRO the whole moments are assembled from every rank's shards.
  void checkpoint(const TrainPosition& p);

 private:
  const Config& cfg_;
  Worker& w_;
  Trainee& t_;
  const Inputs& in_;
  MetricsFile metrics_;
  nlohmann::json run_info_;
};

// The steps since the last log line. Losses are summed on the device and read on log
// steps only: on a GPU each read makes the host wait for the queued work.
class LogWindow {
 public:
  explicit LogWindow(const c10::Device& device);

  void add(const StepOutcome& s);
  int64_t steps() const { return steps_; }
  // Evaluation and checkpoint pauses are not training time.
  void restart_clock() { start_ = std::chrono::steady_clock::now(); }

  // The metrics line of the window, over all ranks (the mean loss, global real tokens,
  // the masked same-text candidates of the global batch per step), and a fresh window.
  // Every rank calls it: it holds one all-reduce.
  nlohmann::json close(ProcessGroup& pg, int64_t global_batch);

 private:
  at::Tensor loss_, masked_;  // on the device: read on log steps only
  double tokens_ = 0, wait_ms_ = 0;
  int64_t steps_ = 0;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace ddp_embed
