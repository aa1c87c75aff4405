// Parquet pair files (data/table_files.h), written by the real pyarrow
// (scripts/python/make_parquet_fixtures.py): the same rows as JSONL and as Parquet load to
// the same dataset, and each bad file is an error naming the file and the place.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "data/input_files.h"
#include "data/pairs.h"
#include "data/table_files.h"
#include "data_fixtures.h"
#include "python_fixtures.h"

namespace ddp_embed {
namespace {

using testing::bert;
namespace fs = std::filesystem;

// The fixtures' folder, made once per build folder for the script's contents.
const fs::path& parquet_fixtures() {
  static const fs::path dir = [] {
    const fs::path script = fs::path(DDP_EMBED_SOURCE_DIR) / "scripts/python/make_parquet_fixtures.py";
    return python_fixtures::made_once(
        fs::path(DDP_EMBED_BINARY_DIR) / "test-fixtures" / "parquet",
        python_fixtures::shell_quote(DDP_EMBED_PYTHON) + " " + python_fixtures::shell_quote(script.string()),
        python_fixtures::read_text(script));
  }();
  return dir;
}

std::string fixture(const std::string& name) { return (parquet_fixtures() / name).string(); }

PairDataset load(const std::vector<std::string>& files, bool skip_bad_lines = false) {
  return load_pairs(files, bert(), 32, skip_bad_lines, 2);
}

bool same_float(float a, float b) { return (std::isnan(a) && std::isnan(b)) || a == b; }

// Every sequence's ids and hash, every pair's record, and the dataset's flags.
void expect_same_dataset(const PairDataset& got, const PairDataset& want, const std::string& what) {
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

// The message of the DataError that loading `file` throws ("" when none).
std::string load_error(const std::string& file) {
  try {
    load({file});
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

TEST(TableFiles, SnappyAndZstdFilesLoadTheSameDatasetAsTheirJsonl) {
  const PairDataset jsonl = load({fixture("a.jsonl")});
  ASSERT_EQ(jsonl.size(), 60);
  ASSERT_TRUE(jsonl.has_scores);
  ASSERT_TRUE(jsonl.all_teacher_scored);
  expect_same_dataset(load({fixture("a.parquet")}), jsonl, "a.parquet (Snappy, row groups of 7)");
  expect_same_dataset(load({fixture("a_zstd.parquet")}), jsonl, "a_zstd.parquet");
}

TEST(TableFiles, LargeTypesAndADictionaryColumnLoadAsTheJsonl) {
  expect_same_dataset(load({fixture("a_large.parquet")}), load({fixture("a.jsonl")}), "a_large.parquet");
}

TEST(TableFiles, AGlobOfShardsLoadsAsTheWholeJsonl) {
  expect_same_dataset(load({fixture("a_shards") + "/*.parquet"}), load({fixture("a.jsonl")}), "a_shards/*.parquet");
}

TEST(TableFiles, AFileIsKnownAsParquetByItsMagicBytes) {
  EXPECT_FALSE(is_parquet_file(fixture("a.jsonl")));
  EXPECT_TRUE(is_parquet_file(fixture("a.data")));
  EXPECT_TRUE(is_parquet_file("no-such-file.parquet"));  // by its name: the reader says it is missing
  expect_same_dataset(load({fixture("a.data")}), load({fixture("a.jsonl")}), "a.data");
}

TEST(TableFiles, SentenceTransformersColumnsLoadAsTheJsonl) {
  const PairDataset jsonl = load({fixture("b.jsonl")});
  ASSERT_EQ(jsonl.size(), 60);
  // negative_1 .. negative_3 in number order, though written 3, 1, 2; "id" not read.
  expect_same_dataset(load({fixture("b.parquet")}), jsonl, "b.parquet");
  expect_same_dataset(load({fixture("b_list.parquet")}), jsonl, "b_list.parquet");
}

TEST(TableFiles, StringViewAndFixedSizeListColumnsLoadAsTheJsonl) {
  expect_same_dataset(load({fixture("b_view.parquet")}), load({fixture("b.jsonl")}), "b_view.parquet");
}

TEST(TableFiles, ColumnsWithoutOurNamesAreTakenByPosition) {
  expect_same_dataset(load({fixture("b_position.parquet")}), load({fixture("b.jsonl")}), "b_position.parquet");
}

TEST(TableFiles, ReadsARowGroupAtATimeInBatchesNeverWhole) {
  std::vector<std::pair<int, int64_t>> batches;  // (row group, first row) of each
  std::vector<size_t> sizes;
  const std::string columns = read_parquet_pairs(fixture("a.parquet"), 4, [&](std::vector<TableRow>& rows) {
    batches.emplace_back(rows.front().row_group, rows.front().row);
    sizes.push_back(rows.size());
    for (size_t r = 0; r < rows.size(); ++r) {
      EXPECT_EQ(rows[r].row_group, rows.front().row_group);
      EXPECT_EQ(rows[r].row, rows.front().row + int64_t(r));
      EXPECT_EQ(rows[r].error, "");
    }
  });
  // 60 rows in row groups of 7 (the last of 4), batches of at most 4 within a group.
  std::vector<std::pair<int, int64_t>> want;
  std::vector<size_t> want_sizes;
  for (int group = 0; group < 9; ++group) {
    const int64_t rows = group < 8 ? 7 : 4;
    for (int64_t first = 0; first < rows; first += 4) {
      want.emplace_back(group, first);
      want_sizes.push_back(size_t(std::min<int64_t>(4, rows - first)));
    }
  }
  EXPECT_EQ(batches, want);
  EXPECT_EQ(sizes, want_sizes);
  EXPECT_EQ(columns, "query \"query\", positive \"pos\", negatives \"neg\", score \"score\", teacher scores "
                     "\"pos_scores\" and \"neg_scores\"");
}

TEST(TableFiles, EachBadFileIsAnErrorNamingTheFileAndThePlace) {
  const struct {
    const char* file;
    std::vector<std::string> says;
  } cases[] = {
      {"misspelled.parquet",
       {"misspelled.parquet: no column for the query (\"query\", \"anchor\" or \"text1\"); the file's columns: "
        "\"querry\", \"pos\" (did you mean \"querry\"?)"}},
      {"int_query.parquet", {"int_query.parquet: column \"query\" (the query) is int64, where text (a string) is expected"}},
      {"struct_pos.parquet",
       {"struct_pos.parquet: column \"pos\" (the positive) is struct<", "where text (a string) or a list of texts is expected"}},
      {"null_query.parquet", {"null_query.parquet: row group 1, row 2: column \"query\" is null"}},
      {"null_in_pos_list.parquet", {"null_in_pos_list.parquet: row group 0, row 1: column \"pos\"[1] is null"}},
      {"empty_query.parquet", {"empty_query.parquet: row group 0, row 1: column \"query\" is empty"}},
      {"no_rows.parquet", {"no_rows.parquet: no pairs"}},
      {"one_column.parquet", {"one_column.parquet: a pair needs two text columns", "\"text\""}},
      {"label_text.parquet", {"label_text.parquet: column \"label\"", "is string, where a number or a list of numbers is expected"}},
      {"scores_count.parquet",
       {"scores_count.parquet: row group 0, row 0: column \"label\" has 2 scores for 3 candidates (positives, then negatives)"}},
      {"empty.parquet", {"empty.parquet: an empty file (0 bytes), where a Parquet file was expected"}},
      {"cut.parquet", {"cut.parquet: not a readable Parquet file (cut short, corrupt, or not Parquet): ", "magic"}},
      {"corrupt_footer.parquet", {"corrupt_footer.parquet: not a readable Parquet file"}},
      {"garbled_footer.parquet", {"garbled_footer.parquet: not a readable Parquet file"}},
      {"corrupt_page.parquet", {"corrupt_page.parquet: row group 3 (of 9) cannot be read (a corrupt file?): "}},
  };
  for (const auto& c : cases) {
    const std::string message = load_error(fixture(std::string("bad/") + c.file));
    for (const auto& part : c.says) EXPECT_NE(message.find(part), std::string::npos) << c.file << " says: " << message;
    // One line without control characters, however Arrow words it and whatever bytes of
    // the file it quotes (a garbled footer's).
    EXPECT_TRUE(std::none_of(message.begin(), message.end(), [](unsigned char ch) { return ch < 0x20; }))
        << c.file << " says: " << message;
  }
  const std::string missing = (parquet_fixtures() / "bad/no-such.parquet").string();
  EXPECT_EQ(load_error(missing), "cannot open " + missing + ": No such file or directory");
}

TEST(TableFiles, ABadRowIsSkippedAndCountedWithSkipBadLines) {
  const PairDataset data = load({fixture("bad/null_query.parquet")}, /*skip_bad_lines=*/true);
  EXPECT_EQ(data.size(), 6);
  EXPECT_EQ(data.skipped, 1);
  EXPECT_EQ(data.lines, 7);
}

TEST(TableFiles, TwoColumnsForOneRoleAreAnError) {
  const std::vector<TableColumn> columns = {{"query", DDP_EMBED_ARROW_TEXT, "string"},
                                            {"anchor", DDP_EMBED_ARROW_TEXT, "string"},
                                            {"pos", DDP_EMBED_ARROW_TEXT, "string"}};
  try {
    map_pair_columns(columns, "f.parquet");
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_STREQ(e.what(), "f.parquet: columns \"query\" and \"anchor\" both name the query: keep one");
  }
  const std::vector<TableColumn> half = {{"pos_scores", DDP_EMBED_ARROW_NUMBER_LIST, "list<element: double>"},
                                         {"query", DDP_EMBED_ARROW_TEXT, "string"},
                                         {"pos", DDP_EMBED_ARROW_TEXT, "string"}};
  EXPECT_THROW(map_pair_columns(half, "f.parquet"), DataError);
}

TEST(TableFiles, ANumberLabelIsTheScoreAndAListLabelTheTeachersScores) {
  const std::vector<TableColumn> number = {{"sentence1", DDP_EMBED_ARROW_TEXT, "string"},
                                           {"label", DDP_EMBED_ARROW_NUMBER, "int64"},
                                           {"sentence2", DDP_EMBED_ARROW_TEXT, "string"}};
  const PairColumns a = map_pair_columns(number, "f.parquet");
  EXPECT_TRUE(a.by_position);
  EXPECT_EQ(a.query, 0);
  EXPECT_EQ(a.pos, 2);
  EXPECT_EQ(a.score, 1);
  EXPECT_EQ(a.label_scores, -1);
  const std::vector<TableColumn> list = {{"query", DDP_EMBED_ARROW_TEXT, "string"},
                                         {"pos", DDP_EMBED_ARROW_TEXT, "string"},
                                         {"label", DDP_EMBED_ARROW_NUMBER_LIST, "list<element: float>"}};
  const PairColumns b = map_pair_columns(list, "f.parquet");
  EXPECT_FALSE(b.by_position);
  EXPECT_EQ(b.score, -1);
  EXPECT_EQ(b.label_scores, 2);
}

TEST(TableFiles, InputsThatAreNotPairFilesRefuseParquetSayingSo) {
  try {
    open_input_file(fixture("a.data"));
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("a.data is a Parquet file, and only files of pairs"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddp_embed
