// Table files of pairs (data/table_files.h, data/table_file.h) written by the real pyarrow
// (scripts/python/make_parquet_fixtures.py, make_table_fixtures.py): the same rows as JSONL
// and as Parquet, an Arrow IPC stream or file, CSV or TSV load to the same dataset, and
// each bad file is an error naming the file and the place.
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
using testing::expect_same_dataset;
namespace fs = std::filesystem;

// The fixtures' folder, made once per build folder for the script's contents.
const fs::path& parquet_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_parquet_fixtures.py", "parquet");
  return dir;
}

std::string fixture(const std::string& name) { return (parquet_fixtures() / name).string(); }

// The IPC, CSV and TSV fixtures' folder (the rows of parquet_fixtures(), the same seed).
const fs::path& table_fixtures() {
  static const fs::path dir =
      python_fixtures::made_by_script("make_table_fixtures.py", "tables", "", {"make_parquet_fixtures.py"});
  return dir;
}

std::string table(const std::string& name) { return (table_fixtures() / name).string(); }

PairDataset load(const std::vector<std::string>& files, bool skip_bad_lines = false) {
  return load_pairs(files, bert(), 32, skip_bad_lines, 2);
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
  const std::string columns = read_table_pairs(fixture("a.parquet"), TableFormat::Parquet, {}, 4, [&](std::vector<TableRow>& rows) {
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

// ---- Arrow IPC, CSV and TSV ------------------------------------------------------------

namespace ddp_embed {
namespace {

// The DataError message of reading `path` as pairs with `names` ("" when none).
std::string read_error(const std::string& path, const ColumnNames& names = {}) {
  try {
    read_table_pairs(path, table_format_of(path), names, 1000, [](std::vector<TableRow>&) {});
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Every row's record, in order.
std::vector<PairRecord> records_of(const std::string& path, const ColumnNames& names = {}) {
  std::vector<PairRecord> out;
  read_table_pairs(path, table_format_of(path), names, 16, [&](std::vector<TableRow>& rows) {
    for (auto& row : rows) {
      EXPECT_EQ(row.error, "") << row.where;
      out.push_back(std::move(row.record));
    }
  });
  return out;
}

TEST(TableFiles, TheFormatIsKnownByTheNameAndTheFirstBytes) {
  EXPECT_EQ(table_format_of(table("a.arrow")), TableFormat::ArrowStream);
  EXPECT_EQ(table_format_of(table("a_file.arrow")), TableFormat::ArrowFile);  // "ARROW1"
  EXPECT_EQ(table_format_of(table("a.feather")), TableFormat::ArrowFile);
  EXPECT_EQ(table_format_of(table("a_saved/data-00000-of-00001.arrow")), TableFormat::ArrowStream);
  EXPECT_EQ(table_format_of(table("b.csv")), TableFormat::Csv);
  EXPECT_EQ(table_format_of("x/pairs.CSV.gz"), TableFormat::Csv);
  EXPECT_EQ(table_format_of(table("b.tsv")), TableFormat::Tsv);
  EXPECT_EQ(table_format_of(table("a.jsonl")), TableFormat::Jsonl);
  EXPECT_EQ(table_format_of("no-such-file.arrow"), TableFormat::ArrowStream);
  EXPECT_EQ(table_format_of(fixture("a.data")), TableFormat::Parquet);
}

TEST(TableFiles, IpcStreamsIpcFilesAndASaveToDiskShardLoadTheSameDatasetAsTheirJsonl) {
  const PairDataset jsonl = load({table("a.jsonl")});
  ASSERT_EQ(jsonl.size(), 60);
  ASSERT_TRUE(jsonl.all_teacher_scored);
  expect_same_dataset(load({table("a.arrow")}), jsonl, "a.arrow (an IPC stream, record batches of 7)");
  expect_same_dataset(load({table("a_file.arrow")}), jsonl, "a_file.arrow (an IPC file)");
  expect_same_dataset(load({table("a.feather")}), jsonl, "a.feather (Zstd buffers)");
  expect_same_dataset(load({table("a_saved/data-00000-of-00001.arrow")}), jsonl, "datasets' save_to_disk shard");
}

TEST(TableFiles, CsvAndTsvWithQuotedFieldsLoadTheSameDatasetAsTheirJsonl) {
  const PairDataset b = load({table("b.jsonl")});
  ASSERT_EQ(b.size(), 60);
  expect_same_dataset(load({table("b.csv")}), b, "b.csv (negative_1 .. negative_3)");
  expect_same_dataset(load({table("b.tsv")}), b, "b.tsv");
  // Commas, tabs, doubled quotes and a line break inside quoted fields; a score column.
  const PairDataset c = load({table("c.jsonl")});
  ASSERT_EQ(c.size(), 60);
  ASSERT_TRUE(c.has_scores);
  expect_same_dataset(load({table("c.csv")}), c, "c.csv");
  expect_same_dataset(load({table("c.tsv")}), c, "c.tsv");
  expect_same_dataset(load({table("c.csv.gz")}), c, "c.csv.gz");
  EXPECT_EQ(records_of(table("c.csv"))[30].pos.at(0).substr(0, 24), "first line\nsecond line, ");
}

TEST(TableFiles, ACsvQueryColumnThatLooksLikeNumbersIsReadAsText) {
  const std::vector<PairRecord> records = records_of(table("ids.csv"));
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(records[0].query, "007");  // not 7
  EXPECT_EQ(records[2].query, "3.50");
  EXPECT_EQ(records[3].query, "1e3");
  expect_same_dataset(load({table("ids.csv")}), load({table("ids.jsonl")}), "ids.csv");
}

TEST(TableFiles, ExplicitColumnNamesMapColumnsOfNoNameOfOurs) {
  const ColumnNames names{"premise", "hypothesis", {"c1", "c2", "c3"}, ""};
  const std::vector<PairRecord> named = records_of(table("b_named.arrow"), names);
  const std::vector<PairRecord> want = records_of(table("b.csv"));
  ASSERT_EQ(named.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(named[i].query, want[i].query) << "row " << i;
    EXPECT_EQ(named[i].pos, want[i].pos) << "row " << i;
    EXPECT_EQ(named[i].neg, want[i].neg) << "row " << i;
  }
  // Without the names, "id" (a number) is the first column: no query by position.
  EXPECT_NE(read_error(table("b_named.arrow")).find("column \"id\" (the query, as the first column) is int64"),
            std::string::npos);
  // Naming two of the negatives reads those two alone.
  const std::vector<PairRecord> two = records_of(table("b_named.arrow"), ColumnNames{"premise", "hypothesis", {"c3", "c1"}, ""});
  ASSERT_EQ(two.size(), want.size());
  EXPECT_EQ(two[0].neg, (std::vector<std::string>{want[0].neg[2], want[0].neg[0]}));
}

TEST(TableFiles, AMisspelledExplicitColumnSaysDidYouMean) {
  const std::string message = read_error(table("b_named.arrow"), ColumnNames{"premis", "hypothesis", {}, ""});
  EXPECT_NE(message.find("b_named.arrow: no column \"premis\" (named for the query in the source's columns); the "
                         "file's columns: \"id\", \"premise\", \"hypothesis\", \"c1\", \"c2\", \"c3\" (did you mean "
                         "\"premise\"?)"),
            std::string::npos)
      << message;
  EXPECT_NE(read_error(table("b.csv"), ColumnNames{"", "", {}, "scroe"}).find("no column \"scroe\" (named for the score"),
            std::string::npos);
}

TEST(TableFiles, IpcIsReadARecordBatchAtATimeInBatchesNeverWhole) {
  struct Case {
    const char* file;
    int64_t batch_rows;  // the file's record batches
  } cases[] = {{"a.arrow", 7}, {"a_file.arrow", 16}, {"a.feather", 16}};
  for (const auto& c : cases) {
    std::vector<std::pair<int, int64_t>> batches, want;
    std::vector<std::string> wheres, want_wheres;
    read_table_pairs(table(c.file), table_format_of(table(c.file)), {}, 4, [&](std::vector<TableRow>& rows) {
      batches.emplace_back(rows.front().row_group, rows.front().row);
      for (const auto& row : rows) wheres.push_back(row.where);
    });
    for (int64_t first = 0; first < 60; first += c.batch_rows)
      for (int64_t row = 0; row < std::min<int64_t>(c.batch_rows, 60 - first); ++row) {
        if (row % 4 == 0) want.emplace_back(int(first / c.batch_rows), row);
        want_wheres.push_back("record batch " + std::to_string(first / c.batch_rows) + ", row " + std::to_string(row));
      }
    EXPECT_EQ(batches, want) << c.file;
    EXPECT_EQ(wheres, want_wheres) << c.file;
  }
}

TEST(TableFiles, CsvIsReadABlockAtATimeInBatchesNeverWhole) {
  // 40000 rows, about 4 MB: the rows of the blocks before line 39002's come out before
  // its error, in batches of at most 1000, each row at its line.
  int64_t rows_before = 0;
  std::string error;
  try {
    read_table_pairs(table("big.csv"), TableFormat::Csv, {}, 1000, [&](std::vector<TableRow>& rows) {
      EXPECT_LE(rows.size(), 1000u);
      for (const auto& row : rows) {
        ASSERT_EQ(row.where, "line " + std::to_string(rows_before + 2));
        ASSERT_EQ(row.record.query, "query number " + std::to_string(rows_before) + " about rivers and banks");
        ++rows_before;
      }
    });
  } catch (const DataError& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("big.csv: line 39002: 3 fields where the header has 2"), std::string::npos) << error;
  EXPECT_GT(rows_before, 20000);  // the blocks before it
  EXPECT_LT(rows_before, 39000);  // not the rows of its block
}

TEST(TableFiles, ATableFileSaysItsRowGroupsWhereTheyAreKnownAndReadsARangeOfThem) {
  TableFile parquet(fixture("a.parquet"), TableFormat::Parquet);
  EXPECT_EQ(parquet.num_rows(), 60);
  ASSERT_EQ(parquet.num_row_groups(), 9);  // row groups of 7
  EXPECT_EQ(parquet.row_group_rows(8), 4);
  EXPECT_EQ(parquet.row_group_rows(9), -1);
  TableFile ipc_file(table("a_file.arrow"), TableFormat::ArrowFile);
  EXPECT_EQ(ipc_file.num_row_groups(), 4);  // record batches of 16
  EXPECT_EQ(ipc_file.num_rows(), -1);
  TableFile stream(table("a.arrow"), TableFormat::ArrowStream);
  EXPECT_EQ(stream.num_row_groups(), -1);
  TableFile csv(table("c.csv"), TableFormat::Csv);
  EXPECT_EQ(csv.num_row_groups(), -1);
  ASSERT_EQ(csv.columns().size(), 4u);
  EXPECT_EQ(csv.columns()[3].kind, DDP_EMBED_ARROW_NUMBER);  // "score", as Arrow infers it
  EXPECT_TRUE(csv.columns()[0].text_readable);
  // Row groups 2 and 3 of each: rows 14 to 27 of Parquet, 32 to 63 (60) of the IPC file.
  const std::vector<PairRecord> all = records_of(table("a.arrow"));
  for (TableFile* file : {&parquet, &ipc_file}) {
    file->select({0}, {}, 5, 2, 4);
    std::vector<std::string> queries;
    while (const int64_t rows = file->next_batch())
      for (int64_t r = 0; r < rows; ++r) {
        std::string_view text;
        double number = 0;
        ASSERT_EQ(file->text(0, r, text), 1);
        EXPECT_EQ(file->number(0, r, number), -1);  // not a number
        queries.emplace_back(text);
      }
    const int64_t first = file == &parquet ? 14 : 32, end = file == &parquet ? 28 : 60;
    ASSERT_EQ(int64_t(queries.size()), end - first) << file->path();
    for (int64_t i = first; i < end; ++i) EXPECT_EQ(queries[size_t(i - first)], all[size_t(i)].query);
  }
  try {
    stream.select({0}, {}, 5, 1, 2);
    FAIL() << "no error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no row groups known before reading; read it whole"), std::string::npos)
        << e.what();
  }
}

TEST(TableFiles, EachBadIpcOrCsvFileIsAnErrorNamingTheFileAndThePlace) {
  const struct {
    const char* file;
    std::vector<std::string> says;
  } cases[] = {
      {"bad/fields.csv", {"bad/fields.csv: line 5: 3 fields where the header has 2: g,h,i"}},
      {"bad/cut.arrow", {"bad/cut.arrow: record batch 4 cannot be read (a cut or corrupt file?): "}},
      {"bad/unended.arrow",
       {"bad/unended.arrow: record batch 9 cannot be read (a cut or corrupt file?): ",
        "the stream ends after 9 record batches without its end-of-stream marker"}},
      {"bad/empty.csv", {"bad/empty.csv: an empty file (0 bytes), where a CSV file was expected"}},
      {"bad/empty_pos.csv", {"bad/empty_pos.csv: line 3: column \"pos\" is empty"}},
      {"bad/late_score.csv",
       {"bad/late_score.csv: line 60001: column \"score\": CSV conversion error to double: invalid value 'abc' (its "
        "type, double, is what the file's first rows hold)"}},
      {"bad/not_arrow.arrow", {"bad/not_arrow.arrow: not a readable Arrow IPC stream (cut short, corrupt, or not "
                               "Arrow IPC): "}},
  };
  for (const auto& c : cases) {
    const std::string message = load_error(table(c.file));
    for (const auto& part : c.says) EXPECT_NE(message.find(part), std::string::npos) << c.file << " says: " << message;
    EXPECT_TRUE(std::none_of(message.begin(), message.end(), [](unsigned char ch) { return ch < 0x20; }))
        << c.file << " says: " << message;
  }
}

}  // namespace
}  // namespace ddp_embed
