// A training run's metrics.jsonl (docs/formats.md, "metrics.jsonl"), read back as one
// series per key.
//
// Each line is a JSON object with a numeric "step"; training lines carry "loss", "lr",
// "pairs_per_s", ..., evaluation lines "eval/<metric>" keys; lines with an "event" key
// (an elastic job's membership changes) record what happened and are no series. A
// resumed run appends the steps since its checkpoint again: for a key logged twice at
// one step, the later line wins. Values that are not numbers are not series (nlohmann::json writes NaN and inf
// as null: a null is kept as NaN, so that a later null still replaces an earlier value).
#pragma once

#include <istream>
#include <string>
#include <vector>

namespace ddp_embed {

// One key's values in step order, one per step.
struct MetricSeries {
  std::string key;
  std::vector<double> steps;
  std::vector<double> values;  // may hold NaN and inf
};

struct MetricsHistory {
  std::string source;                // the file, for titles and messages
  std::vector<MetricSeries> series;  // in the order the keys first appear
  size_t training_steps = 0;         // distinct steps with a "loss"
  size_t eval_steps = 0;             // distinct steps with an "eval/..." key

  // The series of `key`, or nullptr.
  const MetricSeries* find(const std::string& key) const;
  // The "eval/..." series, in the order they first appear.
  std::vector<const MetricSeries*> eval_series() const;
};

// Reads a metrics file. Throws std::runtime_error naming the file (and line) for a line
// that is not a JSON object with a numeric "step", and for a file without training
// lines. Blank lines are skipped.
MetricsHistory read_metrics_history(const std::string& path);
MetricsHistory parse_metrics_history(std::istream& in, const std::string& name);

}  // namespace ddp_embed
