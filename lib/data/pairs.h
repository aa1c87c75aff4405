// Training and evaluation pairs: JSONL → tokenized, compact, in memory.
//
// Accepted lines (docs/formats.md, "Training and evaluation pairs"):
// {"query", "pos": str | [str], "neg": str | [str]}, {"anchor", "positive", "negative"},
// {"text1", "text2", "score"}. A bad line is a DataError "FILE:LINE: what is wrong", or
// is skipped and counted with skip_bad_lines. A table file (Parquet, Arrow, CSV, TSV:
// data/table_files.h) is read as its rows; a bad row is a bad line, "FILE: row group G,
// row R: what is wrong" (or "line L" for CSV).
// A line longer than data.max_line_bytes is a bad line too: it is never held in memory whole.
// Text is tokenized once at load (on several threads); ids are kept in one flat array
// (16-bit when the vocabulary allows), so a million pairs take tens of MB.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "data/column.h"
#include "data/dataset_files.h"
#include "data/table_files.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every sequence of a dataset, stored back to back: in memory, or mapped from a prepared
// data set (data/prepared.h).
class TokenStore {
 public:
  int64_t num_sequences() const;
  int32_t length(int64_t seq) const;
  // Writes length(seq) ids to out.
  void copy(int64_t seq, int64_t* out) const;
  std::vector<int32_t> ids(int64_t seq) const;
  // Heap bytes (a mapped store's pages are the page cache's).
  size_t memory_bytes() const;

  // Appends a sequence; `wide` (int32 storage) is fixed by the first call to reserve().
  // reserve() takes totals, like std::vector::reserve. Narrow storage holds ids 0..65535;
  // append() throws DataError for others.
  void reserve(bool wide, int64_t sequences, int64_t ids);
  void append(const std::vector<int32_t>& ids);
  void append(const int32_t* ids, size_t count);
  bool wide() const { return wide_; }
  // Gives back the spare capacity that growing by appends leaves.
  void shrink_to_fit();

  // A store over columns read elsewhere (a prepared data set): ids of `wide` width and
  // num_sequences + 1 offsets into them.
  static TokenStore from_columns(bool wide, Column<uint16_t> ids16, Column<int32_t> ids32, Column<int64_t> offsets);
  const Column<uint16_t>& ids16() const { return ids16_; }
  const Column<int32_t>& ids32() const { return ids32_; }
  const Column<int64_t>& offsets() const { return offsets_; }

  // Checks each sequence copy() and ids() read: its number and offsets in range, its ids
  // below vocab_size. For mapped data, which is not read whole at start-up: a damaged
  // file is a DataError naming it (in the prepared folder `origin`) before a batch trains on it.
  void set_checked(int32_t vocab_size, std::string origin);
  // Mapped data: the pages read so far unmapped (Column::release_pages).
  void release_pages() const;

 private:
  void check(int64_t seq) const;

  bool wide_ = false;
  bool wide_fixed_ = false;
  Column<uint16_t> ids16_;
  Column<int32_t> ids32_;
  Column<int64_t> offsets_{std::vector<int64_t>{0}};
  int32_t checked_vocab_ = 0;  // 0: unchecked (data built here)
  std::string origin_;
};

// One record: sequence numbers into the TokenStore.
struct PairIndex {
  int64_t query = 0;
  int64_t pos_begin = 0;
  int32_t pos_count = 0;
  int64_t neg_begin = 0;
  int32_t neg_count = 0;
  float score = 0;  // meaningful when the dataset has_scores
};

// The pairs of one source (data.train): [begin, end) of PairDataset::pairs.
struct SourceRange {
  std::string name;
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

struct PairDataset {
  TokenStore tokens;
  // loss.guide with a tokenizer of its own (train/guide.h): every sequence of `tokens`
  // again, tokenized by the guide's tokenizer to its max length, under the same sequence
  // numbers. Empty (no sequences): the guide reads `tokens`.
  TokenStore guide_tokens;
  Column<PairIndex> pairs;
  std::vector<SourceRange> sources;  // in data.train's order, covering every pair
  // Per sequence: text_hash() of its text (the prompt left out), so that the same text
  // is known wherever it appears; and the teacher's score of a candidate (NaN for a
  // query or a record without scores; empty when no record has any).
  Column<uint64_t> text_hashes;
  Column<float> teacher_scores;
  bool has_scores = false;   // every record had a numeric "score"
  bool all_teacher_scored = false;  // every record had teacher scores for all its candidates
  int64_t lines = 0;         // non-empty lines read
  int64_t skipped = 0;       // bad lines skipped (skip_bad_lines)
  int64_t size() const { return static_cast<int64_t>(pairs.size()); }
  bool mapped() const { return pairs.mapped(); }
  // A mapped data set (data/prepared.h): the pages its batches have read so far unmapped,
  // so that a worker's resident memory stays that of a batch, whatever the data's size.
  void release_pages() const;
};

// A 64-bit hash of a text's normalized form — ASCII letters lower-cased, runs of
// whitespace one space, none at either end — so "Paris " and "paris" are one text.
uint64_t text_hash(std::string_view text);

// The longest line read by default (data.max_line_bytes). A record holds a few texts
// that are cut to max_length tokens (at most 512, a few KB of text); a longer line is a
// file that is not JSONL (say a JSON array without line breaks), which would otherwise be
// read into memory whole. It is a bad line, never held in memory whole.
inline constexpr int64_t kDefaultMaxLineBytes = 1 << 20;

// One source to read: its paths (files, glob patterns, dataset folders: resolved by
// data/dataset_files.h, with `dataset` choosing a folder's config and split), the columns
// of its table files (data/table_files.h; empty: by the naming rules), and the prompts
// (their texts) put before its queries and before its positives and negatives when they
// are tokenized.
// require_teacher_scores (loss.distill, MarginMSE): a pair without teacher scores is a
// bad line, "FILE:LINE: <teacher_scores_key> needs teacher scores ...", the key being
// the loss setting that reads them.
struct SourceInput {
  std::string name;
  std::vector<std::string> files;
  std::string query_prompt, passage_prompt;
  bool require_teacher_scores = false;
  std::string teacher_scores_key = "loss.distill";
  DatasetChoice dataset{};
  ColumnNames columns{};
};

// Reads and tokenizes every source's files in order, into one dataset whose `sources`
// say which pairs came from which; logs what each dataset folder's resolution chose.
// Throws DataError naming file and line (or row); a source without pairs is an error
// naming it, and so is `columns` set for a source with a JSONL file (its keys are fixed).
PairDataset load_sources(const std::vector<SourceInput>& sources, const Tokenizer& tokenizer, int max_length,
                         bool skip_bad_lines, int threads = 2, int64_t max_line_bytes = kDefaultMaxLineBytes);

// A piece of one source's file, the unit of work of `embed-train prepare` (data/prepared.h):
// the lines of a plain file that lie in bytes [begin, end) — whole lines, the first one
// line number `first_line`; of a Parquet file, the row groups [begin, end); or, with
// end < 0, the whole file (plain, gzip, or a table file of any format: data/table_file.h).
struct FilePiece {
  std::string file;
  int64_t begin = 0, end = -1;
  int64_t first_line = 1;
};

// The pairs of one piece, read as load_sources() reads the source's files (its prompts
// and rules; errors name the file and its line). A piece without pairs is no error here:
// prepare checks that each file has some.
PairDataset load_piece(const SourceInput& source, const FilePiece& piece, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads = 2,
                       int64_t max_line_bytes = kDefaultMaxLineBytes);

// One source, "train", of `files` without prompts.
PairDataset load_pairs(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads = 2,
                       int64_t max_line_bytes = kDefaultMaxLineBytes);

// The same for one JSONL text from a stream (a file, or text in memory); `origin` names
// it in errors.
PairDataset load_pairs(std::istream& in, const std::string& origin, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads = 2,
                       int64_t max_line_bytes = kDefaultMaxLineBytes);

}  // namespace ddp_embed
