// Small text helpers every floor uses: ASCII lower-casing and quoting a name in a message.
// (json_quoted, not quoted: std::quoted would win a call on a std::string by ADL.)
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ddp_embed {

// `text` with A-Z turned to a-z; every other byte (UTF-8 included) as it is.
std::string ascii_lower(std::string_view text);

// `text` as a JSON string literal, for messages: in double quotes, with " and \ escaped
// and control characters written as JSON writes them (\n, \t, \u001b ...); every other
// byte as it is (nlohmann::json's dump() for valid UTF-8, without its throw on invalid).
std::string json_quoted(std::string_view text);

// json_quoted, cut for a message when over `most` bytes (at a UTF-8 character's start):
// "\"represent represent...\" (2000 bytes)", so a long prompt or value does not fill the
// screen.
std::string json_quoted_cut(std::string_view text, std::size_t most = 60);

}  // namespace ddp_embed
