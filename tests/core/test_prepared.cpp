// Prepared data sets (data/prepared.h), without LibTorch: the pieces a prepare cuts, the
// folder they join into, and what it refuses. The truth each time is load_sources() on
// the same files: a prepared folder must hold exactly the data set a run would read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/prepared.h"
#include "data_fixtures.h"
#include "python_fixtures.h"
#include "tokenize/wordpiece.h"
#include "util/hash.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

using testing::bert;
using testing::kVocab;
using testing::TempDir;

// 300 varied lines: pairs with one or two positives, negatives, teacher scores on every
// third line, blank lines between some.
std::string pair_lines(int n, const std::string& word) {
  std::string out;
  for (int i = 1; i <= n; ++i) {
    const std::string q = "\"what is " + word + " number " + std::to_string(i) + "?\"";
    const std::string p = "\"it is the " + std::to_string(i) + "th " + word + "\"";
    if (i % 3 == 0)
      out += "{\"query\": " + q + ", \"pos\": [" + p + "], \"neg\": [\"not " + std::to_string(i) +
             "\"], \"pos_scores\": [0.9], \"neg_scores\": [0." + std::to_string(i % 7) + "]}\n";
    else if (i % 3 == 1)
      out += "{\"query\": " + q + ", \"pos\": [" + p + ", \"also " + word + "\"]}\n";
    else
      out += "{\"anchor\": " + q + ", \"positive\": " + p + ", \"negative\": \"a Café " + std::to_string(i) + "\"}\n";
    if (i % 50 == 0) out += "\n";
  }
  return out;
}

std::string write(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path.string();
}

std::vector<SourceInput> two_sources(const TempDir& dir) {
  return {SourceInput{"words", {write(dir / "words.jsonl", pair_lines(300, "word"))}, "", "", false},
          SourceInput{"things",
                      {write(dir / "things-a.jsonl", pair_lines(120, "thing")),
                       write(dir / "things-b.jsonl", pair_lines(90, "item"))},
                      "query: ", "passage: ", false}};
}

PreparedManifest manifest_for(const std::vector<SourceInput>& sources) {
  PreparedManifest m;
  m.tokenizer = stamp_tokenizer(bert());
  m.max_length = 24;
  for (const auto& s : sources) {
    PreparedSource p{s.name, s.query_prompt, s.passage_prompt, s.columns.key(), {}, 0, 0};
    for (const auto& f : s.files) p.files.push_back(stamp_file(f));
    m.sources.push_back(p);
  }
  return m;
}

// Loads every piece of `items` on its own, as the ranks of a prepare do: the DataError of
// the piece that failed ("" and -1 when none did) and where that piece begins.
struct PieceError {
  std::string message;
  int64_t piece_begin = -1;
};
PieceError error_of_pieces(const SourceInput& source, const std::vector<PrepareItem>& items) {
  PieceError error;
  for (const auto& item : items) {
    try {
      load_piece(source, item.piece, bert(), 24, false);
    } catch (const DataError& e) {
      error = {e.what(), item.piece.begin};
    }
  }
  return error;
}

// Prepares `sources` as `embed-train prepare` does, in pieces of `piece_bytes`.
fs::path prepare(const TempDir& dir, const std::vector<SourceInput>& sources, int64_t piece_bytes,
                 size_t* piece_count = nullptr, const std::string& name = "prepared") {
  const std::vector<PrepareItem> items = plan_prepare(sources, piece_bytes);
  std::vector<std::string> pieces;
  std::vector<int> piece_source;
  const PreparedManifest m = manifest_for(sources);
  for (size_t i = 0; i < items.size(); ++i) {
    const PairDataset data = load_piece(sources[size_t(items[i].source)], items[i].piece, bert(), 24, false, 2);
    PreparedManifest piece = m;
    piece.sources = {m.sources[size_t(items[i].source)]};
    pieces.push_back((dir / (name + "-piece-" + std::to_string(i))).string());
    piece_source.push_back(items[i].source);
    write_prepared(data, piece, pieces.back());
  }
  if (piece_count) *piece_count = items.size();
  const fs::path out = dir / name;
  concatenate_prepared(pieces, piece_source, m, out.string());
  return out;
}

void expect_same_data(const PairDataset& a, const PairDataset& b) {
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.tokens.num_sequences(), b.tokens.num_sequences());
  for (int64_t s = 0; s < a.tokens.num_sequences(); ++s) ASSERT_EQ(a.tokens.ids(s), b.tokens.ids(s)) << "sequence " << s;
  for (int64_t i = 0; i < a.size(); ++i) {
    const PairIndex &p = a.pairs[size_t(i)], &q = b.pairs[size_t(i)];
    ASSERT_EQ(p.query, q.query) << "pair " << i;
    ASSERT_EQ(p.pos_begin, q.pos_begin);
    ASSERT_EQ(p.pos_count, q.pos_count);
    ASSERT_EQ(p.neg_begin, q.neg_begin);
    ASSERT_EQ(p.neg_count, q.neg_count);
    ASSERT_EQ(p.score, q.score);
  }
  ASSERT_EQ(std::vector<uint64_t>(a.text_hashes.begin(), a.text_hashes.end()),
            std::vector<uint64_t>(b.text_hashes.begin(), b.text_hashes.end()));
  ASSERT_EQ(a.teacher_scores.size(), b.teacher_scores.size());
  for (size_t i = 0; i < a.teacher_scores.size(); ++i) {
    const float x = a.teacher_scores[i], y = b.teacher_scores[i];
    ASSERT_TRUE((std::isnan(x) && std::isnan(y)) || x == y) << "teacher score " << i << ": " << x << " vs " << y;
  }
  ASSERT_EQ(a.sources.size(), b.sources.size());
  for (size_t s = 0; s < a.sources.size(); ++s) {
    EXPECT_EQ(a.sources[s].name, b.sources[s].name);
    EXPECT_EQ(a.sources[s].begin, b.sources[s].begin);
    EXPECT_EQ(a.sources[s].end, b.sources[s].end);
  }
  EXPECT_EQ(a.has_scores, b.has_scores);
  EXPECT_EQ(a.all_teacher_scored, b.all_teacher_scored);
  EXPECT_EQ(a.lines, b.lines);
}

// Pieces of a few KB (dozens of them, cut inside files and at blank lines) joined into a
// folder: the data set load_sources reads from the same files, array by array.
TEST(Prepared, PiecesJoinIntoTheDataSetTheFilesGive) {
  TempDir dir("join");
  const auto sources = two_sources(dir);
  size_t pieces = 0;
  const fs::path folder = prepare(dir, sources, 2000, &pieces);
  EXPECT_GT(pieces, 20u);
  PreparedManifest m;
  const PairDataset prepared = open_prepared(folder.string(), &m);
  const PairDataset loaded = load_sources(sources, bert(), 24, false, 2);
  expect_same_data(prepared, loaded);
  EXPECT_TRUE(prepared.pairs.mapped());
  EXPECT_EQ(prepared.tokens.memory_bytes(), 0u);  // nothing on the heap: the page cache holds it
  EXPECT_EQ(m.pairs, 510);
  EXPECT_FALSE(m.wide);
  EXPECT_TRUE(m.teacher_scores);  // some lines have them, so every sequence has a slot
  ASSERT_EQ(m.sources.size(), 2u);
  EXPECT_EQ(m.sources[1].files.size(), 2u);
  // One piece a file (pieces larger than the files): the same folder, byte for byte.
  TempDir whole("whole");
  const fs::path one = prepare(whole, sources, 1 << 30);
  for (const char* name : {"ids.u16", "offsets.i64", "pairs.bin", "text_hashes.u64", "teacher_scores.f32"}) {
    std::ifstream a(folder / name, std::ios::binary), b(one / name, std::ios::binary);
    const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
    EXPECT_EQ(x, y) << name;
  }
}

// A bad line in the middle of a file is reported with its line number in the file, also
// when it lies in a later piece.
TEST(Prepared, ABadLineInALaterPieceNamesItsLineInTheFile) {
  TempDir dir("badline");
  std::string text = pair_lines(100, "word");
  const size_t at = [&] {  // the start of line 80
    size_t pos = 0;
    for (int line = 1; line < 80; ++line) pos = text.find('\n', pos) + 1;
    return pos;
  }();
  text.insert(at, "{\"query\": \"no positive\"}\n");
  const std::string file = write(dir / "bad.jsonl", text);
  const std::vector<SourceInput> sources = {SourceInput{"bad", {file}, "", "", false}};
  const auto items = plan_prepare(sources, 1500);
  ASSERT_GT(items.size(), 3u);
  const PieceError error = error_of_pieces(sources[0], items);
  EXPECT_NE(error.message.find(file + ":80:"), std::string::npos) << error.message;
}

// pairs.jsonl, and the same rows as pairs.parquet (row groups of 7) and bad.parquet, written
// by the real pyarrow once per build folder (scripts/python/make_prepared_parquet_fixtures.py).
const fs::path& prepared_parquet_fixtures() {
  static const fs::path dir = python_fixtures::made_by_script("make_prepared_parquet_fixtures.py", "prepared-parquet");
  return dir;
}

std::string prepared_array_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// A Parquet file cut into runs of row groups (a dozen pieces, for the ranks to share): the
// folder is the one the whole file gives as one piece, and the one its rows as JSONL give,
// array by array, byte for byte; and the data set a run reads from the file.
TEST(Prepared, AParquetFileInPiecesOfRowGroupsGivesTheFolderOfItsJsonl) {
  const std::string parquet = (prepared_parquet_fixtures() / "pairs.parquet").string();
  const std::string jsonl = (prepared_parquet_fixtures() / "pairs.jsonl").string();
  auto source = [](const std::string& file) {
    return std::vector<SourceInput>{SourceInput{"pairs", {file}, "query: ", "", false}};
  };
  const auto items = plan_prepare(source(parquet), 3 * 5000);
  ASSERT_GT(items.size(), 8u);
  int next_group = 0;
  for (const auto& item : items) {  // whole row groups, in order, none left out
    EXPECT_EQ(item.piece.begin, next_group);
    ASSERT_GT(item.piece.end, item.piece.begin);
    next_group = int(item.piece.end);
  }
  EXPECT_EQ(next_group, 43);
  TempDir dir("parquet");
  size_t pieces = 0, whole_pieces = 0;
  const fs::path cut = prepare(dir, source(parquet), 3 * 5000, &pieces, "cut");
  const fs::path whole = prepare(dir, source(parquet), 1 << 30, &whole_pieces, "whole");
  const fs::path from_jsonl = prepare(dir, source(jsonl), 1 << 30, nullptr, "jsonl");
  EXPECT_EQ(pieces, items.size());
  EXPECT_EQ(whole_pieces, 1u);
  EXPECT_EQ(plan_prepare(source(parquet), 1 << 30).at(0).piece.end, -1);  // one piece: the whole file
  for (const char* name : {"ids.u16", "offsets.i64", "pairs.bin", "text_hashes.u64", "teacher_scores.f32"}) {
    const std::string bytes = prepared_array_bytes(cut / name);
    EXPECT_GT(bytes.size(), 0u) << name;
    EXPECT_EQ(bytes, prepared_array_bytes(whole / name)) << name;
    EXPECT_EQ(bytes, prepared_array_bytes(from_jsonl / name)) << name;
  }
  PreparedManifest m;
  const PairDataset prepared = open_prepared(cut.string(), &m);
  expect_same_data(prepared, load_sources(source(parquet), bert(), 24, false, 2));
  EXPECT_EQ(m.pairs, 300);
  EXPECT_EQ(m.lines, 300);
  EXPECT_TRUE(m.teacher_scores);
}

// A bad row in a later piece is named by its row group and row in the file, as when a run
// reads the whole file.
TEST(Prepared, ABadRowInALaterPieceNamesItsRowGroupInTheFile) {
  const std::string file = (prepared_parquet_fixtures() / "bad.parquet").string();
  const std::vector<SourceInput> sources = {SourceInput{"bad", {file}, "", "", false}};
  const auto items = plan_prepare(sources, 3 * 5000);
  ASSERT_GT(items.size(), 3u);
  const PieceError error = error_of_pieces(sources[0], items);
  EXPECT_GT(error.piece_begin, 0) << "the bad row lies in a later piece";
  EXPECT_NE(error.message.find(file + ": row group 25, row 3: column \"query\" is null"), std::string::npos)
      << error.message;
}

// A line longer than data.max_line_bytes inside a piece is the same bad line it is when a
// run reads the file, with its line number in the file.
TEST(Prepared, ALongLineInAPieceIsABadLineAsInARun) {
  TempDir dir("longline");
  const std::string file =
      write(dir / "long.jsonl", pair_lines(20, "word") + "{\"query\": \"" + std::string(20000, 'x') + "\"}\n" +
                                    pair_lines(20, "word"));
  const std::vector<SourceInput> sources = {SourceInput{"long", {file}, "", "", false}};
  const auto items = plan_prepare(sources, 1000);
  ASSERT_GT(items.size(), 2u);
  std::string message;
  for (const auto& item : items) {
    try {
      load_piece(sources[0], item.piece, bert(), 24, false, 2, /*max_line_bytes=*/4096);
    } catch (const DataError& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find(file + ":21: the line is longer than data.max_line_bytes = 4096"), std::string::npos)
      << message;
}

// A cut-short array is refused when the folder is opened, naming the file.
TEST(Prepared, ATruncatedArrayIsAnErrorNamingTheFile) {
  TempDir dir("truncated");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  fs::resize_file(folder / "ids.u16", fs::file_size(folder / "ids.u16") - 10);
  try {
    open_prepared(folder.string());
    FAIL() << "a truncated ids.u16 was opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find((folder / "ids.u16").string()), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cut short"), std::string::npos) << e.what();
  }
}

// Writes `bytes` at `offset` of `file` in place.
void overwrite(const fs::path& file, int64_t offset, const void* bytes, size_t n) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.write(static_cast<const char*>(bytes), std::streamsize(n));
}

// The open's message for `folder`, "" when it opens.
std::string open_error(const fs::path& folder) {
  try {
    open_prepared(folder.string());
  } catch (const DataError& e) {
    return e.what();
  }
  return "";
}

// Damage that stays in range (an id still in the vocabulary, a count, a score) is caught
// by the checksums when the folder is opened, naming the file and the bytes.
TEST(Prepared, DamageInRangeIsCaughtByTheChecksumsWhenOpened) {
  TempDir dir("flipped");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  const PairDataset before = open_prepared(folder.string());
  const uint16_t id = 2000;  // in the vocabulary
  overwrite(folder / "ids.u16", before.tokens.offsets()[7] * 2 + 2, &id, 2);
  EXPECT_NE(open_error(folder).find((folder / "ids.u16").string() + ": bytes 0.." +
                                    std::to_string(fs::file_size(folder / "ids.u16")) +
                                    " do not match their checksum in manifest.json"),
            std::string::npos)
      << open_error(folder);

  const fs::path other = prepare(dir, two_sources(dir), 1 << 30, nullptr, "other");
  const int32_t count = 2;
  overwrite(other / "pairs.bin", offsetof(PairIndex, neg_count) + 3 * int64_t(sizeof(PairIndex)), &count, 4);
  EXPECT_NE(open_error(other).find((other / "pairs.bin").string() + ": bytes 0.."), std::string::npos)
      << open_error(other);
}

// The workers of a machine share the check, region by region (ids.u16's one region is
// the folder's first, pairs.bin's its third): the worker whose share holds the damage
// finds it, on any number of threads; the other's share is sound.
TEST(Prepared, TheWorkersOfAMachineShareTheCheck) {
  TempDir dir("share");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  const uint16_t id = 2000;
  overwrite(folder / "ids.u16", 4, &id, 2);
  auto opened = [&](int threads, int part, int parts) {
    try {
      open_prepared(folder.string(), nullptr, true, VerifyShare{threads, part, parts});
    } catch (const DataError& e) {
      EXPECT_NE(std::string(e.what()).find("ids.u16: bytes 0.."), std::string::npos) << e.what();
      return false;
    }
    return true;
  };
  EXPECT_FALSE(opened(1, 0, 2));
  EXPECT_FALSE(opened(3, 0, 2));
  EXPECT_TRUE(opened(1, 1, 2));
  EXPECT_FALSE(opened(2, 0, 1));
}

// A folder whose checksums were made again over damage (or a hand-made one) is still
// checked record by record: ids outside the vocabulary, a pair whose counts do not fit
// the layout, a NaN where a teacher score must be, offsets out of order. The lazy check
// of a sequence as batches take it stays behind that (TokenStore::set_checked).
TEST(Prepared, RecordsAreCheckedWhenOpenedEvenWithMatchingChecksums) {
  TempDir dir("records");
  auto damaged = [&](const std::string& name, const std::string& file, int64_t offset, const void* bytes, size_t n) {
    const fs::path folder = prepare(dir, two_sources(dir), 1 << 30, nullptr, name);
    overwrite(folder / file, offset, bytes, n);
    // The checksums made again over the damage, and the manifest's of itself, as a tool
    // that rewrites the manifest would.
    const std::string data = [&] {
      std::ifstream in(folder / file, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(in), {});
    }();
    nlohmann::json m = nlohmann::json::parse(std::ifstream(folder / "manifest.json"));
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(xxh3_64(data.data(), data.size())));
    m["checksums"]["files"][file] = {hex};
    m["manifest_xxh3"] = manifest_self_checksum(m);
    std::ofstream(folder / "manifest.json") << m.dump(2);
    return open_error(folder);
  };
  const uint16_t big_id = 60000;
  EXPECT_NE(damaged("ids", "ids.u16", 10, &big_id, 2).find("ids.u16: token id 60000 at position 5, outside the "
                                                            "tokenizer's vocabulary of 30522: the folder is damaged"),
            std::string::npos);
  const int32_t two = 2;
  // Pair 2 (the third line) has one positive and one negative: two positives would take
  // its negative's place.
  const std::string count = damaged("count", "pairs.bin", offsetof(PairIndex, pos_count) + 2 * 40, &two, 4);
  EXPECT_NE(count.find("pairs.bin: pair 2 (query 6, 2 positives from 7, 1 negatives from 8): its positives follow its "
                       "query and its negatives its positives"),
            std::string::npos)
      << count;
  EXPECT_NE(count.find("the folder is damaged; prepare it again"), std::string::npos) << count;
  const int64_t far = int64_t(1) << 40;
  EXPECT_NE(damaged("far", "pairs.bin", offsetof(PairIndex, neg_begin) + 7 * 40, &far, 8).find("pairs.bin: pair 7"),
            std::string::npos);
  const float nan = std::nanf(""), inf = INFINITY;
  // two_sources' pairs have teacher scores on every third line only; an infinity is
  // refused anywhere.
  EXPECT_NE(damaged("inf", "teacher_scores.f32", 4 * 5, &inf, 4).find("teacher_scores.f32: sequence 5 has the teacher "
                                                                      "score inf"),
            std::string::npos);
  (void)nan;
  const int64_t back = 1;
  EXPECT_NE(damaged("offsets", "offsets.i64", 8 * 20, &back, 8).find("offsets.i64: offset 20 is 1 after"),
            std::string::npos);
}

// The manifest's ranges are checked against each other and the files before anything is
// mapped: a source range past the pairs (which read past the mapping, far enough a
// segmentation fault), counts that do not fit, a missing checksum, the older format.
TEST(Prepared, AManifestThatDoesNotFitItsFilesIsRefused) {
  TempDir dir("ranges");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  const std::string original = [&] {
    std::ifstream in(folder / "manifest.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto with = [&](const std::function<void(nlohmann::json&)>& change) {
    nlohmann::json m = nlohmann::json::parse(original);
    change(m);
    std::ofstream(folder / "manifest.json") << m.dump(2);
    return open_error(folder);
  };
  const std::string manifest = (folder / "manifest.json").string();
  EXPECT_NE(with([](nlohmann::json& m) { m["sources"][1]["pairs"][1] = 100000000; })
                .find(manifest + ": \"sources\" has source \"things\" with pairs"),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& m) { m["sources"][0]["pairs"][0] = 5; }).find("must cover the folder's"),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& m) { m["pairs"] = -1; }).find(manifest + ": \"pairs\" is -1"), std::string::npos);
  EXPECT_NE(with([](nlohmann::json& m) { m["checksums"]["files"].erase("pairs.bin"); })
                .find(manifest + ": \"checksums\" has none for pairs.bin"),
            std::string::npos);
  EXPECT_NE(with([](nlohmann::json& m) {
              m["version"] = 1;
              m.erase("checksums");
            }).find(manifest + ": version 1 (prepared by an older embed-train, without checksums), this build reads "
                               "version 3: prepare it again"),
            std::string::npos);
  EXPECT_EQ(with([](nlohmann::json&) {}), "");
}

// An edit that leaves the manifest consistent (the length it was cut to, the tokenizer it
// was made with, a prompt, a flag) would have a run train on data made for other
// settings: the manifest's checksum of itself refuses it, naming the manifest and the fix.
// Its layout does not count: the same values written otherwise still open.
TEST(Prepared, AnEditedManifestIsRefusedNotTrainedOn) {
  TempDir dir("edited");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  const std::string original = [&] {
    std::ifstream in(folder / "manifest.json");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto with = [&](const std::function<void(nlohmann::json&)>& change, int indent = 2) {
    nlohmann::json m = nlohmann::json::parse(original);
    change(m);
    std::ofstream(folder / "manifest.json") << m.dump(indent);
    return open_error(folder);
  };
  const std::string edited = (folder / "manifest.json").string() + ": edited or damaged since it was written";
  for (const auto& [what, change] : std::vector<std::pair<std::string, std::function<void(nlohmann::json&)>>>{
           {"max_length", [](nlohmann::json& m) { m["max_length"] = 512; }},
           {"fingerprint", [](nlohmann::json& m) { m["tokenizer"]["fingerprint"] = "0123456789abcdef"; }},
           {"prompt", [](nlohmann::json& m) { m["sources"][1]["query_prompt"] = "search: "; }},
           {"teacher_scores_required", [](nlohmann::json& m) { m["teacher_scores_required"] = true; }},
           {"skipped", [](nlohmann::json& m) { m["skipped"] = 7; }},
       }) {
    const std::string error = with(change);
    EXPECT_EQ(error.rfind(edited, 0), 0u) << what << ": " << error;
    EXPECT_NE(error.find("prepare the folder again (embed-train prepare --config ... --output " + folder.string() + ")"),
              std::string::npos)
        << what << ": " << error;
  }
  // Edited, and the checksum made again over the edit: the manifest is then what the run
  // compares against its own settings (manifest_differences, AStaleManifestSaysWhatDiffers).
  EXPECT_EQ(with([](nlohmann::json& m) {
              m["max_length"] = 512;
              m["manifest_xxh3"] = manifest_self_checksum(m);
            }),
            "");
  EXPECT_EQ(with([](nlohmann::json&) {}, 4), "");
  EXPECT_EQ(with([](nlohmann::json&) {}, -1), "");
}

// A manifest without its checksum of itself is refused: by the version, from the embed-train
// before it (prepare it again), or by the key, where only the key was removed.
TEST(Prepared, AManifestWithoutItsOwnChecksumIsRefused) {
  TempDir dir("unstamped");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  nlohmann::json m = nlohmann::json::parse(std::ifstream(folder / "manifest.json"));
  m.erase("manifest_xxh3");
  std::ofstream(folder / "manifest.json") << m.dump(2);
  const std::string manifest = (folder / "manifest.json").string();
  EXPECT_NE(open_error(folder).find(manifest + ": key \"manifest_xxh3\": missing"), std::string::npos)
      << open_error(folder);
  m["version"] = 2;
  std::ofstream(folder / "manifest.json") << m.dump(2);
  EXPECT_NE(open_error(folder).find(manifest + ": version 2 (prepared by an older embed-train, without the manifest's "
                                               "checksum of itself), this build reads version 3: prepare it again"),
            std::string::npos)
      << open_error(folder);
}

// What makes a folder stale, each said on its own line: another tokenizer, max length,
// prompts, and a source file changed since.
TEST(Prepared, AStaleManifestSaysWhatDiffers) {
  TempDir dir("stale");
  auto sources = two_sources(dir);
  const PreparedManifest found = read_manifest(prepare(dir, sources, 1 << 30).string());
  EXPECT_TRUE(manifest_differences(found, manifest_for(sources)).empty());

  PreparedManifest other = manifest_for(sources);
  const auto cased = WordPieceTokenizer::load(kVocab.string(), /*lower_case=*/false);
  other.tokenizer = stamp_tokenizer(*cased);  // the same vocab.txt, cased: other ids
  other.max_length = 32;
  auto differences = manifest_differences(found, other);
  ASSERT_EQ(differences.size(), 2u);
  EXPECT_EQ(differences[0].rfind("tokenizer: prepared with a wordpiece tokenizer", 0), 0u) << differences[0];
  EXPECT_EQ(differences[1], "tokenizer.max_length: prepared with 24, the run has 32");

  sources[1].query_prompt = "search: ";
  std::ofstream(sources[0].files[0], std::ios::app) << R"({"query": "one more", "pos": "line"})" << "\n";
  differences = manifest_differences(found, manifest_for(sources));
  ASSERT_EQ(differences.size(), 2u);
  EXPECT_EQ(differences[0].rfind("source file " + sources[0].files[0] + " changed since it was prepared", 0), 0u)
      << differences[0];
  EXPECT_NE(differences[1].find("data.train[1] (\"things\"): prepared with other prompts"), std::string::npos)
      << differences[1];
}

// data.train[i].columns names which columns are the query and the positive: a folder prepared
// by the rules is stale once a source names them, and says which source and what it names.
TEST(Prepared, AStaleManifestSaysTheColumnsChanged) {
  TempDir dir("stale-columns");
  auto sources = two_sources(dir);
  const PreparedManifest found = read_manifest(prepare(dir, sources, 1 << 30).string());
  sources[0].columns.query = "question";
  sources[0].columns.neg = {"wrong_1", "wrong_2"};
  const auto differences = manifest_differences(found, manifest_for(sources));
  ASSERT_EQ(differences.size(), 1u);
  EXPECT_NE(differences[0].find("prepared with other columns (by the rules; data.train[0].columns now: "
                                "query=question neg=wrong_1,wrong_2)"),
            std::string::npos)
      << differences[0];
}

TEST(Prepared, AManifestThatIsNotOursIsAnErrorNamingIt) {
  TempDir dir("notours");
  write(dir / "manifest.json", R"({"format": "something else"})");
  try {
    read_manifest(dir.path.string());
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "manifest.json").string() + ": not a prepared data set"),
              std::string::npos) << e.what();
  }
  EXPECT_FALSE(is_prepared_folder((dir / "nothing").string()));
}

}  // namespace
}  // namespace ddp_embed
