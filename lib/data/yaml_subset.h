// The part of YAML that a Hugging Face dataset card's `configs:` block is written in
// (datasets' push_to_hub writes it so): block maps and block lists by indentation,
// "- " items, plain, 'single-' and "double-quoted" scalars, flow lists [a, b], comments.
// No YAML library is among the project's dependencies, and the card's other blocks are
// never read. Anything else (anchors, tags, block scalars, flow maps) is refused with its
// line rather than read wrong.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace ddp_embed {

struct YamlNode {
  enum class Kind { Scalar, List, Map };
  Kind kind = Kind::Scalar;
  std::string scalar;                                 // Kind::Scalar: its text, unquoted
  std::vector<YamlNode> items;                        // Kind::List
  std::vector<std::pair<std::string, YamlNode>> map;  // Kind::Map, in the text's order
  int line = 0;                                       // where it begins (1-based, in the file)

  // Kind::Map: the value of `key`, or nullptr.
  const YamlNode* find(const std::string& key) const;
};

// Parses `lines` (a block of the file without line ends; lines[0] is the file's line
// `first_line`) as one node. Throws DataError "<origin>:<line>: <what>" for text outside the
// subset above, or indentation that does not nest.
YamlNode parse_yaml_block(const std::vector<std::string>& lines, int first_line, const std::string& origin);

}  // namespace ddp_embed
