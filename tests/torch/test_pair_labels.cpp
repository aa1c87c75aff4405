// What the loss is told about a batch's candidates (train/batches.h PairBatch::labels):
// the text hashes and teacher scores belong to the very texts make_pair_batch took —
// the epoch's positive and the rotated hard negatives — and a pair without teacher
// scores is a bad line when distillation needs them.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <fstream>
#include <sstream>
#include <vector>

#include "data/pairs.h"
#include "train/batches.h"
#include "tokenize/wordpiece.h"

using namespace ddp_embed;

namespace {

const std::string kVocab = std::string(DDP_EMBED_SOURCE_DIR) + "/tests/fixtures/golden/vocab.txt";

const Tokenizer& bert() {
  static const auto tokenizer = WordPieceTokenizer::load(kVocab, true);
  return *tokenizer;
}

// Every candidate text has a score of its own, so a score names its text.
const char* const kScored =
    R"({"query": "q zero", "pos": ["alpha", "beta", "gamma"], "neg": ["one", "two", "three", "four"], "pos_scores": [10, 11, 12], "neg_scores": [1, 2, 3, 4]})"
    "\n"
    R"({"anchor": "q one", "positive": "delta", "negative": ["five"], "label": [13, 5]})"
    "\n"
    R"({"query": "q two", "pos": ["epsilon", "zeta"], "neg": ["six", "seven", "eight"], "pos_scores": [14, 15], "neg_scores": [6, 7, 8]})"
    "\n";
const std::map<float, std::string> kTextOfScore = {
    {10, "alpha"}, {11, "beta"}, {12, "gamma"}, {13, "delta"}, {14, "epsilon"}, {15, "zeta"}, {1, "one"},
    {2, "two"},    {3, "three"}, {4, "four"},   {5, "five"},   {6, "six"},      {7, "seven"},  {8, "eight"}};

PairDataset load(const std::string& text, bool require_teacher_scores = false, bool skip_bad_lines = false) {
  std::istringstream in(text);
  if (!require_teacher_scores) return load_pairs(in, "pairs.jsonl", bert(), 16, skip_bad_lines);
  const std::string path = ::testing::TempDir() + "/pairs-labels.jsonl";
  std::ofstream(path) << text;
  return load_sources({SourceInput{"train", {path}, "", "", true}}, bert(), 16, skip_bad_lines);
}

}  // namespace

TEST(PairLabels, HashesAndTeacherScoresFollowTheTextsTaken) {
  const PairDataset data = load(kScored);
  ASSERT_TRUE(data.all_teacher_scored);
  std::set<std::string> positives_seen, first_negatives_seen;
  for (int64_t epoch = 0; epoch < 12; ++epoch) {
    const PairBatch b = make_pair_batch(data, {0, 1, 2}, epoch, 42, /*negatives_per_query=*/2);
    const CandidateLabels& l = b.labels;
    ASSERT_EQ(l.hashes.sizes().vec(), (std::vector<int64_t>{3 + 5}));  // 3 positives, 2 + 1 + 2 negatives
    ASSERT_EQ(l.groups.sizes().vec(), (std::vector<int64_t>{3, 3}));
    ASSERT_EQ(l.teacher_scores.sizes().vec(), (std::vector<int64_t>{3, 3}));
    for (int64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(l.groups[i][0].item<int64_t>(), i) << "a group starts with the query's positive";
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t row = l.groups[i][j].item<int64_t>();
        const float score = l.teacher_scores[i][j].item<float>();
        if (row < 0) {  // pair 1 has one negative: its group ends early
          EXPECT_EQ(i, 1);
          EXPECT_TRUE(std::isnan(score));
          continue;
        }
        ASSERT_EQ(kTextOfScore.count(score), 1u) << score;
        const std::string& text = kTextOfScore.at(score);
        // The score is the one of the text in that row: its hash says which text it is.
        EXPECT_EQ(uint64_t(l.hashes[row].item<int64_t>()), text_hash(text)) << "epoch " << epoch << " row " << row;
        // Rows: the positives first, then each query's negatives in order.
        if (j > 0) {
          EXPECT_GE(row, 3);
        }
        if (i == 0 && j == 0) positives_seen.insert(text);
        if (i == 0 && j == 1) first_negatives_seen.insert(text);
      }
    }
  }
  // The draws vary with the epoch: the alignment was checked on more than the first texts.
  EXPECT_EQ(positives_seen.size(), 3u);
  EXPECT_GE(first_negatives_seen.size(), 3u);
}

TEST(PairLabels, WithoutTeacherScoresOnlyTheHashes) {
  const PairDataset data = load(R"({"query": "a", "pos": "Paris ", "neg": "paris"})"
                                "\n"
                                R"({"query": "b", "pos": "PARIS", "neg": "rome"})"
                                "\n");
  const PairBatch b = make_pair_batch(data, {0, 1}, 0, 1, 1);
  EXPECT_FALSE(b.labels.groups.defined());
  EXPECT_FALSE(b.labels.teacher_scores.defined());
  // Case and spacing aside, "Paris ", "PARIS" and "paris" are one text.
  const at::Tensor h = b.labels.hashes;
  EXPECT_EQ(h[0].item<int64_t>(), h[1].item<int64_t>());
  EXPECT_EQ(h[0].item<int64_t>(), h[2].item<int64_t>());
  EXPECT_NE(h[0].item<int64_t>(), h[3].item<int64_t>());
}

TEST(PairLabels, DistillationMakesAPairWithoutScoresABadLine) {
  const std::string text = std::string(kScored) + R"({"query": "q three", "pos": "eta", "neg": "nine"})" + "\n";
  EXPECT_NO_THROW(load(text));  // without distillation a pair may lack scores
  try {
    load(text, /*require_teacher_scores=*/true);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("pairs-labels.jsonl:4: loss.distill needs teacher scores"), std::string::npos)
        << e.what();
  }
  // A bad line like any other: data.skip_bad_lines skips and counts it.
  const PairDataset kept = load(text, true, /*skip_bad_lines=*/true);
  EXPECT_EQ(kept.size(), 3);
  EXPECT_EQ(kept.skipped, 1);
  EXPECT_TRUE(kept.all_teacher_scored);
}
