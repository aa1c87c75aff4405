#include "data/pair_record.h"

#include <nlohmann/json.hpp>

#include "tokenize/unicode.h"

namespace ddp_embed {

namespace {

using nlohmann::json;

constexpr const char* kFormats = "(expected query/pos, anchor/positive or text1/text2)";
constexpr size_t kMaxMessage = 240;

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

std::string quoted(const char* key) { return std::string("\"") + key + "\""; }

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
  return unicode::replace_ill_formed(message.data(), message.data() + message.size());
}

// "invalid JSON at byte N: <nlohmann's reason>".
std::string describe_parse_error(const json::parse_error& e) {
  std::string reason = e.what();
  const auto column = reason.find("column ");
  const auto colon = column == std::string::npos ? reason.find("] ") : reason.find(": ", column);
  if (colon != std::string::npos) reason = reason.substr(colon + 2);
  return tidy("invalid JSON at byte " + std::to_string(e.byte) + ": " + reason);
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
  const std::string name = quoted(key);
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
  json object;
  try {
    object = json::parse(line.begin(), line.end());
  } catch (const json::parse_error& e) {
    return describe_parse_error(e);
  }
  if (!object.is_object()) return std::string("expected a JSON object, got ") + object.type_name();

  const Layout* layout = nullptr;
  for (const Layout& candidate : kLayouts)
    if (object.contains(candidate.query)) {
      layout = &candidate;
      break;
    }
  if (layout == nullptr) return "missing \"query\" " + std::string(kFormats);

  std::string error = read_text(object[layout->query], quoted(layout->query), record.query);
  if (!error.empty()) return tidy(error);

  auto pos = object.find(layout->pos);
  if (pos == object.end() || pos->is_null())
    return "missing " + quoted(layout->pos) + " " + kFormats;
  error = read_texts(*pos, layout->pos, /*allow_empty_list=*/false, record.pos);
  if (!error.empty()) return tidy(error);

  if (layout->neg != nullptr) {
    auto neg = object.find(layout->neg);
    if (neg != object.end() && !neg->is_null()) {
      error = read_texts(*neg, layout->neg, /*allow_empty_list=*/true, record.neg);
      if (!error.empty()) return tidy(error);
    }
  }

  auto score = object.find("score");
  if (score != object.end() && !score->is_null()) {
    if (!score->is_number())
      return std::string("\"score\" must be a number, got ") + score->type_name();
    record.score = score->get<float>();
    record.has_score = true;
  }
  return "";
}

}  // namespace ddp_embed
