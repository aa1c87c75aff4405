// What the data tests share: the golden BERT vocabulary's WordPiece tokenizer, a
// temporary folder that cleans up after itself, and the comparison of two loaded datasets.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "data/pairs.h"
#include "tokenize/wordpiece.h"
#include "temp_dir.h"

namespace ddp_embed::testing {

namespace fs = std::filesystem;

inline const fs::path kVocab = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden/vocab.txt";

// Lower-casing, as bert-base-uncased.
inline const Tokenizer& bert() {
  static const auto tokenizer = WordPieceTokenizer::load(kVocab.string(), true);
  return *tokenizer;
}

inline bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Every sequence's ids and hash, every pair's record, and the dataset's flags.
inline void expect_same_dataset(const PairDataset& got, const PairDataset& want, const std::string& what) {
  SCOPED_TRACE(what);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_EQ(got.tokens.num_sequences(), want.tokens.num_sequences());
  for (int64_t s = 0; s < want.tokens.num_sequences(); ++s) {
    ASSERT_EQ(got.tokens.ids(s), want.tokens.ids(s)) << "sequence " << s;
    ASSERT_EQ(got.text_hashes[size_t(s)], want.text_hashes[size_t(s)]) << "sequence " << s;
  }
  for (int64_t i = 0; i < want.size(); ++i) {
    const PairIndex &a = got.pairs[size_t(i)], &b = want.pairs[size_t(i)];
    ASSERT_EQ(a.query, b.query) << "pair " << i;
    ASSERT_EQ(a.pos_begin, b.pos_begin) << "pair " << i;
    ASSERT_EQ(a.pos_count, b.pos_count) << "pair " << i;
    ASSERT_EQ(a.neg_begin, b.neg_begin) << "pair " << i;
    ASSERT_EQ(a.neg_count, b.neg_count) << "pair " << i;
    ASSERT_EQ(a.score, b.score) << "pair " << i;
  }
  ASSERT_EQ(got.teacher_scores.size(), want.teacher_scores.size());
  for (size_t s = 0; s < want.teacher_scores.size(); ++s)
    ASSERT_TRUE(same_float(got.teacher_scores[s], want.teacher_scores[s])) << "sequence " << s;
  EXPECT_EQ(got.has_scores, want.has_scores);
  EXPECT_EQ(got.all_teacher_scored, want.all_teacher_scored);
  EXPECT_EQ(got.lines, want.lines);
}

}  // namespace ddp_embed::testing
