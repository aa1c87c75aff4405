// The small helpers every floor shares (lib/util: hash.h, text.h), one copy each: the
// hashes give the values the project has always recorded (prepared folders keep text
// hashes and fingerprints), and json_quoted() writes what JSON writes.
#include <cstdint>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "data/pairs.h"
#include "util/hash.h"
#include "util/text.h"

namespace ddp_embed {
namespace {

// The values below were computed by an independent transcription of the hashes as
// config.cpp, prepared.cpp, pairs.cpp and process_group.cpp wrote them before they
// shared util/hash.h (FNV-1a from 1469598103934665603, splitmix64's finalizer).
TEST(Helpers, ProjectHashesKeepTheirValues) {
  EXPECT_EQ(fnv1a64("", 0, kFnv1a64ShortOffset), 0x14650fb0739d0383ULL);
  EXPECT_EQ(fnv1a64(std::string("abc"), kFnv1a64ShortOffset), 0xe16801510db89efdULL);
  EXPECT_EQ(fnv1a64("c", 1, fnv1a64("ab", 2, kFnv1a64ShortOffset)), 0xe16801510db89efdULL);  // continues
  EXPECT_EQ(fnv1a64_mix(fnv1a64_mix(fnv1a64_mix(kFnv1a64ShortOffset, 'a'), 'b'), 'c'), 0xe16801510db89efdULL);
  EXPECT_EQ(mix64(1), 0x5692161d100b05e5ULL);
  EXPECT_EQ(mix64(0), 0u);
  // A text hash: ASCII case and runs of white space aside, finalized by mix64.
  EXPECT_EQ(text_hash("  Hello,\tWORLD  "), 0x3b2b421a859ef1b5ULL);
  EXPECT_EQ(text_hash("hello, world"), 0x3b2b421a859ef1b5ULL);
  EXPECT_EQ(hash_hex(0x14650fb0739d0383ULL), "14650fb0739d0383");
}

TEST(Helpers, QuotedWritesWhatJsonWrites) {
  for (const std::string text : {"", "plain", "a \"name\"", "back\\slash", "tab\there\nnewline", "bell\x07\x1f",
                                 "del\x7f", "Ünïcödé 東京", "\b\f\r"})
    EXPECT_EQ(json_quoted(text), nlohmann::json(text).dump()) << text;
  // Bytes that are not UTF-8 pass as they are (nlohmann::json would throw on them).
  EXPECT_EQ(json_quoted("a\xff"), "\"a\xff\"");
}

TEST(Helpers, AsciiLowerLeavesOtherBytesAlone) {
  EXPECT_EQ(ascii_lower("LayerNorm.Weight_1"), "layernorm.weight_1");
  EXPECT_EQ(ascii_lower("ÜBER Straße"), "Über straße");  // ASCII only, as std::tolower in the C locale
  EXPECT_EQ(ascii_lower(""), "");
}

}  // namespace
}  // namespace ddp_embed
