// Prepared data sets (data/prepared.h), without LibTorch: the pieces a prepare cuts, the
// folder they join into, and what it refuses. The truth each time is load_sources() on
// the same files: a prepared folder must hold exactly the data set a run would read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/prepared.h"
#include "data_fixtures.h"
#include "tokenize/wordpiece.h"

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
    PreparedSource p{s.name, s.query_prompt, s.passage_prompt, {}, 0, 0};
    for (const auto& f : s.files) p.files.push_back(stamp_file(f));
    m.sources.push_back(p);
  }
  return m;
}

// Prepares `sources` as `embed-train prepare` does, in pieces of `piece_bytes`.
fs::path prepare(const TempDir& dir, const std::vector<SourceInput>& sources, int64_t piece_bytes,
                 size_t* piece_count = nullptr) {
  const std::vector<PrepareItem> items = plan_prepare(sources, piece_bytes);
  std::vector<std::string> pieces;
  std::vector<int> piece_source;
  const PreparedManifest m = manifest_for(sources);
  for (size_t i = 0; i < items.size(); ++i) {
    const PairDataset data = load_piece(sources[size_t(items[i].source)], items[i].piece, bert(), 24, false, 2);
    PreparedManifest piece = m;
    piece.sources = {m.sources[size_t(items[i].source)]};
    pieces.push_back((dir / ("piece-" + std::to_string(i))).string());
    piece_source.push_back(items[i].source);
    write_prepared(data, piece, pieces.back());
  }
  if (piece_count) *piece_count = items.size();
  const fs::path out = dir / "prepared";
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
  std::string message;
  for (const auto& item : items) {
    try {
      load_piece(sources[0], item.piece, bert(), 24, false);
    } catch (const DataError& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find(file + ":80:"), std::string::npos) << message;
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

// Ids outside the vocabulary are caught when a sequence is read (before a batch trains on
// it), naming the file and the sequence; the other sequences read as before.
TEST(Prepared, IdsOutsideTheVocabularyAreAnErrorWhenRead) {
  TempDir dir("vocab");
  const fs::path folder = prepare(dir, two_sources(dir), 1 << 30);
  {
    std::fstream ids(folder / "ids.u16", std::ios::in | std::ios::out | std::ios::binary);
    const PairDataset data = open_prepared(folder.string());
    ids.seekp(std::streamoff(data.tokens.offsets()[7] * 2 + 2));  // inside sequence 7
    const uint16_t bad = 60000;
    ids.write(reinterpret_cast<const char*>(&bad), 2);
  }
  const PairDataset data = open_prepared(folder.string());
  std::vector<int64_t> out(64);
  EXPECT_NO_THROW(data.tokens.copy(6, out.data()));
  try {
    data.tokens.copy(7, out.data());
    FAIL() << "an id outside the vocabulary was read";
  } catch (const DataError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find((folder / "ids.u16").string() + ": sequence 7 has token id 60000"), std::string::npos) << m;
  }
  EXPECT_THROW(data.tokens.copy(data.tokens.num_sequences(), out.data()), DataError);  // a damaged pairs.bin
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
