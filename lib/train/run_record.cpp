#include "train/run_record.h"

#include "train/evaluate.h"
#include "util/log.h"

using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// Evaluation batches have a fixed size so that metrics do not depend on the world size.
constexpr int64_t kEvalBatch = 64;

}  // namespace

MetricsFile::MetricsFile(const std::string& path, bool enabled, bool append) {
  if (enabled) out_.open(path, append ? std::ios::app : std::ios::trunc);
}

void MetricsFile::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
}

RunRecord::RunRecord(const Config& cfg, Worker& w, Trainee& t, const Inputs& in, bool resumed)
    : cfg_(cfg), w_(w), t_(t), in_(in),
      metrics_(cfg.output.dir + "/metrics.jsonl", w.main_rank(), /*append=*/resumed),
      run_info_({{"world_size", w.pg->world_size()}, {"config", config_to_json(cfg)}}) {}

void RunRecord::evaluate(int64_t step) {
  if (!in_.eval) return;
  const auto t0 = Clock::now();
  // With loss.matryoshka_dims, every smaller size too ("d64/recall@10").
  auto m = ddp_embed::evaluate(t_.model, *in_.eval, *w_.pg, kEvalBatch, w_.device, "", cfg_.loss.matryoshka_dims);
  nlohmann::json line = {{"step", step}};
  std::string text;
  for (auto& [k, v] : m) {
    line["eval/" + k] = v;
    text += fmt::format(" {} {:.4f}", k, v);
  }
  metrics_.write(line);
  spdlog::info("eval step {}:{} ({:.1f}s)", step, text, std::chrono::duration<double>(Clock::now() - t0).count());
}

void RunRecord::checkpoint(const TrainPosition& p) {
  w_.pg->barrier();
  const FlatAdamW::NamedTensors optimizer_state = t_.optimizer.state(/*keep=*/w_.main_rank());
  if (w_.main_rank()) {
    const auto t0 = Clock::now();
    const std::string where = save_checkpoint(cfg_.output.dir + "/checkpoints", t_.model, optimizer_state,
                                              t_.optimizer.steps_taken(), p, run_info_, cfg_.output.keep_last);
    spdlog::info("checkpoint {} ({:.1f}s)", where, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  w_.pg->barrier();
}

LogWindow::LogWindow(const c10::Device& device)
    : loss_(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))),
      masked_(at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device))) {}

void LogWindow::add(const StepOutcome& s) {
  loss_ += s.loss;
  if (s.masked.defined()) masked_ += s.masked;
  tokens_ += s.real_tokens;
  wait_ms_ += s.comm_wait_ms;
  ++steps_;
}

nlohmann::json LogWindow::close(ProcessGroup& pg, int64_t global_batch) {
  // One all-reduce for everything the line sums over the ranks. Each rank counted the
  // masked candidates of its own queries: the sum is the global batch's.
  at::Tensor sums =
      at::tensor({loss_.item<double>(), tokens_, double(masked_.item<int64_t>())}, at::kDouble).to(pg.device());
  pg.allreduce_sum_(sums);
  sums = sums.cpu();
  const double seconds = std::chrono::duration<double>(Clock::now() - start_).count();
  nlohmann::json line = {{"loss", sums[0].item<double>() / double(pg.world_size() * steps_)},
                         {"pairs_per_s", double(global_batch * steps_) / seconds},
                         {"tokens_per_s", sums[1].item<double>() / seconds},
                         {"step_ms", 1000 * seconds / double(steps_)},
                         {"comm_wait_ms", wait_ms_ / double(steps_)},
                         {"masked_negatives", sums[2].item<double>() / double(steps_)}};
  loss_.zero_();
  masked_.zero_();
  tokens_ = wait_ms_ = 0;
  steps_ = 0;
  restart_clock();
  return line;
}

}  // namespace ddp_embed
