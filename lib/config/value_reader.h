// The config's values, read from JSON one key at a time (config.cpp's field table drives
// it): what each key's value must be (a Rule), and the reader that checks it and says
// what is wrong, where. Private to lib/config.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/config_error.h"
#include "config/data_config.h"    // DataSource, EvalSets
#include "config/output_config.h"  // ResumeFrom

namespace ddp_embed::config_detail {

using nlohmann::json;

// Keys with this name are notes for humans, accepted anywhere and ignored.
constexpr const char* kCommentKey = "_comment";

// What a value must be, beyond its JSON type: numbers, their bounds. (A closed choice is
// an enum field, checked against its table: config/choices.h.)
struct Rule {
  std::optional<double> min, max;
  bool min_open = false, max_open = false;
  bool non_empty = false;
  std::optional<int64_t> largest;  // integers: below their type's limit (said as "of at most")
  std::string shown;                // what messages say it asks, when not the bounds as they are
};

// The largest finite float32: hyper-parameters the step computes with in float32 (a
// learning rate, a loss weight) must fit it, or the step overflows to inf.
constexpr double kFloat32Max = 3.4028234663852886e38;

inline Rule any() { return {}; }
inline Rule positive() { Rule r; r.min = 0; r.min_open = true; return r; }
// A model's sizes: 32-bit, as in a Hugging Face config.json.
inline Rule positive_size() { Rule r = positive(); r.largest = std::numeric_limits<int32_t>::max(); return r; }
inline Rule non_negative() { Rule r; r.min = 0; return r; }
inline Rule at_least(double v) { Rule r; r.min = v; return r; }
inline Rule fraction() { Rule r; r.min = 0; r.max = 1; r.max_open = true; return r; }
inline Rule non_empty() { Rule r; r.non_empty = true; return r; }
// `r`, its values also within float32's range ("a positive number (at most 3.4e+38: the
// step computes with it in float32)").
Rule float32(Rule r);
// A temperature t: the loss scales the cosines (at most 1 in size) by 1/t in float32, so
// 1/t must fit a float32, and t itself.
Rule temperature();
// "train.lr" -> {"train", "lr"}; "loss.distill.weight" -> {"loss", "distill.weight"}.
std::pair<std::string, std::string> split_path(const std::string& path);
// "loss.distill.weight" -> {"loss", "distill", "weight"}: a key's place in the JSON.
std::vector<std::string> path_parts(const std::string& path);

// Compact text of a bad value for messages, cut short when long.
std::string show(const json& value);
// A number as messages write it: "2", "-2.5", "1e-05".
std::string number_text(double v);
// "a positive integer", "a number in [0, 1)": what a rule asks of a number.
std::string describe_number(const Rule& r, bool integer);
bool within(const Rule& r, double v);
// An optional choice's word for no value (model.pooling "auto": as the init folder says),
// and the spellings such a key takes: that word, then its table's.
constexpr const char* kAutoChoice = "auto";
template <class E>
std::vector<std::string> auto_or_choice_names() {
  std::vector<std::string> names = choice_names<E>();
  names.insert(names.begin(), kAutoChoice);
  return names;
}

// Reads typed config values out of the JSON, collecting an error per bad value (naming
// where it came from: the file or a --set) instead of stopping at the first.
class Reader {
 public:
  // The keys given by --set, so that errors name them instead of the file.
  Reader(const json& root, std::string origin, std::set<std::string> overridden)
      : root_(root), origin_(std::move(origin)), overridden_(std::move(overridden)) {}

  std::vector<std::string> errors;

  // The value at `path` ("loss.distill.weight"), into `field`, if the JSON has one.
  template <class T>
  void operator()(const std::string& path, T& field, const Rule& rule) {
    const json* value = find(path);
    if (value) read(path, *value, field, rule);
  }

  // Who gave the value at `path`: the --set that covers it, or "" for the file.
  std::string override_of(const std::string& path) const;
  // "cfg.json: train.lr" or "--set train.lr": where a bad value came from.
  std::string where(const std::string& path) const;
  // Who gave the values of a rule that ties keys together: "--set KEY" when a --set gave
  // any of them (the first such), else the file.
  std::string writer_of_any(const std::vector<std::string>& paths) const;
  // "cfg.json" or "--set train": who wrote an unknown key.
  std::string writer_of(const std::string& path) const;
  // Whether the file or a --set gives `path` a value (a default follows from another key
  // only where none is given).
  bool given(const std::string& path) const { return find(path) != nullptr; }

 private:
  const json* find(const std::string& path) const;
  void fail(const std::string& path, const std::string& expected, const json& got);
  // A value outside a closed choice's `names`, with the nearest spelling when one is close.
  void fail_choice(const std::string& path, const std::vector<std::string>& names, const json& got);

  // Integers: JSON integers, or floats with an integral value (1e3 from --set).
  template <class T>
  std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>> read(
      const std::string& path, const json& v, T& field, const Rule& rule) {
    const std::string expected = describe_number(rule, true);
    double as_double = 0;
    if (v.is_number_integer() || v.is_number_unsigned()) {
      as_double = v.get<double>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               v.get<double>() == std::floor(v.get<double>())) {
      as_double = v.get<double>();
    } else {
      return fail(path, expected, v);
    }
    if (!within(rule, as_double)) return fail(path, expected, v);
    // Range of T (or the rule's largest), compared exactly (a double cannot hold 2^64 - 1).
    const uint64_t largest = rule.largest ? static_cast<uint64_t>(*rule.largest)
                                          : static_cast<uint64_t>(std::numeric_limits<T>::max());
    bool fits;
    if (v.is_number_unsigned()) {
      fits = v.get<uint64_t>() <= largest;
    } else if (v.is_number_integer()) {
      const int64_t i = v.get<int64_t>();
      fits = i < 0 ? std::is_signed_v<T> && i >= static_cast<int64_t>(std::numeric_limits<T>::min())
                   : static_cast<uint64_t>(i) <= largest;
    } else {
      const long double x = as_double;
      fits = x >= static_cast<long double>(std::numeric_limits<T>::min()) &&
             x < static_cast<long double>(largest) + 1.0L;
    }
    if (!fits) return fail(path, expected + " of at most " + std::to_string(largest), v);
    if (v.is_number_unsigned()) field = static_cast<T>(v.get<uint64_t>());
    else if (v.is_number_integer()) field = static_cast<T>(v.get<int64_t>());
    else field = static_cast<T>(as_double);
  }

  // A list of choices (output.report_to), each one of E's spellings ([] = none); a
  // single spelling is a list of one.
  template <class E>
  std::enable_if_t<is_choice_v<E>> read(const std::string& path, const json& v, std::vector<E>& field,
                                        const Rule& rule) {
    const json list = v.is_string() ? json::array({v}) : v;
    std::vector<E> out;
    if (!list.is_array()) return fail_choice(path, choice_names<E>(), v);
    for (size_t i = 0; i < list.size(); ++i) {
      const json& item = list[i];
      const auto value = item.is_string() ? find_choice<E>(item.get<std::string>()) : std::nullopt;
      // The item named, so that a slip of the keyboard gets its "did you mean".
      if (!value) return fail_choice(v.is_array() ? path + "[" + std::to_string(i) + "]" : path, choice_names<E>(), item);
      out.push_back(*value);
    }
    field = std::move(out);
    (void)rule;
  }

  // A list of numbers, each satisfying `rule` ([] = none).
  template <class T>
  std::enable_if_t<!is_choice_v<T>> read(const std::string& path, const json& v, std::vector<T>& field,
                                         const Rule& rule) {
    if (!v.is_array()) return fail(path, "a list of " + describe_number(rule, std::is_integral_v<T>) + "s", v);
    std::vector<T> out(v.size());
    const size_t errors_before = errors.size();
    for (size_t i = 0; i < v.size(); ++i) read(path + "[" + std::to_string(i) + "]", v[i], out[i], rule);
    if (errors.size() == errors_before) field = std::move(out);
  }

  // null or "auto" (no value: as the init folder says), or an integer satisfying `rule`:
  // model.sparse.max_active_dims.
  void read(const std::string& path, const json& v, std::optional<int64_t>& field, const Rule& rule) {
    if (v.is_null() || (v.is_string() && v.get<std::string>() == kAutoChoice)) {
      field.reset();
      return;
    }
    const size_t errors_before = errors.size();
    int64_t value = 0;
    read(path, v, value, rule);
    if (errors.size() == errors_before) field = value;
  }
  void read(const std::string& path, const json& v, double& field, const Rule& rule);
  void read(const std::string& path, const json& v, bool& field, const Rule& rule);
  void read(const std::string& path, const json& v, std::string& field, const Rule& rule);
  // A closed choice: one of its table's spellings (config/choices.h).
  template <class E>
  std::enable_if_t<is_choice_v<E>> read(const std::string& path, const json& v, E& field, const Rule&) {
    if (const auto value = v.is_string() ? find_choice<E>(v.get<std::string>()) : std::nullopt) {
      field = *value;
    } else {
      fail_choice(path, choice_names<E>(), v);
    }
  }
  // "auto" (no value) or a closed choice: model.pooling.
  template <class E>
  std::enable_if_t<is_choice_v<E>> read(const std::string& path, const json& v, std::optional<E>& field,
                                        const Rule&) {
    if (v.is_string() && v.get<std::string>() == kAutoChoice) {
      field.reset();
    } else if (const auto value = v.is_string() ? find_choice<E>(v.get<std::string>()) : std::nullopt) {
      field = *value;
    } else {
      fail_choice(path, auto_or_choice_names<E>(), v);
    }
  }
  // output.resume: "auto", "never", or any other non-empty text, a checkpoint path.
  void read(const std::string& path, const json& v, ResumeFrom& field, const Rule& rule);
  void read(const std::string& path, const json& v, std::optional<std::string>& field, const Rule& rule);
  // null (none), a path, or a non-empty list of paths and objects {"path", "config",
  // "split", "columns"}.
  void read(const std::string& path, const json& v, EvalSets& field, const Rule& rule);
  // model.prompts: {"name": "text", ...}.
  void read(const std::string& path, const json& v, std::map<std::string, std::string>& field, const Rule& rule);
  // data.train: a path or a list of paths (one source, "train"), or a list of sources,
  // each an object {"path", "name", "weight", "query_prompt", "passage_prompt",
  // "negatives_per_query", "config", "split", "columns"} or a path (a source of its own).
  void read(const std::string& path, const json& v, std::vector<DataSource>& field, const Rule& rule);
  bool read_source(const std::string& at, const json& v, DataSource& source);
  // "config", "split" and "columns" ({"query", "pos", "neg": a name or a list, "score"})
  // of the object `v` at `at`, where given.
  void read_dataset_choice(const std::string& at, const json& v, std::string& config, std::string& split,
                           ColumnChoice& columns);
  // An error for each key of the object `v` not in `keys` ("did you mean", else the list).
  void unknown_keys(const std::string& at, const json& v, const std::vector<std::string>& keys, const std::string& what);
  // A file name or a non-empty list of file names.
  bool read_paths(const std::string& path, const json& v, std::vector<std::string>& out);

  const json& root_;
  std::string origin_;
  std::set<std::string> overridden_;
};

}  // namespace ddp_embed::config_detail
