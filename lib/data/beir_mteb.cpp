// A BEIR set as MTEB keeps it on the Hugging Face Hub, read where it lies: a snapshot folder
// whose README.md names three configs — "corpus" ("_id", "title", "text"), "queries"
// ("_id", "text") and "default" (or "qrels": "query-id", "corpus-id", "score", a split
// each of test/dev/train) — as mteb's RetrievalDataLoader reads them: the corpus and the
// queries from their config's split (the evaluated split when it has one, else its first),
// ids as text (a whole-number id as its digits), a score as a whole number. The files are
// Parquet (MTEB's sets today), another table format, or JSONL (its older copies), found
// through data/dataset_files.h and read through data/table_file.h a batch at a time.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "config/key_suggest.h"
#include "data/beir_parts.h"
#include "data/dataset_files.h"
#include "data/input_files.h"
#include "data/pairs.h"
#include "data/table_file.h"
#include "util/text.h"

namespace ddp_embed {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kMtebBatchRows = 8192;

const DatasetConfig* find_mteb_config(const std::vector<DatasetConfig>& configs, const std::string& name) {
  for (const DatasetConfig& c : configs)
    if (c.name == name) return &c;
  return nullptr;
}

std::string mteb_quoted_list(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + json_quoted(n);
  return out;
}

// The qrels' config: "default" (mteb's loader), else "qrels" (the name some of MTEB's newer
// sets give it).
const DatasetConfig& mteb_qrels_config(const std::vector<DatasetConfig>& configs, const std::string& folder) {
  for (const char* name : {"default", "qrels"})
    if (const DatasetConfig* c = find_mteb_config(configs, name)) return *c;
  std::vector<std::string> names;
  for (const DatasetConfig& c : configs) names.push_back(c.name);
  throw DataError(folder + "/README.md: no config \"default\" (MTEB's qrels: \"query-id\", \"corpus-id\", \"score\"); "
                  "its configs: " + mteb_quoted_list(names) + ". Name the qrels' files in a config \"default\"");
}

// The files of `config`'s `split`, resolved as datasets.load_dataset resolves them.
std::vector<DataFile> mteb_files(const std::string& folder, const std::string& config, const std::string& split) {
  DatasetChoice choice;
  choice.config = config;
  choice.splits = {split};
  choice.key = "--split";
  return resolve_data_files({folder}, choice).files;
}

// The split of `config` read for the set's `split`: that one when it has it (a corpus per
// split), else its first, as mteb reads the corpus and the queries.
std::string mteb_part_split(const DatasetConfig& config, const std::string& split) {
  for (const std::string& s : config.splits)
    if (s == split) return s;
  return config.splits.front();
}

// The column named `name` (-1: none), its kind checked: text, or a whole number for an id.
// A missing `required` one is an error listing the columns there are ("did you mean").
int mteb_column(const TableFile& table, const std::string& name, bool required, bool id, const std::string& what) {
  const std::vector<TableColumn>& columns = table.columns();
  for (size_t c = 0; c < columns.size(); ++c) {
    if (columns[c].name != name) continue;
    if (!required && columns[c].type == "null") return -1;  // an optional column of nulls only: none
    const int kind = columns[c].kind;
    const bool ok = kind == DDP_EMBED_ARROW_TEXT || columns[c].text_readable || (id && kind == DDP_EMBED_ARROW_NUMBER);
    if (!ok)
      throw DataError(table.path() + ": the column \"" + name + "\" holds " + columns[c].type + "; " + what +
                      " must be text" + (id ? " or whole numbers" : ""));
    return static_cast<int>(c);
  }
  if (!required) return -1;
  std::string names, near;
  size_t best = name.size() / 3 + 2;
  for (const TableColumn& c : columns) {
    names += (names.empty() ? "" : ", ") + json_quoted_cut(c.name, 40);
    const size_t d = edit_distance(ascii_lower(c.name), name);
    if (d < best) best = d, near = c.name;
  }
  const std::string suggestion = near.empty() ? "" : " (did you mean " + json_quoted(near) + "?)";
  throw DataError(table.path() + ": no column \"" + name + "\" (" + what + "); its columns: " +
                  (names.empty() ? "none" : names) + suggestion);
}

// A whole number as its digits; "" when `value` is not whole or beyond float64's exact integers.
std::string mteb_whole_number(double value) {
  if (!std::isfinite(value) || std::floor(value) != value || std::fabs(value) > 9007199254740992.0) return "";
  return std::to_string(static_cast<int64_t>(value));
}

// A number as JSON writes it, for messages: 0.5, 3.
std::string mteb_number_text(double value) { return nlohmann::json(value).dump(); }

// Cell (slot, r) as an id: its text, or a whole number's digits.
std::string mteb_id(const TableFile& table, int slot, int64_t r, const char* column, const std::string& where) {
  std::string_view text;
  double number = 0;
  int got = table.text(slot, r, text);
  if (got == -1) got = table.number(slot, r, number);
  else if (got == 1 && text.empty()) throw DataError(where + ": \"" + column + "\" is empty: every row needs its id");
  else if (got == 1) return std::string(text);
  if (got == 0) throw DataError(where + ": \"" + column + "\" is null: every row needs its id");
  const std::string digits = mteb_whole_number(number);
  if (got != 1 || digits.empty())
    throw DataError(where + ": \"" + column + "\" is " + mteb_number_text(number) +
                    ", not a whole number: write ids as text or integers");
  return digits;
}

// Cell (slot, r) as text; null: "" when `optional`, else an error.
std::string mteb_text(const TableFile& table, int slot, int64_t r, const char* column, bool optional,
                      const std::string& where) {
  std::string_view text;
  if (slot < 0) return "";
  const int got = table.text(slot, r, text);
  if (got == 0 && !optional) throw DataError(where + ": \"" + column + "\" is null (a text is needed)");
  return std::string(text);
}

// Queries or documents of one table file, appended to `out`: the id from "_id" (or "id"),
// "text", and for documents "title" when there is one (null: none).
void read_mteb_table_records(const DataFile& file, bool with_title, BeirRecords& out) {
  TableFile table(file.path, file.format);
  // "_id" as BEIR names it, else "id" (MTEB's newer sets).
  const std::string what = std::string(with_title ? "the document ids" : "the query ids") + "; \"id\" is read too";
  int id = mteb_column(table, "_id", false, true, what);
  if (id < 0) id = mteb_column(table, "id", false, true, what);
  if (id < 0) mteb_column(table, "_id", true, true, what);
  const std::string id_name = table.columns()[size_t(id)].name;
  const int text = mteb_column(table, "text", true, false, with_title ? "each document's text" : "each query's text");
  const int title = with_title ? mteb_column(table, "title", false, false, "each document's title") : -1;
  std::vector<int> columns = {id, text};
  if (title >= 0) columns.push_back(title);
  table.select(columns, std::vector<bool>(columns.size(), true), kMtebBatchRows);
  for (int64_t rows; (rows = table.next_batch()) > 0;) {
    for (int64_t r = 0; r < rows; ++r) {
      const std::string where = file.path + ": " + table.where(r);
      std::string record_id = mteb_id(table, 0, r, id_name.c_str(), where);
      std::string body = mteb_text(table, 1, r, "text", false, where);
      if (title >= 0) body = beir_document_text(mteb_text(table, 2, r, "title", true, where), body);
      out.add(std::move(record_id), std::move(body), where);
    }
  }
}

// A score as a whole number: MTEB's qrels hold int64, or float64 whole numbers.
int64_t mteb_score(double value, const std::string& where) {
  const std::string digits = mteb_whole_number(value);
  if (digits.empty())
    throw DataError(where + ": the score " + mteb_number_text(value) + " is not a whole number (a relevance grade: 0 "
                    "judged not relevant, 1 or more relevant)");
  return std::stoll(digits);
}

void read_mteb_table_qrels(const DataFile& file, const BeirParts& parts, BeirJudgements& judgements) {
  TableFile table(file.path, file.format);
  const int query = mteb_column(table, "query-id", true, true, "each judgement's query id");
  const int doc = mteb_column(table, "corpus-id", true, true, "each judgement's document id");
  const std::vector<TableColumn>& columns = table.columns();
  int score = -1;
  for (size_t c = 0; c < columns.size(); ++c)
    if (columns[c].name == "score") score = static_cast<int>(c);
  if (score < 0 || columns[size_t(score)].kind != DDP_EMBED_ARROW_NUMBER)
    throw DataError(file.path + ": " + (score < 0 ? "no column \"score\"" : "the column \"score\" holds " +
                    columns[size_t(score)].type) + "; each judgement needs its relevance grade, a whole number");
  table.select({query, doc, score}, {true, true, false}, kMtebBatchRows);
  for (int64_t rows; (rows = table.next_batch()) > 0;) {
    for (int64_t r = 0; r < rows; ++r) {
      const std::string where = file.path + ": " + table.where(r);
      double value = 0;
      if (table.number(2, r, value) != 1) throw DataError(where + ": \"score\" is null");
      judgements.add(mteb_id(table, 0, r, "query-id", where), mteb_id(table, 1, r, "corpus-id", where),
                     mteb_score(value, where), parts.queries, parts.corpus, where);
    }
  }
}

// JSONL qrels, as MTEB's older copies keep them: {"query-id", "corpus-id", "score"} a line.
void read_mteb_jsonl_qrels(const std::string& path, const BeirParts& parts, BeirJudgements& judgements) {
  const auto in = open_input_file(path);
  std::string line;
  for (int64_t number = 1; std::getline(*in, line); ++number) {
    if (number == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) throw DataError(where + ": not a JSON object");
    auto id = [&](const char* key) {
      const auto it = j.find(key);
      if (it != j.end() && it->is_string() && !it->get<std::string>().empty()) return it->get<std::string>();
      if (it != j.end() && it->is_number_integer()) return it->dump();
      throw DataError(where + ": \"" + key + "\" must be a non-empty string or an integer");
    };
    const auto score = j.find("score");
    if (score == j.end() || !score->is_number())
      throw DataError(where + ": \"score\" must be a number (a relevance grade)");
    judgements.add(id("query-id"), id("corpus-id"), mteb_score(score->get<double>(), where), parts.queries,
                   parts.corpus, where);
  }
}

// Records of a config's files (table files or JSONL), in the files' order.
BeirRecords read_mteb_records(const std::string& folder, const DatasetConfig& config, const std::string& split,
                              bool with_title) {
  const std::string config_split = mteb_part_split(config, split);
  BeirRecords records;
  records.name = std::string(with_title ? "the corpus" : "the queries") + " (README.md's config \"" + config.name +
                 "\", split " + config_split + ")";
  for (const DataFile& file : mteb_files(folder, config.name, config_split)) {
    if (file.format == TableFormat::Jsonl) read_jsonl_records(file.path, with_title, records);
    else read_mteb_table_records(file, with_title, records);
  }
  if (records.ids.empty()) throw DataError(folder + ": " + records.name + " has no rows");
  return records;
}

}  // namespace

bool is_mteb_folder(const std::string& folder) {
  const std::vector<DatasetConfig> configs = dataset_configs(folder);
  return find_mteb_config(configs, "corpus") && find_mteb_config(configs, "queries");
}

std::string default_mteb_split(const std::string& folder) {
  const std::vector<DatasetConfig> configs = dataset_configs(folder);
  const DatasetConfig& qrels = mteb_qrels_config(configs, folder);
  for (const std::string& s : qrels.splits)
    if (s == "test") return s;
  if (qrels.splits.size() == 1) return qrels.splits.front();
  throw DataError(folder + "/README.md: the qrels' config \"" + qrels.name + "\" has no split test, and several (" +
                  mteb_quoted_list(qrels.splits) + "): name one");
}

BeirParts read_mteb_parts(const std::string& folder, const std::string& split) {
  const std::vector<DatasetConfig> configs = dataset_configs(folder);
  const DatasetConfig& qrels = mteb_qrels_config(configs, folder);
  BeirParts parts;
  parts.split = split.empty() ? default_mteb_split(folder) : split;
  if (std::find(qrels.splits.begin(), qrels.splits.end(), parts.split) == qrels.splits.end())
    throw DataError(folder + "/README.md: the qrels' config \"" + qrels.name + "\" has no split " + parts.split +
                    "; its splits: " + mteb_quoted_list(qrels.splits));
  // The queries first: a set without them is told so before its corpus is read.
  parts.queries = read_mteb_records(folder, *find_mteb_config(configs, "queries"), parts.split, false);
  parts.corpus = read_mteb_records(folder, *find_mteb_config(configs, "corpus"), parts.split, true);
  const std::vector<DataFile> files = mteb_files(folder, qrels.name, parts.split);
  parts.qrels_origin = files.size() == 1 ? files.front().path
                                         : folder + "/README.md's config \"" + qrels.name + "\", split " + parts.split;
  BeirJudgements judgements(parts.queries.ids.size());
  for (const DataFile& file : files) {
    if (file.format == TableFormat::Jsonl) read_mteb_jsonl_qrels(file.path, parts, judgements);
    else read_mteb_table_qrels(file, parts, judgements);
  }
  judgements.finish();
  parts.relevant = std::move(judgements.relevant);
  return parts;
}

}  // namespace ddp_embed
