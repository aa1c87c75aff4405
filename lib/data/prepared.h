// A prepared data set: the training sources tokenized once (`embed-train prepare`), as
// flat binary arrays that every worker maps read-only (util/mapped_file.h). Workers on a
// machine share one copy in the page cache, a worker's memory does not grow with the data,
// and start-up reads a manifest instead of tokenizing. The folder (docs/formats.md,
// "Prepared data"):
//
//   manifest.json        what it was made from and what it holds (PreparedManifest)
//   ids.u16 | ids.i32    every sequence's token ids back to back (32-bit above 65,536 tokens)
//   offsets.i64          sequence s is ids[offsets[s], offsets[s + 1])
//   pairs.bin            one 40-byte PairIndex a pair (sequence numbers, counts, score)
//   text_hashes.u64      per sequence, text_hash() of its text
//   teacher_scores.f32   per sequence, the teacher's score (NaN: none); only when any pair has some
//
// Little-endian, as the machine writes them. A folder appears whole or not at all: it is
// written beside itself (DIR.tmp) and renamed into place; manifest.json is written last,
// with a checksum of itself ("manifest_xxh3"), so that an edit to it is refused, not trained on.
//
// Who touches a folder at once (PreparedFolderLock, flock(2) on DIR.lock beside it): a
// prepare holds the lock exclusively from before it looks at DIR until DIR is published;
// a run holds it shared while it opens DIR (manifest, mapping, verification). A second
// prepare, and a run opening DIR while a prepare holds it, fail at once naming the holder:
// the rename alone would not do, as a prepare removes a stale DIR at its start and again
// just before its rename, and a run between the two would take the gap for damage. Once a
// run has mapped the arrays, a prepare may replace DIR: the run keeps the files it mapped.
//
// What a folder holds is verified when a run opens it (data/prepared_check.h): the
// manifest's counts and ranges against each other and against the files' sizes, every
// array against its checksums (one XXH3-64 per 64 MiB region, written as the array was),
// every pair record's sequence numbers and counts, token ids within the vocabulary,
// offsets in order, teacher scores finite. A damaged folder is a DataError naming the file
// and what is wrong, before any step trains on it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "data/pairs.h"

namespace ddp_embed {

// A source file as it was when it was prepared: a changed file is a stale folder.
struct PreparedFile {
  std::string path;
  int64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t sample_hash = 0;  // of its size, first and last 64 KiB: cheap to check at every start
  bool operator==(const PreparedFile& o) const {
    return path == o.path && size == o.size && mtime_ns == o.mtime_ns && sample_hash == o.sample_hash;
  }
};
PreparedFile stamp_file(const std::string& path);  // DataError when it cannot be read

struct PreparedSource {
  std::string name, query_prompt, passage_prompt;  // prompts as texts, as they were tokenized
  std::string columns;                              // data.train[i].columns (ColumnNames::key), "" = none
  std::vector<PreparedFile> files;                  // after glob expansion, in order
  int64_t begin = 0, end = 0;                       // its pairs
};

// The tokenizer a folder was prepared with: ids from another one are garbage to a model.
struct TokenizerStamp {
  std::string type;
  int32_t vocab_size = 0;
  std::string fingerprint;  // hash of its files and of the ids it gives a set of probe texts
};
TokenizerStamp stamp_tokenizer(const Tokenizer& tokenizer);

// The arrays' checksums: each file cut into regions of region_bytes (the last one
// shorter), one XXH3-64 a region. Regions let the check run on several threads, and
// release each region's pages once it is hashed.
inline constexpr int64_t kChecksumRegionBytes = int64_t(64) << 20;

struct PreparedManifest {
  TokenizerStamp tokenizer;
  int max_length = 0;
  bool teacher_scores_required = false;  // prepared for loss.distill: every pair has them
  std::vector<PreparedSource> sources;
  int64_t sequences = 0, ids = 0, pairs = 0;
  int64_t lines = 0, skipped = 0;
  bool wide = false;                // ids are 32-bit
  bool has_scores = false;          // PairDataset::has_scores
  bool all_teacher_scored = false;  // PairDataset::all_teacher_scored
  bool teacher_scores = false;      // teacher_scores.f32 exists
  int64_t region_bytes = kChecksumRegionBytes;
  std::map<std::string, std::vector<uint64_t>> checksums;  // file name -> one XXH3-64 a region
  // Not empty: this folder is one piece of an unfinished prepare of that folder
  // (DIR.parts/piece-N), which a run refuses as a data set.
  std::string piece_of;
};

// Who checks which part of a folder as it is opened: `threads` threads, over the regions
// whose index i (counted over all the arrays) has i % parts == part. The workers of one
// machine read the same files, so each checks a share (part = its local rank, parts = the
// machine's workers): together they check all of it once, not once each; a worker whose
// share is damaged fails, and the launcher stops the others.
struct VerifyShare {
  int threads = 1;
  int part = 0, parts = 1;
};

// The files a folder holds besides manifest.json, with the sizes its counts give them.
std::vector<std::pair<std::string, int64_t>> expected_files(const PreparedManifest& m);

// A folder's path as prepare uses it: normalized, without a trailing slash (DIR.tmp and
// DIR.parts are written beside DIR).
std::string folder_path(const std::string& dir);

inline constexpr const char* kPreparedManifestName = "manifest.json";

// Whether `dir` is a prepared folder (holds manifest.json).
bool is_prepared_folder(const std::string& dir);
// DataError naming the file and the key when it is not a manifest we wrote, or its
// counts, source ranges or checksums do not fit together, or (checked last) it does not
// match its own checksum: edited or damaged since it was written. A folder of an older
// format (version 1 without checksums, 2 without the manifest's own) is refused with
// "prepare it again".
PreparedManifest read_manifest(const std::string& dir);

// manifest.json's text for `m` (counts, sources, checksums as they are), stamped with
// its checksum of itself.
std::string prepared_manifest_text(const PreparedManifest& m);
// That checksum ("manifest_xxh3"): XXH3-64, as 16 hex digits, of the compact dump of
// every other key of `manifest` (nlohmann::json sorts keys: the layout of the file and
// the order of its keys do not count, their values do).
std::string manifest_self_checksum(const nlohmann::json& manifest);

// The lock on a prepared folder (above): flock(2) on DIR.lock, released by the kernel
// when its process dies, however it dies. Two of them conflict within one process too.
class PreparedFolderLock {
 public:
  enum class Mode {
    Prepare,  // exclusive; DIR.lock is created, holds "PID HOST", and is removed on release
    Read,     // shared; nothing is created (a folder on a read-only disk opens)
  };
  // Takes the lock on folder_path(dir) or throws DataError at once, naming DIR and who
  // holds it (a prepare's pid and host; a run opening it). Where the file system cannot
  // lock, a prepare logs a warning and goes on unlocked.
  PreparedFolderLock(const std::string& dir, Mode mode);
  ~PreparedFolderLock();
  PreparedFolderLock(const PreparedFolderLock&) = delete;
  PreparedFolderLock& operator=(const PreparedFolderLock&) = delete;

 private:
  std::string path_;
  Mode mode_;
  int fd_ = -1;
};

// Writes `data` as the prepared folder `dir` (replacing one there), with `manifest`'s
// tokenizer, max_length and source files; its counts and the sources' pair ranges come
// from `data`.
void write_prepared(const PairDataset& data, PreparedManifest manifest, const std::string& dir);

// Joins prepared folders (the pieces of a prepare, in order; each one source's) into
// `dir`: the sequences renumbered, the sources' pair ranges from the pieces' counts.
// `manifest` gives the tokenizer, max_length and the sources (names, prompts, files);
// piece_source[i] is the source piece i belongs to.
void concatenate_prepared(const std::vector<std::string>& pieces, const std::vector<int>& piece_source,
                          PreparedManifest manifest, const std::string& dir);

// The data set of a prepared folder, its arrays mapped and verified (data/prepared_check.h:
// sizes, checksums, records, at memory bandwidth; `share` of it, the other shares left to
// the machine's other workers), a DataError naming the file and what is wrong. Sequences are checked again as batches take them
// (TokenStore::set_checked). `random_access`: batches jump about (no read-ahead); false
// for reading it front to back.
PairDataset open_prepared(const std::string& dir, PreparedManifest* manifest = nullptr, bool random_access = true,
                          const VerifyShare& share = {});

// What the run expects a folder to be made from. Empty when `found` matches, else one
// line per difference ("tokenizer: ...", "source file X: ..."). Source files that no
// longer exist are not compared: the folder is the data (it may have been copied).
std::vector<std::string> manifest_differences(const PreparedManifest& found, const PreparedManifest& expected);

// The unit of work of a prepare: a piece of a source's file. Plain files larger than
// piece_bytes are cut at line ends into pieces of about that size (their first line
// numbers counted on the way); a Parquet file into runs of whole row groups of about
// piece_bytes / 3 on disk (compressed text: about the rows of a JSONL piece); gzip files
// and other table files (IPC streams, CSV) are one piece each. A file that is one piece
// has end < 0. Throws DataError for a Parquet file whose footer cannot be read.
struct PrepareItem {
  int source = 0;
  FilePiece piece;
  int64_t bytes = 0;  // on disk: what the progress line counts
};
std::vector<PrepareItem> plan_prepare(const std::vector<SourceInput>& sources, int64_t piece_bytes);

}  // namespace ddp_embed
