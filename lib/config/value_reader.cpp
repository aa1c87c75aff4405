#include "config/value_reader.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "config/key_suggest.h"

namespace ddp_embed::config_detail {

std::pair<std::string, std::string> split_path(const std::string& path) {
  const auto dot = path.find('.');
  if (dot == std::string::npos) return {path, ""};
  return {path.substr(0, dot), path.substr(dot + 1)};
}

// "loss.distill.weight" -> {"loss", "distill", "weight"}: a key's place in the JSON.
std::vector<std::string> path_parts(const std::string& path) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot; (dot = path.find('.', start)) != std::string::npos; start = dot + 1)
    parts.push_back(path.substr(start, dot - start));
  parts.push_back(path.substr(start));
  return parts;
}


// Compact text of a bad value for messages, cut short when long.
std::string show(const json& value) {
  // JSON has no infinity: a number beyond a double (1e999) parses to one, which dump()
  // would write as null.
  if (value.is_number_float() && !std::isfinite(value.get<double>()))
    return std::isnan(value.get<double>()) ? "NaN" : value.get<double>() > 0 ? "a number beyond a double (inf)"
                                                                              : "a number beyond a double (-inf)";
  std::string s = value.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

std::string number_text(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  std::ostringstream os;
  os << v;
  return os.str();
}

namespace {

std::string bounds_text(const Rule& r, const std::string& kind) {
  if (r.min && r.max) {
    return std::string("a ") + kind + " in " + (r.min_open ? "(" : "[") + number_text(*r.min) + ", " +
           number_text(*r.max) + (r.max_open ? ")" : "]");
  }
  if (r.min && *r.min == 0) return (r.min_open ? "a positive " : "a non-negative ") + kind;
  if (r.min) return "an " + kind + (r.min_open ? " > " : " >= ") + number_text(*r.min);
  return (kind == "integer" ? "an " : "a ") + kind;
}

}  // namespace

std::string describe_number(const Rule& r, bool integer) {
  return r.shown.empty() ? bounds_text(r, integer ? "integer" : "number") : r.shown;
}

Rule float32(Rule r) {
  r.shown = describe_number(r, false) + (r.min ? " (at most 3.4e+38" : " (from -3.4e+38 to 3.4e+38") +
            ": the step computes with it in float32)";
  r.min = r.min ? std::max(*r.min, -kFloat32Max) : -kFloat32Max;
  r.max = r.max ? std::min(*r.max, kFloat32Max) : kFloat32Max;
  return r;
}

Rule temperature() {
  Rule r;
  r.min = 1 / kFloat32Max;
  r.max = kFloat32Max;
  r.shown = "a positive number of at least 2.9e-39 (the loss scales by 1/temperature in float32, which must hold it)";
  return r;
}

bool within(const Rule& r, double v) {
  if (r.min && (r.min_open ? v <= *r.min : v < *r.min)) return false;
  if (r.max && (r.max_open ? v >= *r.max : v > *r.max)) return false;
  return true;
}


std::string Reader::override_of(const std::string& path) const {
  // A key below it ("loss.distill.weight" of --set loss.distill={...}) or an item of its
  // list ("data.train[0].path", "loss.matryoshka_dims[1]") is the --set's too.
  for (const auto& key : overridden_)
    if (path == key || path.rfind(key + ".", 0) == 0 || path.rfind(key + "[", 0) == 0) return key;
  return "";
}

std::string Reader::where(const std::string& path) const {
  return override_of(path).empty() ? origin_ + ": " + path : "--set " + path;
}

std::string Reader::writer_of_any(const std::vector<std::string>& paths) const {
  for (const auto& path : paths)
    if (const std::string key = override_of(path); !key.empty()) return "--set " + key;
  return origin_;
}

std::string Reader::writer_of(const std::string& path) const {
  const std::string key = override_of(path);
  return key.empty() ? origin_ : "--set " + key;
}

const json* Reader::find(const std::string& path) const {
  const json* at = &root_;
  for (const auto& part : path_parts(path)) {
    if (!at->is_object()) return nullptr;
    const auto v = at->find(part);
    if (v == at->end()) return nullptr;
    at = &*v;
  }
  return at;
}

void Reader::fail(const std::string& path, const std::string& expected, const json& got) {
  errors.push_back(where(path) + ": expected " + expected + ", got " + show(got));
}

void Reader::read(const std::string& path, const json& v, double& field, const Rule& rule) {
  const std::string expected = describe_number(rule, false);
  if (!v.is_number() || !std::isfinite(v.get<double>()) || !within(rule, v.get<double>()))
    return fail(path, expected, v);
  field = v.get<double>();
}

void Reader::read(const std::string& path, const json& v, bool& field, const Rule&) {
  if (!v.is_boolean()) return fail(path, "true or false", v);
  field = v.get<bool>();
}

void Reader::fail_choice(const std::string& path, const std::vector<std::string>& names, const json& got) {
  const std::optional<std::string> typed = got.is_string() ? std::optional(got.get<std::string>()) : std::nullopt;
  errors.push_back(where(path) + ": " + bad_choice_message(names, show(got), typed));
}

void Reader::read(const std::string& path, const json& v, std::string& field, const Rule& rule) {
  if (!v.is_string() || (rule.non_empty && v.get<std::string>().empty()))
    return fail(path, rule.non_empty ? "a non-empty string" : "a string", v);
  field = v.get<std::string>();
}

void Reader::read(const std::string& path, const json& v, ResumeFrom& field, const Rule& rule) {
  std::string text;
  read(path, v, text, rule);
  if (text.empty()) return;  // refused above
  const std::optional<ResumeMode> mode = find_choice<ResumeMode>(text);
  field = mode ? ResumeFrom{*mode, ""} : ResumeFrom{ResumeMode::Path, text};
}

void Reader::read(const std::string& path, const json& v, std::optional<std::string>& field,
          const Rule& rule) {
  if (v.is_null()) {
    field.reset();
  } else if (v.is_string() && !(rule.non_empty && v.get<std::string>().empty())) {
    field = v.get<std::string>();
  } else {
    fail(path, rule.non_empty ? "a non-empty string or null" : "a string or null", v);
  }
}

void Reader::read(const std::string& path, const json& v, EvalSets& field, const Rule&) {
  if (v.is_null()) {
    field = EvalSets{};
    return;
  }
  const bool objects = v.is_array() && std::any_of(v.begin(), v.end(), [](const json& x) { return x.is_object(); });
  if (!objects) {
    std::vector<std::string> paths;
    if (read_paths(path, v, paths)) field = EvalSets{std::move(paths), {}};
    return;
  }
  EvalSets out;
  const size_t errors_before = errors.size();
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    EvalSets::Choice choice;
    std::string name;
    if (v[i].is_string()) {
      std::vector<std::string> one;
      if (read_paths(at, v[i], one)) name = one.front();
    } else if (!v[i].is_object()) {
      fail(at, "an evaluation set: a path, or an object with \"path\"", v[i]);
    } else {
      unknown_keys(at, v[i], {"path", "config", "split", "columns", "first_stage", "top_k"}, "an evaluation set");
      if (!v[i].contains("path")) errors.push_back(where(at) + ": an evaluation set needs \"path\"");
      else read(at + ".path", v[i]["path"], name, non_empty());
      read_dataset_choice(at, v[i], choice.config, choice.split, choice.columns);
      if (v[i].contains("first_stage")) read(at + ".first_stage", v[i]["first_stage"], choice.first_stage, non_empty());
      if (v[i].contains("top_k")) read(at + ".top_k", v[i]["top_k"], choice.top_k, at_least(1));
    }
    out.paths.push_back(name);
    out.choices.push_back(std::move(choice));
  }
  if (errors.size() == errors_before) field = std::move(out);
}

void Reader::unknown_keys(const std::string& at, const json& v, const std::vector<std::string>& keys,
                          const std::string& what) {
  for (const auto& item : v.items()) {
    if (item.key() == kCommentKey || std::find(keys.begin(), keys.end(), item.key()) != keys.end()) continue;
    std::string list;
    for (const auto& k : keys) list += (list.empty() ? "" : ", ") + k;
    const std::string near = nearest_key(item.key(), keys);
    errors.push_back(where(at) + ": unknown key \"" + item.key() + "\"" +
                     (near.empty() ? " (" + what + " has: " + list + ")" : " (did you mean \"" + near + "\"?)"));
  }
}

void Reader::read_dataset_choice(const std::string& at, const json& v, std::string& config, std::string& split,
                                 ColumnChoice& columns) {
  if (v.contains("config")) read(at + ".config", v["config"], config, non_empty());
  if (v.contains("split")) read(at + ".split", v["split"], split, non_empty());
  if (!v.contains("columns")) return;
  const std::string path = at + ".columns";
  const json& c = v["columns"];
  if (!c.is_object()) return fail(path, "an object of roles and column names, e.g. {\"query\": \"question\"}", c);
  unknown_keys(path, c, {"query", "pos", "neg", "score"}, "columns");
  if (c.contains("query")) read(path + ".query", c["query"], columns.query, non_empty());
  if (c.contains("pos")) read(path + ".pos", c["pos"], columns.pos, non_empty());
  if (c.contains("score")) read(path + ".score", c["score"], columns.score, non_empty());
  if (c.contains("neg")) {
    const json& neg = c["neg"];
    const std::string expected = "a column name or a non-empty list of column names";
    if (neg.is_string() && !neg.get<std::string>().empty()) {
      columns.neg = {neg.get<std::string>()};
    } else if (neg.is_array() && !neg.empty() && std::all_of(neg.begin(), neg.end(), [](const json& n) {
                 return n.is_string() && !n.get<std::string>().empty();
               })) {
      columns.neg = neg.get<std::vector<std::string>>();
    } else {
      fail(path + ".neg", expected, neg);
    }
  }
}

bool Reader::read_paths(const std::string& path, const json& v, std::vector<std::string>& out) {
  const std::string expected = "a file name or a non-empty list of file names";
  out.clear();
  if (v.is_string()) {
    out.push_back(v.get<std::string>());
  } else if (v.is_array() && !v.empty()) {
    for (const auto& item : v) {
      if (!item.is_string()) return fail(path, expected, v), false;
      out.push_back(item.get<std::string>());
    }
  } else {
    return fail(path, expected, v), false;
  }
  for (const auto& name : out)
    if (name.empty()) return fail(path, expected, v), false;
  return true;
}

void Reader::read(const std::string& path, const json& v, std::vector<DataSource>& field, const Rule&) {
  const bool objects = v.is_array() && std::any_of(v.begin(), v.end(), [](const json& x) { return x.is_object(); });
  if (!objects) {
    DataSource plain;
    if (read_paths(path, v, plain.paths)) field = {plain};
    return;
  }
  std::vector<DataSource> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string at = path + "[" + std::to_string(i) + "]";
    DataSource source;
    if (!read_source(at, v[i], source)) return;
    out.push_back(std::move(source));
  }
  field = std::move(out);
}

bool Reader::read_source(const std::string& at, const json& v, DataSource& source) {
  const size_t errors_before = errors.size();
  if (v.is_string()) {
    if (!read_paths(at, v, source.paths)) return false;
  } else if (!v.is_object()) {
    return fail(at, "a source: an object with \"path\", or a file name", v), false;
  } else {
    unknown_keys(at, v, {"name", "path", "weight", "query_prompt", "passage_prompt", "negatives_per_query", "config",
                         "split", "columns"},
                 "a source");
    if (!v.contains("path")) {
      errors.push_back(where(at) + ": a source needs \"path\" (its file or dataset folder, or a list of them)");
    } else {
      read_paths(at + ".path", v["path"], source.paths);
    }
    if (v.contains("name")) read(at + ".name", v["name"], source.name, non_empty());
    if (v.contains("weight")) read(at + ".weight", v["weight"], source.weight, positive());
    if (v.contains("query_prompt")) read(at + ".query_prompt", v["query_prompt"], source.query_prompt, any());
    if (v.contains("passage_prompt")) read(at + ".passage_prompt", v["passage_prompt"], source.passage_prompt, any());
    if (v.contains("negatives_per_query") && !v["negatives_per_query"].is_null()) {
      int n = 0;
      read(at + ".negatives_per_query", v["negatives_per_query"], n, non_negative());
      source.negatives_per_query = n;
    }
    read_dataset_choice(at, v, source.config, source.split, source.columns);
  }
  if (errors.size() != errors_before) return false;
  if (!v.is_object() || !v.contains("name")) {
    std::string first = source.paths.front();  // a folder's name without its last '/'
    while (first.size() > 1 && first.back() == '/') first.pop_back();
    source.name = std::filesystem::path(first).stem().string();
  }
  return true;
}

void Reader::read(const std::string& path, const json& v, std::map<std::string, std::string>& field, const Rule&) {
  const std::string expected = "an object of prompt names and their texts, e.g. {\"query\": \"query: \"}";
  if (!v.is_object()) return fail(path, expected, v);
  std::map<std::string, std::string> out;
  for (const auto& item : v.items()) {
    if (item.key().empty() || !item.value().is_string()) return fail(path, expected, v);
    out[item.key()] = item.value().get<std::string>();
  }
  field = std::move(out);
}

}  // namespace ddp_embed::config_detail
