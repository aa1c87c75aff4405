// UTF-8 without ICU: decoding and encoding code points, checking text, and replacing what
// is ill-formed as Python's errors="replace" does. Pure functions over bytes: thread-safe.
#pragma once

#include <string>

namespace ddp_embed::utf8 {

// What decode() yields for an ill-formed sequence. It lies outside Unicode, so it differs
// from a real U+FFFD in the text.
constexpr char32_t kInvalid = 0x110000;
constexpr char32_t kReplacementCharacter = 0xFFFD;

// Decodes one code point from [p, end) (p < end) and advances p. An ill-formed sequence
// (overlong, surrogate, beyond U+10FFFF, truncated, stray continuation byte) yields
// kInvalid and skips its maximal ill-formed prefix, never a byte that could start a
// valid character: the same characters survive as with Python's errors="replace".
char32_t decode(const char*& p, const char* end);

// True when every byte sequence in [p, end) is well-formed UTF-8.
bool is_valid(const char* p, const char* end);

// The text with every ill-formed sequence replaced by U+FFFD (Python's errors="replace").
std::string replace_ill_formed(const char* p, const char* end);

// Appends cp as UTF-8.
void append(std::string& out, char32_t cp);

}  // namespace ddp_embed::utf8
