// Table files of pairs (Parquet, Arrow IPC, CSV, TSV): their columns mapped to roles,
// their rows read through TableFile into PairRecords, a batch at a time.
#include "data/table_files.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string_view>
#include <utility>

#include "config/key_suggest.h"
#include "data/pairs.h"
#include "util/text.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace {

constexpr const char* kQueryNames[] = {"query", "anchor", "text1"};
constexpr const char* kPosNames[] = {"pos", "positive", "text2"};
constexpr const char* kNegNames[] = {"neg", "negative"};
constexpr const char* kScoreNames[] = {"score", "label", "pos_scores", "neg_scores"};

template <size_t N>
bool is_one_of(const std::string& name, const char* const (&names)[N]) {
  for (const char* candidate : names)
    if (name == candidate) return true;
  return false;
}

// N of "negative_N" (N >= 1), else 0.
int negative_number(const std::string& name) {
  constexpr std::string_view prefix = "negative_";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0 || name.size() > prefix.size() + 6)
    return 0;
  int n = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    n = n * 10 + (name[i] - '0');
  }
  return n;
}

template <size_t N>
std::string quoted_list(const char* const (&names)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + json_quoted(names[i]);
  return out;
}

std::string quoted_columns(const std::vector<TableColumn>& columns) {
  std::string out;
  for (const auto& column : columns) out += (out.empty() ? "" : ", ") + json_quoted_cut(column.name, 40);
  return out.empty() ? "none" : out;
}

// The unused column whose name is nearest one of `names`, for "did you mean".
template <size_t N>
std::string nearest_column(const std::vector<TableColumn>& columns, const std::vector<bool>& used,
                           const char* const (&names)[N]) {
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (size_t c = 0; c < columns.size(); ++c) {
    if (used[c]) continue;
    const std::string typed = ascii_lower(columns[c].name);
    for (const char* name : names) {
      const size_t d = edit_distance(typed, name);
      if (d <= 1 + std::strlen(name) / 3 && d < best_distance) {
        best_distance = d;
        best = columns[c].name;
      }
    }
  }
  return best;
}

const char* kind_words(int kind) {
  switch (kind) {
    case DDP_EMBED_ARROW_TEXT: return "text (a string)";
    case DDP_EMBED_ARROW_TEXT_LIST: return "a list of texts";
    case DDP_EMBED_ARROW_NUMBER: return "a number";
    case DDP_EMBED_ARROW_NUMBER_LIST: return "a list of numbers";
    default: return "something else";
  }
}

class ColumnMapper {
 public:
  ColumnMapper(const std::vector<TableColumn>& columns, const std::string& origin, const ColumnNames& names)
      : columns_(columns), origin_(origin), names_(names), used_(columns.size(), false) {}

  PairColumns map() {
    if (names_.score.empty())
      map_scores();
    else
      map_named_score();
    for (const std::string& neg : names_.neg)
      out_.neg.push_back(take(named(neg, "a negative"), {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST}, " (a negative)"));
    // A query's or a positive's name: by name (a misspelled other is then "did you mean");
    // negatives' names alone do not count ("question", "answer", "negative" is by position).
    bool named = !names_.query.empty() || !names_.pos.empty();
    for (const auto& column : columns_)
      named = named || is_one_of(column.name, kQueryNames) || is_one_of(column.name, kPosNames);
    if (named)
      map_by_name();
    else
      map_by_position();
    return out_;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw DataError(origin_ + ": " + what); }

  // Checks that column c holds one of `kinds` (its role said by `role`) and marks it used.
  int take(int c, std::initializer_list<int> kinds, const std::string& role) {
    const TableColumn& column = columns_[size_t(c)];
    if (used_[size_t(c)]) fail("column " + json_quoted(column.name) + role + " has a role already: give it one");
    bool fits = false;
    std::string expected;
    for (int kind : kinds) {
      fits = fits || column.kind == kind || (kind == DDP_EMBED_ARROW_TEXT && column.text_readable);
      expected += std::string(expected.empty() ? "" : " or ") + kind_words(kind);
    }
    if (!fits)
      fail("column " + json_quoted(column.name) + role + " is " + column.type + ", where " + expected +
           " is expected");
    used_[size_t(c)] = true;
    return c;
  }

  // The one column with a name of `names`, or -1; two are an error.
  template <size_t N>
  int find_one(const char* const (&names)[N], const char* role) const {
    int found = -1;
    for (size_t c = 0; c < columns_.size(); ++c) {
      if (!is_one_of(columns_[c].name, names)) continue;
      if (found >= 0)
        fail("columns " + json_quoted(columns_[size_t(found)].name) + " and " + json_quoted(columns_[c].name) +
             " both name " + role + ": keep one");
      found = static_cast<int>(c);
    }
    return found;
  }

  int find_named(const std::string& name) const {
    for (size_t c = 0; c < columns_.size(); ++c)
      if (columns_[c].name == name) return static_cast<int>(c);
    return -1;
  }

  // The column named `name` in ColumnNames for `role`; missing is an error.
  int named(const std::string& name, const char* role) const {
    const int c = find_named(name);
    if (c >= 0) return c;
    std::string near;
    size_t near_distance = std::numeric_limits<size_t>::max();
    for (const auto& column : columns_) {
      const size_t d = edit_distance(ascii_lower(column.name), ascii_lower(name));
      if (d <= 1 + name.size() / 3 && d < near_distance) {
        near_distance = d;
        near = column.name;
      }
    }
    fail("no column " + json_quoted_cut(name, 40) + " (named for " + role + " in the source's columns); the file's columns: " +
         quoted_columns(columns_) + (near.empty() ? "" : " (did you mean " + json_quoted(near) + "?)"));
  }

  void map_named_score() {
    const int c = named(names_.score, "the score");
    take(c, {DDP_EMBED_ARROW_NUMBER, DDP_EMBED_ARROW_NUMBER_LIST}, " (the score, or the teacher's scores of the candidates)");
    if (columns_[size_t(c)].kind == DDP_EMBED_ARROW_NUMBER_LIST)
      out_.label_scores = c;
    else
      out_.score = c;
  }

  void map_scores() {
    const int score = find_named("score"), label = find_named("label");
    const int pos_scores = find_named("pos_scores"), neg_scores = find_named("neg_scores");
    if (score >= 0) out_.score = take(score, {DDP_EMBED_ARROW_NUMBER}, " (the score)");
    if (label >= 0) {
      const std::string role = " (the score, or the teacher's scores of the candidates)";
      take(label, {DDP_EMBED_ARROW_NUMBER, DDP_EMBED_ARROW_NUMBER_LIST}, role);
      if (columns_[size_t(label)].kind == DDP_EMBED_ARROW_NUMBER_LIST) {
        out_.label_scores = label;
      } else {
        if (score >= 0) fail("columns \"score\" and \"label\" both hold a score: keep one");
        out_.score = label;
      }
    }
    if (pos_scores >= 0 || neg_scores >= 0) {
      if (pos_scores < 0 || neg_scores < 0)
        fail("teacher scores need both columns \"pos_scores\" and \"neg_scores\" (one per positive and per negative)");
      if (out_.label_scores >= 0)
        fail("give teacher scores as columns \"pos_scores\"/\"neg_scores\" or as a list column \"label\", not both");
      out_.pos_scores = take(pos_scores, {DDP_EMBED_ARROW_NUMBER_LIST}, " (the positives' teacher scores)");
      out_.neg_scores = take(neg_scores, {DDP_EMBED_ARROW_NUMBER_LIST}, " (the negatives' teacher scores)");
    }
  }

  template <size_t N>
  [[noreturn]] void fail_missing(const char* role, const char* const (&names)[N]) const {
    const std::string near = nearest_column(columns_, used_, names);
    fail("no column for " + std::string(role) + " (" + quoted_list(names) + "); the file's columns: " +
         quoted_columns(columns_) + (near.empty() ? "" : " (did you mean " + json_quoted(near) + "?)"));
  }

  void map_by_name() {
    const int query = names_.query.empty() ? find_one(kQueryNames, "the query") : named(names_.query, "the query");
    const int pos = names_.pos.empty() ? find_one(kPosNames, "the positive") : named(names_.pos, "the positive");
    if (query < 0) fail_missing("the query", kQueryNames);
    out_.query = take(query, {DDP_EMBED_ARROW_TEXT}, " (the query)");
    if (pos < 0) fail_missing("the positive", kPosNames);
    out_.pos = take(pos, {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST}, " (the positive)");
    if (!names_.neg.empty()) return;  // named negatives replace the rules'
    const int neg = find_one(kNegNames, "the negatives");
    if (neg >= 0) out_.neg.push_back(take(neg, {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST}, " (the negatives)"));
    std::vector<std::pair<int, int>> numbered;  // (N of negative_N, column)
    for (size_t c = 0; c < columns_.size(); ++c)
      if (const int n = negative_number(columns_[c].name); n > 0) numbered.emplace_back(n, static_cast<int>(c));
    std::sort(numbered.begin(), numbered.end());
    for (const auto& [n, c] : numbered)
      out_.neg.push_back(take(c, {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST}, " (a negative)"));
  }

  void map_by_position() {
    std::vector<int> texts;
    for (size_t c = 0; c < columns_.size(); ++c)
      if (!is_one_of(columns_[c].name, kScoreNames) && !used_[c]) texts.push_back(static_cast<int>(c));
    if (texts.size() < 2)
      fail("a pair needs two text columns, a query and a positive, and the file's columns are " +
           quoted_columns(columns_) + " (name them \"query\" and \"pos\", or \"anchor\" and \"positive\")");
    out_.by_position = true;
    out_.query = take(texts[0], {DDP_EMBED_ARROW_TEXT}, " (the query, as the first column)");
    out_.pos = take(texts[1], {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST}, " (the positive, as the second column)");
    for (size_t k = 2; k < texts.size() && names_.neg.empty(); ++k)
      out_.neg.push_back(take(texts[k], {DDP_EMBED_ARROW_TEXT, DDP_EMBED_ARROW_TEXT_LIST},
                              " (a negative, as a column after the second)"));
  }

  const std::vector<TableColumn>& columns_;
  const std::string& origin_;
  const ColumnNames& names_;
  std::vector<bool> used_;
  PairColumns out_;
};

// ---- reading rows ----------------------------------------------------------------------

bool blank_text(std::string_view text) { return text.find_first_not_of(" \t\r\n") == std::string_view::npos; }

// Reads a row's values from the file's current batch; slots in the order of selected().
class RowReader {
 public:
  RowReader(const TableFile& file, const PairColumns& map) : file_(file), columns_(file.columns()), map_(map) {
    add(map.query);
    add(map.pos);
    for (int c : map.neg) add(c);
    score_ = map.score >= 0 ? add(map.score) : -1;
    label_ = map.label_scores >= 0 ? add(map.label_scores) : -1;
    pos_scores_ = map.pos_scores >= 0 ? add(map.pos_scores) : -1;
    neg_scores_ = map.neg_scores >= 0 ? add(map.neg_scores) : -1;
  }
  const std::vector<int>& selected() const { return selected_; }
  // Per slot: read as text (all but the numbers).
  std::vector<bool> as_text() const {
    std::vector<bool> out(selected_.size(), true);
    for (int slot : {score_, label_, pos_scores_, neg_scores_})
      if (slot >= 0) out[size_t(slot)] = false;
    return out;
  }

  // Row r of the batch into `record`: "" or what is wrong.
  std::string read(int64_t r, PairRecord& record) const {
    record = PairRecord();
    std::string error = text(0, r, name(0), record.query);
    if (!error.empty()) return error;
    if ((error = texts(1, r, /*null_is_none=*/false, record.pos)).size()) return error;
    if (record.pos.empty()) return "column " + name(1) + " is an empty list";
    for (int s = 2; s < 2 + static_cast<int>(map_.neg.size()); ++s)
      if ((error = texts(s, r, /*null_is_none=*/true, record.neg)).size()) return error;
    if (score_ >= 0) {
      double value = 0;
      if (file_.number(score_, r, value) == 1) {
        if ((error = to_float(value, name(score_), record.score)).size()) return error;
        record.has_score = true;
      }
    }
    return teacher_scores(r, record);
  }

 private:
  int add(int column) {
    selected_.push_back(column);
    return static_cast<int>(selected_.size()) - 1;
  }
  std::string name(int slot) const { return json_quoted(columns_[size_t(selected_[size_t(slot)])].name); }
  int kind(int slot) const { return columns_[size_t(selected_[size_t(slot)])].kind; }

  static std::string checked(std::string_view text, const std::string& what, std::string& out) {
    if (!utf8::is_valid(text.data(), text.data() + text.size())) return what + " is not valid UTF-8";
    if (blank_text(text)) return what + " is empty";
    out.assign(text.data(), text.size());
    return "";
  }

  std::string text(int slot, int64_t r, const std::string& column, std::string& out) const {
    std::string_view value;
    const int got = file_.text(slot, r, value);
    if (got != 1) return "column " + column + (got == 0 ? " is null" : " cannot be read as text");
    return checked(value, "column " + column, out);
  }

  // A text or a list of texts, appended to `out`; a null cell is none when null_is_none.
  std::string texts(int slot, int64_t r, bool null_is_none, std::vector<std::string>& out) const {
    if (kind(slot) == DDP_EMBED_ARROW_TEXT) {
      std::string value;
      std::string_view data;
      const int got = file_.text(slot, r, data);
      if (got == 0 && null_is_none) return "";
      if (got != 1) return "column " + name(slot) + (got == 0 ? " is null" : " cannot be read as text");
      std::string error = checked(data, "column " + name(slot), value);
      if (error.empty()) out.push_back(std::move(value));
      return error;
    }
    int64_t count = 0;
    const int got = file_.list_size(slot, r, count);
    if (got == 0 && null_is_none) return "";
    if (got != 1) return "column " + name(slot) + (got == 0 ? " is null" : " cannot be read as a list");
    for (int64_t k = 0; k < count; ++k) {
      std::string_view data;
      const std::string what = "column " + name(slot) + "[" + std::to_string(k) + "]";
      const int item = file_.list_text(slot, r, k, data);
      if (item != 1) return what + (item == 0 ? " is null" : " cannot be read as text");
      out.emplace_back();
      if (std::string error = checked(data, what, out.back()); !error.empty()) return error;
    }
    return "";
  }

  static std::string to_float(double value, const std::string& what, float& out) {
    if (!std::isfinite(value) || std::fabs(value) > std::numeric_limits<float>::max())
      return what + " " + std::to_string(value) + " is out of range for a float";
    out = static_cast<float>(value);
    return "";
  }

  // The list of numbers in `slot` (`count` of them: those of `of`) appended to `out`;
  // false (and no error) when the cell is null.
  std::string scores(int slot, int64_t r, size_t count, const char* of, std::vector<float>& out, bool& present) const {
    int64_t size = 0;
    present = file_.list_size(slot, r, size) == 1;
    if (!present) return "";
    if (static_cast<size_t>(size) != count)
      return "column " + name(slot) + " has " + std::to_string(size) + " scores for " + std::to_string(count) + " " + of;
    for (int64_t k = 0; k < size; ++k) {
      double value = 0;
      const std::string what = "column " + name(slot) + "[" + std::to_string(k) + "]";
      if (file_.list_number(slot, r, k, value) != 1) return what + " is null";
      out.emplace_back();
      if (std::string error = to_float(value, what, out.back()); !error.empty()) return error;
    }
    return "";
  }

  std::string teacher_scores(int64_t r, PairRecord& record) const {
    bool present = false;
    if (label_ >= 0)
      return scores(label_, r, record.pos.size() + record.neg.size(), "candidates (positives, then negatives)",
                    record.teacher_scores, present);
    if (pos_scores_ < 0) return "";
    bool neg_present = false;
    std::string error = scores(pos_scores_, r, record.pos.size(), "positives", record.teacher_scores, present);
    if (error.empty())
      error = scores(neg_scores_, r, record.neg.size(), "negatives", record.teacher_scores, neg_present);
    if (error.empty() && present != neg_present)
      error = "columns \"pos_scores\" and \"neg_scores\": one is null and the other is not";
    if (!present) record.teacher_scores.clear();
    return error;
  }

  const TableFile& file_;
  const std::vector<TableColumn>& columns_;
  const PairColumns& map_;
  std::vector<int> selected_;  // slot -> the file's column
  int score_ = -1, label_ = -1, pos_scores_ = -1, neg_scores_ = -1;
};

}  // namespace

bool is_parquet_file(const std::string& path) { return table_format_of(path) == TableFormat::Parquet; }

std::string ColumnNames::key() const {
  std::string out;
  auto add = [&out](const char* role, const std::string& name) {
    if (!name.empty()) out += (out.empty() ? "" : " ") + std::string(role) + "=" + name;
  };
  add("query", query);
  add("pos", pos);
  std::string negatives;
  for (const auto& name : neg) negatives += (negatives.empty() ? "" : ",") + name;
  add("neg", negatives);
  add("score", score);
  return out;
}

std::string PairColumns::describe(const std::vector<TableColumn>& columns) const {
  auto named = [&](int c) { return json_quoted(columns[size_t(c)].name); };
  std::string out = std::string(by_position ? "by position: " : "") + "query " + named(query) + ", positive " + named(pos);
  for (size_t k = 0; k < neg.size(); ++k) out += (k == 0 ? ", negatives " : ", ") + named(neg[k]);
  if (score >= 0) out += ", score " + named(score);
  if (label_scores >= 0) out += ", teacher scores " + named(label_scores);
  if (pos_scores >= 0) out += ", teacher scores " + named(pos_scores) + " and " + named(neg_scores);
  return out;
}

PairColumns map_pair_columns(const std::vector<TableColumn>& columns, const std::string& origin,
                             const ColumnNames& names) {
  return ColumnMapper(columns, origin, names).map();
}

std::string read_table_pairs(const std::string& path, TableFormat format, const ColumnNames& names,
                             int64_t batch_rows, const std::function<void(std::vector<TableRow>&)>& on_batch,
                             int first_group, int end_group) {
  TableFile file(path, format);
  const PairColumns map = map_pair_columns(file.columns(), path, names);
  const RowReader reader(file, map);
  file.select(reader.selected(), reader.as_text(), batch_rows, first_group, end_group);
  std::vector<TableRow> rows;
  while (const int64_t count = file.next_batch()) {
    rows.resize(static_cast<size_t>(count));
    for (int64_t r = 0; r < count; ++r) {
      TableRow& row = rows[size_t(r)];
      row.row_group = file.current_group();
      row.row = file.row_in_group(r);
      row.where = file.where(r);
      row.error = reader.read(r, row.record);
    }
    on_batch(rows);
  }
  return map.describe(file.columns());
}

}  // namespace ddp_embed
