// The few Unicode facts BERT's basic tokenization needs, without ICU: what the tokenizer
// does with each character, Python's str.lower() and "NFD, then drop the combining marks"
// (accent stripping). Text is decoded with util/utf8.h. Tables are generated from
// Python's unicodedata by scripts/gen-unicode-tables.py; everything here is pure
// functions over constant data, so it is thread-safe and allocates nothing.
#pragma once

#include <cstdint>

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

// Anything beyond U+10FFFF, such as utf8::kInvalid (an ill-formed sequence), is Control:
// dropped by the tokenizer, as Python's U+FFFD for it would be.
CharClass char_class(char32_t cp);

// Python's chr(cp).lower() (applied twice, as BertTokenizer does): writes 1 to 3 code
// points to out and returns their number.
int to_lower(char32_t cp, char32_t out[3]);

// unicodedata.normalize("NFD", chr(cp)) without the Mn characters: writes 0 to 3 code
// points to out and returns their number.
int strip_accents(char32_t cp, char32_t out[3]);

}  // namespace unicode
}  // namespace ddp_embed
