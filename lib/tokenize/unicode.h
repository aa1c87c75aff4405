// The few Unicode facts BERT's basic tokenization needs, without ICU: a lenient UTF-8
// decoder, what the tokenizer does with each character, Python's str.lower() and
// "NFD, then drop the combining marks" (accent stripping). Tables are generated from
// Python's unicodedata by scripts/gen-unicode-tables.py; everything here is pure
// functions over constant data, so it is thread-safe and allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace ddp_embed {
namespace unicode {

// What Hugging Face's BasicTokenizer does with a character.
enum class CharClass : uint8_t {
  Other = 0,    // part of a word
  Control = 1,  // dropped by _clean_text (NUL, U+FFFD, categories C* except \t\n\r)
  Space = 2,    // separates words (\t \n \r, Zs, U+2028, U+2029)
  Punct = 3,    // a word of its own (non-alphanumeric ASCII, categories P*)
  Mark = 4,     // Mn, dropped when stripping accents
  Cjk = 5,      // CJK ideograph: a word of its own when tokenize_chinese_chars
};

CharClass char_class(char32_t cp);

// Decodes one code point from [p, end) (p < end) and advances p. An ill-formed sequence
// (overlong, surrogate, beyond U+10FFFF, truncated, stray continuation byte) yields
// kInvalid and skips its maximal ill-formed prefix, never a byte that could start a
// valid character: the same characters survive as with Python's errors="replace".
// kInvalid lies outside Unicode, so it differs from a real U+FFFD in the text; its class
// is Control (dropped by the tokenizer, as Python's U+FFFD would be).
constexpr char32_t kInvalid = 0x110000;
constexpr char32_t kReplacementCharacter = 0xFFFD;
char32_t decode_utf8(const char*& p, const char* end);

// True when every byte sequence in [p, end) is well-formed UTF-8.
bool is_valid_utf8(const char* p, const char* end);

// The text with every ill-formed sequence replaced by U+FFFD (Python's errors="replace").
std::string replace_ill_formed(const char* p, const char* end);

// Appends cp as UTF-8.
void append_utf8(std::string& out, char32_t cp);

// Python's chr(cp).lower() (applied twice, as BertTokenizer does): writes 1 to 3 code
// points to out and returns their number.
int to_lower(char32_t cp, char32_t out[3]);

// unicodedata.normalize("NFD", chr(cp)) without the Mn characters: writes 0 to 3 code
// points to out and returns their number.
int strip_accents(char32_t cp, char32_t out[3]);

const char* unicode_version();

}  // namespace unicode
}  // namespace ddp_embed
