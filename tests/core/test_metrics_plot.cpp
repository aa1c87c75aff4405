// The figure of a run (lib/report): metrics.jsonl read back, the SVG drawn from it.
#include "report/metrics_plot.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "report/svg_chart.h"
#include "svg_check.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

MetricsHistory parse(const std::string& text, const std::string& name = "run/metrics.jsonl") {
  std::istringstream in(text);
  return parse_metrics_history(in, name);
}

// A run of `steps` logged steps with two evaluation metrics at 0, steps/2 and steps.
std::string run_text(int steps) {
  std::string text;
  auto eval_line = [](int step) {
    return "{\"step\":" + std::to_string(step) + ",\"eval/recall@1\":" + std::to_string(0.1 + 0.001 * step) +
           ",\"eval/mrr@10\":" + std::to_string(0.2 + 0.001 * step) + "}\n";
  };
  text += eval_line(0);
  for (int s = 1; s <= steps; ++s) {
    text += "{\"step\":" + std::to_string(s) + ",\"epoch\":0,\"loss\":" + std::to_string(1.0 / s) +
            ",\"lr\":" + std::to_string(1e-4 * s / steps) + ",\"grad_norm\":0.5,\"pairs_per_s\":" +
            std::to_string(300 + s) + ",\"tokens_per_s\":9000,\"step_ms\":100,\"comm_wait_ms\":1.5}\n";
    if (s == steps / 2) text += eval_line(s);
  }
  return text + eval_line(steps);
}

svg_check::Document checked(const std::string& svg) {
  auto doc = svg_check::parse(svg);
  EXPECT_TRUE(doc.ok()) << doc.error;
  return doc;
}

std::vector<std::pair<double, double>> series_points(const svg_check::Document& doc, const std::string& series) {
  const int k = svg_check::polyline(doc, series);
  EXPECT_GE(k, 0) << "no single polyline for " << series;
  if (k < 0) return {};
  return svg_check::points(doc.elements[size_t(k)].attributes.at("points"));
}

// ---- reading metrics.jsonl ---------------------------------------------------------------

TEST(MetricsPlot, HistoryReadsTrainingAndEvaluationSeries) {
  const MetricsHistory h = parse(run_text(10));
  EXPECT_EQ(h.training_steps, 10u);
  EXPECT_EQ(h.eval_steps, 3u);
  ASSERT_NE(h.find("loss"), nullptr);
  EXPECT_EQ(h.find("loss")->values.size(), 10u);
  EXPECT_EQ(h.find("comm_wait_ms")->values.size(), 10u);  // other keys are kept too
  const auto evals = h.eval_series();
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_EQ(evals[0]->key, "eval/recall@1");  // the file's order
  EXPECT_EQ(evals[1]->key, "eval/mrr@10");
  EXPECT_EQ(evals[0]->steps, (std::vector<double>{0, 5, 10}));
}

// An elastic job's membership change is a line with an "event" key: a record, no series.
TEST(MetricsPlot, HistoryHasNoSeriesOfEventLines) {
  const MetricsHistory h = parse(
      "{\"step\":1,\"loss\":1.0}\n"
      "{\"event\":\"membership_change\",\"step\":1,\"round\":1,\"nodes\":2,\"previous_nodes\":3,"
      "\"world_size\":2,\"lost\":[\"node 2, 10.0.0.3\"],\"joined\":[]}\n"
      "{\"step\":2,\"loss\":0.5}\n");
  EXPECT_EQ(h.training_steps, 2u);
  EXPECT_EQ(h.find("nodes"), nullptr);
  EXPECT_EQ(h.find("world_size"), nullptr);
  ASSERT_NE(h.find("loss"), nullptr);
  EXPECT_EQ(h.find("loss")->values, (std::vector<double>{1.0, 0.5}));
}

TEST(MetricsPlot, HistoryKeepsTheLaterLineOfARepeatedStep) {
  // A resumed run appends steps 2 and 3 again.
  const MetricsHistory h = parse(
      "{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":2.0}\n{\"step\":3,\"loss\":3.0}\n"
      "\n"
      "{\"step\":2,\"loss\":20.0}\n{\"step\":3,\"loss\":30.0}\n{\"step\":4,\"loss\":40.0}\n");
  EXPECT_EQ(h.training_steps, 4u);
  EXPECT_EQ(h.find("loss")->steps, (std::vector<double>{1, 2, 3, 4}));
  EXPECT_EQ(h.find("loss")->values, (std::vector<double>{1, 20, 30, 40}));
}

TEST(MetricsPlot, HistoryReadsNullAsNaNAndOtherValuesAsNoSeries) {
  const MetricsHistory h = parse(
      "{\"step\":1,\"loss\":null,\"note\":\"text\",\"flag\":true}\n{\"step\":2,\"loss\":0.5}\n");
  ASSERT_EQ(h.find("loss")->values.size(), 2u);
  EXPECT_TRUE(std::isnan(h.find("loss")->values[0]));
  EXPECT_EQ(h.find("note"), nullptr);
  EXPECT_EQ(h.find("flag"), nullptr);
}

// Several sources: each training line names its source and the steps per source, a
// string and an object; neither is a series, and the figure is drawn as without them.
TEST(MetricsPlot, SourceKeysAreReadOverAndDrawnAround) {
  const std::string text =
      "{\"step\":1,\"loss\":1.0,\"lr\":0.1,\"pairs_per_s\":30,\"source\":\"nli\",\"steps_per_source\":{\"nli\":1,\"qa\":0}}\n"
      "{\"step\":2,\"loss\":0.8,\"lr\":0.1,\"pairs_per_s\":31,\"source\":\"qa\",\"steps_per_source\":{\"nli\":1,\"qa\":1}}\n";
  const MetricsHistory h = parse(text);
  EXPECT_EQ(h.training_steps, 2u);
  EXPECT_EQ(h.find("source"), nullptr);
  EXPECT_EQ(h.find("steps_per_source"), nullptr);
  const auto doc = checked(render_metrics_svg(h));
  EXPECT_EQ(series_points(doc, "loss").size(), 2u);
}

TEST(MetricsPlot, ALineThatIsNotJsonNamesFileAndLine) {
  try {
    parse("{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":0.9}\n{\"step\":3,\"lo", "runs/x/metrics.jsonl");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("runs/x/metrics.jsonl:3: not valid JSON"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse("[1, 2]\n"), std::runtime_error);
  try {
    parse("{\"step\":1,\"loss\":1.0}\n{\"loss\":0.9}\n", "m.jsonl");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("m.jsonl:2: no numeric \"step\""), std::string::npos) << e.what();
  }
}

TEST(MetricsPlot, NoTrainingLinesIsAClearError) {
  for (const std::string& text : {std::string(), std::string("\n\n"), std::string("{\"step\":0,\"eval/recall@1\":0.1}\n")}) {
    try {
      parse(text, "empty/metrics.jsonl");
      FAIL() << "no error for '" << text << "'";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("empty/metrics.jsonl: no training lines"), std::string::npos)
          << e.what();
    }
  }
}

TEST(MetricsPlot, MissingFileIsNamed) {
  try {
    read_metrics_history("/nonexistent/metrics.jsonl");
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/metrics.jsonl"), std::string::npos);
  }
}

// ---- the SVG --------------------------------------------------------------------------------

TEST(MetricsPlot, WellFormedWithOnePolylinePerSeries) {
  const std::string svg = render_metrics_svg(parse(run_text(40)));
  const auto doc = checked(svg);
  ASSERT_FALSE(doc.elements.empty());
  EXPECT_EQ(doc.elements[0].name, "svg");
  EXPECT_EQ(doc.elements[0].attributes.at("xmlns"), "http://www.w3.org/2000/svg");
  EXPECT_EQ(svg.find("<script"), std::string::npos);

  EXPECT_EQ(series_points(doc, "loss").size(), 40u);
  EXPECT_EQ(series_points(doc, "lr").size(), 40u);
  EXPECT_EQ(series_points(doc, "pairs_per_s").size(), 40u);
  EXPECT_EQ(series_points(doc, "eval/recall@1").size(), 3u);
  EXPECT_EQ(series_points(doc, "eval/mrr@10").size(), 3u);
  // Only these: grad_norm, tokens_per_s, comm_wait_ms ... have no panel.
  int polylines = 0;
  for (const auto& e : doc.elements) polylines += e.name == "polyline";
  EXPECT_EQ(polylines, 5);
  // The evaluation panel has a legend entry per metric (without the "eval/" prefix).
  int legend_entries = 0;
  for (const auto& e : doc.elements)
    if (e.name == "text" && (e.text == "recall@1" || e.text == "mrr@10")) ++legend_entries;
  EXPECT_EQ(legend_entries, 2);
  // Axes: labels and tick labels.
  int step_labels = 0;
  for (const auto& e : doc.elements) step_labels += e.name == "text" && e.text == "step";
  EXPECT_EQ(step_labels, 4);
}

TEST(MetricsPlot, EveryPointLiesInsideItsPanelsPlotArea) {
  const auto doc = checked(render_metrics_svg(parse(run_text(25))));
  int checked_polylines = 0;
  for (size_t k = 0; k < doc.elements.size(); ++k) {
    if (doc.elements[k].name != "polyline") continue;
    const int panel = doc.ancestor(int(k), "g");
    ASSERT_GE(panel, 0);
    const svg_check::Element* area = nullptr;
    for (const auto& e : doc.elements)
      if (e.name == "rect" && e.parent == panel && e.attributes.count("class") && e.attributes.at("class") == "plot-area")
        area = &e;
    ASSERT_NE(area, nullptr) << "panel without a plot area";
    const double x = std::stod(area->attributes.at("x")), y = std::stod(area->attributes.at("y"));
    const double w = std::stod(area->attributes.at("width")), h = std::stod(area->attributes.at("height"));
    const auto pts = svg_check::points(doc.elements[k].attributes.at("points"));
    ASSERT_FALSE(pts.empty());
    for (const auto& [px, py] : pts) {
      EXPECT_GE(px, x - 0.05);
      EXPECT_LE(px, x + w + 0.05);
      EXPECT_GE(py, y - 0.05);
      EXPECT_LE(py, y + h + 0.05);
    }
    ++checked_polylines;
  }
  EXPECT_EQ(checked_polylines, 5);
}

TEST(MetricsPlot, NonFiniteValuesAreSkipped) {
  MetricsHistory h = parse(run_text(10));
  for (auto& s : h.series)
    if (s.key == "loss") {
      s.values[2] = kNaN;
      s.values[5] = kInf;
      s.values[7] = -kInf;
    }
  const auto doc = checked(render_metrics_svg(h));
  EXPECT_EQ(series_points(doc, "loss").size(), 7u);
  for (const auto& [x, y] : series_points(doc, "loss")) {
    EXPECT_TRUE(std::isfinite(x));
    EXPECT_TRUE(std::isfinite(y));
  }
  // null in the file (how NaN is written) is skipped the same way.
  const auto from_file = checked(render_metrics_svg(
      parse("{\"step\":1,\"loss\":null}\n{\"step\":2,\"loss\":0.5}\n{\"step\":3,\"loss\":0.4}\n")));
  EXPECT_EQ(series_points(from_file, "loss").size(), 2u);
}

TEST(MetricsPlot, RepeatedStepsAreDrawnOnce) {
  const auto doc = checked(render_metrics_svg(
      parse("{\"step\":1,\"loss\":1.0}\n{\"step\":2,\"loss\":2.0}\n{\"step\":2,\"loss\":0.5}\n{\"step\":3,\"loss\":0.4}\n")));
  const auto pts = series_points(doc, "loss");
  ASSERT_EQ(pts.size(), 3u);
  EXPECT_LT(pts[0].first, pts[1].first);
  EXPECT_LT(pts[1].first, pts[2].first);
}

TEST(MetricsPlot, OneStepAConstantSeriesOrNothingFiniteStillDraws) {
  for (const std::string& text : {std::string("{\"step\":7,\"loss\":0.3,\"lr\":0.0,\"pairs_per_s\":5}\n"),
                                 std::string("{\"step\":1,\"loss\":2}\n{\"step\":2,\"loss\":2}\n"),
                                 std::string("{\"step\":1,\"loss\":null}\n")}) {
    const auto doc = checked(render_metrics_svg(parse(text)));
    for (const auto& e : doc.elements)
      for (const auto& [name, value] : e.attributes) {
        EXPECT_EQ(value.find("nan"), std::string::npos) << text << ": " << name << "=" << value;
        EXPECT_EQ(value.find("inf"), std::string::npos) << text << ": " << name << "=" << value;
      }
  }
}

TEST(MetricsPlot, NoEvaluationPanelWithoutEvaluations) {
  const auto doc = checked(render_metrics_svg(parse("{\"step\":1,\"loss\":1}\n{\"step\":2,\"loss\":0.5}\n")));
  int panels = 0;
  for (const auto& e : doc.elements) panels += e.name == "g" && e.attributes.count("data-panel");
  EXPECT_EQ(panels, 1);  // only the loss: this file has no lr or pairs_per_s either
}

TEST(MetricsPlot, TextIsEscaped) {
  const std::string odd = "runs/a&b <\"c'>/metrics.jsonl";
  const std::string svg = render_metrics_svg(
      parse("{\"step\":1,\"loss\":1,\"eval/x<&>\\\"y\":0.5}\n{\"step\":2,\"loss\":0.5}\n", odd));
  const auto doc = checked(svg);
  EXPECT_GE(svg_check::polyline(doc, "eval/x<&>\"y"), 0);
  bool title_found = false;
  for (const auto& e : doc.elements) title_found |= e.name == "title" && e.text == "Training metrics: " + odd;
  EXPECT_TRUE(title_found);
  EXPECT_EQ(xml_escape("a<b>&\"c'\x01"), "a&lt;b&gt;&amp;&quot;c&apos; ");
}

TEST(MetricsPlot, TheCheckerCatchesBrokenSvg) {
  EXPECT_FALSE(svg_check::parse("<svg><g></svg>").ok());
  EXPECT_FALSE(svg_check::parse("<svg><text x=1>a</text></svg>").ok());
  EXPECT_FALSE(svg_check::parse("<svg><text x=\"1\"y=\"2\">a</text></svg>").ok());
  EXPECT_FALSE(svg_check::parse("<svg><text>a & b</text></svg>").ok());
  EXPECT_FALSE(svg_check::parse("<svg><text x=\"<\">a</text></svg>").ok());
  EXPECT_FALSE(svg_check::parse("<svg/><svg/>").ok());
  EXPECT_TRUE(svg_check::parse("<?xml version=\"1.0\"?>\n<svg a='1'><g><!-- c --><t>&amp;</t></g></svg>\n").ok());
}

TEST(MetricsPlot, WritesBesideTheMetricsFileByDefault) {
  const fs::path dir = fs::temp_directory_path() / ("metrics-plot-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << run_text(6);
  const PlotSummary s = plot_metrics_file((dir / "metrics.jsonl").string());
  EXPECT_EQ(s.output, (dir / "metrics.svg").string());
  EXPECT_EQ(s.training_steps, 6u);
  EXPECT_EQ(s.eval_steps, 3u);
  std::ifstream in(dir / "metrics.svg");
  const std::string svg((std::istreambuf_iterator<char>(in)), {});
  checked(svg);
  EXPECT_EQ(plot_metrics_file((dir / "metrics.jsonl").string(), (dir / "other.svg").string()).output,
            (dir / "other.svg").string());
  EXPECT_TRUE(fs::exists(dir / "other.svg"));
  EXPECT_EQ(default_plot_path("metrics.jsonl"), "metrics.svg");
  fs::remove_all(dir);
}

// ---- axes -------------------------------------------------------------------------------------

TEST(MetricsPlot, NiceTicksCoverTheRangeWithRoundSpacing) {
  EXPECT_EQ(nice_ticks(0, 1000, 5), (std::vector<double>{0, 200, 400, 600, 800, 1000}));
  EXPECT_EQ(nice_ticks(3, 97, 5), (std::vector<double>{0, 20, 40, 60, 80, 100}));
  const auto small = nice_ticks(0.605, 0.683, 5);
  ASSERT_EQ(small.size(), 6u);
  EXPECT_LE(small.front(), 0.605);
  EXPECT_GE(small.back(), 0.683);
  EXPECT_NEAR(small[1] - small[0], 0.02, 1e-12);
  // Whole steps: no 1.5 between 1 and 2.
  EXPECT_EQ(nice_ticks(1, 5, 6, 1), (std::vector<double>{1, 2, 3, 4, 5}));
}

TEST(MetricsPlot, TickLabelsUseTheDigitsTheSpacingNeeds) {
  EXPECT_EQ(format_tick(200, 100), "200");
  EXPECT_EQ(format_tick(0.62, 0.02), "0.62");
  EXPECT_EQ(format_tick(0.5, 0.5), "0.5");
  EXPECT_EQ(format_tick(1e-17, 0.1), "0");
  EXPECT_EQ(format_tick(4e-5, 2e-5), "4e-5");
  EXPECT_EQ(format_tick(1.2e-4, 2e-5), "1.2e-4");
  EXPECT_EQ(format_tick(2.5e7, 5e6), "2.5e7");
}

}  // namespace
}  // namespace ddp_embed
