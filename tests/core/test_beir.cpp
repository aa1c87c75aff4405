// BEIR folders (data/beir.h): the files read plain or gzip-compressed (by name or by their
// bytes), a byte-order mark starting a file skipped; what is refused, with the file and
// line: an id holding a byte-order mark, a score that is not an integer, a folder or a loop
// of symbolic links where a file belongs, a file there both plain and compressed. And the
// same set in MTEB's Hub layout (Parquet named by README.md's configs, written by the real
// pyarrow and read back by datasets: scripts/python/make_beir_fixtures.py) reads as its
// BEIR folder, with the same faults refused naming the file, row group and row.
#include "data/beir.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "data_fixtures.h"
#include "python_fixtures.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

using testing::bert;
using testing::TempDir;

const std::string kBeirQueries =
    "{\"_id\": \"q1\", \"text\": \"a question\"}\n{\"_id\": \"q2\", \"text\": \"another question\"}\n";
const std::string kBeirCorpus =
    "{\"_id\": \"d1\", \"title\": \"t\", \"text\": \"an answer\"}\n{\"_id\": \"d2\", \"text\": \"a second answer\"}\n";
const std::string kBeirQrels = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t2\n";

void write_beir_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

void write_beir_gzip(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

// The folder `dir`/`name` with the three files, plain.
fs::path plain_beir(const TempDir& dir, const std::string& name, const std::string& queries = kBeirQueries,
                    const std::string& corpus = kBeirCorpus, const std::string& qrels = kBeirQrels) {
  const fs::path folder = dir / name;
  write_beir_text(folder / "queries.jsonl", queries);
  write_beir_text(folder / "corpus.jsonl", corpus);
  write_beir_text(folder / "qrels" / "test.tsv", qrels);
  return folder;
}

BeirSet load(const fs::path& folder) { return load_beir(folder.string(), "", bert(), 32); }

// The DataError's message of loading `folder`, or "" when it loads.
std::string beir_error(const fs::path& folder) {
  try {
    load(folder);
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

void expect_same_set(const BeirSet& a, const BeirSet& b) {
  EXPECT_EQ(a.query_ids, b.query_ids);
  EXPECT_EQ(a.corpus_ids, b.corpus_ids);
  EXPECT_EQ(a.relevant, b.relevant);
  ASSERT_EQ(a.tokens.num_sequences(), b.tokens.num_sequences());
  for (int64_t s = 0; s < a.tokens.num_sequences(); ++s) EXPECT_EQ(a.tokens.ids(s), b.tokens.ids(s)) << s;
}

TEST(Beir, GzippedFilesAreReadWhetherTheirNameSaysSoOrNot) {
  const TempDir dir("beir_gz");
  const BeirSet plain = load(plain_beir(dir, "plain"));
  ASSERT_EQ(plain.query_ids, (std::vector<std::string>{"q1", "q2"}));
  ASSERT_EQ(plain.relevant, (std::vector<std::vector<int64_t>>{{0}, {1}}));

  // Named: queries.jsonl.gz and qrels/test.tsv.gz (as the Hugging Face copies come);
  // unnamed: gzip's bytes in corpus.jsonl.
  const fs::path gz = dir / "gz";
  write_beir_gzip(gz / "queries.jsonl.gz", kBeirQueries);
  write_beir_gzip(gz / "corpus.jsonl", kBeirCorpus);
  write_beir_gzip(gz / "qrels" / "test.tsv.gz", kBeirQrels);
  EXPECT_EQ(default_beir_split(gz.string()), "test");
  expect_same_set(load(gz), plain);

  // The only split, compressed, is the default one.
  fs::rename(gz / "qrels" / "test.tsv.gz", gz / "qrels" / "dev.tsv.gz");
  EXPECT_EQ(default_beir_split(gz.string()), "dev");
}

TEST(Beir, AByteOrderMarkStartingAFileIsSkipped) {
  const TempDir dir("beir_bom");
  const std::string bom = "\xEF\xBB\xBF";
  // The qrels without a header: the mark sits right before the first query id.
  const fs::path folder =
      plain_beir(dir, "bom", bom + kBeirQueries, bom + kBeirCorpus, bom + "q1\td1\t1\nq2\td2\t2\n");
  expect_same_set(load(folder), load(plain_beir(dir, "plain")));
}

TEST(Beir, AnIdHoldingAByteOrderMarkIsAnErrorNamingFileAndLine) {
  const TempDir dir("beir_bom_id");
  // Two qrels files joined with cat: the second one's mark lands inside "q2".
  EXPECT_NE(beir_error(plain_beir(dir, "joined", kBeirQueries, kBeirCorpus,
                                  "\xEF\xBB\xBFquery-id\tcorpus-id\tscore\nq1\td1\t1\n\xEF\xBB\xBFq2\td2\t2\n"))
                .find("joined/qrels/test.tsv:3: an id holds a byte-order mark (U+FEFF), at byte 0 of \"q2\": ids are "
                      "compared byte for byte, so it would match nothing: remove the mark"),
            std::string::npos);
  // Inside a JSON id, written as an escape, past the start.
  const std::string message = beir_error(plain_beir(
      dir, "escaped", kBeirQueries, "{\"_id\": \"d1\", \"text\": \"a\"}\n{\"_id\": \"d\\ufeff2\", \"text\": \"b\"}\n"));
  EXPECT_NE(message.find("escaped/corpus.jsonl:2: an id holds a byte-order mark (U+FEFF), at byte 1 of \"d2\""),
            std::string::npos)
      << message;
}

TEST(Beir, AScoreThatIsNotAnIntegerIsAnErrorOnTheFirstLineToo) {
  const TempDir dir("beir_score");
  // Without a header the first line is a judgement: "0.5" is refused, not taken for a header.
  std::string message = beir_error(plain_beir(dir, "first", kBeirQueries, kBeirCorpus, "q1\td1\t0.5\nq2\td2\t1\n"));
  EXPECT_NE(message.find("first/qrels/test.tsv:1: the score \"0.5\" is not an integer"), std::string::npos) << message;
  message = beir_error(plain_beir(dir, "later", kBeirQueries, kBeirCorpus, kBeirQrels + "q1\td2\t1.0\n"));
  EXPECT_NE(message.find("later/qrels/test.tsv:4: the score \"1.0\" is not an integer"), std::string::npos) << message;
  // A header in other words is still a header: its score field is a word.
  const BeirSet other = load(plain_beir(dir, "other", kBeirQueries, kBeirCorpus, "qid\tdocid\trel\nq1\td1\t1\n"));
  EXPECT_EQ(other.query_ids, std::vector<std::string>{"q1"});
}

TEST(Beir, AFolderOrALoopOfLinksWhereAFileBelongsIsNamed) {
  const TempDir dir("beir_paths");
  const fs::path folder = plain_beir(dir, "folder");
  fs::remove(folder / "corpus.jsonl");
  fs::create_directories(folder / "corpus.jsonl");
  EXPECT_NE(beir_error(folder).find("folder/corpus.jsonl: is a folder, a file was expected"), std::string::npos)
      << beir_error(folder);

  const fs::path split = plain_beir(dir, "split");
  fs::remove(split / "qrels" / "test.tsv");
  fs::create_directories(split / "qrels" / "test.tsv");
  EXPECT_NE(beir_error(split).find("split/qrels/test.tsv: is a folder, a file was expected"), std::string::npos)
      << beir_error(split);

  const fs::path loop = plain_beir(dir, "loop");
  fs::remove(loop / "queries.jsonl");
  fs::create_symlink("queries.jsonl", loop / "queries.jsonl");
  EXPECT_NE(beir_error(loop).find("loop/queries.jsonl: too many levels of symbolic links"), std::string::npos)
      << beir_error(loop);

  const fs::path qrels_loop = plain_beir(dir, "qrels_loop");
  fs::remove_all(qrels_loop / "qrels");
  fs::create_symlink("qrels", qrels_loop / "qrels");
  EXPECT_NE(beir_error(qrels_loop).find("qrels_loop/qrels: too many levels of symbolic links"), std::string::npos)
      << beir_error(qrels_loop);

  const fs::path both = plain_beir(dir, "both");
  fs::copy_file(both / "corpus.jsonl", both / "corpus.jsonl.gz");
  EXPECT_NE(beir_error(both).find("both/corpus.jsonl and corpus.jsonl.gz are both there: keep one"),
            std::string::npos)
      << beir_error(both);
}

// ---- MTEB's layout --------------------------------------------------------------------

// The fixtures' folder, made once per build folder for the script's contents.
const fs::path& beir_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_beir_fixtures.py", "beir");
  return dir;
}

BeirSet load_beir_split(const fs::path& folder, const std::string& split) {
  return load_beir(folder.string(), split, bert(), 32);
}

TEST(BeirMteb, AnMtebParquetFolderReadsAsItsBeirFolderInEachSplit) {
  const fs::path& dir = beir_fixtures();
  const BeirSet beir = load(dir / "mini");
  ASSERT_EQ(beir.query_ids, (std::vector<std::string>{"q1", "q2"}));
  ASSERT_EQ(beir.relevant, (std::vector<std::vector<int64_t>>{{0}, {1}}));  // d3 judged 0: not relevant
  for (const char* folder : {"mini_mteb", "mini_mteb_qrels_config", "mini_mteb_jsonl"}) {
    SCOPED_TRACE(folder);
    EXPECT_EQ(default_beir_split((dir / folder).string()), "test");
    const BeirSet mteb = load(dir / folder);
    EXPECT_EQ(mteb.split, "test");
    EXPECT_EQ(mteb.name, folder);
    expect_same_set(mteb, beir);
    const BeirSet dev = load_beir_split(dir / folder, "dev");
    EXPECT_EQ(dev.split, "dev");
    expect_same_set(dev, load_beir_split(dir / "mini", "dev"));
  }
}

TEST(BeirMteb, WholeNumberIdsAndScoresAreReadAsMtebCastsThem) {
  const fs::path& dir = beir_fixtures();
  const BeirSet beir = load(dir / "mini");
  const BeirSet ints = load(dir / "mini_mteb_int_ids");  // int64 ids, float64 scores 1.0, 2.0, 0.0
  EXPECT_EQ(ints.query_ids, (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(ints.corpus_ids, (std::vector<std::string>{"1", "2", "3"}));
  EXPECT_EQ(ints.relevant, beir.relevant);
  ASSERT_EQ(ints.tokens.num_sequences(), beir.tokens.num_sequences());
  for (int64_t s = 0; s < beir.tokens.num_sequences(); ++s) EXPECT_EQ(ints.tokens.ids(s), beir.tokens.ids(s)) << s;
}

TEST(BeirMteb, BothLayoutsAreBeirFoldersAndAFolderOfPairShardsIsNot) {
  const fs::path& dir = beir_fixtures();
  for (const char* folder : {"mini", "mini_mteb", "mini_mteb_qrels_config", "mini_mteb_jsonl", "mini_mteb_int_ids"})
    EXPECT_TRUE(is_beir_folder((dir / folder).string())) << folder;
  EXPECT_FALSE(is_beir_folder((dir / "pair_shards").string()));
  EXPECT_FALSE(is_beir_folder((dir / "mini" / "queries.jsonl").string()));  // a file
  const TempDir empty("beir_empty");
  EXPECT_FALSE(is_beir_folder(empty.path.string()));
  // Asked to read one anyway, it says what the two layouts are.
  const std::string message = beir_error(dir / "pair_shards");
  EXPECT_NE(message.find("pair_shards: not a BEIR folder: a BEIR folder holds corpus.jsonl, queries.jsonl and "
                         "qrels/SPLIT.tsv, or is MTEB's Hub folder"),
            std::string::npos)
      << message;
}

TEST(BeirMteb, ASplitTheQrelsDoNotHaveIsAnErrorListingThoseThere) {
  std::string message;
  try {
    load_beir_split(beir_fixtures() / "mini_mteb", "train");
  } catch (const DataError& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("mini_mteb/README.md: the qrels' config \"default\" has no split train; its splits: "
                         "\"test\", \"dev\""),
            std::string::npos)
      << message;
}

TEST(BeirMteb, EachFaultIsAnErrorNamingTheFileRowGroupAndRow) {
  const fs::path bad = beir_fixtures() / "bad";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"unknown_corpus_id", "unknown_corpus_id/qrels/test-00000-of-00001.parquet: row group 1, row 0: the corpus id "
                            "\"d9\" is not in the corpus (README.md's config \"corpus\", split test)"},
      {"unknown_query_id", "unknown_query_id/qrels/test-00000-of-00001.parquet: row group 1, row 1: the query id "
                           "\"q7\" is not in the queries (README.md's config \"queries\", split test)"},
      {"corpus_without_id", "corpus_without_id/corpus/test-00000-of-00001.parquet: no column \"_id\" (the document "
                            "ids; \"id\" is read too); its columns: \"doc_id\", \"title\", \"text\""},
      {"duplicate_corpus_id", "duplicate_corpus_id/corpus/test-00000-of-00001.parquet: row group 1, row 1: the id "
                              "\"d1\" appears twice in the corpus"},
      {"fractional_score", "fractional_score/qrels/test-00000-of-00001.parquet: row group 0, row 0: the score 0.5 is "
                           "not a whole number"},
      {"null_text", "null_text/corpus/test-00000-of-00001.parquet: row group 1, row 0: \"text\" is null"},
      {"nothing_relevant", "nothing_relevant/qrels/test-00000-of-00001.parquet: no query has a relevant document"},
  };
  for (const auto& [folder, expected] : cases) {
    const std::string message = beir_error(bad / folder);
    EXPECT_NE(message.find(expected), std::string::npos) << folder << ": " << message;
  }
}

}  // namespace
}  // namespace ddp_embed
