#include "report/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace ddp_embed {

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        out += (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n') ? ' ' : c;
    }
  }
  return out;
}

// ---- ticks ------------------------------------------------------------------------------

namespace {

// The round spacing (1, 2 or 5 × 10^k) nearest above (hi - lo) / target.
double nice_spacing(double lo, double hi, int target) {
  const double raw = (hi - lo) / std::max(1, target);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double n = raw / magnitude;
  const double multiple = n < 1.5 ? 1 : n < 3 ? 2 : n < 7 ? 5 : 10;
  return multiple * magnitude;
}

// Exponent notation without padding: "5e-05" → "5e-5", "2.5e+07" → "2.5e7".
std::string tidy_exponent(std::string s) {
  const auto e = s.find('e');
  if (e == std::string::npos) return s;
  std::string mantissa = s.substr(0, e), exponent = s.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '-' || exponent[0] == '+')) exponent.erase(0, 1);
  exponent.erase(0, std::min(exponent.find_first_not_of('0'), exponent.size() - 1));
  return mantissa + "e" + (negative ? "-" : "") + exponent;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int target, double min_spacing) {
  const double spacing = std::max(nice_spacing(lo, hi, target), min_spacing);
  if (!std::isfinite(spacing) || spacing <= 0) return {lo, hi};  // a range beyond double's reach
  const double first = std::floor(lo / spacing + 1e-9);
  const double last = std::ceil(hi / spacing - 1e-9);
  std::vector<double> ticks;
  for (double i = first; i <= last && ticks.size() < 1000; i += 1) {
    const double v = i * spacing;
    ticks.push_back(std::fabs(v) < spacing * 1e-9 ? 0.0 : v);  // no "-0", no 1e-17
  }
  return ticks;
}

std::string format_tick(double value, double spacing) {
  if (std::fabs(value) < std::fabs(spacing) * 1e-6) return "0";
  const int decimals = std::max(0, int(std::ceil(-std::log10(spacing) - 1e-9)));
  if (decimals <= 4 && std::fabs(value) < 1e6) return fixed(value, decimals);
  const int digits = std::max(1, int(std::floor(std::log10(std::fabs(value))) - std::floor(std::log10(spacing))) + 1);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*e", std::min(digits - 1, 6), value);
  return tidy_exponent(buf);
}

// ---- drawing ----------------------------------------------------------------------------

namespace {

constexpr double kTitleHeight = 24, kLeftMargin = 66, kRightMargin = 14, kLegendWidth = 126;
constexpr double kBottomMargin = 40, kTickLength = 4;
constexpr const char* kAxisColor = "#444444";
constexpr const char* kGridColor = "#e4e4e4";

std::string num(double v) { return fixed(v, 1); }

// A linear map from data to pixels.
struct Scale {
  double d0, d1, p0, p1;
  double operator()(double v) const { return p0 + (v - d0) / (d1 - d0) * (p1 - p0); }
};

// The y range of a panel's finite values, widened where it would be empty.
bool finite_y_range(const ChartPanel& panel, double& lo, double& hi) {
  lo = std::numeric_limits<double>::infinity();
  hi = -lo;
  for (const auto& s : panel.series)
    for (size_t i = 0; i < s.y.size() && i < s.x.size(); ++i)
      if (std::isfinite(s.y[i]) && std::isfinite(s.x[i])) {
        lo = std::min(lo, s.y[i]);
        hi = std::max(hi, s.y[i]);
      }
  if (lo > hi) return false;
  if (panel.y_from_zero) {
    lo = std::min(lo, 0.0);
    hi = std::max(hi, 0.0);
  }
  if (lo == hi) {  // one value, or a constant series
    const double pad = lo == 0 ? 1.0 : std::fabs(lo) * 0.1;
    hi += pad;
    lo = (panel.y_from_zero && lo == 0) ? 0.0 : lo - pad;
  }
  // A little room, so that no line runs along the frame (a constant learning rate), but
  // not across zero (scores that cannot be negative get no negative ticks).
  const double room = (hi - lo) * 0.04;
  lo = (lo >= 0 && lo - room < 0) ? 0.0 : lo - room;
  hi = (hi <= 0 && hi + room > 0) ? 0.0 : hi + room;
  return true;
}

std::string line(double x1, double y1, double x2, double y2, const char* color) {
  return "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" + num(y2) +
         "\" stroke=\"" + color + "\"/>\n";
}

void append_x_axis(std::string& svg, const Rect& area, const Scale& x, const std::vector<double>& ticks,
                   const std::string& label) {
  const double spacing = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  const double bottom = area.y + area.height;
  for (double t : ticks) {
    const double px = x(t);
    svg += line(px, area.y, px, bottom, kGridColor);
    svg += line(px, bottom, px, bottom + kTickLength, kAxisColor);
    svg += svg_text(px, bottom + 16, format_tick(t, spacing), "text-anchor=\"middle\"");
  }
  svg += svg_text(area.x + area.width / 2, bottom + 32, label, "text-anchor=\"middle\"");
}

void append_y_axis(std::string& svg, const Rect& area, const Scale& y, const std::vector<double>& ticks,
                   const std::string& label) {
  const double spacing = ticks.size() > 1 ? ticks[1] - ticks[0] : 1;
  for (double t : ticks) {
    const double py = y(t);
    svg += line(area.x, py, area.x + area.width, py, kGridColor);
    svg += line(area.x - kTickLength, py, area.x, py, kAxisColor);
    svg += svg_text(area.x - kTickLength - 3, py + 4, format_tick(t, spacing), "text-anchor=\"end\"");
  }
  const double lx = area.x - kLeftMargin + 14, ly = area.y + area.height / 2;
  svg += svg_text(lx, ly, label, "text-anchor=\"middle\" transform=\"rotate(-90 " + num(lx) + " " + num(ly) + ")\"");
}

// One polyline with a point per finite value (and dots when asked).
void append_series(std::string& svg, const ChartSeries& s, const Scale& x, const Scale& y) {
  std::string points, dots;
  for (size_t i = 0; i < s.x.size() && i < s.y.size(); ++i) {
    if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i])) continue;
    const std::string px = num(x(s.x[i])), py = num(y(s.y[i]));
    if (!points.empty()) points += ' ';
    points += px + "," + py;
    if (s.markers)
      dots += "<circle cx=\"" + px + "\" cy=\"" + py + "\" r=\"2.5\" fill=\"" + xml_escape(s.color) + "\"/>\n";
  }
  svg += "<polyline class=\"series\" data-series=\"" + xml_escape(s.name) + "\" fill=\"none\" stroke=\"" +
         xml_escape(s.color) + "\" stroke-width=\"1.5\" stroke-linejoin=\"round\" points=\"" + points +
         "\"><title>" + xml_escape(s.name) + "</title></polyline>\n";
  svg += dots;
}

// At most `max_bytes` bytes, never cutting a UTF-8 sequence.
std::string shortened(const std::string& text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t cut = max_bytes - 3;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut) + "...";
}

void append_legend(std::string& svg, const Rect& area, const std::vector<ChartSeries>& series) {
  double y = area.y + 8;
  const double x = area.x + area.width + 12;
  for (const auto& s : series) {
    svg += "<line x1=\"" + num(x) + "\" y1=\"" + num(y) + "\" x2=\"" + num(x + 16) + "\" y2=\"" + num(y) +
           "\" stroke=\"" + xml_escape(s.color) + "\" stroke-width=\"2\"/>\n";
    svg += svg_text(x + 21, y + 4, shortened(s.label.empty() ? s.name : s.label, 16));
    y += 17;
  }
}

}  // namespace

Rect plot_area(const ChartPanel& p) {
  const double right = p.legend ? kLegendWidth : kRightMargin;
  return {p.box.x + kLeftMargin, p.box.y + kTitleHeight, p.box.width - kLeftMargin - right,
          p.box.height - kTitleHeight - kBottomMargin};
}

void append_chart_panel(std::string& svg, const ChartPanel& panel) {
  const Rect area = plot_area(panel);
  svg += "<g class=\"panel\" data-panel=\"" + xml_escape(panel.id) + "\">\n";
  svg += svg_text(area.x, panel.box.y + 16, panel.title, "font-size=\"14\" font-weight=\"bold\"");

  const std::vector<double> xt = nice_ticks(panel.x_min, panel.x_max, 6, panel.x_tick_spacing_min);
  const Scale x{xt.front(), xt.back(), area.x, area.x + area.width};
  append_x_axis(svg, area, x, xt, panel.x_label);

  double lo, hi;
  const bool has_data = finite_y_range(panel, lo, hi);
  if (has_data) {
    const std::vector<double> yt = nice_ticks(lo, hi, 5);
    const Scale y{yt.front(), yt.back(), area.y + area.height, area.y};
    append_y_axis(svg, area, y, yt, panel.y_label);
    for (const auto& s : panel.series) append_series(svg, s, x, y);
  } else {
    svg += svg_text(area.x + area.width / 2, area.y + area.height / 2, "no finite values",
                    "text-anchor=\"middle\" fill=\"#888888\"");
  }
  svg += "<rect class=\"plot-area\" x=\"" + num(area.x) + "\" y=\"" + num(area.y) + "\" width=\"" +
         num(area.width) + "\" height=\"" + num(area.height) + "\" fill=\"none\" stroke=\"" + kAxisColor + "\"/>\n";
  if (panel.legend) append_legend(svg, area, panel.series);
  svg += "</g>\n";
}

std::string svg_document_start(double width, double height, const std::string& title) {
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
         "\" viewBox=\"0 0 " + num(width) + " " + num(height) +
         "\" font-family=\"Helvetica, Arial, sans-serif\" font-size=\"12\" fill=\"#222222\">\n"
         "<title>" + xml_escape(title) + "</title>\n"
         "<rect x=\"0\" y=\"0\" width=\"" + num(width) + "\" height=\"" + num(height) + "\" fill=\"white\"/>\n";
}

std::string svg_document_end() { return "</svg>\n"; }

std::string svg_text(double x, double y, std::string_view text, std::string_view attributes) {
  std::string out = "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\"";
  if (!attributes.empty()) out += " " + std::string(attributes);
  return out + ">" + xml_escape(text) + "</text>\n";
}

}  // namespace ddp_embed
