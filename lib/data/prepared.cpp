#include "data/prepared.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "data/dataset_files.h"
#include "data/prepared_check.h"
#include "data/table_file.h"
#include "util/file_check.h"
#include "util/hash.h"
#include "util/mapped_file.h"

namespace ddp_embed {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// pairs.bin holds PairIndex as it is in memory: fixed here, so that a change is a compile
// error and not a silently unreadable folder.
static_assert(std::is_trivially_copyable_v<PairIndex> && sizeof(PairIndex) == 40 &&
                  offsetof(PairIndex, pos_count) == 16 && offsetof(PairIndex, neg_begin) == 24 &&
                  offsetof(PairIndex, score) == 36,
              "pairs.bin's record layout (docs/formats.md) changed");

// A binary file written in pieces, hashed as it goes (one XXH3-64 per region of
// kChecksumRegionBytes: the manifest's checksums); close() makes sure it reached the disk.
class ArrayWriter {
 public:
  explicit ArrayWriter(std::string path) : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb")) {
    if (!file_) throw DataError("cannot write " + path_ + ": " + std::strerror(errno));
  }
  ~ArrayWriter() {
    if (file_) std::fclose(file_);
  }
  void write(const void* data, size_t bytes) {
    if (bytes > 0 && std::fwrite(data, 1, bytes, file_) != bytes)
      throw DataError("cannot write " + path_ + ": " + std::strerror(errno) + " (is the disk full?)");
    const char* p = static_cast<const char*>(data);
    while (bytes > 0) {
      const size_t n = std::min(bytes, size_t(kChecksumRegionBytes - in_region_));
      region_.update(p, n);
      in_region_ += int64_t(n);
      p += n;
      bytes -= n;
      if (in_region_ == kChecksumRegionBytes) end_region();
    }
  }
  // One XXH3-64 per region, after close().
  const std::vector<uint64_t>& checksums() const { return checksums_; }
  // Pair records with their sequence numbers moved by `shift`, padding zeroed (the same
  // data, the same bytes).
  void write_pairs(const PairIndex* pairs, size_t n, int64_t shift) {
    std::vector<PairIndex> buffer;
    buffer.reserve(std::min<size_t>(n, 1 << 16));
    for (size_t i = 0; i < n; ++i) {
      PairIndex p;
      std::memset(static_cast<void*>(&p), 0, sizeof p);
      p.query = pairs[i].query + shift;
      p.pos_begin = pairs[i].pos_begin + shift;
      p.pos_count = pairs[i].pos_count;
      p.neg_begin = pairs[i].neg_begin + shift;
      p.neg_count = pairs[i].neg_count;
      p.score = pairs[i].score;
      buffer.push_back(p);
      if (buffer.size() == buffer.capacity() || i + 1 == n) {
        write(buffer.data(), buffer.size() * sizeof(PairIndex));
        buffer.clear();
      }
    }
  }
  void close() {
    if (in_region_ > 0) end_region();
    const bool ok = std::fflush(file_) == 0 && ::fsync(fileno(file_)) == 0;
    const int err = errno;
    std::fclose(file_);
    file_ = nullptr;
    if (!ok) throw DataError("cannot write " + path_ + ": " + std::strerror(err));
  }

 private:
  void end_region() {
    checksums_.push_back(region_.digest());
    region_.reset();
    in_region_ = 0;
  }
  std::string path_;
  std::FILE* file_;
  Xxh3Stream region_;
  int64_t in_region_ = 0;
  std::vector<uint64_t> checksums_;
};

std::string ids_name(bool wide) { return wide ? "ids.i32" : "ids.u16"; }

void write_text(const std::string& path, const std::string& text) {
  ArrayWriter out(path);
  out.write(text.data(), text.size());
  out.close();
}

// `tmp` becomes `dir`: an old `dir` is removed first (a prepare replaces what was there).
void publish(const std::string& tmp, const std::string& folder) {
  const std::string dir = folder_path(folder);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::rename(tmp, dir, ec);
  if (ec) throw DataError("cannot rename " + tmp + " to " + dir + ": " + ec.message());
}

std::string fresh_tmp(const std::string& dir) {
  const std::string tmp = folder_path(dir) + ".tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (fs::path(dir).has_parent_path()) fs::create_directories(fs::path(dir).parent_path(), ec);
  fs::create_directories(tmp, ec);
  if (ec) throw DataError("cannot create " + tmp + ": " + ec.message());
  return tmp;
}

void set_counts(PreparedManifest& m, const PairDataset& data) {
  m.sequences = data.tokens.num_sequences();
  m.ids = data.tokens.offsets().back();
  m.pairs = data.size();
  m.lines = data.lines;
  m.skipped = data.skipped;
  m.wide = data.tokens.wide();
  m.has_scores = data.has_scores;
  m.all_teacher_scored = data.all_teacher_scored;
  m.teacher_scores = !data.teacher_scores.empty();
}

}  // namespace

std::vector<std::pair<std::string, int64_t>> expected_files(const PreparedManifest& m) {
  std::vector<std::pair<std::string, int64_t>> out = {
      {ids_name(m.wide), m.ids * (m.wide ? 4 : 2)},
      {"offsets.i64", (m.sequences + 1) * 8},
      {"pairs.bin", m.pairs * int64_t(sizeof(PairIndex))},
      {"text_hashes.u64", m.sequences * 8},
  };
  if (m.teacher_scores) out.emplace_back("teacher_scores.f32", m.sequences * 4);
  return out;
}

PreparedFile stamp_file(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a file of pairs (JSONL, or .gz)"); !folder.empty())
    throw DataError(folder);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw DataError("cannot read " + path + ": " + std::strerror(errno));
  PreparedFile f;
  f.path = path;
  f.size = int64_t(st.st_size);
  f.mtime_ns = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError("cannot read " + path + ": " + std::strerror(errno));
  constexpr int64_t kSample = 64 << 10;
  std::string head(size_t(std::min(f.size, kSample)), '\0'), tail(size_t(std::min(f.size, kSample)), '\0');
  in.read(head.data(), std::streamsize(head.size()));
  in.seekg(f.size - int64_t(tail.size()));
  in.read(tail.data(), std::streamsize(tail.size()));
  if (!in) throw DataError("cannot read " + path);
  f.sample_hash = fnv1a64(tail.data(), tail.size(),
                          fnv1a64(head.data(), head.size(), fnv1a64(&f.size, sizeof f.size, kFnv1a64ShortOffset)));
  return f;
}

TokenizerStamp stamp_tokenizer(const Tokenizer& tokenizer) {
  TokenizerStamp stamp{tokenizer.type(), tokenizer.vocab_size(), ""};
  // Its files as save() writes them, in name order ...
  std::string pattern = (fs::temp_directory_path() / "ddp-embed-tokenizer-XXXXXX").string();
  if (!::mkdtemp(pattern.data())) throw DataError("cannot create a folder in " + fs::temp_directory_path().string());
  const fs::path dir = pattern;
  tokenizer.save(dir.string());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  uint64_t h = fnv1a64(stamp.type, kFnv1a64ShortOffset);
  for (const auto& file : files) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string name = file.filename().string();
    h = fnv1a64(name, h);
    h = fnv1a64(bytes, h);
  }
  fs::remove_all(dir);
  // ... and what it does: ids for texts that exercise case, accents, scripts and
  // punctuation (a wrapper that lower-cases first changes these, not the files).
  for (const char* probe : {"Hello, World! It's 2024.", "Ünïcödé café naïve", "東京 is in 日本", "e-mail: a@b.c",
                            "   spaced\tout\n text  ", "ALL CAPS and MiXeD"}) {
    const std::vector<int32_t> ids = tokenizer.encode(probe, 64);
    h = fnv1a64(ids.data(), ids.size() * sizeof(int32_t), h);
  }
  stamp.fingerprint = hash_hex(h);
  return stamp;
}

std::string folder_path(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (!p.has_filename() && p.has_parent_path()) p = p.parent_path();
  return p.string();
}

void write_prepared(const PairDataset& data, PreparedManifest manifest, const std::string& dir) {
  set_counts(manifest, data);
  for (size_t s = 0; s < manifest.sources.size() && s < data.sources.size(); ++s) {
    manifest.sources[s].begin = data.sources[s].begin;
    manifest.sources[s].end = data.sources[s].end;
  }
  const std::string tmp = fresh_tmp(dir);
  const TokenStore& tokens = data.tokens;
  auto written = [&](const std::string& name, ArrayWriter& writer) {
    writer.close();
    manifest.checksums[name] = writer.checksums();
  };
  ArrayWriter ids((fs::path(tmp) / ids_name(tokens.wide())).string());
  if (tokens.wide())
    ids.write(tokens.ids32().data(), tokens.ids32().size() * 4);
  else
    ids.write(tokens.ids16().data(), tokens.ids16().size() * 2);
  written(ids_name(tokens.wide()), ids);
  ArrayWriter offsets((fs::path(tmp) / "offsets.i64").string());
  offsets.write(tokens.offsets().data(), tokens.offsets().size() * 8);
  written("offsets.i64", offsets);
  ArrayWriter pairs((fs::path(tmp) / "pairs.bin").string());
  pairs.write_pairs(data.pairs.data(), data.pairs.size(), 0);
  written("pairs.bin", pairs);
  ArrayWriter hashes((fs::path(tmp) / "text_hashes.u64").string());
  hashes.write(data.text_hashes.data(), data.text_hashes.size() * 8);
  written("text_hashes.u64", hashes);
  if (manifest.teacher_scores) {
    ArrayWriter scores((fs::path(tmp) / "teacher_scores.f32").string());
    scores.write(data.teacher_scores.data(), data.teacher_scores.size() * 4);
    written("teacher_scores.f32", scores);
  }
  write_text((fs::path(tmp) / kPreparedManifestName).string(), prepared_manifest_text(manifest));
  publish(tmp, dir);
}

void concatenate_prepared(const std::vector<std::string>& pieces, const std::vector<int>& piece_source,
                          PreparedManifest manifest, const std::string& dir) {
  // The pieces' manifests first: the counts, the width, whether any has teacher scores.
  std::vector<PreparedManifest> parts;
  for (const auto& piece : pieces) parts.push_back(read_manifest(piece));
  manifest.sequences = manifest.ids = manifest.pairs = manifest.lines = manifest.skipped = 0;
  manifest.has_scores = manifest.all_teacher_scored = !parts.empty();
  manifest.teacher_scores = false;
  manifest.wide = manifest.tokenizer.vocab_size > 65536;
  for (auto& s : manifest.sources) s.begin = s.end = -1;
  for (size_t i = 0; i < parts.size(); ++i) {
    const PreparedManifest& p = parts[i];
    if (p.wide != manifest.wide) throw DataError(pieces[i] + ": token ids of another width than the others");
    PreparedSource& source = manifest.sources.at(size_t(piece_source[i]));
    if (source.begin < 0) source.begin = manifest.pairs;
    manifest.sequences += p.sequences;
    manifest.ids += p.ids;
    manifest.pairs += p.pairs;
    manifest.lines += p.lines;
    manifest.skipped += p.skipped;
    source.end = manifest.pairs;
    if (p.pairs > 0) {
      manifest.has_scores = manifest.has_scores && p.has_scores;
      manifest.all_teacher_scored = manifest.all_teacher_scored && p.all_teacher_scored;
    }
    manifest.teacher_scores = manifest.teacher_scores || p.teacher_scores;
  }
  for (auto& s : manifest.sources)
    if (s.begin < 0) s.begin = s.end = manifest.pairs;
  if (manifest.pairs == 0) manifest.has_scores = manifest.all_teacher_scored = false;

  // Then every array, piece after piece, the sequence numbers and offsets moved along.
  const std::string tmp = fresh_tmp(dir);
  auto path = [&](const std::string& name) { return (fs::path(tmp) / name).string(); };
  ArrayWriter ids(path(ids_name(manifest.wide))), offsets(path("offsets.i64")), pairs(path("pairs.bin")),
      hashes(path("text_hashes.u64"));
  std::unique_ptr<ArrayWriter> scores;
  if (manifest.teacher_scores) scores = std::make_unique<ArrayWriter>(path("teacher_scores.f32"));
  int64_t seq_base = 0, id_base = 0;
  const int64_t zero = 0;
  offsets.write(&zero, 8);
  std::vector<int64_t> moved;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const PairDataset part = open_prepared(pieces[i], nullptr, /*random_access=*/false);  // read through once
    const TokenStore& t = part.tokens;
    if (manifest.wide)
      ids.write(t.ids32().data(), t.ids32().size() * 4);
    else
      ids.write(t.ids16().data(), t.ids16().size() * 2);
    moved.assign(t.offsets().begin() + 1, t.offsets().end());
    for (int64_t& o : moved) o += id_base;
    offsets.write(moved.data(), moved.size() * 8);
    pairs.write_pairs(part.pairs.data(), part.pairs.size(), seq_base);
    hashes.write(part.text_hashes.data(), part.text_hashes.size() * 8);
    if (scores) {
      if (!part.teacher_scores.empty()) {
        scores->write(part.teacher_scores.data(), part.teacher_scores.size() * 4);
      } else {
        const std::vector<float> none(size_t(t.num_sequences()), std::numeric_limits<float>::quiet_NaN());
        scores->write(none.data(), none.size() * 4);
      }
    }
    seq_base += t.num_sequences();
    id_base += t.offsets().back();
  }
  auto written = [&](const std::string& name, ArrayWriter& writer) {
    writer.close();
    manifest.checksums[name] = writer.checksums();
  };
  written(ids_name(manifest.wide), ids);
  written("offsets.i64", offsets);
  written("pairs.bin", pairs);
  written("text_hashes.u64", hashes);
  if (scores) written("teacher_scores.f32", *scores);
  manifest.piece_of.clear();
  write_text(path(kPreparedManifestName), prepared_manifest_text(manifest));
  publish(tmp, dir);
}

PairDataset open_prepared(const std::string& dir, PreparedManifest* manifest_out, bool random_access,
                          const VerifyShare& share) {
  const PreparedManifest m = read_manifest(dir);
  auto map = [&](const std::string& name, int64_t expected) {
    const std::string path = (fs::path(dir) / name).string();
    if (!fs::exists(path)) throw DataError(path + ": missing: the folder is damaged; prepare it again");
    if (!fs::is_regular_file(path)) throw DataError(path + ": not a file: the folder is damaged; prepare it again");
    auto file = std::make_shared<const MappedFile>(path, random_access);
    if (int64_t(file->size()) != expected)  // the size of what is mapped, not of a path looked at before
      throw DataError(path + ": " + std::to_string(file->size()) + " bytes, but manifest.json's counts make it " +
                      std::to_string(expected) + ": the file was cut short or replaced; prepare the folder again");
    return file;
  };
  std::map<std::string, std::shared_ptr<const MappedFile>> files;
  for (const auto& [name, bytes] : expected_files(m)) files[name] = map(name, bytes);
  verify_prepared_files(dir, m, files, share);

  PairDataset data;
  const auto offsets = Column<int64_t>(files["offsets.i64"], 0, size_t(m.sequences + 1));
  const std::string ids_file = (fs::path(dir) / ids_name(m.wide)).string();
  if (offsets[0] != 0 || offsets[size_t(m.sequences)] != m.ids)
    throw DataError((fs::path(dir) / "offsets.i64").string() + ": does not span " + ids_file +
                    ": the folder is damaged; prepare it again");
  if (m.wide)
    data.tokens = TokenStore::from_columns(true, {}, Column<int32_t>(files[ids_name(true)], 0, size_t(m.ids)), offsets);
  else
    data.tokens = TokenStore::from_columns(false, Column<uint16_t>(files[ids_name(false)], 0, size_t(m.ids)), {}, offsets);
  data.tokens.set_checked(m.tokenizer.vocab_size, dir);
  data.pairs = Column<PairIndex>(files["pairs.bin"], 0, size_t(m.pairs));
  data.text_hashes = Column<uint64_t>(files["text_hashes.u64"], 0, size_t(m.sequences));
  if (m.teacher_scores) data.teacher_scores = Column<float>(files["teacher_scores.f32"], 0, size_t(m.sequences));
  for (const auto& s : m.sources) data.sources.push_back(SourceRange{s.name, s.begin, s.end});
  data.has_scores = m.has_scores;
  data.all_teacher_scored = m.all_teacher_scored;
  data.lines = m.lines;
  data.skipped = m.skipped;
  if (manifest_out) *manifest_out = m;
  return data;
}

std::vector<std::string> manifest_differences(const PreparedManifest& found, const PreparedManifest& expected) {
  std::vector<std::string> out;
  const TokenizerStamp &a = found.tokenizer, &b = expected.tokenizer;
  if (a.type != b.type || a.vocab_size != b.vocab_size || a.fingerprint != b.fingerprint)
    out.push_back("tokenizer: prepared with a " + a.type + " tokenizer of " + std::to_string(a.vocab_size) +
                  " tokens (fingerprint " + a.fingerprint + "), the run's is a " + b.type + " tokenizer of " +
                  std::to_string(b.vocab_size) + " tokens (fingerprint " + b.fingerprint + ")");
  if (found.max_length != expected.max_length)
    out.push_back("tokenizer.max_length: prepared with " + std::to_string(found.max_length) + ", the run has " +
                  std::to_string(expected.max_length));
  if (expected.teacher_scores_required && !found.all_teacher_scored)
    out.push_back("the loss (loss.distill or MarginMSE) needs teacher scores on every pair, and the folder has pairs without them");
  if (found.sources.size() != expected.sources.size()) {
    out.push_back("data.train: " + std::to_string(expected.sources.size()) + " sources, the folder has " +
                  std::to_string(found.sources.size()));
    return out;
  }
  for (size_t i = 0; i < found.sources.size(); ++i) {
    const PreparedSource &f = found.sources[i], &e = expected.sources[i];
    const std::string where = "data.train[" + std::to_string(i) + "] (\"" + e.name + "\")";
    if (f.name != e.name) out.push_back(where + ": the folder's source " + std::to_string(i) + " is \"" + f.name + "\"");
    if (f.query_prompt != e.query_prompt || f.passage_prompt != e.passage_prompt)
      out.push_back(where + ": prepared with other prompts (query " + json(f.query_prompt).dump() + ", passage " +
                    json(f.passage_prompt).dump() + ")");
    if (f.columns != e.columns)
      out.push_back(where + ": prepared with other columns (" + (f.columns.empty() ? "by the rules" : f.columns) +
                    "; data.train[" + std::to_string(i) + "].columns now: " +
                    (e.columns.empty() ? "none" : e.columns) + ")");
    std::vector<std::string> found_paths, expected_paths;
    for (const auto& file : f.files) found_paths.push_back(file.path);
    for (const auto& file : e.files) expected_paths.push_back(file.path);
    if (found_paths != expected_paths) {
      out.push_back(where + ": its files are not the ones the folder was prepared from (" + json(found_paths).dump() + ")");
      continue;
    }
    for (size_t k = 0; k < f.files.size(); ++k)
      if (!(f.files[k] == e.files[k]))
        out.push_back("source file " + f.files[k].path + " changed since it was prepared (size " +
                      std::to_string(f.files[k].size) + " → " + std::to_string(e.files[k].size) + ")");
  }
  return out;
}

namespace {

// Parquet holds text compressed (Zstd or Snappy on sentences: a third of its JSONL's size
// or less), so a piece of piece_bytes / 3 on disk holds about the rows of a JSONL piece.
constexpr int64_t kParquetShareOfText = 3;

// A Parquet file's pieces: runs of whole row groups of about piece_bytes / 3 on disk (a
// group's share of the file's bytes taken as its share of the rows: TableFile gives each
// group's rows, not its bytes); one piece, the whole file, when it comes to no more.
void plan_parquet(int source, const std::string& file, int64_t size, int64_t piece_bytes,
                  std::vector<PrepareItem>& items) {
  const TableFile table(file, TableFormat::Parquet);
  const int groups = table.num_row_groups();
  const int64_t rows = std::max<int64_t>(1, table.num_rows());
  const int64_t budget = std::max<int64_t>(1, piece_bytes / kParquetShareOfText);
  std::vector<PrepareItem> pieces;
  int first = 0;
  int64_t piece_rows = 0;
  for (int g = 0; g < groups; ++g) {
    piece_rows += std::max<int64_t>(0, table.row_group_rows(g));
    const int64_t bytes = size * piece_rows / rows;
    if (bytes >= budget || g + 1 == groups) {
      pieces.push_back({source, FilePiece{file, first, g + 1, 1}, bytes});
      first = g + 1;
      piece_rows = 0;
    }
  }
  if (pieces.size() <= 1) pieces = {{source, FilePiece{file, 0, -1, 1}, size}};
  items.insert(items.end(), pieces.begin(), pieces.end());
}

}  // namespace

std::vector<PrepareItem> plan_prepare(const std::vector<SourceInput>& sources, int64_t piece_bytes) {
  std::vector<PrepareItem> items;
  std::vector<char> block(1 << 20);
  for (size_t s = 0; s < sources.size(); ++s) {
    if (sources[s].files.empty()) throw DataError("data source \"" + sources[s].name + "\": no files given");
    for (const DataFile& data_file : resolve_data_files(sources[s].files, sources[s].dataset).files) {
      const std::string& file = data_file.path;
      const TableFormat format = data_file.format;
      const PreparedFile stamp = stamp_file(file);
      if (format == TableFormat::Parquet) {
        plan_parquet(int(s), file, stamp.size, piece_bytes, items);
        continue;
      }
      std::ifstream in(file, std::ios::binary);
      unsigned char magic[2] = {0, 0};
      in.read(reinterpret_cast<char*>(magic), 2);
      const bool gzip = in.gcount() == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
      // Other table files (IPC streams, CSV: a header to read first) are one piece each.
      if (gzip || stamp.size <= piece_bytes || format != TableFormat::Jsonl) {
        items.push_back({int(s), FilePiece{file, 0, -1, 1}, stamp.size});
        continue;
      }
      // Cut after the first line end at or past each multiple of piece_bytes, counting lines.
      in.clear();
      in.seekg(0);
      int64_t pos = 0, line = 1, begin = 0, begin_line = 1, next_cut = piece_bytes;
      while (in) {
        in.read(block.data(), std::streamsize(block.size()));
        const int64_t n = in.gcount();
        for (int64_t i = 0; i < n; ++i) {
          if (block[size_t(i)] != '\n') continue;
          ++line;
          if (pos + i + 1 >= next_cut) {
            items.push_back({int(s), FilePiece{file, begin, pos + i + 1, begin_line}, pos + i + 1 - begin});
            begin = pos + i + 1;
            begin_line = line;
            next_cut = begin + piece_bytes;
          }
        }
        pos += n;
      }
      if (pos != stamp.size) throw DataError(file + ": read " + std::to_string(pos) + " bytes of " +
                                             std::to_string(stamp.size) + " (is it changing?)");
      if (begin < pos) items.push_back({int(s), FilePiece{file, begin, pos, begin_line}, pos - begin});
    }
  }
  return items;
}

}  // namespace ddp_embed
