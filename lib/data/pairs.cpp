// load_pairs(): read JSONL (or a table file: data/table_files.h) in chunks, parse and tokenize
// each chunk on several threads, then append the results in file order, so the dataset
// does not depend on `threads`.
#include "data/pairs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "data/input_files.h"
#include "data/pair_record.h"
#include "data/table_files.h"
#include "util/file_check.h"
#include "util/hash.h"

namespace ddp_embed {

namespace {

// A chunk is this many lines or bytes, whichever comes first: enough work to share
// between threads, little enough memory.
constexpr size_t kChunkLines = 8192;
constexpr size_t kReadChunkBytes = 64u << 20;
constexpr int kWarnSkipped = 5;  // skipped lines logged one by one, then only counted

// A JSONL line, or a row of a table file, whose record is read already.
struct Line {
  int64_t number = 0;
  std::string text;
  std::string error;  // what is wrong with the line before parsing it (its length)
  bool from_table = false;
  std::string where{};  // a table row: "row group G, row R"
  PairRecord record{};  // a table row's
};

// std::getline with a bound: reads blocks and cuts them at '\n', so that a line longer
// than `max_bytes` is skipped to its end instead of being held in memory whole.
class LineReader {
 public:
  LineReader(std::istream& in, size_t max_bytes)
      : in_(in), max_bytes_(max_bytes), block_(new char[kBlockBytes]) {}

  // The next line (without its '\n') into `line`; false at the end of the input. When the
  // line is longer than max_bytes, `too_long` is set and `line` is left empty.
  bool next(std::string& line, bool& too_long) {
    line.clear();
    too_long = false;
    bool read_any = false;
    for (;;) {
      if (pos_ == end_ && !fill()) return read_any;
      read_any = true;
      const char* begin = block_.get() + pos_;
      const auto* newline = static_cast<const char*>(std::memchr(begin, '\n', end_ - pos_));
      const size_t length = newline ? static_cast<size_t>(newline - begin) : end_ - pos_;
      keep(line, begin, length, too_long);
      pos_ += length;
      if (newline) {
        ++pos_;
        return true;
      }
    }
  }

 private:
  bool fill() {
    in_.read(block_.get(), static_cast<std::streamsize>(kBlockBytes));
    pos_ = 0;
    end_ = static_cast<size_t>(in_.gcount());
    return end_ > 0;
  }

  void keep(std::string& line, const char* begin, size_t length, bool& too_long) const {
    if (too_long) return;
    if (length > max_bytes_ - line.size()) {
      too_long = true;
      std::string().swap(line);  // give the memory back now, not after the line
      return;
    }
    line.append(begin, length);
  }

  static constexpr size_t kBlockBytes = 1 << 16;
  std::istream& in_;
  const size_t max_bytes_;
  std::unique_ptr<char[]> block_;  // not zeroed: read() fills what is used
  size_t pos_ = 0, end_ = 0;
};

// One parsed and tokenized line: its sequences back to back (query, positives,
// negatives), or what is wrong with it.
struct LineResult {
  std::string error;
  std::vector<int32_t> ids;
  std::vector<int32_t> lengths;
  std::vector<uint64_t> hashes;  // per sequence
  std::vector<float> teacher_scores;  // per candidate (positives, negatives), or empty
  int32_t pos_count = 0, neg_count = 0;
  bool has_score = false;
  float score = 0;
};

// How a source's lines are read: the prompts put before its texts as they are
// tokenized, and whether each pair must carry teacher scores.
struct SourceRules {
  std::string query_prompt, passage_prompt;
  bool require_teacher_scores = false;
  std::string teacher_scores_key;  // the loss setting that needs them, for the message
  ColumnNames columns{};           // of its table files
  std::string columns_key;         // the setting that named them, for the message
};

bool blank_line(const std::string& line) {
  return line.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

void process_line(const Line& line, const Tokenizer& tokenizer, int max_length, const SourceRules& rules,
                  LineResult& out) {
  if (!line.error.empty()) {
    out.error = line.error;
    return;
  }
  PairRecord parsed;
  if (!line.from_table) {
    out.error = parse_pair_record(line.text, parsed);
    if (!out.error.empty()) return;
  }
  const PairRecord& record = line.from_table ? line.record : parsed;
  if (rules.require_teacher_scores && record.teacher_scores.empty()) {
    out.error = rules.teacher_scores_key + " needs teacher scores on every pair, and this one has none: "
                "give \"pos_scores\" and \"neg_scores\" (one per positive, one per negative) or \"label\" (one per "
                "positive, then one per negative)";
    return;
  }
  auto add = [&](const std::string& prompt, const std::string& text) {
    const std::vector<int32_t> ids = tokenizer.encode(prompt.empty() ? text : prompt + text, max_length);
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.lengths.push_back(static_cast<int32_t>(ids.size()));
    out.hashes.push_back(text_hash(text));
  };
  add(rules.query_prompt, record.query);
  for (const auto& text : record.pos) add(rules.passage_prompt, text);
  for (const auto& text : record.neg) add(rules.passage_prompt, text);
  out.pos_count = static_cast<int32_t>(record.pos.size());
  out.neg_count = static_cast<int32_t>(record.neg.size());
  out.has_score = record.has_score;
  out.score = record.score;
  out.teacher_scores = record.teacher_scores;
}

// Processes lines[i] into results[i] on up to `threads` threads, each taking one
// contiguous slice.
void process_chunk(const std::vector<Line>& lines, const Tokenizer& tokenizer, int max_length,
                   const SourceRules& rules, int threads, std::vector<LineResult>& results) {
  results.assign(lines.size(), LineResult());
  const size_t workers = std::max<size_t>(1, std::min<size_t>(threads, lines.size()));
  auto work = [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) process_line(lines[i], tokenizer, max_length, rules, results[i]);
  };
  if (workers == 1) {
    work(0, lines.size());
    return;
  }
  std::vector<std::exception_ptr> failures(workers);
  std::vector<std::thread> pool;
  pool.reserve(workers);
  for (size_t w = 0; w < workers; ++w) {
    const size_t begin = lines.size() * w / workers, end = lines.size() * (w + 1) / workers;
    pool.emplace_back([&, w, begin, end] {
      try {
        work(begin, end);
      } catch (...) {
        failures[w] = std::current_exception();
      }
    });
  }
  for (auto& thread : pool) thread.join();
  for (auto& failure : failures)
    if (failure) std::rethrow_exception(failure);
}

std::string too_long_message(int64_t limit) {
  return "the line is longer than data.max_line_bytes = " + std::to_string(limit) +
         " bytes (a JSONL record is one line: a missing newline, or not JSONL? raise the limit if the line is meant)";
}

// The next `bytes` bytes of another stream buffer, and no more: a piece of a file.
class RangeBuffer : public std::streambuf {
 public:
  RangeBuffer(std::streambuf& source, int64_t bytes) : source_(source), left_(bytes) {}
  int64_t left() const { return left_; }

 protected:
  std::streamsize xsgetn(char* out, std::streamsize n) override {
    const std::streamsize got = source_.sgetn(out, std::min<std::streamsize>(n, std::streamsize(left_)));
    left_ -= got;
    return got;
  }
  int_type underflow() override { return traits_type::eof(); }  // read() goes through xsgetn

 private:
  std::streambuf& source_;
  int64_t left_;
};

class PairLoader {
 public:
  PairLoader(const Tokenizer& tokenizer, int max_length, bool skip_bad_lines, int threads, int64_t max_line_bytes)
      : tokenizer_(tokenizer),
        max_length_(max_length),
        skip_bad_lines_(skip_bad_lines),
        max_line_bytes_(max_line_bytes),
        threads_(std::max(1, threads)) {
    data_.tokens.reserve(/*wide=*/tokenizer.vocab_size() > 65536, 0, 0);
  }

  // The source whose files are read next: its pairs form a SourceRange of their own.
  void begin_source(const std::string& name, SourceRules rules) {
    data_.sources.push_back(SourceRange{name, data_.size(), data_.size()});
    rules_ = std::move(rules);
  }

  // A JSONL file, plain or gzip-compressed, or a table file. `need_pairs`: as in load_stream.
  void load_file(const std::string& file, TableFormat format, bool need_pairs = true) {
    if (format != TableFormat::Jsonl) return load_table(file, format, need_pairs);
    if (!rules_.columns.empty())
      throw DataError(rules_.columns_key + " names columns of table files (Parquet, Arrow, CSV, TSV), and " + file +
                      " is JSONL, whose keys are fixed (docs/formats.md): remove " + rules_.columns_key +
                      ", or give the source as a table file");
    load_stream(*open_input_file(file), file, 1, need_pairs);
  }

  // `first_line`: the number of the stream's first line in its file; `need_pairs`: a
  // stream without pairs is an error (a whole file; a piece of one may have none).
  void load_stream(std::istream& in, const std::string& file, int64_t first_line = 1, bool need_pairs = true) {
    const int64_t pairs_before = data_.size(), skipped_before = data_.skipped;
    std::vector<Line> chunk;
    size_t chunk_bytes = 0;
    int64_t number = first_line - 1;
    std::string text;
    bool too_long = false;
    LineReader reader(in, static_cast<size_t>(max_line_bytes_));
    while (reader.next(text, too_long)) {
      ++number;
      if (number == 1 && first_line == 1 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) text.erase(0, 3);  // BOM
      if (!too_long && blank_line(text)) continue;
      ++data_.lines;
      chunk_bytes += text.size();
      chunk.push_back(Line{number, std::move(text), too_long ? too_long_message(max_line_bytes_) : ""});
      text = std::string();
      if (chunk.size() >= kChunkLines || chunk_bytes >= kReadChunkBytes) {
        add_chunk(file, chunk);
        chunk.clear();
        chunk_bytes = 0;
      }
    }
    if (in.bad()) throw DataError("cannot read " + file + ": " + std::strerror(errno));
    add_chunk(file, chunk);
    if (need_pairs) require_pairs(file, pairs_before, skipped_before);
  }

  // A table file, a batch of rows at a time; its rows are lines for the rest. Parquet:
  // only row groups [first_group, end_group) (-1: to the end), a piece of the file.
  void load_table(const std::string& file, TableFormat format, bool need_pairs, int first_group = 0,
                  int end_group = -1) {
    const int64_t pairs_before = data_.size(), skipped_before = data_.skipped;
    std::vector<Line> chunk;
    const auto on_batch = [&](std::vector<TableRow>& rows) {
      chunk.assign(rows.size(), Line());
      for (size_t i = 0; i < rows.size(); ++i) {
        Line& line = chunk[i];
        line.from_table = true;
        line.where = std::move(rows[i].where);
        line.error = std::move(rows[i].error);
        line.record = std::move(rows[i].record);
      }
      data_.lines += static_cast<int64_t>(rows.size());
      add_chunk(file, chunk);
    };
    const std::string columns =
        read_table_pairs(file, format, rules_.columns, kChunkLines, on_batch, first_group, end_group);
    if (columns != last_columns_ && first_group == 0) spdlog::info("{}: columns {}", file, columns);
    last_columns_ = columns;
    if (need_pairs) require_pairs(file, pairs_before, skipped_before);
  }

  // A whole file without pairs is an error.
  void require_pairs(const std::string& file, int64_t pairs_before, int64_t skipped_before) const {
    if (data_.size() > pairs_before) return;
    const int64_t skipped = data_.skipped - skipped_before;
    throw DataError(file + ": no pairs" + (skipped > 0 ? " (" + std::to_string(skipped) + " bad lines skipped)" : ""));
  }

  PairDataset finish() {
    data_.has_scores = data_.size() > 0 && all_scored_;
    data_.all_teacher_scored = data_.size() > 0 && all_teacher_scored_;
    if (!any_teacher_scored_) data_.teacher_scores.clear();
    data_.tokens.shrink_to_fit();
    data_.pairs.shrink_to_fit();
    data_.text_hashes.shrink_to_fit();
    data_.teacher_scores.shrink_to_fit();
    return std::move(data_);
  }

 private:
  void add_chunk(const std::string& file, const std::vector<Line>& chunk) {
    if (chunk.empty()) return;
    process_chunk(chunk, tokenizer_, max_length_, rules_, threads_, results_);
    for (size_t i = 0; i < chunk.size(); ++i) {
      LineResult& result = results_[i];
      if (!result.error.empty()) {
        const std::string where =
            chunk[i].from_table ? file + ": " + chunk[i].where + ": " : file + ":" + std::to_string(chunk[i].number) + ": ";
        if (!skip_bad_lines_) throw DataError(where + result.error);
        if (++data_.skipped <= kWarnSkipped) spdlog::warn("skipping {}{}", where, result.error);
        continue;
      }
      append(result);
    }
  }

  void append(const LineResult& result) {
    TokenStore& tokens = data_.tokens;
    PairIndex pair;
    pair.query = tokens.num_sequences();
    pair.pos_begin = pair.query + 1;
    pair.pos_count = result.pos_count;
    pair.neg_begin = pair.pos_begin + result.pos_count;
    pair.neg_count = result.neg_count;
    pair.score = result.score;
    all_scored_ = all_scored_ && result.has_score;
    const int32_t* ids = result.ids.data();
    for (int32_t length : result.lengths) {
      tokens.append(ids, static_cast<size_t>(length));
      ids += length;
    }
    data_.text_hashes.append(result.hashes.begin(), result.hashes.end());
    // Teacher scores: NaN for the query, then the candidates' (NaN where the record has none).
    const bool scored = !result.teacher_scores.empty();
    all_teacher_scored_ = all_teacher_scored_ && scored;
    any_teacher_scored_ = any_teacher_scored_ || scored;
    data_.teacher_scores.push_back(kNoScore);
    for (size_t k = 0; k + 1 < result.lengths.size(); ++k)
      data_.teacher_scores.push_back(scored ? result.teacher_scores[k] : kNoScore);
    data_.pairs.push_back(pair);
    data_.sources.back().end = data_.size();
  }

  static constexpr float kNoScore = std::numeric_limits<float>::quiet_NaN();

  const Tokenizer& tokenizer_;
  const int max_length_;
  const bool skip_bad_lines_;
  const int64_t max_line_bytes_;
  const int threads_;
  PairDataset data_;
  SourceRules rules_;
  bool all_scored_ = true, all_teacher_scored_ = true, any_teacher_scored_ = false;
  std::vector<LineResult> results_;
  std::string last_columns_;  // how the last table file's columns were taken, logged when it changes
};

SourceRules source_rules(const SourceInput& source) {
  return {source.query_prompt, source.passage_prompt, source.require_teacher_scores, source.teacher_scores_key,
          source.columns, source.dataset.key + ".columns"};
}

}  // namespace

uint64_t text_hash(std::string_view text) {
  auto space = [](unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  uint64_t h = kFnv1a64ShortOffset;  // FNV-1a over the normalized bytes
  auto add = [&h](unsigned char c) { h = fnv1a64_mix(h, c); };
  bool pending_space = false, started = false;
  for (unsigned char c : text) {
    if (space(c)) {
      pending_space = started;
      continue;
    }
    if (pending_space) add(' ');
    pending_space = false;
    started = true;
    add(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  }
  // splitmix64's finalizer: FNV's low bits are weak, and masks and buckets use them.
  return mix64(h);
}

PairDataset load_sources(const std::vector<SourceInput>& sources, const Tokenizer& tokenizer, int max_length,
                         bool skip_bad_lines, int threads, int64_t max_line_bytes) {
  if (sources.empty()) throw DataError("no data sources given");
  if (max_line_bytes <= 0) throw DataError("data.max_line_bytes must be positive");
  PairLoader loader(tokenizer, max_length, skip_bad_lines, threads, max_line_bytes);
  for (const auto& source : sources) {
    if (source.files.empty()) throw DataError("data source \"" + source.name + "\": no files given");
    loader.begin_source(source.name, source_rules(source));
    const ResolvedData resolved = resolve_data_files(source.files, source.dataset);
    for (const std::string& choice : resolved.choices) spdlog::info("data source \"{}\": {}", source.name, choice);
    for (const DataFile& file : resolved.files) loader.load_file(file.path, file.format);
  }
  return loader.finish();
}

PairDataset load_piece(const SourceInput& source, const FilePiece& piece, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads, int64_t max_line_bytes) {
  if (max_line_bytes <= 0) throw DataError("data.max_line_bytes must be positive");
  PairLoader loader(tokenizer, max_length, skip_bad_lines, threads, max_line_bytes);
  loader.begin_source(source.name, source_rules(source));
  if (piece.end < 0) {
    loader.load_file(piece.file, table_format_of(piece.file), /*need_pairs=*/false);
    return loader.finish();
  }
  if (const TableFormat format = table_format_of(piece.file); format == TableFormat::Parquet) {
    loader.load_table(piece.file, format, /*need_pairs=*/false, int(piece.begin), int(piece.end));  // row groups
    return loader.finish();
  }
  // A byte range of a plain file, streamed as a whole file is (a piece of one long line
  // is never held whole: the line reader skips what is over max_line_bytes).
  if (const std::string folder = folder_not_file(piece.file, "a file of pairs"); !folder.empty())
    throw DataError(folder);
  std::ifstream file(piece.file, std::ios::binary);
  if (!file) throw DataError("cannot open " + piece.file + ": " + std::strerror(errno));
  file.seekg(piece.begin);
  RangeBuffer range(*file.rdbuf(), piece.end - piece.begin);
  std::istream in(&range);
  loader.load_stream(in, piece.file, piece.first_line, /*need_pairs=*/false);
  if (range.left() > 0)
    throw DataError(piece.file + ": bytes " + std::to_string(piece.end - range.left()) + ".." +
                    std::to_string(piece.end) + " could not be read (was the file changed while it was prepared?)");
  return loader.finish();
}

PairDataset load_pairs(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads, int64_t max_line_bytes) {
  if (files.empty()) throw DataError("no data files given");
  return load_sources({SourceInput{"train", files, "", "", false}}, tokenizer, max_length, skip_bad_lines, threads,
                      max_line_bytes);
}

PairDataset load_pairs(std::istream& in, const std::string& origin, const Tokenizer& tokenizer,
                       int max_length, bool skip_bad_lines, int threads, int64_t max_line_bytes) {
  if (max_line_bytes <= 0) throw DataError("data.max_line_bytes must be positive");
  PairLoader loader(tokenizer, max_length, skip_bad_lines, threads, max_line_bytes);
  loader.begin_source("train", {});
  loader.load_stream(in, origin);
  return loader.finish();
}

}  // namespace ddp_embed
