// Pair files: formats, error messages with file and line, skipping, compact storage.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/pairs.h"
#include "data_fixtures.h"
#include "tokenize/wordpiece.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

using testing::bert;
using testing::kVocab;
using testing::TempDir;

std::vector<int32_t> ids(const std::string& text, int max_length = 32) {
  return bert().encode(text, max_length);
}

TEST(Pairs, QueryPosNeg) {
  TempDir dir("qpn");
  const auto file = dir.write(
      "a.jsonl",
      R"({"query": "how are you", "pos": "fine thanks"})"
      "\n\n   \n"
      R"({"query": "what is bert", "pos": ["a model", "an encoder"], "neg": ["a muppet"]})"
      "\n");
  const PairDataset data = load_pairs({file}, bert(), 32, false);
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(data.lines, 2);  // blank lines are not counted
  EXPECT_EQ(data.skipped, 0);
  EXPECT_FALSE(data.has_scores);
  EXPECT_EQ(data.tokens.num_sequences(), 2 + 4);

  const PairIndex& a = data.pairs[0];
  EXPECT_EQ(data.tokens.ids(a.query), ids("how are you"));
  EXPECT_EQ(a.pos_count, 1);
  EXPECT_EQ(data.tokens.ids(a.pos_begin), ids("fine thanks"));
  EXPECT_EQ(a.neg_count, 0);

  const PairIndex& b = data.pairs[1];
  EXPECT_EQ(data.tokens.ids(b.query), ids("what is bert"));
  ASSERT_EQ(b.pos_count, 2);
  EXPECT_EQ(data.tokens.ids(b.pos_begin), ids("a model"));
  EXPECT_EQ(data.tokens.ids(b.pos_begin + 1), ids("an encoder"));
  ASSERT_EQ(b.neg_count, 1);
  EXPECT_EQ(data.tokens.ids(b.neg_begin), ids("a muppet"));
  EXPECT_EQ(data.tokens.length(b.neg_begin), static_cast<int32_t>(ids("a muppet").size()));

  std::vector<int64_t> copied(data.tokens.length(b.query));
  data.tokens.copy(b.query, copied.data());
  const auto expected = ids("what is bert");
  EXPECT_EQ(copied, std::vector<int64_t>(expected.begin(), expected.end()));
}

TEST(Pairs, AnchorPositiveNegative) {
  TempDir dir("apn");
  const auto file = dir.write(
      "a.jsonl", R"({"anchor": "a cat", "positive": "a kitten", "negative": "a truck"})"
                 "\n"
                 R"({"anchor": "a dog", "positive": ["a puppy"], "negative": ["a car", "a van"]})");
  const PairDataset data = load_pairs({file}, bert(), 16, false);
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(data.tokens.ids(data.pairs[0].query), ids("a cat", 16));
  EXPECT_EQ(data.tokens.ids(data.pairs[0].pos_begin), ids("a kitten", 16));
  EXPECT_EQ(data.pairs[0].neg_count, 1);
  EXPECT_EQ(data.tokens.ids(data.pairs[0].neg_begin), ids("a truck", 16));
  EXPECT_EQ(data.pairs[1].neg_count, 2);
  EXPECT_EQ(data.tokens.ids(data.pairs[1].neg_begin + 1), ids("a van", 16));
}

TEST(Pairs, ScoredTextPairs) {
  TempDir dir("sts");
  const auto scored =
      dir.write("sts.jsonl", R"({"text1": "a man plays", "text2": "a person plays", "score": 4.5})"
                             "\n"
                             R"({"text1": "a cat", "text2": "the stock market", "score": 0})");
  PairDataset data = load_pairs({scored}, bert(), 32, false);
  ASSERT_EQ(data.size(), 2);
  EXPECT_TRUE(data.has_scores);
  EXPECT_FLOAT_EQ(data.pairs[0].score, 4.5f);
  EXPECT_FLOAT_EQ(data.pairs[1].score, 0.0f);
  EXPECT_EQ(data.tokens.ids(data.pairs[1].pos_begin), ids("the stock market"));

  // One record without a score: the dataset as a whole has none.
  const auto mixed = dir.write("mixed.jsonl", R"({"text1": "a", "text2": "b", "score": 1})"
                                              "\n"
                                              R"({"text1": "c", "text2": "d"})");
  EXPECT_FALSE(load_pairs({mixed}, bert(), 32, false).has_scores);
  // Several files load in order.
  data = load_pairs({scored, mixed}, bert(), 32, false);
  ASSERT_EQ(data.size(), 4);
  EXPECT_EQ(data.tokens.ids(data.pairs[3].query), ids("c"));
}

// A reranker's labeled pairs: the doc is the one candidate, the label its teacher score.
TEST(Pairs, LabeledQueryDocPairs) {
  TempDir dir("labeled");
  const auto labeled = dir.write("labeled.jsonl", R"({"query": "a man plays", "doc": "a person plays", "label": 1})"
                                                  "\n"
                                                  R"({"query": "a cat", "doc": "the stock market", "label": 0.25})");
  const PairDataset data = load_pairs({labeled}, bert(), 32, false);
  ASSERT_EQ(data.size(), 2);
  EXPECT_TRUE(data.all_teacher_scored);
  EXPECT_EQ(data.tokens.ids(data.pairs[1].pos_begin), ids("the stock market"));
  EXPECT_FLOAT_EQ(data.teacher_scores[size_t(data.pairs[1].pos_begin)], 0.25f);
  EXPECT_EQ(data.pairs[1].neg_count, 0);

}

TEST(Pairs, WindowsLineEndsAndByteOrderMark) {
  TempDir dir("crlf");
  const auto file = dir.write("a.jsonl",
                              "\xEF\xBB\xBF{\"query\": \"q\", \"pos\": \"p\"}\r\n\r\n{\"query\": "
                              "\"r\", \"pos\": \"s\"}\r\n");
  const PairDataset data = load_pairs({file}, bert(), 32, false);
  EXPECT_EQ(data.size(), 2);
  EXPECT_EQ(data.lines, 2);
}

// Runs load_pairs on one file whose line `line` is `bad` (the others are fine) and
// returns the error.
std::string error_for(const TempDir& dir, const std::string& bad, int line = 3) {
  std::string content;
  for (int i = 1; i <= 4; ++i)
    content += (i == line ? bad : R"({"query": "fine", "pos": "good"})") + std::string("\n");
  const auto file = dir.write("bad.jsonl", content);
  try {
    load_pairs({file}, bert(), 32, false);
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind(file + ":" + std::to_string(line) + ": ", 0), 0u) << message;
    EXPECT_TRUE(utf8::is_valid(message.data(), message.data() + message.size())) << message;
    return message;
  }
  ADD_FAILURE() << "no error for " << bad;
  return "";
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(Pairs, ErrorsNameFileAndLine) {
  TempDir dir("errors");
  std::string e = error_for(dir, R"({"query": "q"})");
  EXPECT_TRUE(has(e, "missing \"pos\" (expected query/pos, query/doc, anchor/positive or text1/text2)")) << e;
  e = error_for(dir, R"({"query": "q", "pos": "p", "neg": ["n"], "label": 1})", 2);
  EXPECT_TRUE(has(e, ":2: a number as \"label\" labels a single (query, doc) pair")) << e;
  e = error_for(dir, R"({"anchor": "q", "negative": ["n"]})", 1);
  EXPECT_TRUE(has(e, "missing \"positive\"")) << e;
  e = error_for(dir, R"({"text1": "q", "score": 1})", 4);
  EXPECT_TRUE(has(e, "missing \"text2\"")) << e;
  e = error_for(dir, R"({"question": "q", "answer": "a"})");
  EXPECT_TRUE(has(e, "missing \"query\"")) << e;

  e = error_for(dir, R"({"query": "q", "pos": "p")", 2);
  EXPECT_TRUE(has(e, "invalid JSON at byte")) << e;
  e = error_for(dir, "not json at all");
  EXPECT_TRUE(has(e, "invalid JSON at byte 2")) << e;  // nlohmann's position
  e = error_for(dir, R"(["query", "pos"])");
  EXPECT_TRUE(has(e, "expected a JSON object, got array")) << e;

  e = error_for(dir, R"({"query": 42, "pos": "p"})");
  EXPECT_TRUE(has(e, "\"query\" must be a string, got number")) << e;
  e = error_for(dir, R"({"query": "q", "pos": {"text": "p"}})");
  EXPECT_TRUE(has(e, "\"pos\" must be a string or a list of strings, got object")) << e;
  e = error_for(dir, R"({"query": "q", "pos": []})");
  EXPECT_TRUE(has(e, "\"pos\" is an empty list")) << e;
  e = error_for(dir, R"({"query": "q", "pos": ["p", null]})");
  EXPECT_TRUE(has(e, "\"pos\"[1] must be a string, got null")) << e;
  e = error_for(dir, R"({"query": "q", "pos": "p", "neg": [3]})");
  EXPECT_TRUE(has(e, "\"neg\"[0] must be a string, got number")) << e;
  e = error_for(dir, R"({"text1": "a", "text2": "b", "score": "high"})");
  EXPECT_TRUE(has(e, "\"score\" must be a number, got string")) << e;

  e = error_for(dir, R"({"query": "", "pos": "p"})");
  EXPECT_TRUE(has(e, "\"query\" is empty")) << e;
  e = error_for(dir, R"({"query": "q", "pos": "  \t "})");
  EXPECT_TRUE(has(e, "\"pos\" is empty")) << e;
  e = error_for(dir, R"({"query": "q", "pos": ["p", ""]})");
  EXPECT_TRUE(has(e, "\"pos\"[1] is empty")) << e;

  // Bytes that are not UTF-8: an error for that line, never a crash; the message stays
  // valid UTF-8.
  e = error_for(dir, "{\"query\": \"caf\xe9\", \"pos\": \"p\"}");
  EXPECT_TRUE(has(e, "invalid JSON")) << e;
  e = error_for(dir, std::string("{\"query\": \"q\0\", \"pos\": \"p\"}", 27));
  EXPECT_TRUE(has(e, "invalid JSON")) << e;
}

// Bug (the one fuzz_manifest found, here too): a number beyond a double's range made
// nlohmann throw out_of_range, not parse_error, and it escaped load_pairs without file
// and line. Bug: a score beyond a float's range was converted to a float anyway
// (undefined behaviour, an infinite score in practice).
TEST(Pairs, NumbersOutOfRangeAreBadLines) {
  TempDir dir("range");
  std::string e = error_for(dir, R"({"query": "q", "pos": "p", "score": 1e400})");
  EXPECT_TRUE(has(e, "invalid JSON at byte 37: number overflow parsing '1e400'")) << e;
  e = error_for(dir, R"({"query": "q", "pos": "p", "x": -1e999, "score": 1})");
  EXPECT_TRUE(has(e, "number overflow parsing '-1e999'")) << e;
  e = error_for(dir, R"({"text1": "a", "text2": "b", "score": 1e39})");
  EXPECT_TRUE(has(e, "\"score\" 1e+39 is out of range for a float")) << e;
  e = error_for(dir, R"({"text1": "a", "text2": "b", "score": -3.5e38})");
  EXPECT_TRUE(has(e, "is out of range for a float")) << e;
}

// A line nested thousands of levels deep is refused before nlohmann builds it.
TEST(Pairs, DeepNestingIsABadLine) {
  TempDir dir("nesting");
  const std::string e = error_for(dir, std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_TRUE(has(e, "nested deeper than 16 levels: not a pair record")) << e;
}

TEST(Pairs, MissingAndEmptyFilesAreErrors) {
  TempDir dir("files");
  const std::string missing = (dir.path / "nope.jsonl").string();
  try {
    load_pairs({missing}, bert(), 32, false);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open " + missing + ": No such file or directory");
  }
  const auto empty = dir.write("empty.jsonl", "\n  \n");
  try {
    load_pairs({empty}, bert(), 32, false);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), empty + ": no pairs");
  }
  const auto good = dir.write("good.jsonl", R"({"query": "q", "pos": "p"})");
  EXPECT_THROW(load_pairs({good, empty}, bert(), 32, false), DataError);  // every file counts
  EXPECT_THROW(load_pairs({}, bert(), 32, false), DataError);
}

TEST(Pairs, SkipBadLinesCountsThem) {
  TempDir dir("skip");
  const auto file = dir.write("a.jsonl", R"({"query": "one", "pos": "1"})"
                                         "\n{broken\n"
                                         R"({"query": "two"})"
                                         "\n\n"
                                         R"({"query": "three", "pos": "3"})"
                                         "\n[1, 2]\n");
  const PairDataset data = load_pairs({file}, bert(), 32, /*skip_bad_lines=*/true);
  EXPECT_EQ(data.size(), 2);
  EXPECT_EQ(data.skipped, 3);
  EXPECT_EQ(data.lines, 5);
  EXPECT_EQ(data.tokens.ids(data.pairs[1].query), ids("three"));
  EXPECT_THROW(load_pairs({file}, bert(), 32, false), DataError);

  const auto all_bad = dir.write("bad.jsonl", "{\n{\n");
  try {
    load_pairs({all_bad}, bert(), 32, true);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), all_bad + ": no pairs (2 bad lines skipped)");
  }
}

TEST(Pairs, TruncatesToMaxLength) {
  TempDir dir("truncate");
  std::string longer;
  for (int i = 0; i < 200; ++i) longer += "word ";
  const auto file =
      dir.write("a.jsonl", nlohmann::json({{"query", longer}, {"pos", "short"}}).dump());
  const PairDataset data = load_pairs({file}, bert(), 16, false);
  EXPECT_EQ(data.tokens.length(data.pairs[0].query), 16);
  EXPECT_EQ(data.tokens.ids(data.pairs[0].query).back(), 102);
}

// Text of about `bytes` bytes, many words.
std::string long_text(size_t bytes) {
  std::string text;
  text.reserve(bytes + 64);
  while (text.size() < bytes) text += "sentence embeddings for everyone ";
  return text;
}

// A long line is read (and truncated to max_length) when data.max_line_bytes allows it.
TEST(Pairs, SixteenMegabyteLineWithAHigherLimit) {
  TempDir dir("huge");
  const std::string text = long_text(16u << 20);
  const auto file = dir.write("a.jsonl", nlohmann::json({{"query", text}, {"pos", text}}).dump() +
                                             "\n" + R"({"query": "q", "pos": "p"})");
  const PairDataset data = load_pairs({file}, bert(), 64, false, 2, /*max_line_bytes=*/64 << 20);
  ASSERT_EQ(data.size(), 2);
  EXPECT_EQ(data.tokens.length(0), 64);
  EXPECT_EQ(data.tokens.length(1), 64);
}

// Over the limit: an error naming file, line and the key to raise; with skip_bad_lines the
// line is counted and the lines after it are still read. A line of exactly the limit is fine.
TEST(Pairs, LineOverTheLimitIsAnError) {
  TempDir dir("limit");
  const std::string good = R"({"query": "q", "pos": "p"})";
  const std::string longer = R"({"query": ")" + std::string(200, 'a') + R"(", "pos": "p"})";
  const auto file = dir.write("a.jsonl", good + "\n" + longer + "\n" + good);
  try {
    load_pairs({file}, bert(), 32, false, 2, 100);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(file + ":2: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("data.max_line_bytes = 100"), std::string::npos) << e.what();
  }
  const PairDataset skipped = load_pairs({file}, bert(), 32, true, 2, 100);
  EXPECT_EQ(skipped.size(), 2);
  EXPECT_EQ(skipped.skipped, 1);
  EXPECT_EQ(load_pairs({file}, bert(), 32, false, 2, static_cast<int64_t>(longer.size())).size(), 3);
  EXPECT_THROW(load_pairs({file}, bert(), 32, false, 2, static_cast<int64_t>(longer.size()) - 1), DataError);
}

// Bug: a line was read whole whatever its length, so a file without line breaks (a JSON
// array, a binary file) was held in memory at once. Now a longer line is a bad line.
TEST(Pairs, LineOverTheLimitIsABadLineNotAnAllocation) {
  TempDir dir("too_long");
  const std::string good = R"({"query": "q", "pos": "p"})";
  const std::string huge = nlohmann::json({{"query", long_text(10u << 20)}, {"pos", "p"}}).dump();
  const auto file = dir.write("a.jsonl", good + "\n" + huge + "\n" + good + "\n");
  try {
    load_pairs({file}, bert(), 16, false);
    FAIL() << "a 10 MB line was accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(file + ":2: the line is longer than data.max_line_bytes = 1048576 bytes", 0), 0u)
        << e.what();
  }
  const PairDataset skipped = load_pairs({file}, bert(), 16, true);
  EXPECT_EQ(skipped.size(), 2);  // the line after the long one is read from its start
  EXPECT_EQ(skipped.skipped, 1);
  EXPECT_EQ(skipped.lines, 3);
}

// Many records, the same result on 1 and 4 threads (chunks are reassembled in order).
std::string synthetic_pairs(int n) {
  const char* words[] = {"the",        "a",       "model", "learns", "sentence",
                         "embeddings", "from",    "pairs", "of",     "similar",
                         "texts",      "quickly", "on",    "many",   "machines"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    std::string q, p;
    for (int w = 0; w < 5 + i % 4; ++w) q += std::string(words[(i * 7 + w * 3) % 15]) + " ";
    for (int w = 0; w < 6 + i % 3; ++w) p += std::string(words[(i * 5 + w * 2) % 15]) + " ";
    out += "{\"query\": \"" + q + std::to_string(i) + "\", \"pos\": \"" + p + "\"}\n";
  }
  return out;
}

TEST(Pairs, ThreadCountDoesNotChangeTheResult) {
  TempDir dir("threads");
  const auto file = dir.write("a.jsonl", synthetic_pairs(20000));
  const PairDataset one = load_pairs({file}, bert(), 32, false, 1);
  const PairDataset four = load_pairs({file}, bert(), 32, false, 4);
  ASSERT_EQ(one.size(), 20000);
  ASSERT_EQ(four.size(), one.size());
  ASSERT_EQ(four.tokens.num_sequences(), one.tokens.num_sequences());
  for (int64_t s = 0; s < one.tokens.num_sequences(); ++s)
    ASSERT_EQ(four.tokens.ids(s), one.tokens.ids(s)) << "sequence " << s;
  for (int64_t i = 0; i < one.size(); ++i) {
    ASSERT_EQ(four.pairs[i].query, one.pairs[i].query);
    ASSERT_EQ(four.pairs[i].pos_begin, one.pairs[i].pos_begin);
  }
  EXPECT_EQ(one.tokens.ids(one.pairs[12345].query),
            ids(nlohmann::json::parse(
                synthetic_pairs(12346).substr(synthetic_pairs(12345).size()))["query"]));
}

// 100k pairs of 5-8 word texts (plus a number): 2 sequences a pair of at most 24 ids
// ([CLS], up to 8 words and a number of up to 4 pieces, [SEP]) at 2 bytes, plus one
// 8-byte offset per sequence: at most 100k * 2 * (24 * 2 + 8) B = 11.2 MB, against
// ~60 MB for the same ids as int64 in a vector per sequence.
TEST(Pairs, MemoryForManyPairsIsSmall) {
  TempDir dir("memory");
  const auto file = dir.write("a.jsonl", synthetic_pairs(100000));
  const PairDataset data = load_pairs({file}, bert(), 64, false, 2);
  ASSERT_EQ(data.size(), 100000);
  EXPECT_FALSE(data.tokens.wide());
  int64_t total_ids = 0;
  int32_t longest = 0;
  for (int64_t s = 0; s < data.tokens.num_sequences(); ++s) {
    total_ids += data.tokens.length(s);
    longest = std::max(longest, data.tokens.length(s));
  }
  EXPECT_LE(longest, 24);
  const size_t exact =
      total_ids * sizeof(uint16_t) + (data.tokens.num_sequences() + 1) * sizeof(int64_t);
  EXPECT_LE(data.tokens.memory_bytes(), exact + exact / 20);  // no spare capacity left over
  EXPECT_LT(data.tokens.memory_bytes(), 11200000u);
}

TEST(Pairs, TokenStoreIsNarrowOrWide) {
  TokenStore narrow;
  narrow.reserve(false, 2, 5);
  narrow.append({101, 65535, 102});
  narrow.append(std::vector<int32_t>{});
  EXPECT_EQ(narrow.num_sequences(), 2);
  EXPECT_EQ(narrow.ids(0), (std::vector<int32_t>{101, 65535, 102}));
  EXPECT_EQ(narrow.length(1), 0);
  EXPECT_THROW(narrow.append({70000}), DataError);
  EXPECT_THROW(narrow.append({-1}), DataError);

  TokenStore wide;
  wide.reserve(true, 1, 3);
  wide.reserve(false, 10, 30);  // the width is fixed by the first call
  EXPECT_TRUE(wide.wide());
  wide.append({2, 250000, 3});
  EXPECT_EQ(wide.ids(0), (std::vector<int32_t>{2, 250000, 3}));
  int64_t out[3];
  wide.copy(0, out);
  EXPECT_EQ(out[1], 250000);
  EXPECT_GE(wide.memory_bytes(), 3 * sizeof(int32_t));
}

// A tokenizer with more than 65536 ids makes the dataset store 32-bit ids.
class BigVocabTokenizer final : public Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text, int) const override {
    return {0, 70000 + static_cast<int32_t>(text.size()), 1};
  }
  int32_t vocab_size() const override { return 100000; }
  SpecialIds special() const override { return SpecialIds{}; }
  std::string type() const override { return "test"; }
  void save(const std::string&) const override {}
};

TEST(Pairs, WideIdsForBigVocabularies) {
  TempDir dir("wide");
  const auto file = dir.write("a.jsonl", R"({"query": "abc", "pos": "abcdef"})");
  const PairDataset data = load_pairs({file}, BigVocabTokenizer(), 32, false);
  EXPECT_TRUE(data.tokens.wide());
  EXPECT_EQ(data.tokens.ids(0), (std::vector<int32_t>{0, 70003, 1}));
  EXPECT_EQ(data.tokens.ids(1), (std::vector<int32_t>{0, 70006, 1}));
}

}  // namespace
}  // namespace ddp_embed
