// Reading JSON text that may be hostile or broken: how deeply it nests, and where and
// why it does not parse.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ddp_embed {

// The deepest nesting of objects and arrays in `text` (0 for a scalar), measured before
// parsing. nlohmann::json parses iteratively, but copying, comparing and dumping a value
// recurse once per level: a "[[[[...]]]]" of a few megabytes parses fine and then
// overflows the stack. Readers of untrusted JSON refuse texts nested deeper than they can
// legitimately be. Brackets inside strings do not count, nor, with `comments`, inside //
// and /* */ comments; ill-formed text gives some number (the parser reports it).
int json_nesting_depth(std::string_view text, bool comments = false);

// Why `text` is not a JSON value: where the parser gave up (1-based: the byte it could
// not take, or the first byte of a number out of range; one past the end for a text cut
// short) and its reason without nlohmann's prefix, e.g. {12, "syntax error while parsing
// object - unexpected ','; expected string literal"} or {9, "number overflow parsing
// '1e400'"}. Covers every way parsing fails, including numbers out of
// a double's range, which nlohmann reports as out_of_range rather than parse_error.
struct JsonTextError {
  std::size_t byte = 0;
  std::string reason;
};
// {0, ""} when the text parses.
JsonTextError find_json_error(std::string_view text, bool comments = false);

}  // namespace ddp_embed
