#include "report/metrics_plot.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <stdexcept>

#include "report/svg_chart.h"
#include "util/atomic_file.h"
#include "util/file_check.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

constexpr double kWidth = 1000, kHeaderHeight = 58, kPanelHeight = 300, kGap = 10;
// Distinguishable colours for the evaluation metrics, in order.
const char* const kPalette[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

ChartSeries chart_series(const MetricSeries& s, const std::string& color) {
  ChartSeries c;
  c.name = s.key;
  c.color = color;
  c.x = s.steps;
  c.y = s.values;
  return c;
}

ChartPanel panel(const std::string& id, const std::string& title, const std::string& y_label) {
  ChartPanel p;
  p.id = id;
  p.title = title;
  p.x_label = "step";
  p.y_label = y_label;
  p.x_tick_spacing_min = 1;  // steps are whole numbers
  return p;
}

// The panels with data in them, in reading order.
std::vector<ChartPanel> build_panels(const MetricsHistory& h) {
  std::vector<ChartPanel> panels;
  if (const auto* s = h.find("loss")) {
    panels.push_back(panel("loss", "Loss", "loss (mean over ranks)"));
    panels.back().series.push_back(chart_series(*s, "#1f77b4"));
  }
  if (const auto* s = h.find("lr")) {
    panels.push_back(panel("lr", "Learning rate", "learning rate"));
    panels.back().y_from_zero = true;
    panels.back().series.push_back(chart_series(*s, "#2ca02c"));
  }
  if (const auto* s = h.find("pairs_per_s")) {
    panels.push_back(panel("throughput", "Throughput", "pairs/s"));
    panels.back().y_from_zero = true;
    panels.back().series.push_back(chart_series(*s, "#ff7f0e"));
  }
  const auto evals = h.eval_series();
  if (!evals.empty()) {
    panels.push_back(panel("eval", "Evaluation", "score"));
    panels.back().legend = true;
    size_t i = 0;
    for (const auto* s : evals) {
      ChartSeries c = chart_series(*s, kPalette[i++ % std::size(kPalette)]);
      c.label = s->key.substr(5);  // without "eval/"
      c.markers = true;
      panels.back().series.push_back(std::move(c));
    }
  }
  return panels;
}

// One x range for every panel: the steps that have a finite value to draw.
void share_x_range(std::vector<ChartPanel>& panels) {
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& p : panels)
    for (const auto& s : p.series)
      for (size_t i = 0; i < s.x.size(); ++i)
        if (std::isfinite(s.y[i])) {
          lo = std::min(lo, s.x[i]);
          hi = std::max(hi, s.x[i]);
        }
  if (lo > hi) lo = hi = 0;  // nothing finite anywhere: empty panels
  if (lo == hi) hi = lo + 1;
  for (auto& p : panels) {
    p.x_min = lo;
    p.x_max = hi;
  }
}

std::string describe(const MetricsHistory& h) {
  double last_step = 0;
  if (const auto* s = h.find("loss"); s && !s->steps.empty()) last_step = s->steps.back();
  return h.source + " | " + std::to_string(h.training_steps) + " training lines up to step " +
         std::to_string(static_cast<long long>(last_step)) + ", " + std::to_string(h.eval_steps) + " evaluations";
}

}  // namespace

std::string render_metrics_svg(const MetricsHistory& history) {
  std::vector<ChartPanel> panels = build_panels(history);
  share_x_range(panels);
  const double column_width = (kWidth - 3 * kGap) / 2;
  const size_t rows = (panels.size() + 1) / 2;
  const double height = kHeaderHeight + double(rows) * (kPanelHeight + kGap);

  std::string svg = svg_document_start(kWidth, height, "Training metrics: " + history.source);
  svg += svg_text(kGap + 6, 24, "Training metrics", "font-size=\"17\" font-weight=\"bold\"");
  svg += svg_text(kGap + 6, 44, describe(history), "fill=\"#555555\"");
  for (size_t i = 0; i < panels.size(); ++i) {
    panels[i].box = {kGap + double(i % 2) * (column_width + kGap),
                     kHeaderHeight + double(i / 2) * (kPanelHeight + kGap), column_width, kPanelHeight};
    append_chart_panel(svg, panels[i]);
  }
  return svg + svg_document_end();
}

std::string default_plot_path(const std::string& metrics_path) {
  return (fs::path(metrics_path).parent_path() / "metrics.svg").string();
}

PlotSummary plot_metrics_file(const std::string& metrics_path, const std::string& svg_path) {
  if (!svg_path.empty() && same_file(svg_path, metrics_path))
    throw std::invalid_argument("--output " + svg_path + " is the --metrics file (" + metrics_path +
                                "): the figure would overwrite the run's metrics; name another file (or none: "
                                "metrics.svg beside it)");
  const MetricsHistory history = read_metrics_history(metrics_path);
  PlotSummary summary{svg_path.empty() ? default_plot_path(metrics_path) : svg_path, history.training_steps,
                      history.eval_steps};
  const std::string svg = render_metrics_svg(history);
  write_file_atomically(summary.output, svg);
  return summary;
}

}  // namespace ddp_embed
