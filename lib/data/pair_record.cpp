#include "data/pair_record.h"

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "util/json_input.h"
#include "util/text.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace {

using nlohmann::json;

constexpr const char* kFormats = "(expected query/pos, query/doc, anchor/positive or text1/text2)";
constexpr size_t kMaxMessage = 240;
// A record is an object of strings and lists of strings: 2 levels. A deeper line is
// refused before parsing, as a megabyte of "[[[[" would become a million JSON values.
constexpr int kMaxNesting = 16;

// The three accepted layouts: which key holds the query, the positive(s), the negatives.
struct Layout {
  const char* query;
  const char* pos;
  const char* neg;  // nullptr: no negatives in this layout
};
constexpr Layout kLayouts[] = {
    {"query", "pos", "neg"},
    {"anchor", "positive", "negative"},
    {"text1", "text2", nullptr},
};

bool blank(const std::string& text) {
  return text.find_first_not_of(" \t\r\n") == std::string::npos;
}

// Error texts may quote the line; keep them short and valid UTF-8 (they end up in logs
// and JSON).
std::string tidy(std::string message) {
  if (message.size() > kMaxMessage) {
    message.resize(kMaxMessage);
    message += "...";
  }
  return utf8::replace_ill_formed(message.data(), message.data() + message.size());
}

// "invalid JSON at byte N: <nlohmann's reason>", for a line that did not parse.
std::string describe_json_error(std::string_view line) {
  const JsonTextError error = find_json_error(line);
  return tidy("invalid JSON at byte " + std::to_string(error.byte) + ": " + error.reason);
}

// A score must fit a float: a JSON number beyond its range (1e39) would not convert.
std::string read_score(const json& value, float& out) {
  if (!value.is_number()) return std::string("\"score\" must be a number, got ") + value.type_name();
  const double score = value.get<double>();
  if (std::fabs(score) > std::numeric_limits<float>::max())
    return "\"score\" " + value.dump() + " is out of range for a float";
  out = static_cast<float>(score);
  return "";
}

// A list of `count` scores under `key`, appended to `out`; "" or what is wrong.
std::string read_scores(const json& value, const char* key, size_t count, const char* of, std::vector<float>& out) {
  const std::string name = json_quoted(key);
  if (!value.is_array()) return name + " must be a list of numbers, got " + value.type_name();
  if (value.size() != count)
    return name + " has " + std::to_string(value.size()) + " scores for " + std::to_string(count) + " " + of;
  for (size_t i = 0; i < value.size(); ++i) {
    float score = 0;
    const std::string error = read_score(value[i], score);  // "\"score\" must be ..."
    if (!error.empty()) return name + "[" + std::to_string(i) + "]" + error.substr(std::strlen("\"score\""));
    out.push_back(score);
  }
  return "";
}

// A non-empty string, into `out`; "" or what is wrong.
std::string read_text(const json& value, const std::string& name, std::string& out) {
  if (!value.is_string()) return name + " must be a string, got " + value.type_name();
  out = value.get<std::string>();
  if (blank(out)) return name + " is empty";
  return "";
}

// A string or a list of strings, into `out`.
std::string read_texts(const json& value, const char* key, bool allow_empty_list,
                       std::vector<std::string>& out) {
  const std::string name = json_quoted(key);
  if (value.is_string()) {
    out.emplace_back();
    return read_text(value, name, out.back());
  }
  if (!value.is_array())
    return name + " must be a string or a list of strings, got " + value.type_name();
  if (value.empty() && !allow_empty_list) return name + " is an empty list";
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    out.emplace_back();
    const std::string error = read_text(value[i], name + "[" + std::to_string(i) + "]", out.back());
    if (!error.empty()) return error;
  }
  return "";
}

}  // namespace

std::string parse_pair_record(std::string_view line, PairRecord& record) {
  record = PairRecord();
  if (json_nesting_depth(line) > kMaxNesting)
    return "nested deeper than " + std::to_string(kMaxNesting) + " levels: not a pair record";
  json object;
  try {
    object = json::parse(line.begin(), line.end());
  } catch (const json::exception&) {  // parse_error, or out_of_range for a number like 1e400
    return describe_json_error(line);
  }
  if (!object.is_object()) return std::string("expected a JSON object, got ") + object.type_name();

  const Layout* layout = nullptr;
  for (const Layout& candidate : kLayouts)
    if (object.contains(candidate.query)) {
      layout = &candidate;
      break;
    }
  if (layout == nullptr) return "missing \"query\" " + std::string(kFormats);

  std::string error = read_text(object[layout->query], json_quoted(layout->query), record.query);
  if (!error.empty()) return tidy(error);

  auto pos = object.find(layout->pos);
  // A reranker's labeled pair, {"query", "doc", "label"}: the doc is its one candidate.
  if (pos == object.end() && layout == &kLayouts[0]) pos = object.find("doc");
  if (pos == object.end() || pos->is_null())
    return "missing " + json_quoted(layout->pos) + " " + kFormats;
  error = read_texts(*pos, layout->pos, /*allow_empty_list=*/false, record.pos);
  if (!error.empty()) return tidy(error);

  if (layout->neg != nullptr) {
    auto neg = object.find(layout->neg);
    if (neg != object.end() && !neg->is_null()) {
      error = read_texts(*neg, layout->neg, /*allow_empty_list=*/true, record.neg);
      if (!error.empty()) return tidy(error);
    }
  }

  const auto pos_scores = object.find("pos_scores"), neg_scores = object.find("neg_scores");
  const auto label = object.find("label");
  const bool split_scores = pos_scores != object.end() || neg_scores != object.end();
  if (split_scores && label != object.end()) return "give teacher scores as \"pos_scores\"/\"neg_scores\" or as \"label\", not both";
  if (split_scores) {
    if (pos_scores == object.end() || neg_scores == object.end())
      return "teacher scores need both \"pos_scores\" and \"neg_scores\" (one per \"pos\" and per \"neg\")";
    error = read_scores(*pos_scores, "pos_scores", record.pos.size(), "positives", record.teacher_scores);
    if (error.empty())
      error = read_scores(*neg_scores, "neg_scores", record.neg.size(), "negatives", record.teacher_scores);
    if (!error.empty()) return tidy(error);
  } else if (label != object.end() && label->is_number()) {
    // A labeled pair's label: the teacher's score of its one candidate.
    if (record.pos.size() + record.neg.size() != 1)
      return "a number as \"label\" labels a single (query, doc) pair; with several candidates give a list, one "
             "score per positive, then per negative";
    float value = 0;
    error = read_score(*label, value);
    if (!error.empty()) return tidy("\"label\"" + error.substr(std::strlen("\"score\"")));
    record.teacher_scores.push_back(value);
  } else if (label != object.end() && !label->is_null()) {
    error = read_scores(*label, "label", record.pos.size() + record.neg.size(), "candidates (positives, then negatives)",
                        record.teacher_scores);
    if (!error.empty()) return tidy(error);
  }

  auto score = object.find("score");
  if (score != object.end() && !score->is_null()) {
    error = read_score(*score, record.score);
    if (!error.empty()) return error;
    record.has_score = true;
  }
  return "";
}

}  // namespace ddp_embed
