// The text of training data as sentences, one at a time, for training a tokenizer
// (train_sentencepiece of tokenize/tokenizer.h pulls them): a tokenizer trained on
// data.train must see the texts that training reads, from the same files in every format
// they come in, and a corpus of millions of pairs is streamed, never held whole.
//
// Each file gives, in the files' order and each file's:
//   a table file (Parquet, Arrow IPC, CSV, TSV; data/table_file.h): of each row its query,
//     its positives, then its negatives, from the columns map_pair_columns of
//     data/table_files.h gives them (the roles training reads; a source's ColumnNames
//     honoured), read a batch of rows at a time;
//   a JSONL file (plain or gzip): of each record every text field, in the order "query",
//     "pos", "neg", "anchor", "positive", "negative", "text1", "text2", "text" (a list:
//     each text in it) — for a pair the same order as a table's row;
//   any other file (plain or gzip) whose name does not end in .jsonl or .json and whose
//     first non-blank line is not a JSON object: each non-blank line as a sentence.
// Empty texts are left out; ill-formed UTF-8 is replaced (U+FFFD), as the tokenizer does
// when it encodes.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset_files.h"
#include "data/table_files.h"

namespace ddp_embed {

// Files of one source and how its table files' columns are named.
struct TextSource {
  std::vector<DataFile> files;  // as resolve_data_files gives them
  ColumnNames columns{};        // of its table files; must be empty where it has a JSONL file
  std::string columns_key;      // the setting that named them ("data.train[0].columns"), for messages
};

class TextCorpus {
 public:
  // Opens nothing yet: each file is opened when its first sentence is asked for.
  explicit TextCorpus(std::vector<TextSource> sources);
  ~TextCorpus();
  TextCorpus(const TextCorpus&) = delete;
  TextCorpus& operator=(const TextCorpus&) = delete;

  // True and the next sentence in `sentence`; false after the last. Throws DataError
  // naming the file and what to fix: a file that cannot be opened or read (a cut gzip
  // stream), a JSONL line that is not a JSON object (file:line), a table file Arrow cannot
  // read or whose columns do not map (map_pair_columns), a row whose query or positive is
  // null or not text, or a null text in a list (file: row group and row, record batch and
  // row, or line), columns named for a source with a JSONL file. A null negative is none,
  // as training takes it.
  bool next(std::string& sentence);

 private:
  bool read_record();  // the next line or row's texts into pending_; false after the last file
  bool open_next_file();
  void read_line();
  void read_row();
  void add(const char* data, size_t size);

  std::vector<TextSource> sources_;
  size_t source_ = 0, file_ = 0;  // the next file to open
  std::string path_;              // the open file's

  std::unique_ptr<std::istream> text_;  // an open JSONL or text file
  bool jsonl_ = false, jsonl_known_ = false;
  int64_t line_number_ = 0;

  std::unique_ptr<TableFile> table_;  // an open table file
  std::vector<bool> slot_is_list_;    // per selected column: 0 the query, 1 the positive, then negatives
  std::vector<std::string> slot_names_;
  int64_t batch_rows_ = 0, row_ = 0;

  std::vector<std::string> pending_;  // the texts of the record read last
  size_t next_pending_ = 0;
};

}  // namespace ddp_embed
