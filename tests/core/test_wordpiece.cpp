// WordPiece against Hugging Face's BertTokenizer (golden ids from transformers 4.29),
// plus the edge cases the golden texts do not cover.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tokenize/tokenizer.h"
#include "tokenize/wordpiece.h"
#include "temp_dir.h"
#include "python_fixtures.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

const fs::path kGolden = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden";

using python_fixtures::read_text;

std::vector<nlohmann::json> read_jsonl(const fs::path& path) {
  std::vector<nlohmann::json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

using ddp_embed::testing::TempDir;

const WordPieceTokenizer& uncased() {
  static const auto tokenizer = WordPieceTokenizer::load((kGolden / "vocab.txt").string(), true);
  return *tokenizer;
}

const WordPieceTokenizer& cased() {
  static const auto tokenizer = WordPieceTokenizer::load((kGolden / "vocab.txt").string(), false);
  return *tokenizer;
}

// The pieces as text, without [CLS]/[SEP], for readable failures.
std::vector<std::string> pieces(const WordPieceTokenizer& tokenizer, const std::string& text) {
  std::vector<std::string> out;
  const auto ids = tokenizer.encode(text, 0);
  for (size_t i = 1; i + 1 < ids.size(); ++i) out.push_back(tokenizer.token(ids[i]));
  return out;
}

using Pieces = std::vector<std::string>;

// ---- the golden ids -------------------------------------------------------------------

void expect_golden_tokens(const fs::path& file) {
  const auto rows = read_jsonl(file);
  ASSERT_EQ(rows.size(), 38u) << file;
  int lower = 0, upper = 0;
  for (const auto& row : rows) {
    const std::string text = row["text"];
    const bool lower_case = row["do_lower_case"];
    const auto expected = row["input_ids"].get<std::vector<int32_t>>();
    const auto& tokenizer = lower_case ? uncased() : cased();
    EXPECT_EQ(tokenizer.encode(text, 512), expected)
        << "text: " << text << " lower: " << lower_case;
    EXPECT_EQ(tokenizer.encode(text, 0), expected) << "text: " << text;
    (lower_case ? lower : upper)++;
  }
  EXPECT_EQ(lower, 19);
  EXPECT_EQ(upper, 19);
}

TEST(WordPiece, GoldenTokensOfBertTinyA) {
  expect_golden_tokens(kGolden / "bert-tiny-a/tokens.jsonl");
}
TEST(WordPiece, GoldenTokensOfBertTinyB) {
  expect_golden_tokens(kGolden / "bert-tiny-b/tokens.jsonl");
}

// expected.jsonl's input_ids: lower-cased, truncated to 64, through a model folder whose
// tokenizer_config.json decides the lower-casing.
TEST(WordPiece, GoldenInputIdsThroughTheModelFolder) {
  TempDir dir("golden_folder");
  fs::copy_file(kGolden / "vocab.txt", dir.path / "vocab.txt");
  std::ofstream(dir.path / "tokenizer_config.json")
      << R"({"do_lower_case": true, "tokenizer_class": "BertTokenizer", "model_max_length": 64})";
  // lower_case=false is overridden by the config.
  const auto tokenizer = load_tokenizer("wordpiece", dir.path.string(), /*lower_case=*/false);
  EXPECT_EQ(tokenizer->model_max_length(), 64);
  EXPECT_EQ(tokenizer->type(), "wordpiece");
  for (const char* model : {"bert-tiny-a", "bert-tiny-b"}) {
    const auto rows = read_jsonl(kGolden / model / "expected.jsonl");
    ASSERT_EQ(rows.size(), 19u);
    for (const auto& row : rows) {
      const std::string text = row["text"];
      EXPECT_EQ(tokenizer->encode(text, 64), row["input_ids"].get<std::vector<int32_t>>()) << text;
    }
  }
}

TEST(WordPiece, SpecialIdsAndVocabSize) {
  const auto special = uncased().special();
  EXPECT_EQ(special.pad, 0);
  EXPECT_EQ(special.unk, 100);
  EXPECT_EQ(special.cls, 101);
  EXPECT_EQ(special.sep, 102);
  EXPECT_EQ(special.mask, 103);
  EXPECT_EQ(uncased().vocab_size(), 30522);
}

// ---- truncation -----------------------------------------------------------------------

TEST(WordPiece, TruncationKeepsTheHeadAndEndsWithSep) {
  const std::string text =
      "The embeddings are trained with a contrastive loss over in-batch negatives.";
  const auto full = uncased().encode(text, 0);
  ASSERT_GT(full.size(), 12u);
  for (int max_length : {3, 5, 8, 12}) {
    const auto ids = uncased().encode(text, max_length);
    ASSERT_EQ(ids.size(), static_cast<size_t>(max_length));
    EXPECT_EQ(std::vector<int32_t>(ids.begin(), ids.end() - 1),
              std::vector<int32_t>(full.begin(), full.begin() + max_length - 1));
    EXPECT_EQ(ids.back(), 102);
  }
  EXPECT_EQ(uncased().encode(text, 2), (std::vector<int32_t>{101, 102}));
  EXPECT_EQ(uncased().encode(text, 1), (std::vector<int32_t>{101, 102}));  // both always
  EXPECT_EQ(uncased().encode(text, static_cast<int>(full.size())), full);
  EXPECT_EQ(uncased().encode(text, 1000), full);
}

// ---- what BertTokenizer does, case by case ---------------------------------------------

TEST(WordPiece, EmptyAndBlankText) {
  EXPECT_EQ(uncased().encode("", 64), (std::vector<int32_t>{101, 102}));
  EXPECT_EQ(uncased().encode(" \t\r\n\u3000 ", 64), (std::vector<int32_t>{101, 102}));
  EXPECT_EQ(uncased().encode(std::string("\0\0", 2), 64), (std::vector<int32_t>{101, 102}));
}

TEST(WordPiece, ChineseCharactersAreWordsOfTheirOwn) {
  EXPECT_EQ(pieces(uncased(), "我爱北京"), (Pieces{"我", "[UNK]", "北", "京"}));
  EXPECT_EQ(pieces(uncased(), "abc中文def"), (Pieces{"abc", "中", "文", "def"}));
  // Hiragana and Hangul are not "Chinese characters": they stay inside words.
  EXPECT_EQ(pieces(uncased(), "ひらがな"), (Pieces{"ひ", "##ら", "##か", "##な"}));
  // CJK compatibility ideographs decompose (NFD) to the unified ones when lower-casing.
  EXPECT_EQ(pieces(uncased(), "\uF9B5"), pieces(uncased(), "\u4F8B"));
}

TEST(WordPiece, AccentsAreStrippedOnlyWhenLowerCasing) {
  EXPECT_EQ(pieces(uncased(), "Héllo Wörld"), (Pieces{"hello", "world"}));
  EXPECT_EQ(pieces(uncased(), "e\u0301"), (Pieces{"e"}));  // a combining mark goes too
  // Cased: the accent stays.
  EXPECT_NE(pieces(cased(), "café"), (Pieces{"cafe"}));
  // İ lower-cases to i + U+0307, and the mark is stripped.
  EXPECT_EQ(pieces(uncased(), "İ"), (Pieces{"i"}));
  // Hangul syllables decompose into jamo when lower-casing, not otherwise.
  EXPECT_EQ(pieces(uncased(), "한"), (Pieces{"ᄒ", "##ᅡ", "##ᆫ"}));
  EXPECT_EQ(pieces(cased(), "한"), (Pieces{"[UNK]"}));  // no syllables in this vocabulary
}

TEST(WordPiece, StripAccentsCanBeSetOnItsOwn) {
  WordPieceOptions options;
  options.lower_case = false;
  options.strip_accents = true;
  std::istringstream vocab_text(read_text(kGolden / "vocab.txt"));
  std::vector<std::string> vocab;
  for (std::string line; std::getline(vocab_text, line);) vocab.push_back(line);
  WordPieceTokenizer tokenizer(vocab, options);
  EXPECT_EQ(pieces(tokenizer, "café"), (Pieces{"cafe"}));
  EXPECT_EQ(pieces(tokenizer, "Café")[0], "[UNK]");  // not lower-cased: "C" is unknown
}

TEST(WordPiece, PunctuationIsSplitOff) {
  EXPECT_EQ(pieces(uncased(), "don't"), (Pieces{"don", "'", "t"}));
  EXPECT_EQ(pieces(uncased(), "a$b^c`d"), (Pieces{"a", "$", "b", "^", "c", "`", "d"}));
  EXPECT_EQ(pieces(uncased(), "«hi»"), (Pieces{"«", "hi", "»"}));
  EXPECT_EQ(pieces(uncased(), "unaffable"), (Pieces{"una", "##ffa", "##ble"}));
}

TEST(WordPiece, ControlAndFormatCharactersVanish) {
  EXPECT_EQ(uncased().encode(std::string("hel\0lo", 6), 0), uncased().encode("hello", 0));
  EXPECT_EQ(uncased().encode("hel\u200blo", 0), uncased().encode("hello", 0));  // Cf
  EXPECT_EQ(uncased().encode("hel\x7flo", 0), uncased().encode("hello", 0));    // Cc
  EXPECT_EQ(uncased().encode("hel\uFFFDlo", 0), uncased().encode("hello", 0));
  EXPECT_EQ(uncased().encode("hel\uE000lo", 0), uncased().encode("hello", 0));  // Co
  // Whitespace of every kind separates words; U+2028 too (Python's str.split()).
  for (const char* space : {"\t", "\n", "\r", "\u00a0", "\u2003", "\u3000", "\u2028", "\u2029"})
    EXPECT_EQ(pieces(uncased(), std::string("hello") + space + "world"), (Pieces{"hello", "world"}))
        << space;
  // \x1c..\x1f and U+0085 are whitespace to Python but control characters to BERT.
  EXPECT_EQ(pieces(uncased(), "hello\x1cworld"), (Pieces{"hello", "##world"}));
}

TEST(WordPiece, SpecialTokensInTheTextKeepTheirIds) {
  EXPECT_EQ(uncased().encode("hello [SEP] world", 0),
            (std::vector<int32_t>{101, 7592, 102, 2088, 102}));
  EXPECT_EQ(pieces(uncased(), "a[MASK]b [PAD][UNK]"),
            (Pieces{"a", "[MASK]", "b", "[PAD]", "[UNK]"}));
  EXPECT_EQ(pieces(cased(), "x[CLS]y"), (Pieces{"x", "[CLS]", "y"}));
  // Only the exact text: lower case is ordinary text.
  EXPECT_EQ(pieces(uncased(), "[cls]"), (Pieces{"[", "cl", "##s", "]"}));
  EXPECT_EQ(pieces(uncased(), "[CLS"), (Pieces{"[", "cl", "##s"}));
  // A word that becomes "[CLS]" after cleaning stays whole (never_split).
  EXPECT_EQ(pieces(cased(), "[C\x01LS]"), (Pieces{"[CLS]"}));
}

TEST(WordPiece, LongWordsAreUnknown) {
  const std::string hundred(100, 'a');
  EXPECT_NE(pieces(uncased(), hundred), (Pieces{"[UNK]"}));
  EXPECT_EQ(pieces(uncased(), hundred + "a"), (Pieces{"[UNK]"}));
  // The limit counts characters after punctuation splitting, not bytes.
  EXPECT_EQ(pieces(uncased(), hundred + "." + hundred).size(),
            2 * pieces(uncased(), hundred).size() + 1);
  std::string accented;
  for (int i = 0; i < 60; ++i) accented += "é";  // 120 bytes, 60 characters
  EXPECT_NE(pieces(uncased(), accented), (Pieces{"[UNK]"}));
}

TEST(WordPiece, IllFormedUtf8IsDroppedNeverACrash) {
  const auto hello = uncased().encode("hello", 0);
  for (const std::string& bad :
       {std::string("hel\xfflo"), std::string("hel\x80lo"), std::string("hel\xc3lo"),
        std::string("hel\xed\xa0\x80lo"), std::string("hel\xc0\xafllo").erase(5, 1),
        std::string("hel\xf4\x90\x80\x80lo"), std::string("hel\xe2\x82lo"),
        std::string("hello\xe2\x82"), std::string("\xf0\x9f\x98hello")}) {
    EXPECT_EQ(uncased().encode(bad, 0), hello) << nlohmann::json(std::string("x")).dump();
  }
  // A truncated sequence never swallows the ASCII byte after it.
  EXPECT_EQ(pieces(uncased(), "a\xe2 b"), (Pieces{"a", "b"}));
  // Random bytes: no crash, ids in range.
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string junk(rng() % 64, '\0');
    for (auto& c : junk) c = static_cast<char>(rng() % 256);
    for (const auto* tokenizer : {&uncased(), &cased()}) {
      const auto ids = tokenizer->encode(junk, round % 2 ? 16 : 0);
      ASSERT_GE(ids.size(), 2u);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tokenizer->vocab_size());
    }
  }
}

TEST(WordPiece, TenMegabyteLine) {
  std::string text;
  text.reserve(10u << 20);
  const char* words[] = {"training ", "sentence ", "embeddings ", "données ", "北京 ", "x, "};
  for (size_t i = 0; text.size() < (10u << 20); ++i) text += words[i % 6];
  auto start = std::chrono::steady_clock::now();
  const auto head = uncased().encode(text, 64);
  const double head_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(head.size(), 64u);
  EXPECT_LT(head_s, 0.1) << "a truncated encoding should stop reading early";

  start = std::chrono::steady_clock::now();
  const auto all = uncased().encode(text, 0);
  const double all_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(all.size(), 1000000u);
  EXPECT_EQ(std::vector<int32_t>(all.begin(), all.begin() + 63),
            std::vector<int32_t>(head.begin(), head.end() - 1));
  EXPECT_LT(all_s, 30.0);

  // One 10 MB word: a single [UNK], without storing the word.
  EXPECT_EQ(uncased().encode(std::string(10u << 20, 'z'), 0),
            (std::vector<int32_t>{101, 100, 102}));
}

TEST(WordPiece, ThreadsGetTheSameIds) {
  std::vector<std::string> texts;
  std::istringstream lines(read_text(kGolden / "texts.txt"));
  for (std::string line; std::getline(lines, line);) texts.push_back(line);
  std::vector<std::vector<int32_t>> expected;
  for (const auto& text : texts) expected.push_back(uncased().encode(text, 64));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int round = 0; round < 200; ++round)
        for (size_t i = 0; i < texts.size(); ++i)
          if (uncased().encode(texts[i], 64) != expected[i]) ++mismatches;
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches.load(), 0);
}

// Prints the speed; asserts nothing about it (machines differ).
TEST(WordPiece, SpeedOnGoldenTexts) {
  std::vector<std::string> texts;
  std::istringstream lines(read_text(kGolden / "texts.txt"));
  for (std::string line; std::getline(lines, line);) texts.push_back(line);
  size_t total = 0, sentences = 0;
  const auto start = std::chrono::steady_clock::now();
  double seconds = 0;
  while (seconds < 0.5) {
    for (const auto& text : texts) total += uncased().encode(text, 64).size();
    sentences += texts.size();
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  EXPECT_GT(total, 0u);
  std::printf("[ speed    ] WordPiece (uncased): %.0f sentences/s, %.0f tokens/s, one thread\n",
              sentences / seconds, total / seconds);
}

// ---- files ----------------------------------------------------------------------------

TEST(WordPiece, SaveAndLoadRoundTrip) {
  TempDir dir("save");
  auto original = WordPieceTokenizer::load((kGolden / "vocab.txt").string(), false);
  original->set_model_max_length(128);
  original->save(dir.path.string());
  EXPECT_EQ(read_text(dir.path / "vocab.txt"), read_text(kGolden / "vocab.txt"));
  const auto config = nlohmann::json::parse(read_text(dir.path / "tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(config["do_lower_case"], false);
  EXPECT_EQ(config["model_max_length"], 128);
  const auto map = nlohmann::json::parse(read_text(dir.path / "special_tokens_map.json"));
  EXPECT_EQ(map["cls_token"], "[CLS]");
  EXPECT_EQ(map["mask_token"], "[MASK]");

  const auto loaded = load_tokenizer("wordpiece", dir.path.string(), /*lower_case=*/true);
  EXPECT_EQ(loaded->model_max_length(), 128);
  for (const char* text : {"Hello World", "Café déjà vu", "我爱北京"})
    EXPECT_EQ(loaded->encode(text, 64), original->encode(text, 64)) << text;
  EXPECT_NE(loaded->encode("Hello", 64), uncased().encode("Hello", 64));  // still cased
}

TEST(WordPiece, VocabWithWindowsLineEnds) {
  TempDir dir("crlf");
  std::ofstream(dir.path / "vocab.txt", std::ios::binary)
      << "[PAD]\r\n[UNK]\r\n[CLS]\r\n[SEP]\r\nhello\r\n##s\r\n";
  const auto tokenizer = load_tokenizer("wordpiece", (dir.path / "vocab.txt").string());
  EXPECT_EQ(tokenizer->vocab_size(), 6);
  EXPECT_EQ(tokenizer->encode("hellos hi", 0), (std::vector<int32_t>{2, 4, 5, 1, 3}));
  EXPECT_EQ(tokenizer->special().mask, 1);  // no [MASK]: falls back to [UNK]
}

TEST(WordPiece, ErrorsNameThePath) {
  const std::string missing = "/nonexistent/dir/vocab.txt";
  try {
    load_tokenizer("wordpiece", missing);
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  TempDir dir("errors");
  try {
    load_tokenizer("wordpiece", dir.path.string());
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path.string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("vocab.txt"), std::string::npos) << e.what();
  }
  std::ofstream(dir.path / "vocab.txt") << "[PAD]\n[CLS]\n[SEP]\nhello\n";
  try {
    load_tokenizer("wordpiece", dir.path.string());
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("[UNK]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(dir.path.string()), std::string::npos) << e.what();
  }
  std::ofstream(dir.path / "vocab.txt") << "[PAD]\n[UNK]\n[CLS]\n[SEP]\n";
  std::ofstream(dir.path / "tokenizer_config.json") << "{not json";
  try {
    load_tokenizer("wordpiece", dir.path.string());
    FAIL() << "no error";
  } catch (const TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_tokenizer("bpe", dir.path.string()), TokenizerError);
}

}  // namespace
}  // namespace ddp_embed
