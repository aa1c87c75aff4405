// Training and evaluation pairs: JSONL → tokenized, compact, in memory.
//
// Accepted lines (docs/formats.md, "Training and evaluation pairs"):
// {"query", "pos": str | [str], "neg": str | [str]}, {"anchor", "positive", "negative"},
// {"text1", "text2", "score"}. A bad line is a DataError "FILE:LINE: what is wrong", or
// is skipped and counted with skip_bad_lines.
// A line longer than data.max_line_bytes is a bad line too: it is never held in memory whole.
// Text is tokenized once at load (on several threads); ids are kept in one flat array
// (16-bit when the vocabulary allows), so a million pairs take tens of MB.
#pragma once

#include <cstdint>
#include <istream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct DataError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Every sequence of a dataset, stored back to back.
class TokenStore {
 public:
  int64_t num_sequences() const;
  int32_t length(int64_t seq) const;
  // Writes length(seq) ids to out.
  void copy(int64_t seq, int64_t* out) const;
  std::vector<int32_t> ids(int64_t seq) const;
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

 private:
  bool wide_ = false;
  bool wide_fixed_ = false;
  std::vector<uint16_t> ids16_;
  std::vector<int32_t> ids32_;
  std::vector<int64_t> offsets_{0};
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

struct PairDataset {
  TokenStore tokens;
  std::vector<PairIndex> pairs;
  bool has_scores = false;  // every record had a numeric "score"
  int64_t lines = 0;        // non-empty lines read
  int64_t skipped = 0;      // bad lines skipped (skip_bad_lines)
  int64_t size() const { return static_cast<int64_t>(pairs.size()); }
};

// The longest line read by default (data.max_line_bytes). A record holds a few texts
// that are cut to max_length tokens (at most 512, a few KB of text); a longer line is a
// file that is not JSONL (say a JSON array without line breaks), which would otherwise be
// read into memory whole. It is a bad line, never held in memory whole.
inline constexpr int64_t kDefaultMaxLineBytes = 1 << 20;

// Reads and tokenizes the files in order. Throws DataError naming file and line.
PairDataset load_pairs(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads = 2,
                       int64_t max_line_bytes = kDefaultMaxLineBytes);

// The same for one JSONL text from a stream (a file, or text in memory); `origin` names
// it in errors.
PairDataset load_pairs(std::istream& in, const std::string& origin, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads = 2,
                       int64_t max_line_bytes = kDefaultMaxLineBytes);

}  // namespace ddp_embed
