// A tokenizer's training text from data files of every format (data/text_corpus.h), with
// files written by the real pyarrow and datasets (scripts/python/make_parquet_fixtures.py,
// make_table_fixtures.py): the same rows as JSONL and as a table file give the same
// sentences in the same order, so they train the same sentencepiece model byte for byte;
// a bad row is an error naming its file and place.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "data/text_corpus.h"
#include "python_fixtures.h"
#include "temp_dir.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using ddp_embed::testing::TempDir;

// The fixtures' folders, made once per build folder (the same as test_table_files.cpp's).
const fs::path& corpus_parquet_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_parquet_fixtures.py", "parquet");
  return dir;
}

const fs::path& corpus_table_fixtures() {
  static const fs::path dir =
      python_fixtures::made_by_script("make_table_fixtures.py", "tables", "", {"make_parquet_fixtures.py"});
  return dir;
}

// The corpus of `paths` (files or dataset folders, resolved as data.train resolves them).
TextCorpus corpus_of(const std::vector<fs::path>& paths, const ColumnNames& columns = {}) {
  std::vector<std::string> names;
  for (const auto& path : paths) names.push_back(path.string());
  return TextCorpus({{resolve_data_files(names).files, columns, "data.train.columns"}});
}

std::vector<std::string> sentences_of(const std::vector<fs::path>& paths) {
  TextCorpus corpus = corpus_of(paths);
  std::vector<std::string> out;
  std::string sentence;
  while (corpus.next(sentence)) out.push_back(sentence);
  return out;
}

// spiece.model of a tokenizer trained on `paths` into `output`.
std::string trained_model(const std::vector<fs::path>& paths, const fs::path& output) {
  TextCorpus corpus = corpus_of(paths);
  train_sentencepiece([&corpus](std::string& sentence) { return corpus.next(sentence); }, 100, output.string(),
                      paths.front().string());
  return python_fixtures::read_text(output / "spiece.model");
}

// The message of the DataError that reading all of `path` throws ("" when none).
std::string corpus_error(const fs::path& path) {
  try {
    sentences_of({path});
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Below the trainer's sample of 2 M sentences the model depends on which sentences there are,
// not on their order (the same sentences reversed train the same bytes): the order is
// the claim of the test after this one.
TEST(TextCorpus, ParquetTrainsTheSameTokenizerAsItsJsonlByteForByte) {
  const fs::path& dir = corpus_parquet_fixtures();
  TempDir out("corpus");
  const std::string from_jsonl = trained_model({dir / "a.jsonl"}, out.path / "jsonl");
  ASSERT_GT(from_jsonl.size(), 100u);
  EXPECT_TRUE(from_jsonl == trained_model({dir / "a.parquet"}, out.path / "parquet"))
      << "the tokenizer trained on a.parquet differs from a.jsonl's";
  EXPECT_TRUE(from_jsonl == trained_model({dir / "a_shards"}, out.path / "shards"))
      << "the tokenizer trained on the folder a_shards differs from a.jsonl's";
}

TEST(TextCorpus, EveryTableFormatGivesItsJsonlsSentencesInOrder) {
  const fs::path& parquet = corpus_parquet_fixtures();
  const fs::path& tables = corpus_table_fixtures();
  const std::vector<std::string> a = sentences_of({parquet / "a.jsonl"});
  // 60 rows of a query, one to three positives, zero to four negatives.
  ASSERT_GT(a.size(), 60u * 2);
  EXPECT_EQ(sentences_of({parquet / "a_zstd.parquet"}), a);
  EXPECT_EQ(sentences_of({tables / "a.arrow"}), a);
  EXPECT_EQ(sentences_of({tables / "a_saved"}), a) << "a save_to_disk folder";
  // negative_1 .. negative_3 columns (in number order) against a JSONL list of three.
  const std::vector<std::string> b = sentences_of({parquet / "b.jsonl"});
  ASSERT_EQ(b.size(), 60u * 5);
  EXPECT_EQ(sentences_of({parquet / "b.parquet"}), b);
  EXPECT_EQ(sentences_of({tables / "b.csv"}), b);
  // Quoted commas, tabs and a line break, and gzip.
  const std::vector<std::string> c = sentences_of({tables / "c.jsonl"});
  EXPECT_EQ(sentences_of({tables / "c.csv.gz"}), c);
}

TEST(TextCorpus, ExplicitColumnsChooseTheTextsOfARow) {
  // b_named.arrow: id, premise, hypothesis, c1 .. c3 (no name of ours), the rows of b.
  TextCorpus corpus = corpus_of({corpus_table_fixtures() / "b_named.arrow"}, ColumnNames{"premise", "hypothesis", {"c2"}, ""});
  const std::vector<std::string> b = sentences_of({corpus_parquet_fixtures() / "b.jsonl"});
  std::vector<std::string> got;
  std::string sentence;
  while (corpus.next(sentence)) got.push_back(sentence);
  ASSERT_EQ(got.size(), 60u * 3);
  for (size_t row = 0; row < 60; ++row) {
    EXPECT_EQ(got[row * 3], b[row * 5]) << "row " << row << ": the query";
    EXPECT_EQ(got[row * 3 + 1], b[row * 5 + 1]) << "row " << row << ": the positive";
    EXPECT_EQ(got[row * 3 + 2], b[row * 5 + 3]) << "row " << row << ": the second negative";
  }
}

TEST(TextCorpus, ABadRowNamesItsFileAndPlace) {
  const std::string csv = corpus_error(corpus_table_fixtures() / "bad/fields.csv");
  EXPECT_NE(csv.find("bad/fields.csv: line 5: 3 fields where the header has 2"), std::string::npos) << csv;
  const std::string parquet = corpus_error(corpus_parquet_fixtures() / "bad/null_query.parquet");
  EXPECT_NE(parquet.find("bad/null_query.parquet: row group 1, row 2: column \"query\" is null"), std::string::npos)
      << parquet;
  const std::string list = corpus_error(corpus_parquet_fixtures() / "bad/null_in_pos_list.parquet");
  EXPECT_NE(list.find("bad/null_in_pos_list.parquet: row group 0, row 1: column \"pos\"[1] is null"), std::string::npos)
      << list;
}

TEST(TextCorpus, ColumnsNamedForAJsonlFileAreRefused) {
  TextCorpus corpus = corpus_of({corpus_parquet_fixtures() / "a.jsonl"}, ColumnNames{"question", "", {}, ""});
  std::string sentence;
  try {
    corpus.next(sentence);
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("data.train.columns names columns of table files"), std::string::npos)
        << e.what();
  }
}

TEST(TextCorpus, AnErrorOfTheTextEndsTrainingAsThatError) {
  TempDir out("corpus-error");
  int given = 0;
  try {
    train_sentencepiece(
        [&given](std::string& sentence) {
          if (given == 50) throw DataError("pairs.parquet: row group 0, row 50: column \"query\" is null");
          sentence = "sentence number " + std::to_string(given++);
          return true;
        },
        100, (out.path / "tok").string(), "pairs.parquet");
    ADD_FAILURE() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "pairs.parquet: row group 0, row 50: column \"query\" is null");
  }
  EXPECT_EQ(given, 50);
  EXPECT_FALSE(fs::exists(out.path / "tok" / "spiece.model"));
}

}  // namespace
}  // namespace ddp_embed
