// TextCorpus: data files of every format as a tokenizer's sentences, one record (a line
// or a row) at a time, so that what a tokenizer is trained on is what training reads.
#include "data/text_corpus.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string_view>
#include <utility>

#include "data/input_files.h"
#include "data/pairs.h"
#include "util/text.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace {

// Every field of a JSONL record that holds text (data/pairs.h's formats, plus "text"), in
// the order taken: a pair's query, positives, negatives, as a table's row gives them.
constexpr const char* kCorpusTextFields[] = {"query",    "pos",   "neg",   "anchor", "positive",
                                             "negative", "text1", "text2", "text"};

// Rows of a table file decoded at a time: a batch, never the whole file.
constexpr int64_t kCorpusBatchRows = 4096;

bool corpus_named_jsonl(const std::string& path) {
  const std::string name = ascii_lower(path);
  for (const char* suffix : {".jsonl", ".json", ".jsonl.gz", ".json.gz"}) {
    const size_t n = std::strlen(suffix);
    if (name.size() >= n && name.compare(name.size() - n, n, suffix) == 0) return true;
  }
  return false;
}

bool corpus_blank(const std::string& line) { return line.find_first_not_of(" \t\r") == std::string::npos; }

}  // namespace

TextCorpus::TextCorpus(std::vector<TextSource> sources) : sources_(std::move(sources)) {}

TextCorpus::~TextCorpus() = default;

bool TextCorpus::next(std::string& sentence) {
  while (next_pending_ >= pending_.size()) {
    pending_.clear();
    next_pending_ = 0;
    if (!read_record()) return false;
  }
  sentence = std::move(pending_[next_pending_++]);
  return true;
}

bool TextCorpus::read_record() {
  if (!text_ && !table_ && !open_next_file()) return false;
  if (text_)
    read_line();
  else
    read_row();
  return true;
}

bool TextCorpus::open_next_file() {
  while (source_ < sources_.size() && file_ >= sources_[source_].files.size()) {
    ++source_;
    file_ = 0;
  }
  if (source_ >= sources_.size()) return false;
  const TextSource& source = sources_[source_];
  const DataFile& file = source.files[file_++];
  path_ = file.path;
  if (file.format == TableFormat::Jsonl) {
    if (!source.columns.empty())
      throw DataError(source.columns_key + " names columns of table files (Parquet, Arrow, CSV, TSV), and " + path_ +
                      " is JSONL, whose keys are fixed (docs/formats.md): remove " + source.columns_key +
                      ", or give the source as a table file");
    text_ = open_input_file(path_);
    jsonl_ = corpus_named_jsonl(path_);
    jsonl_known_ = jsonl_;
    line_number_ = 0;
    return true;
  }
  table_ = std::make_unique<TableFile>(path_, file.format);
  const PairColumns map = map_pair_columns(table_->columns(), path_, source.columns);
  std::vector<int> selected = {map.query, map.pos};
  selected.insert(selected.end(), map.neg.begin(), map.neg.end());
  slot_is_list_.clear();
  slot_names_.clear();
  for (int c : selected) {
    const TableColumn& column = table_->columns()[size_t(c)];
    slot_is_list_.push_back(column.kind == DDP_EMBED_ARROW_TEXT_LIST);
    slot_names_.push_back(json_quoted(column.name));
  }
  table_->select(selected, std::vector<bool>(selected.size(), true), kCorpusBatchRows);
  batch_rows_ = row_ = 0;
  return true;
}

// The next line's texts: a JSONL record's text fields, or the line of a text file.
void TextCorpus::read_line() {
  std::string line;
  if (!std::getline(*text_, line)) {
    if (text_->bad()) throw DataError("cannot read " + path_ + ": " + std::strerror(errno));
    text_.reset();
    return;
  }
  ++line_number_;
  if (line_number_ == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);  // a BOM
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (corpus_blank(line)) return;
  const auto record = jsonl_ || !jsonl_known_ ? nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false)
                                              : nlohmann::json();
  if (!jsonl_known_) {  // the first non-blank line decides: a JSON object, or text
    jsonl_ = record.is_object();
    jsonl_known_ = true;
  }
  if (!jsonl_) return add(line.data(), line.size());
  if (!record.is_object())
    throw DataError(path_ + ":" + std::to_string(line_number_) +
                    ": not a JSON object (a JSONL file needs one object a line): fix or remove the line");
  for (const char* key : kCorpusTextFields) {
    const auto it = record.find(key);
    if (it == record.end()) continue;
    if (it->is_string()) {
      const auto& text = it->get_ref<const std::string&>();
      add(text.data(), text.size());
    }
    if (it->is_array())
      for (const auto& item : *it) {
        if (!item.is_string()) continue;
        const auto& text = item.get_ref<const std::string&>();
        add(text.data(), text.size());
      }
  }
}

// The next row's texts: its query, positives and negatives (slots 0, 1, then 2..).
void TextCorpus::read_row() {
  if (row_ >= batch_rows_) {
    batch_rows_ = table_->next_batch();
    row_ = 0;
    if (batch_rows_ == 0) {
      table_.reset();
      return;
    }
  }
  const int64_t r = row_++;
  auto fail = [&](const std::string& what) {
    throw DataError(path_ + ": " + table_->where(r) + ": " + what + " (the tokenizer is trained on every row: " +
                    "give it a text, or remove the row)");
  };
  for (size_t slot = 0; slot < slot_is_list_.size(); ++slot) {
    const int s = static_cast<int>(slot);
    const bool negative = slot >= 2;  // a null negative is none, as training takes it
    std::string_view text;
    if (!slot_is_list_[slot]) {
      const int got = table_->text(s, r, text);
      if (got == 0 && negative) continue;
      if (got != 1) fail("column " + slot_names_[slot] + (got == 0 ? " is null" : " cannot be read as text"));
      add(text.data(), text.size());
      continue;
    }
    int64_t count = 0;
    const int got = table_->list_size(s, r, count);
    if (got == 0 && negative) continue;
    if (got != 1) fail("column " + slot_names_[slot] + (got == 0 ? " is null" : " cannot be read as a list"));
    for (int64_t k = 0; k < count; ++k) {
      const int item = table_->list_text(s, r, k, text);
      if (item != 1)
        fail("column " + slot_names_[slot] + "[" + std::to_string(k) + "]" +
             (item == 0 ? " is null" : " cannot be read as text"));
      add(text.data(), text.size());
    }
  }
}

void TextCorpus::add(const char* data, size_t size) {
  if (size == 0) return;
  if (utf8::is_valid(data, data + size))
    pending_.emplace_back(data, size);
  else
    pending_.push_back(utf8::replace_ill_formed(data, data + size));
}

}  // namespace ddp_embed
