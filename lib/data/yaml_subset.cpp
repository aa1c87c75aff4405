// A recursive-descent reader of YAML's block structure, one line at a time: each line's
// indentation says which map or list it belongs to, as YAML's own rules say.
#include "data/yaml_subset.h"

#include <string>
#include <tuple>
#include <vector>

#include "data/pairs.h"

namespace ddp_embed {
namespace {

struct YamlRow {
  int indent = 0;
  std::string text;  // after the indentation, trailing spaces cut
  int line = 0;
};

bool yaml_item_row(const std::string& text) { return text == "-" || text.compare(0, 2, "- ") == 0; }

class YamlReader {
 public:
  YamlReader(std::vector<YamlRow> rows, std::string origin) : rows_(std::move(rows)), origin_(std::move(origin)) {}

  YamlNode document() {
    if (rows_.empty()) return YamlNode{};
    YamlNode node = block(rows_[0].indent);
    if (pos_ < rows_.size()) fail(rows_[pos_].line, "indented less than the block's first line");
    return node;
  }

  [[noreturn]] void fail(int line, const std::string& what) const {
    throw DataError(origin_ + ":" + std::to_string(line) + ": " + what +
                    " (ddp-embed reads the configs block's YAML as datasets writes it: block maps and lists, plain or "
                    "quoted scalars, [a, b] lists; write it so)");
  }

 private:
  YamlNode block(int indent) { return yaml_item_row(rows_[pos_].text) ? list(indent) : map(indent); }

  // Rows deeper than `indent` that nobody consumed do not nest.
  bool at(int indent) {
    if (pos_ >= rows_.size() || rows_[pos_].indent < indent) return false;
    if (rows_[pos_].indent > indent) fail(rows_[pos_].line, "indented more than the lines above it");
    return true;
  }

  YamlNode list(int indent) {
    YamlNode node;
    node.kind = YamlNode::Kind::List;
    node.line = rows_[pos_].line;
    while (at(indent) && yaml_item_row(rows_[pos_].text)) {
      YamlRow& row = rows_[pos_];
      const size_t rest_at = row.text.find_first_not_of(' ', 1);
      if (rest_at == std::string::npos) {  // "-" alone: the item is the block below
        ++pos_;
        node.items.push_back(pos_ < rows_.size() && rows_[pos_].indent > indent ? block(rows_[pos_].indent)
                                                                                : YamlNode{});
        continue;
      }
      // "- key: value" or "- - x": the rest is a block of its own, indented where it starts.
      const std::string rest = row.text.substr(rest_at);
      if (yaml_item_row(rest) || key_end(rest, row.line) != std::string::npos) {
        row.indent += static_cast<int>(rest_at);
        row.text = rest;
        node.items.push_back(block(row.indent));
        continue;
      }
      node.items.push_back(scalar(rest, row.line));
      ++pos_;
    }
    return node;
  }

  YamlNode map(int indent) {
    YamlNode node;
    node.kind = YamlNode::Kind::Map;
    node.line = rows_[pos_].line;
    while (at(indent)) {
      const YamlRow& row = rows_[pos_];
      if (yaml_item_row(row.text)) fail(row.line, "a list item among a map's keys");
      const size_t colon = key_end(row.text, row.line);
      if (colon == std::string::npos) fail(row.line, "expected \"key: value\", found \"" + row.text + "\"");
      const std::string key = unquote_key(row.text.substr(0, colon), row.line);
      if (node.find(key)) fail(row.line, "\"" + key + "\" is given twice");
      std::string value = row.text.substr(colon + 1);
      value.erase(0, value.find_first_not_of(' '));
      const int line = row.line;
      ++pos_;
      if (value.empty() || value[0] == '#') {
        // The value is the block below: deeper, or a list at the key's own indentation.
        const bool below = pos_ < rows_.size() && (rows_[pos_].indent > indent ||
                                                   (rows_[pos_].indent == indent && yaml_item_row(rows_[pos_].text)));
        YamlNode child = below ? block(rows_[pos_].indent) : YamlNode{};
        if (!below) child.line = line;
        node.map.emplace_back(key, std::move(child));
      } else {
        node.map.emplace_back(key, scalar(value, line));
      }
    }
    return node;
  }

  // Where the key of "key: value" ends (its ':'), or npos when the text is not one.
  size_t key_end(const std::string& text, int line) const {
    if (!text.empty() && (text[0] == '{' || text[0] == '[')) return std::string::npos;  // a flow collection
    size_t i = 0;
    if (!text.empty() && (text[0] == '"' || text[0] == '\'')) i = quoted_end(text, 0, line);
    for (; i < text.size(); ++i) {
      if (text[i] == '#' && i > 0 && text[i - 1] == ' ') return std::string::npos;
      if (text[i] == ':' && (i + 1 == text.size() || text[i + 1] == ' ')) return i;
    }
    return std::string::npos;
  }

  std::string unquote_key(std::string key, int line) const {
    while (!key.empty() && key.back() == ' ') key.pop_back();
    if (!key.empty() && (key[0] == '"' || key[0] == '\'')) return quoted(key, 0, line).first;
    return key;
  }

  // The index past the closing quote of the quoted text that begins at `begin`.
  size_t quoted_end(const std::string& text, size_t begin, int line) const { return quoted(text, begin, line).second; }

  // The quoted scalar that begins at `begin`: its text and the index past its closing quote.
  std::pair<std::string, size_t> quoted(const std::string& text, size_t begin, int line) const {
    const char quote = text[begin];
    std::string out;
    for (size_t i = begin + 1; i < text.size(); ++i) {
      const char c = text[i];
      if (quote == '\'' && c == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'') {
          out += '\'';
          ++i;
          continue;
        }
        return {out, i + 1};
      }
      if (quote == '"' && c == '"') return {out, i + 1};
      if (quote == '"' && c == '\\' && i + 1 < text.size()) {
        const char e = text[++i];
        out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
        continue;
      }
      out += c;
    }
    fail(line, std::string("a quoted scalar without its closing ") + quote + " (a scalar over several lines?)");
  }

  // What may follow a scalar on its line: spaces, then a comment.
  void expect_line_end(const std::string& text, size_t i, int line) const {
    const size_t next = text.find_first_not_of(' ', i);
    if (next != std::string::npos && text[next] != '#')
      fail(line, "unexpected \"" + text.substr(next) + "\" after a scalar");
  }

  YamlNode scalar(const std::string& text, int line) const {
    YamlNode node;
    node.line = line;
    const char c = text[0];
    if (c == '"' || c == '\'') {
      const auto [value, end] = quoted(text, 0, line);
      expect_line_end(text, end, line);
      node.scalar = value;
      return node;
    }
    if (c == '[') return flow_list(text, line);
    if (std::string("{&*!|>%@`").find(c) != std::string::npos)
      fail(line, std::string("\"") + c +
                     "\" begins YAML this reader does not read (a flow map, anchor, alias, tag "
                     "or block scalar); a glob pattern that begins with * is written quoted");
    std::string value = text.substr(0, text.find(" #"));
    while (!value.empty() && value.back() == ' ') value.pop_back();
    node.scalar = value;
    return node;
  }

  // [a, "b", 'c']: plain or quoted scalars, none nested.
  YamlNode flow_list(const std::string& text, int line) const {
    YamlNode node;
    node.kind = YamlNode::Kind::List;
    node.line = line;
    size_t i = 1;
    for (;;) {
      i = text.find_first_not_of(' ', i);
      if (i == std::string::npos) fail(line, "a [ list without its closing ] (a list over several lines?)");
      if (text[i] == ']' && node.items.empty()) return expect_line_end(text, i + 1, line), node;
      YamlNode item;
      item.line = line;
      if (text[i] == '"' || text[i] == '\'') {
        std::tie(item.scalar, i) = quoted(text, i, line);
        i = text.find_first_not_of(' ', i);
      } else {
        if (std::string("[{&*!|>").find(text[i]) != std::string::npos)
          fail(line, "a [ list holds plain or quoted scalars only; quote \"" + text.substr(i) + "\"");
        const size_t end = text.find_first_of(",]", i);
        if (end == std::string::npos) fail(line, "a [ list without its closing ]");
        item.scalar = text.substr(i, end - i);
        while (!item.scalar.empty() && item.scalar.back() == ' ') item.scalar.pop_back();
        i = end;
      }
      node.items.push_back(std::move(item));
      if (i == std::string::npos) fail(line, "a [ list without its closing ]");
      if (text[i] == ']') return expect_line_end(text, i + 1, line), node;
      if (text[i] != ',') fail(line, "expected , or ] in a [ list, found \"" + text.substr(i) + "\"");
      ++i;
    }
  }

  std::vector<YamlRow> rows_;
  std::string origin_;
  size_t pos_ = 0;
};

}  // namespace

const YamlNode* YamlNode::find(const std::string& key) const {
  for (const auto& [name, value] : map)
    if (name == key) return &value;
  return nullptr;
}

YamlNode parse_yaml_block(const std::vector<std::string>& lines, int first_line, const std::string& origin) {
  std::vector<YamlRow> rows;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string text = lines[i];
    if (!text.empty() && text.back() == '\r') text.pop_back();
    const int line = first_line + static_cast<int>(i);
    const size_t indent = text.find_first_not_of(' ');
    if (indent == std::string::npos || text[indent] == '#') continue;  // blank or a comment
    if (text[indent] == '\t')
      throw DataError(origin + ":" + std::to_string(line) + ": a tab in the indentation (YAML indents with spaces)");
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.pop_back();
    rows.push_back(YamlRow{static_cast<int>(indent), text.substr(indent), line});
  }
  return YamlReader(std::move(rows), origin).document();
}

}  // namespace ddp_embed
