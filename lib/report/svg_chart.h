// Line charts as SVG text: axes with "nice" ticks, grid, labels, one polyline per
// series, a legend. Knows nothing of training; report/metrics_plot.h lays out the
// panels of a run's figure with it.
//
// The SVG is self-contained (no scripts, no external fonts or styles), so any browser
// or image viewer shows it. Every text is XML-escaped. Series values that are NaN or
// infinite are left out; each series is one <polyline> with one point per finite value,
// marked data-series="NAME" so that scripts and tests can find it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {

// Text safe inside an XML element or a quoted attribute: & < > " ' escaped; control
// characters other than tab and newline (not allowed in XML 1.0) become spaces.
std::string xml_escape(std::string_view text);

// Evenly spaced round values (1, 2 or 5 times a power of ten apart, at least
// `min_spacing`) covering about `target` intervals of [lo, hi]: the first tick <= lo,
// the last >= hi. Needs lo < hi.
std::vector<double> nice_ticks(double lo, double hi, int target, double min_spacing = 0);

// A tick's label: as many decimals as the spacing of the ticks needs; exponent notation
// for very small or very large values ("5e-5", "2.5e+7").
std::string format_tick(double value, double spacing);

struct ChartSeries {
  std::string name;    // data-series attribute, tooltip and legend
  std::string label;   // legend text (defaults to name)
  std::string color;   // any SVG colour
  std::vector<double> x, y;
  bool markers = false;  // a dot at each point (sparse series, e.g. evaluations)
};

struct Rect {
  double x = 0, y = 0, width = 0, height = 0;
};

struct ChartPanel {
  std::string id;       // data-panel attribute
  std::string title;    // above the plot
  std::string x_label;
  std::string y_label;
  Rect box;             // the whole panel, labels included
  double x_min = 0, x_max = 1;  // the x range (shared between panels of one figure)
  double x_tick_spacing_min = 0;  // e.g. 1 when x counts whole things (steps)
  bool y_from_zero = false;     // the y axis starts at 0 (rates, learning rates)
  bool legend = false;          // a legend at the right of the plot area
  std::vector<ChartSeries> series;
};

// The plot area (axes box) of a panel: the panel less room for title, labels, legend.
Rect plot_area(const ChartPanel& panel);

// Appends the panel as one <g class="panel" data-panel="ID"> element.
void append_chart_panel(std::string& svg, const ChartPanel& panel);

// The document around the panels: <?xml?> + <svg> root with a white background.
std::string svg_document_start(double width, double height, const std::string& title);
std::string svg_document_end();

// "<text ...>escaped</text>" at (x, y); `attributes` is inserted as is (already valid).
std::string svg_text(double x, double y, std::string_view text, std::string_view attributes = "");

}  // namespace ddp_embed
