#include "util/json_input.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace ddp_embed {

int json_nesting_depth(std::string_view text, bool comments) {
  enum class In { Json, String, Escape, LineComment, BlockComment };
  In state = In::Json;
  int depth = 0, deepest = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const char next = i + 1 < text.size() ? text[i + 1] : '\0';
    switch (state) {
      case In::String:
        if (c == '\\') state = In::Escape;
        else if (c == '"') state = In::Json;
        break;
      case In::Escape:
        state = In::String;
        break;
      case In::LineComment:
        if (c == '\n') state = In::Json;
        break;
      case In::BlockComment:
        if (c == '*' && next == '/') {
          state = In::Json;
          ++i;
        }
        break;
      case In::Json:
        if (c == '"') {
          state = In::String;
        } else if (comments && c == '/' && (next == '/' || next == '*')) {
          state = next == '/' ? In::LineComment : In::BlockComment;
          ++i;
        } else if (c == '{' || c == '[') {
          deepest = std::max(deepest, ++depth);
        } else if ((c == '}' || c == ']') && depth > 0) {
          --depth;  // a stray closer is a syntax error: never let it hide what follows
        }
        break;
    }
  }
  return deepest;
}

namespace {

using nlohmann::json;

// A SAX handler that builds nothing and keeps the parser's first complaint with its
// position, which nlohmann's exceptions carry only for syntax errors.
class ErrorLocator final : public nlohmann::json_sax<json> {
 public:
  static constexpr int kNumberOverflow = 406;  // nlohmann's out_of_range.406

  JsonTextError error;

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }

  bool parse_error(std::size_t position, const std::string& last_token,
                   const nlohmann::detail::exception& e) override {
    // A syntax error is found at the last byte read; a number out of range is the whole
    // token just read: point at its first byte.
    if (e.id == kNumberOverflow && last_token.size() <= position) position -= last_token.size() - 1;
    error = JsonTextError{position, without_prefix(e.what())};
    return false;
  }

 private:
  // "[json.exception.parse_error.101] parse error at line 1, column 2: syntax error ..."
  // → "syntax error ..."; "[json.exception.out_of_range.406] number overflow ..." →
  // "number overflow ...". Callers say where, in their own terms.
  static std::string without_prefix(const std::string& what) {
    const auto bracket = what.find("] ");
    std::string reason = bracket == std::string::npos ? what : what.substr(bracket + 2);
    const auto colon = reason.find(": ");
    if (reason.rfind("parse error", 0) == 0 && colon != std::string::npos) reason = reason.substr(colon + 2);
    return reason;
  }
};

}  // namespace

JsonTextError find_json_error(std::string_view text, bool comments) {
  ErrorLocator locator;
  json::sax_parse(text, &locator, json::input_format_t::json, /*strict=*/true, comments);
  return locator.error;
}

}  // namespace ddp_embed
