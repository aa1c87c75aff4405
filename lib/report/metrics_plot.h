// The figure of a training run: metrics.jsonl → one self-contained SVG.
//
// Panels, all with the step on x (one shared range): the loss, the learning rate, the
// throughput (pairs/s) and, when the run evaluated, the evaluation metrics (one line
// per metric, with a legend). Used by `embed-train plot`, scripts/plot-metrics, and by
// the trainer, which writes OUTPUT_DIR/metrics.svg at the end of a run.
//
// Why a folder of its own (lib/report) and not lib/eval: lib/eval computes metrics
// from embeddings; this only draws numbers that were already logged, needs no model and
// no LibTorch, and is the place for any later report of a run.
#pragma once

#include <string>

#include "report/metrics_history.h"

namespace ddp_embed {

// The SVG document for a run's history.
std::string render_metrics_svg(const MetricsHistory& history);

// Where the figure of `metrics_path` goes by default: metrics.svg in the same folder.
std::string default_plot_path(const std::string& metrics_path);

struct PlotSummary {
  std::string output;
  size_t training_steps = 0;
  size_t eval_steps = 0;
};

// Reads `metrics_path` and writes its figure to `svg_path` (default_plot_path() when
// empty), complete or not at all (written under a temporary name, then renamed).
// Throws std::runtime_error naming the file and line of bad input.
PlotSummary plot_metrics_file(const std::string& metrics_path, const std::string& svg_path = "");

}  // namespace ddp_embed
