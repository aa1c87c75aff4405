// The Unicode helpers under the tokenizers: the character classes, lower-casing and accent
// stripping of tokenize/unicode.h (BERT's basic tokenizer's rules), and util/utf8.h's decoder
// of ill-formed input.
#include <gtest/gtest.h>

#include <string>

#include "tokenize/unicode.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

TEST(Unicode, Tables) {
  using unicode::CharClass;
  EXPECT_EQ(unicode::char_class('a'), CharClass::Other);
  EXPECT_EQ(unicode::char_class(' '), CharClass::Space);
  EXPECT_EQ(unicode::char_class('\t'), CharClass::Space);
  EXPECT_EQ(unicode::char_class(0x1F), CharClass::Control);
  EXPECT_EQ(unicode::char_class('$'), CharClass::Punct);
  EXPECT_EQ(unicode::char_class(0x2014), CharClass::Punct);  // em dash, Pd
  EXPECT_EQ(unicode::char_class(0x00A9), CharClass::Other);  // ©, So
  EXPECT_EQ(unicode::char_class(0x0301), CharClass::Mark);
  EXPECT_EQ(unicode::char_class(0x4E2D), CharClass::Cjk);
  EXPECT_EQ(unicode::char_class(0x200B), CharClass::Control);
  EXPECT_EQ(unicode::char_class(0x10FFFF), CharClass::Control);  // unassigned (Cn)
  EXPECT_EQ(unicode::char_class(0x110000), CharClass::Control);

  char32_t out[3];
  ASSERT_EQ(unicode::to_lower('Q', out), 1);
  EXPECT_EQ(out[0], U'q');
  ASSERT_EQ(unicode::to_lower(0x0130, out), 2);
  EXPECT_EQ(out[0], U'i');
  EXPECT_EQ(out[1], 0x0307u);
  ASSERT_EQ(unicode::to_lower(0x0100, out), 1);  // Ā -> ā (a stride-2 run)
  EXPECT_EQ(out[0], 0x0101u);
  ASSERT_EQ(unicode::to_lower(0x0101, out), 1);
  EXPECT_EQ(out[0], 0x0101u);
  ASSERT_EQ(unicode::to_lower(0x03A3, out), 1);  // Σ -> σ, never final ς per character
  EXPECT_EQ(out[0], 0x03C3u);
  ASSERT_EQ(unicode::to_lower(0x1E9E, out), 1);  // ẞ -> ß
  EXPECT_EQ(out[0], 0x00DFu);

  ASSERT_EQ(unicode::strip_accents(0x00E9, out), 1);  // é
  EXPECT_EQ(out[0], U'e');
  EXPECT_EQ(unicode::strip_accents(0x0301, out), 0);
  ASSERT_EQ(unicode::strip_accents(0x00C5, out), 1);  // Å
  EXPECT_EQ(out[0], U'A');
  ASSERT_EQ(unicode::strip_accents(0xAC00, out), 2);  // 가
  EXPECT_EQ(out[0], 0x1100u);
  EXPECT_EQ(out[1], 0x1161u);
  ASSERT_EQ(unicode::strip_accents(0x00E6, out), 1);  // æ has no decomposition
  EXPECT_EQ(out[0], 0x00E6u);
}

TEST(Unicode, Utf8Decoder) {
  auto decode_all = [](const std::string& bytes) {
    std::u32string out;
    for (const char *p = bytes.data(), *end = p + bytes.size(); p < end;)
      out += utf8::decode(p, end);
    return out;
  };
  EXPECT_EQ(decode_all("a\u00e9\u4e2d\U0001F600"), (std::u32string{U'a', 0xE9, 0x4E2D, 0x1F600}));
  constexpr char32_t bad = utf8::kInvalid;  // what an ill-formed sequence decodes to
  EXPECT_EQ(decode_all("\xc0\xaf"), (std::u32string{bad, bad}));           // overlong
  EXPECT_EQ(decode_all("\xed\xa0\x80"), (std::u32string{bad, bad, bad}));  // surrogate
  EXPECT_EQ(decode_all("\xe4\xb8"), (std::u32string{bad}));                // truncated
  EXPECT_EQ(decode_all("\xe4\xb8z"), (std::u32string{bad, U'z'}));
  EXPECT_EQ(decode_all("\xf4\x90\x80\x80"), (std::u32string{bad, bad, bad, bad}));  // > U+10FFFF
  EXPECT_EQ(decode_all("\uFFFD"), (std::u32string{0xFFFD}));  // a real one is no error
  EXPECT_TRUE(utf8::is_valid("\uFFFD", "\uFFFD" + 3));
  EXPECT_TRUE(utf8::is_valid("a\u00e9", "a\u00e9" + 3));
  const std::string junk = "a\xff";
  EXPECT_FALSE(utf8::is_valid(junk.data(), junk.data() + junk.size()));
  EXPECT_EQ(utf8::replace_ill_formed(junk.data(), junk.data() + junk.size()), "a\uFFFD");
}

}  // namespace
}  // namespace ddp_embed
