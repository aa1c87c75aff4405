// embed-train rerank and the kind checks (train/rerank_inference.h), and the reranked
// order of eval --first-stage (train/rerank_eval.h):
//  - each bad line of rerank's input is an error naming the file and the line, through
//    read_rerank_pairs and through the command;
//  - a bi-encoder folder given to rerank, a cross-encoder folder given to encode, eval
//    (without --first-stage) or mine: an error saying what the folder is and what to use;
//  - scores come back in input order whatever order the pairs are batched in.
// The cross-encoder folders are CrossEncoder(all-MiniLM-L6-v2, num_labels=N).save, made
// once per build folder (scripts/python/rerank_reference.py folders); their scores equal
// CrossEncoder.predict's in Reference.RerankEqualsCrossEncoder.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>

#include "../core/python_fixtures.h"
#include "data/pairs.h"
#include "e2e_support.h"
#include "train/rerank_eval.h"
#include "train/rerank_inference.h"

using namespace e2e;
using ddp_embed::DataError;
using ddp_embed::TextPair;

namespace {

// The two cross-encoder folders: one_label and three_labels.
fs::path rerank_folders() {
  return python_fixtures::made_by_script("rerank_reference.py", "rerank-folders",
                                         "folders --minilm " + python_fixtures::shell_quote(kMiniLM));
}

fs::path rerank_write_lines(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// read_rerank_pairs' DataError for a file of these lines; "" when it reads them.
std::string rerank_input_error(const fs::path& path, const std::string& lines) {
  rerank_write_lines(path, lines);
  try {
    ddp_embed::read_rerank_pairs(path.string());
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

class RerankInput : public ::testing::Test {
 protected:
  fs::path work = fresh_dir("rerank-input");
};

TEST_F(RerankInput, EachSpellingOfAPairIsReadInFileOrderAndBlankLinesAreSkipped) {
  const fs::path file = rerank_write_lines(work / "pairs.jsonl",
                                    "{\"query\": \"q1\", \"doc\": \"d1\"}\n\n"
                                    "{\"query\": \"q2\", \"document\": \"\"}\r\n"
                                    "  \n{\"query\": \"q3\", \"passage\": \"d3\", \"label\": 1}\n"
                                    "{\"text1\": \"q4\", \"text2\": \"d4\"}");
  const std::vector<TextPair> pairs = ddp_embed::read_rerank_pairs(file.string());
  ASSERT_EQ(pairs.size(), 4u);
  const std::vector<std::pair<std::string, std::string>> want = {{"q1", "d1"}, {"q2", ""}, {"q3", "d3"}, {"q4", "d4"}};
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(pairs[i].query, want[i].first) << i;
    EXPECT_EQ(pairs[i].doc, want[i].second) << i;
  }
}

TEST_F(RerankInput, EachBadLineIsAnErrorNamingTheFileAndTheLine) {
  const std::string good = "{\"query\": \"q\", \"doc\": \"d\"}\n";
  struct Case {
    std::string line, says;
  };
  const std::vector<Case> cases = {
      {"{\"query\": \"q\"}", "no document beside \"query\""},
      {"{\"text1\": \"q\", \"doc\": \"d\"}", "no document (\"text2\") beside \"text1\""},
      {"{\"doc\": \"d\"}", "no query"},
      {"{\"query\": \"q\", \"doc\": ", "not valid JSON"},
      {"[\"q\", \"d\"]", "an array, not a JSON object"},
      {"{\"query\": \"q\", \"doc\": 3}", "\"doc\" is a number, not a string"},
      {"{\"query\": null, \"doc\": \"d\"}", "\"query\" is null, not a string"},
      {"{\"query\": \"q\", \"doc\": \"d\", \"passage\": \"p\"}", "both \"doc\" and \"passage\""},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path file = work / ("bad" + std::to_string(i) + ".jsonl");
    const std::string error = rerank_input_error(file, good + "\n" + cases[i].line + "\n" + good);
    EXPECT_NE(error.find(file.string() + ":3: "), std::string::npos) << cases[i].line << " -> " << error;
    EXPECT_NE(error.find(cases[i].says), std::string::npos) << cases[i].line << " -> " << error;
  }
  const fs::path empty = work / "empty.jsonl";
  EXPECT_NE(rerank_input_error(empty, "\n  \n").find(empty.string() + ": no pairs in it"), std::string::npos);
}

// The order of eval --first-stage's final ranking: the top k by score (NaN last, ties in
// first-stage order), the rest as the first stage ranked them.
TEST(RerankedOrder, TopKByScoreNanLastTiesInFirstStageOrderTailUnmoved) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<int64_t> first = {40, 41, 42, 43, 44, 45, 46};
  EXPECT_EQ(ddp_embed::reranked_order(first, {0.1f, nan, 0.5f, 0.1f, 0.9f}),
            (std::vector<int64_t>{44, 42, 40, 43, 41, 45, 46}));
  EXPECT_EQ(ddp_embed::reranked_order(first, {}), first);
  EXPECT_THROW(ddp_embed::reranked_order({1, 2}, {0.f, 0.f, 0.f}), std::invalid_argument);
}

class RerankCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(kMiniLM.empty()) << "the reference environment has no all-MiniLM-L6-v2 (scripts/setup.sh)";
    folders = rerank_folders();
  }
  fs::path work = fresh_dir("rerank-command");
  fs::path folders;
  const std::string embed_train = kThreads + kBin + "/embed-train ";
};

TEST_F(RerankCommand, ABadLineIsAnErrorNamingTheFileAndLine) {
  const fs::path input = rerank_write_lines(work / "pairs.jsonl", "{\"query\": \"q\", \"doc\": \"d\"}\n{\"query\": \"q\"}\n");
  const RunResult r = run(embed_train + "rerank --model " + (folders / "one_label").string() + " --input " +
                          input.string() + " --output " + (work / "scores.jsonl").string());
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(input.string() + ":2: no document"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(work / "scores.jsonl"));
}

TEST_F(RerankCommand, ABiEncoderFolderIsRefusedSayingWhatItIsAndWhatToUse) {
  const fs::path input = rerank_write_lines(work / "pairs.jsonl", "{\"query\": \"q\", \"doc\": \"d\"}\n");
  const RunResult r = run(embed_train + "rerank --model " + kMiniLM + " --input " + input.string() + " --output " +
                          (work / "scores.jsonl").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(kMiniLM + " is a bi-encoder folder"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rerank needs a cross-encoder folder"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("embed-train encode"), std::string::npos) << r.output;
}

// encode, eval (--beir and --data, without --first-stage), mine, and eval --first-stage
// given a cross-encoder as its first stage: each says the folder is a cross-encoder and
// names rerank.
TEST_F(RerankCommand, ACrossEncoderFolderIsRefusedWhereEmbeddingsAreNeeded) {
  const std::string cross = (folders / "one_label").string();
  const fs::path texts = rerank_write_lines(work / "texts.txt", "a sentence\n");
  const fs::path pairs = rerank_write_lines(work / "pairs.jsonl", "{\"query\": \"q\", \"pos\": \"p\"}\n");
  const std::string beir = kSrc + "/data/trecqa_beir";
  const std::vector<std::pair<std::string, std::string>> commands = {
      {"encode", "encode --model " + cross + " --input " + texts.string() + " --output " + (work / "e.npy").string()},
      {"eval --beir", "eval --model " + cross + " --beir " + beir},
      {"eval --data", "eval --model " + cross + " --data " + pairs.string()},
      {"mine", "mine --model " + cross + " --input " + pairs.string() + " --output " + (work / "m.jsonl").string()},
      {"--first-stage", "eval --model " + cross + " --beir " + beir + " --first-stage " + cross},
  };
  for (const auto& [name, args] : commands) {
    const RunResult r = run(embed_train + args);
    EXPECT_EQ(r.exit_code, 1) << name << ": " << r.output;
    EXPECT_NE(r.output.find(cross + " is a cross-encoder folder (BertForSequenceClassification, 1 label)"),
              std::string::npos)
        << name << ": " << r.output;
    EXPECT_NE(r.output.find("embed-train rerank --model " + cross), std::string::npos) << name << ": " << r.output;
  }
}

// Pairs of distinct joined lengths sort into one order whatever order they come in, so
// the batches are the same and each pair's scores are the same bits, at its own place:
// a score written back to another pair's place would show (the scores differ).
TEST_F(RerankCommand, ScoresComeBackInInputOrderWhateverTheBatching) {
  ddp_embed::LoadedModel loaded = ddp_embed::load_model_folder((folders / "three_labels").string());
  std::vector<TextPair> pairs;
  std::string doc = "word";
  for (int i = 0; i < 7; ++i, doc += " more words")
    pairs.push_back({"query " + std::to_string(i), doc});
  std::vector<size_t> permutation = {3, 0, 6, 1, 5, 2, 4};
  std::vector<TextPair> permuted;
  for (size_t p : permutation) permuted.push_back(pairs[p]);
  const ddp_embed::RerankSettings settings{2, c10::kCPU, 64, "rerank"};
  const at::Tensor scores = ddp_embed::score_pairs(loaded, pairs, settings);
  const at::Tensor again = ddp_embed::score_pairs(loaded, permuted, settings);
  ASSERT_EQ(scores.sizes(), (std::vector<int64_t>{7, 3}));
  for (size_t i = 0; i < permutation.size(); ++i)
    EXPECT_TRUE(at::equal(again[int64_t(i)], scores[int64_t(permutation[i])])) << i;
  for (int64_t i = 0; i < 7; ++i)
    for (int64_t j = 0; j < i; ++j) EXPECT_FALSE(at::equal(scores[i], scores[j])) << i << " " << j;
}

}  // namespace
