#include "report/metrics_history.h"

#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "util/file_check.h"

namespace ddp_embed {
namespace {

bool is_eval_key(const std::string& key) { return key.rfind("eval/", 0) == 0; }

// Keys as they are read: per key, step → value; a later line overwrites.
struct Collected {
  std::vector<std::string> key_order;
  std::map<std::string, std::map<double, double>> values;
  std::set<double> training_steps, eval_steps;

  void add(const std::string& key, double step, double value) {
    auto [it, fresh] = values.try_emplace(key);
    if (fresh) key_order.push_back(key);
    it->second[step] = value;
  }
};

std::runtime_error line_error(const std::string& name, size_t number, const std::string& what) {
  return std::runtime_error(name + ":" + std::to_string(number) + ": " + what);
}

void collect_line(const std::string& line, const std::string& name, size_t number, Collected& out) {
  nlohmann::ordered_json j;  // keeps the keys in the line's order
  try {
    j = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::ordered_json::exception&) {
    throw line_error(name, number, "not valid JSON");
  }
  if (!j.is_object()) throw line_error(name, number, "expected a JSON object");
  const auto step_it = j.find("step");
  if (step_it == j.end() || !step_it->is_number()) throw line_error(name, number, "no numeric \"step\"");
  const double step = step_it->get<double>();
  if (j.contains("event")) return;  // a record of what happened at a step (a membership change), not a series
  for (const auto& [key, value] : j.items()) {
    if (key == "step") continue;
    if (value.is_number()) out.add(key, step, value.get<double>());
    else if (value.is_null()) out.add(key, step, std::numeric_limits<double>::quiet_NaN());
    else continue;
    if (key == "loss") out.training_steps.insert(step);
    if (is_eval_key(key)) out.eval_steps.insert(step);
  }
}

}  // namespace

const MetricSeries* MetricsHistory::find(const std::string& key) const {
  for (const auto& s : series)
    if (s.key == key) return &s;
  return nullptr;
}

std::vector<const MetricSeries*> MetricsHistory::eval_series() const {
  std::vector<const MetricSeries*> out;
  for (const auto& s : series)
    if (is_eval_key(s.key)) out.push_back(&s);
  return out;
}

MetricsHistory parse_metrics_history(std::istream& in, const std::string& name) {
  Collected collected;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    collect_line(line, name, number, collected);
  }
  if (collected.training_steps.empty())
    throw std::runtime_error(name + ": no training lines (JSON objects with \"step\" and \"loss\"); "
                             "expected the metrics.jsonl of an embed-train run");

  MetricsHistory history;
  history.source = name;
  history.training_steps = collected.training_steps.size();
  history.eval_steps = collected.eval_steps.size();
  for (const auto& key : collected.key_order) {
    MetricSeries s{key, {}, {}};
    for (const auto& [step, value] : collected.values.at(key)) {
      s.steps.push_back(step);
      s.values.push_back(value);
    }
    history.series.push_back(std::move(s));
  }
  return history;
}

MetricsHistory read_metrics_history(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a metrics file (metrics.jsonl)"); !folder.empty())
    throw std::runtime_error(folder);
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot open the metrics file");
  return parse_metrics_history(in, path);
}

}  // namespace ddp_embed
