// sentencepiece: training on pair files, special ids, encoding, save/load, errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "data/text_corpus.h"
#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/tokenizer.h"
#include "temp_dir.h"
#include "python_fixtures.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

using ddp_embed::testing::TempDir;

using python_fixtures::read_text;

// train_sentencepiece on the sentences of `files` (data/text_corpus.h).
void train_on_files(const std::vector<std::string>& files, int vocab_size, const fs::path& output) {
  std::vector<DataFile> data;
  for (const auto& file : files) data.push_back({file, table_format_of(file)});
  TextCorpus corpus({{data, {}, ""}});
  train_sentencepiece([&corpus](std::string& sentence) { return corpus.next(sentence); }, vocab_size, output.string(),
                      files.front());
}

// A few hundred everyday English sentences, made from parts so that words recur (as in
// real text) while the vocabulary stays varied enough for a 200-piece model.
std::vector<std::string> english_sentences() {
  const std::vector<std::string> subjects = {
      "The old fisherman",        "A young architect",      "My next-door neighbour",
      "The history teacher",      "Our volleyball team",    "The little brown dog",
      "Her youngest brother",     "A tired student",        "The hotel chef",
      "Every curious child",      "The night-shift doctor", "His grandmother",
      "The mayor of the village", "A quiet librarian",      "Two retired sailors",
      "The new manager",          "Somebody in the crowd",  "The taxi driver",
      "A famous violinist",       "The village baker"};
  const std::vector<std::string> verbs = {
      "is reading",        "was repairing",  "will paint", "has cleaned",       "really enjoys",
      "is watching",       "quickly bought", "is cooking", "completely forgot", "finally found",
      "carefully wrapped", "borrowed",       "described",  "photographed",      "ordered"};
  const std::vector<std::string> objects = {"a second-hand guitar",
                                            "the Sunday newspaper",
                                            "an apple pie",
                                            "the kitchen floor",
                                            "a bright red bicycle",
                                            "the evening news",
                                            "some fresh bread",
                                            "the broken garden fence",
                                            "a surprisingly long letter",
                                            "the train tickets",
                                            "a small oil painting",
                                            "the football match",
                                            "three jars of honey",
                                            "a wooden chess board",
                                            "the instructions for the washing machine",
                                            "a map of the mountains",
                                            "the neighbours' cat",
                                            "an umbrella with yellow stripes",
                                            "a heavy winter coat",
                                            "the recipe for onion soup"};
  const std::vector<std::string> endings = {" in the morning.",
                                            " before dinner.",
                                            " with great care.",
                                            " at the railway station.",
                                            " again today.",
                                            " during the thunderstorm.",
                                            " after the long meeting.",
                                            " without telling anyone.",
                                            " next to the harbour.",
                                            " while humming a song.",
                                            "."};
  std::vector<std::string> out;
  size_t i = 0;
  for (const auto& s : subjects)
    for (const auto& v : verbs)
      for (const auto& o : objects) {
        ++i;
        if (i % 13 != 0) continue;  // a varied subset of about 460 sentences
        out.push_back(s + " " + v + " " + o + endings[(i / 13) % endings.size()]);
      }
  return out;
}

// JSONL pair records over those sentences, in the formats load_pairs() accepts.
void write_pairs(const fs::path& file) {
  const auto sentences = english_sentences();
  std::ofstream out(file);
  for (size_t i = 0; i + 2 < sentences.size(); i += 3) {
    nlohmann::json record;
    switch (i % 3) {
      case 0:
        record = {
            {"query", sentences[i]}, {"pos", {sentences[i + 1]}}, {"neg", {sentences[i + 2]}}};
        break;
      case 1:
        record = {{"anchor", sentences[i]},
                  {"positive", sentences[i + 1]},
                  {"negative", sentences[i + 2]}};
        break;
      default:
        record = {{"text1", sentences[i]}, {"text2", sentences[i + 1]}, {"score", 3.5}};
        out << nlohmann::json({{"text", sentences[i + 2]}}).dump() << "\n";
    }
    out << record.dump() << "\n";
  }
}

// One model for the whole suite, trained when a test first asks for it: training takes a
// moment.
class SentencePiece : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static fs::path model_dir() {
    if (!dir_) {
      dir_ = new TempDir("trained");
      write_pairs(dir_->path / "pairs.jsonl");
      train_on_files({(dir_->path / "pairs.jsonl").string()}, 200, dir_->path / "tok");
    }
    return dir_->path / "tok";
  }
  static TempDir* dir_;
};
TempDir* SentencePiece::dir_ = nullptr;

TEST_F(SentencePiece, WritesTheHuggingFaceFiles) {
  EXPECT_TRUE(fs::exists(model_dir() / "spiece.model"));
  const auto config = nlohmann::json::parse(read_text(model_dir() / "tokenizer_config.json"));
  EXPECT_EQ(config["tokenizer_class"], "AlbertTokenizer");
  EXPECT_EQ(config["do_lower_case"], false);
  EXPECT_EQ(config["keep_accents"], true);
  EXPECT_EQ(config["cls_token"], "[CLS]");
  EXPECT_EQ(config["pad_token"], "[PAD]");
  const auto map = nlohmann::json::parse(read_text(model_dir() / "special_tokens_map.json"));
  for (const auto& [key, value] : std::map<std::string, std::string>{{"cls_token", "[CLS]"},
                                                                     {"sep_token", "[SEP]"},
                                                                     {"pad_token", "[PAD]"},
                                                                     {"unk_token", "[UNK]"},
                                                                     {"mask_token", "[MASK]"}})
    EXPECT_EQ(map[key], value) << key;
}

TEST_F(SentencePiece, SpecialIdsAreBertsOrder) {
  const auto tokenizer = load_tokenizer("sentencepiece", model_dir().string());
  EXPECT_EQ(tokenizer->type(), "sentencepiece");
  EXPECT_EQ(tokenizer->vocab_size(), 200);
  const SpecialIds special = tokenizer->special();
  EXPECT_EQ(special.pad, 0);
  EXPECT_EQ(special.unk, 1);
  EXPECT_EQ(special.cls, 2);
  EXPECT_EQ(special.sep, 3);
  EXPECT_EQ(special.mask, 4);
  const auto& sp = dynamic_cast<const SentencePieceTokenizer&>(*tokenizer);
  EXPECT_EQ(sp.piece(0), "[PAD]");
  EXPECT_EQ(sp.piece(1), "[UNK]");
  EXPECT_EQ(sp.piece(2), "[CLS]");
  EXPECT_EQ(sp.piece(3), "[SEP]");
  EXPECT_EQ(sp.piece(4), "[MASK]");
}

TEST_F(SentencePiece, EncodesSeenTextWithoutUnknowns) {
  const auto tokenizer = load_tokenizer("sentencepiece", (model_dir() / "spiece.model").string());
  for (const std::string& text : english_sentences()) {
    const auto ids = tokenizer->encode(text, 0);
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids.front(), 2);
    EXPECT_EQ(ids.back(), 3);
    for (size_t i = 1; i + 1 < ids.size(); ++i) {
      EXPECT_GE(ids[i], 5) << text;  // a real piece: no [UNK], no special
      EXPECT_LT(ids[i], 200);
    }
    EXPECT_EQ(tokenizer->encode(text, 0), ids);  // deterministic
  }
  // Pieces are shorter than the words: a vocabulary of 200 cannot hold all of them.
  EXPECT_GT(tokenizer->encode("The teacher likes the red bicycle.", 0).size(), 8u);
}

TEST_F(SentencePiece, TruncationSpecialTextAndOddInput) {
  const auto tokenizer = load_tokenizer("sentencepiece", model_dir().string());
  const std::string text = "The old man is reading the newspaper in the morning.";
  const auto full = tokenizer->encode(text, 0);
  ASSERT_GT(full.size(), 8u);
  const auto cut = tokenizer->encode(text, 8);
  ASSERT_EQ(cut.size(), 8u);
  EXPECT_EQ(std::vector<int32_t>(cut.begin(), cut.end() - 1),
            std::vector<int32_t>(full.begin(), full.begin() + 7));
  EXPECT_EQ(cut.back(), 3);
  EXPECT_EQ(tokenizer->encode("", 64), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(tokenizer->encode("   ", 64), (std::vector<int32_t>{2, 3}));
  // The special tokens' text stands for their ids, as in Hugging Face's tokenizers.
  const auto masked = tokenizer->encode("The old [MASK] is reading", 0);
  EXPECT_EQ(std::count(masked.begin(), masked.end(), 4), 1);
  EXPECT_EQ(tokenizer->encode("[SEP]", 0), (std::vector<int32_t>{2, 3, 3}));
  // Unknown characters are [UNK]; ill-formed UTF-8 does not crash.
  const auto unknown = tokenizer->encode("猫", 0);
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), 1), unknown.end());
  const auto bad = tokenizer->encode(std::string("The \xff\xfe old \xc3 man"), 0);
  EXPECT_EQ(bad.front(), 2);
  EXPECT_EQ(bad.back(), 3);
}

TEST_F(SentencePiece, SaveAndLoadRoundTrip) {
  TempDir copy("copy");
  const auto original = load_tokenizer("sentencepiece", model_dir().string());
  original->set_model_max_length(96);
  original->save((copy.path / "nested/out").string());
  EXPECT_EQ(read_text(copy.path / "nested/out/spiece.model"),
            read_text(model_dir() / "spiece.model"));
  const auto loaded = load_tokenizer("sentencepiece", (copy.path / "nested/out").string());
  EXPECT_EQ(loaded->model_max_length(), 96);
  for (const char* text : {"A young woman bought a guitar.", "Every child found the bread again"})
    EXPECT_EQ(loaded->encode(text, 64), original->encode(text, 64));
  const SpecialIds a = loaded->special(), b = original->special();
  EXPECT_EQ(std::vector<int32_t>({a.pad, a.unk, a.cls, a.sep, a.mask}),
            std::vector<int32_t>({b.pad, b.unk, b.cls, b.sep, b.mask}));
}

TEST_F(SentencePiece, TrainsOnPlainTextTheSameModelTwice) {
  TempDir dir("plain");
  {
    std::ofstream out(dir.path / "corpus.txt");
    for (const auto& sentence : english_sentences()) out << sentence << "\n\n";
  }
  train_on_files({(dir.path / "corpus.txt").string()}, 150, dir.path / "a");
  train_on_files({(dir.path / "corpus.txt").string()}, 150, dir.path / "b");
  EXPECT_EQ(read_text(dir.path / "a/spiece.model"), read_text(dir.path / "b/spiece.model"));
  const auto tokenizer = load_tokenizer("sentencepiece", (dir.path / "a").string());
  EXPECT_EQ(tokenizer->vocab_size(), 150);
  EXPECT_EQ(tokenizer->special().cls, 2);
}

TEST_F(SentencePiece, ErrorsNameThePath) {
  TempDir dir("errors");
  auto expect_error_naming = [](const std::function<void()>& action, const std::string& path) {
    try {
      action();
      ADD_FAILURE() << "no error for " << path;
    } catch (const std::exception& e) {  // DataError reading the text, TokenizerError loading a model
      EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    }
  };
  const std::string missing = (dir.path / "missing.jsonl").string();
  expect_error_naming([&] { train_on_files({missing}, 100, dir.path / "out"); },
                      missing);
  expect_error_naming([&] { load_tokenizer("sentencepiece", missing); }, missing);
  expect_error_naming([&] { load_tokenizer("sentencepiece", dir.path.string()); },
                      dir.path.string());
  const std::string corrupt = (dir.path / "bad.model").string();
  std::ofstream(corrupt) << "this is not a model";
  expect_error_naming([&] { load_tokenizer("sentencepiece", corrupt); }, corrupt);
  const std::string broken = (dir.path / "broken.jsonl").string();
  std::ofstream(broken) << "{\"query\": \"fine\", \"pos\": \"also fine\"}\n{oops\n";
  expect_error_naming([&] { train_on_files({broken}, 100, dir.path / "out"); },
                      broken + ":2");
  EXPECT_FALSE(fs::exists(dir.path / "out" / "spiece.model"));
}

}  // namespace
}  // namespace ddp_embed
