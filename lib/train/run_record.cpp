#include "train/run_record.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "compat/cuda_support.h"
#include "report/metrics_plot.h"
#include "train/evaluate.h"
#include "util/log.h"
#include "util/process_info.h"

using Clock = std::chrono::steady_clock;

namespace ddp_embed {
namespace {

// Evaluation batches have a fixed size so that metrics do not depend on the world size.
constexpr int64_t kEvalBatch = 64;

// The ETA is the mean time of the last kEtaWindow steps times the steps left; the first
// kWarmupSteps of a process (allocations, first-touch of the weights) are left out.
constexpr size_t kWarmupSteps = 2, kEtaWindow = 50;

// metrics.jsonl's "source" (the source of the window's last step) and "steps_per_source"
// (each source's steps up to `pos`, over the whole run). Derived from the plan, which
// knows every step's source, so a resumed run counts exactly as an uninterrupted one.
nlohmann::json source_counts(const BatchPlan& plan, const TrainPosition& pos, const StepBatches& last) {
  const std::vector<int64_t> counts = plan.steps_per_source(pos.epoch, pos.step_in_epoch);
  nlohmann::json per_source = nlohmann::json::object();
  for (size_t s = 0; s < counts.size(); ++s) per_source[plan.sources()[s].name] = counts[s];
  return {{"source", last.source_name}, {"steps_per_source", per_source}};
}

}  // namespace

// ---- metrics.jsonl, evaluations, checkpoints, the figure --------------------------------

namespace {

// The lines of a metrics.jsonl so far (a line cut short by a kill is left out).
std::vector<nlohmann::json> read_metrics_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  std::string text;
  while (std::getline(in, text)) {
    nlohmann::json line = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (line.is_object()) lines.push_back(std::move(line));
  }
  return lines;
}

// A resumed run appends to metrics.jsonl: a last line without its newline (the run was
// killed while writing it) is cut off first, or the next record would be joined to it.
void drop_torn_last_line(const std::string& path) {
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || size == 0) return;
  std::ifstream in(path, std::ios::binary);
  // The end of the last complete line: after the last newline, searched from the end.
  std::optional<uint64_t> keep;
  std::string block;
  for (uint64_t end = size; !keep;) {
    const uint64_t begin = end > (1 << 16) ? end - (1 << 16) : 0;
    block.resize(size_t(end - begin));
    in.seekg(std::streamoff(begin));
    in.read(block.data(), std::streamsize(block.size()));
    if (!in) return;  // unreadable: the append below reports it
    const size_t newline = block.rfind('\n');
    if (newline != std::string::npos) keep = begin + newline + 1;
    else if (begin == 0) keep = 0;
    end = begin;
  }
  if (*keep == size) return;
  std::filesystem::resize_file(path, *keep, ec);
  if (ec) {
    spdlog::warn("{}: its last line is torn (no newline), and cutting it off failed: {}", path, ec.message());
    return;
  }
  spdlog::warn("{}: its last line was torn ({} bytes without a newline: the run was killed while writing it); "
               "dropped that record", path, size - *keep);
}

}  // namespace

MetricsFile::MetricsFile(const Config& cfg, bool enabled, int64_t resumed_step) {
  if (!enabled) return;
  const std::string path = cfg.output.dir + "/metrics.jsonl";
  if (resumed_step > 0) drop_torn_last_line(path);
  const auto& report_to = cfg.output.report_to;
  if (std::find(report_to.begin(), report_to.end(), ReportTo::TensorBoard) != report_to.end()) {
    tensorboard_ = rewrite_tensorboard_folder(
        cfg.output.dir + "/tensorboard", resumed_step > 0 ? read_metrics_lines(path) : std::vector<nlohmann::json>{},
        resumed_step);
    spdlog::info("TensorBoard: {}", tensorboard_->path());
  }
  out_.open(path, resumed_step > 0 ? std::ios::app : std::ios::trunc);
}

void MetricsFile::write(const nlohmann::json& line) {
  if (!out_.is_open()) return;
  out_ << line.dump() << "\n";
  out_.flush();
  if (tensorboard_) tensorboard_->write_metrics_line(line);
}

RunRecord::RunRecord(const Config& cfg, Worker& worker, ModelUnderTraining& training, const Inputs& in,
                     int64_t total_steps, int64_t resumed_step)
    : cfg_(cfg), worker_(worker), training_(training), in_(in), total_steps_(total_steps),
      metrics_(cfg, worker.main_rank(), resumed_step),
      run_info_({{"world_size", worker.pg->world_size()}, {"config", config_to_json(cfg)}}),
      best_(cfg, worker.main_rank(), /*resumed=*/resumed_step > 0, /*first_attempt=*/worker.env.restart_count == 0) {}

bool RunRecord::should_evaluate(int64_t step) const {
  return !in_.eval.empty() && cfg_.output.eval_every > 0 && step % cfg_.output.eval_every == 0 &&
         step != total_steps_;
}

void RunRecord::evaluate(int64_t step) {
  if (in_.eval.empty()) return;
  const auto t0 = Clock::now();
  // With loss.matryoshka_dims, every smaller size too ("d64/recall@10").
  auto m = evaluate_sets(training_.model, in_.eval, *worker_.pg, kEvalBatch, worker_.device,
                         cfg_.loss.matryoshka_dims);
  nlohmann::json line = {{"step", step}};
  std::string text;
  for (auto& [k, v] : m) {
    line["eval/" + k] = v;
    text += fmt::format(" {} {:.4f}", k, v);
  }
  metrics_.write(line);
  spdlog::info("eval step {}:{} ({:.1f}s)", step, text, seconds_since(t0));
  best_.consider(line, step, training_.model, *in_.tokenizer, output_folder_options(cfg_, in_));
}

void RunRecord::write_final_model(int64_t step) {
  if (!worker_.main_rank()) return;
  const std::string final_dir = cfg_.output.dir + "/final";
  if (best_.write_final(final_dir)) return;
  save_model_folder(final_dir, training_.model, *in_.tokenizer, output_folder_options(cfg_, in_),
                    {{"step", step}, {"config", config_to_json(cfg_)}});
  spdlog::info("model written to {} (peak RSS {:.0f} MB)", final_dir, peak_rss_mb());
}

bool RunRecord::should_checkpoint(int64_t step) const {
  return cfg_.output.save_every > 0 && step % cfg_.output.save_every == 0 && step != total_steps_;
}

void RunRecord::checkpoint(const TrainPosition& pos) {
  worker_.pg->barrier();
  const FlatAdamW::NamedTensors optimizer_state = training_.optimizer.state(/*keep=*/worker_.main_rank());
  if (worker_.main_rank()) {
    const auto t0 = Clock::now();
    const std::string where = save_checkpoint(cfg_.output.dir + "/checkpoints", training_.model, optimizer_state,
                                              training_.optimizer.steps_taken(), pos, run_info_, cfg_.output.keep_last);
    spdlog::info("checkpoint {} ({:.1f}s)", where, seconds_since(t0));
  }
  worker_.pg->barrier();
}

void RunRecord::draw_figure() const {
  if (!worker_.main_rank()) return;
  try {
    const PlotSummary plot = plot_metrics_file(cfg_.output.dir + "/metrics.jsonl", cfg_.output.dir + "/metrics.svg");
    spdlog::info("figure of the run: {}", plot.output);
  } catch (const std::exception& e) {
    spdlog::warn("no figure of the run: {}", e.what());
  }
}

// ---- the log of the steps ---------------------------------------------------------------

LogWindow::LogWindow(const c10::Device& device)
    : loss_(at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(device))),
      masked_(at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device))),
      guided_(at::zeros({}, at::TensorOptions().dtype(at::kLong).device(device))) {}

void LogWindow::add(const StepOutcome& outcome) {
  loss_ += outcome.loss;
  if (outcome.masked.defined()) masked_ += outcome.masked;
  if (outcome.guided.defined()) guided_ += outcome.guided;
  if (outcome.sparse_terms.defined()) sparse_ = sparse_.defined() ? sparse_ + outcome.sparse_terms : outcome.sparse_terms;
  guide_ms_ += outcome.guide_ms;
  tokens_ += outcome.real_tokens;
  wait_ms_ += outcome.comm_wait_ms;
  ++steps_;
}

nlohmann::json LogWindow::close(ProcessGroup& pg, int64_t global_batch) {
  // One all-reduce for everything the line sums over the ranks. Each rank counted the
  // masked candidates of its own queries: the sum is the global batch's.
  at::Tensor sums =
      at::tensor({loss_.item<double>(), tokens_, double(masked_.item<int64_t>()), double(guided_.item<int64_t>())},
                 at::kDouble).to(pg.device());
  if (sparse_.defined()) sums = at::cat({sums, sparse_.to(sums.device(), at::kDouble)});  // every rank has them or none
  pg.allreduce_sum_(sums);
  sums = sums.cpu();
  const double seconds = seconds_since(start_);
  nlohmann::json line = {{"loss", sums[0].item<double>() / double(pg.world_size() * steps_)},
                         {"pairs_per_s", double(global_batch * steps_) / seconds},
                         {"tokens_per_s", sums[1].item<double>() / seconds},
                         {"step_ms", 1000 * seconds / double(steps_)},
                         {"masked_negatives", sums[2].item<double>() / double(steps_)}};
  // Over NCCL the host does not wait for the all-reduces (only the GPU's stream does: a
  // --profile trace shows it), so the host's clock would measure launching them: no key.
  if (pg.host_waits_for_collectives()) line["comm_wait_ms"] = wait_ms_ / double(steps_);
  if (guide_ms_ > 0) {  // loss.guide: the pairs it masked besides, and its share of the step (this rank's)
    line["guide_masked_negatives"] = sums[3].item<double>() / double(steps_);
    line["guide_ms"] = guide_ms_ / double(steps_);
    line["guide_step_share"] = guide_ms_ / (1000 * seconds);
  }
  if (sparse_.defined()) {  // a sparse encoder: the means over the ranks and steps, a step's
    const double n = double(pg.world_size() * steps_);
    line["active_dims_query"] = sums[4].item<double>() / n;
    line["active_dims_document"] = sums[5].item<double>() / n;
    line["flops_query"] = sums[6].item<double>() / n;
    line["flops_document"] = sums[7].item<double>() / n;
    sparse_ = at::Tensor();
  }
  loss_.zero_();
  masked_.zero_();
  guided_.zero_();
  tokens_ = wait_ms_ = guide_ms_ = 0;
  steps_ = 0;
  restart_clock();
  return line;
}

StepLog::StepLog(const Config& cfg, const Worker& worker, const ModelUnderTraining& training, const BatchPlan& plan,
                 RunRecord& record, int64_t first_step, int64_t total_steps, double startup_s)
    : cfg_(cfg), worker_(worker), training_(training), plan_(plan), record_(record), first_step_(first_step),
      total_steps_(total_steps), startup_s_(startup_s), window_(worker.device),
      step_times_(kWarmupSteps, kEtaWindow), logged_loss_(std::nan("")) {}

void StepLog::after_step(const TrainPosition& pos, const StepBatches& batches, const StepOutcome& outcome, double lr,
                         double step_seconds) {
  step_times_.add(step_seconds);
  window_.add(outcome);
  if (pos.step % cfg_.output.log_every != 0 && pos.step != total_steps_) return;
  const nlohmann::json line = metrics_line(pos, batches, outcome, lr);
  logged_loss_ = line["loss"];
  record_.write_metrics(line);
  show_progress(pos.step);  // before the log line, which draws the status line again below it
  // With several sources the line names the source of its step.
  const std::string source =
      plan_.sources().size() > 1 && batches.source >= 0 ? " [" + batches.source_name + "]" : "";
  // With a guide: the pairs it masked besides the same-text ones, and its time a step.
  const std::string guide =
      line.contains("guide_ms")
          ? fmt::format(" guide_masked {:g} (guide {:.0f} ms, {:.0f}% of the step)", double(line["guide_masked_negatives"]),
                        double(line["guide_ms"]), 100 * double(line["guide_step_share"]))
          : "";
  // A reranker's training line is a query with its candidates, each candidate one scored
  // (query, document) pair: "queries/s" says which count pairs_per_s is.
  const char* lines_per_s = cfg_.model.kind == ModelKind::CrossEncoder ? "queries/s" : "pairs/s";
  // A sparse encoder's: how many entries its vectors hold, what FLOPS pushes down.
  const std::string active = line.contains("active_dims_query")
                                 ? fmt::format(" active q {:.0f} d {:.0f}", double(line["active_dims_query"]),
                                               double(line["active_dims_document"]))
                                 : "";
  spdlog::info("step {}/{}{} loss {:.4f} lr {:.2e} grad_norm {:.3f} masked {:g}{}{} | {:.1f} {} {:.0f} tok/s "
               "{:.0f} ms/step | ETA {}", pos.step, total_steps_, source, logged_loss_, lr, outcome.update.grad_norm,
               double(line["masked_negatives"]), guide, active, double(line["pairs_per_s"]), lines_per_s, double(line["tokens_per_s"]),
               double(line["step_ms"]), format_duration(step_times_.eta_seconds(total_steps_ - pos.step)));
}

// The window's line (loss, throughput: LogWindow::close) with the step's place, learning
// rate, gradient norm and memory.
nlohmann::json StepLog::metrics_line(const TrainPosition& pos, const StepBatches& batches,
                                     const StepOutcome& outcome, double lr) {
  const int64_t window_steps = window_.steps();
  nlohmann::json line = window_.close(*worker_.pg, cfg_.train.batch_size);
  line.update({{"step", pos.step}, {"epoch", pos.epoch}, {"lr", lr}, {"grad_norm", outcome.update.grad_norm},
               {"peak_rss_mb", peak_rss_mb()}});
  if (worker_.device.is_cuda()) line["peak_gpu_mb"] = compat::cuda_peak_allocated_mb(worker_.device.index());
  if (training_.loss_scaler.enabled()) line["loss_scale"] = training_.loss_scaler.scale();
  // The first line also says how long start-up took (process start → first step).
  if (pos.step - first_step_ == window_steps) line["startup_s"] = startup_s_;
  if (plan_.batches_have_sources()) line.update(source_counts(plan_, pos, batches));
  return line;
}

void StepLog::show_progress(int64_t steps_done) const {
  StatusLine& status = console_status();
  if (!status.enabled()) return;
  const double pairs_per_s = double(cfg_.train.batch_size) / step_times_.mean_seconds();
  const std::string loss = std::isnan(logged_loss_) ? "loss -" : fmt::format("loss {:.4f}", logged_loss_);
  const std::string rate = std::isnan(pairs_per_s) ? "- pairs/s" : fmt::format("{:.1f} pairs/s", pairs_per_s);
  status.update(format_progress_line({"step", steps_done, total_steps_, loss + " | " + rate,
                                      seconds_since(train_start_), step_times_.eta_seconds(total_steps_ - steps_done)},
                                     status.width()));
}

}  // namespace ddp_embed
