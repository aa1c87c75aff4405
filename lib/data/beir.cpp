#include "data/beir.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "data/beir_parts.h"
#include "data/input_files.h"

namespace ddp_embed {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLayout = "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv";
// Both layouts, for a folder that is in neither.
constexpr const char* kBeirLayoutNames =
    "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv, or is MTEB's Hub folder: a README.md "
    "whose configs corpus, queries and default (the qrels) name its files";
constexpr const char* kBom = "\xEF\xBB\xBF";  // U+FEFF in UTF-8

enum class Entry { Missing, File, Folder };

// What `path` is, following links. A loop of links or a path that cannot be looked at
// (no permission) is a DataError naming it, not filesystem_error's library text.
Entry entry_at(const fs::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return S_ISDIR(st.st_mode) ? Entry::Folder : Entry::File;
  if (errno == ENOENT || errno == ENOTDIR) return Entry::Missing;
  if (errno == ELOOP)
    throw DataError(path.string() + ": too many levels of symbolic links (a link that leads back to itself?)");
  throw DataError(path.string() + ": " + std::strerror(errno));
}

// The file `name` of the folder, or its gzip-compressed `name.gz` (as the Hugging Face
// copies of BEIR come): its path, "" when neither is there. A folder in its place, or
// both files, is a DataError naming it.
std::string beir_file(const fs::path& folder, const std::string& name) {
  std::string found;
  for (const std::string& candidate : {name, name + ".gz"}) {
    const fs::path path = folder / candidate;
    const Entry entry = entry_at(path);
    if (entry == Entry::Folder) throw DataError(path.string() + ": is a folder, a file was expected (" + kLayout + ")");
    if (entry == Entry::Missing) continue;
    if (!found.empty())
      throw DataError((folder / name).string() + " and " + candidate + " are both there: keep one");
    found = path.string();
  }
  return found;
}

// beir_file's path, or a DataError when neither file is there.
std::string required_beir_file(const fs::path& folder, const std::string& name) {
  const std::string path = beir_file(folder, name);
  if (path.empty()) throw DataError((folder / name).string() + ": cannot open (" + kLayout + ")");
  return path;
}

// Line `number` of a file: a UTF-8 byte-order mark at the start of the file is not text.
void strip_file_bom(std::string& line, int64_t number) {
  if (number == 1 && line.compare(0, 3, kBom) == 0) line.erase(0, 3);
}

// An id as text: BEIR writes strings; a number is taken as written.
std::string id_of(const nlohmann::json& record, const std::string& where) {
  const auto it = record.find("_id");
  if (it == record.end()) throw DataError(where + ": missing \"_id\"");
  std::string id;
  if (it->is_string() && !it->get<std::string>().empty()) id = it->get<std::string>();
  else if (it->is_number_integer()) id = it->dump();
  else throw DataError(where + ": \"_id\" must be a non-empty string, not " + it->dump());
  check_beir_id(id, where);
  return id;
}

std::string text_field(const nlohmann::json& record, const char* key, bool required, const std::string& where) {
  const auto it = record.find(key);
  if (it == record.end() || it->is_null()) {
    if (required) throw DataError(where + ": missing \"" + key + "\"");
    return "";
  }
  if (!it->is_string()) throw DataError(where + ": \"" + key + "\" must be a string");
  return it->get<std::string>();
}

// BEIR's queries.jsonl or corpus.jsonl (or .gz): its records, named after the file.
BeirRecords read_beir_file_records(const std::string& path, bool with_title) {
  BeirRecords out;
  out.name = fs::path(path).filename().string();
  read_jsonl_records(path, with_title, out);
  if (out.ids.empty()) throw DataError(path + ": no records");
  return out;
}

std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> fields;
  size_t start = 0;
  for (size_t tab; (tab = line.find('\t', start)) != std::string::npos; start = tab + 1)
    fields.push_back(line.substr(start, tab - start));
  fields.push_back(line.substr(start));
  if (!fields.back().empty() && fields.back().back() == '\r') fields.back().pop_back();
  return fields;
}

// The header line BEIR writes ("query-id corpus-id score"): a first line whose score field
// is a word (no digit in it). A first line with a number there ("0.5") is a judgement, and
// is read, or refused, as every other line is.
bool is_header(const std::vector<std::string>& fields, int64_t number) {
  const std::string& score = fields[2];
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  return number == 1 && !score.empty() && std::none_of(score.begin(), score.end(), digit);
}

// A relevance score: a whole number, as BEIR's own loader (int()) reads it.
int64_t score_of(const std::string& text, const std::string& where) {
  try {
    size_t used = 0;
    const int64_t score = std::stoll(text, &used);
    if (used == text.size()) return score;
  } catch (const std::exception&) {
  }
  throw DataError(where + ": the score \"" + text + "\" is not an integer (a relevance grade: 0 judged not relevant, "
                  "1 or more relevant)");
}

// qrels/<split>.tsv → per query index (of `queries`), its relevant documents (of `corpus`).
std::vector<std::vector<int64_t>> read_tsv_qrels(const std::string& path, const BeirRecords& queries,
                                                 const BeirRecords& corpus) {
  const auto in = open_input_file(path);
  BeirJudgements judgements(queries.ids.size());
  std::string line;
  for (int64_t number = 1; std::getline(*in, line); ++number) {
    strip_file_bom(line, number);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() != 3) throw DataError(where + ": expected 3 tab-separated fields (query-id, corpus-id, score)");
    if (is_header(f, number)) continue;
    judgements.add(f[0], f[1], score_of(f[2], where), queries, corpus, where);
  }
  judgements.finish();
  return std::move(judgements.relevant);
}

// BEIR's own folder: queries.jsonl first, so that a folder without queries is told so
// before its corpus is read.
BeirParts read_beir_folder_parts(const std::string& folder, const std::string& split) {
  const fs::path root(folder);
  // A folder with none of BEIR's files was most likely meant as something else: say both.
  if (beir_file(root, "corpus.jsonl").empty() && beir_file(root, "queries.jsonl").empty() &&
      entry_at(root / "qrels") == Entry::Missing)
    throw DataError(folder + ": not a BEIR folder: " + kBeirLayoutNames);
  BeirParts parts;
  parts.split = split.empty() ? default_beir_split(folder) : split;
  parts.queries = read_beir_file_records(required_beir_file(root, "queries.jsonl"), /*with_title=*/false);
  parts.corpus = read_beir_file_records(required_beir_file(root, "corpus.jsonl"), /*with_title=*/true);
  parts.qrels_origin = folder + "/qrels/" + parts.split + ".tsv";
  parts.relevant =
      read_tsv_qrels(required_beir_file(root, "qrels/" + parts.split + ".tsv"), parts.queries, parts.corpus);
  return parts;
}

}  // namespace

void check_beir_id(const std::string& id, const std::string& where) {
  const size_t at = id.find(kBom);
  if (at == std::string::npos) return;
  std::string shown = id;
  shown.erase(at, 3);
  throw DataError(where + ": an id holds a byte-order mark (U+FEFF), at byte " + std::to_string(at) + " of \"" +
                  shown + "\": ids are compared byte for byte, so it would match nothing: remove the mark "
                  "(joining files that each begin with one leaves the later ones' inside the text)");
}

std::string beir_document_text(const std::string& title, const std::string& text) {
  if (title.empty()) return text;
  return text.empty() ? title : title + " " + text;
}

void read_jsonl_records(const std::string& path, bool with_title, BeirRecords& out) {
  const auto in = open_input_file(path);  // plain or gzip-compressed, whatever its name says
  std::string line;
  for (int64_t number = 1; std::getline(*in, line); ++number) {
    strip_file_bom(line, number);
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) throw DataError(where + ": not a JSON object");
    std::string id = id_of(record, where);
    std::string text = text_field(record, "text", /*required=*/true, where);
    if (with_title) text = beir_document_text(text_field(record, "title", /*required=*/false, where), text);
    out.add(std::move(id), std::move(text), where);
  }
}

void BeirRecords::add(std::string id, std::string text, const std::string& where) {
  check_beir_id(id, where);
  if (!index_of.emplace(id, static_cast<int64_t>(ids.size())).second)
    throw DataError(where + ": the id \"" + id + "\" appears twice in " + name);
  ids.push_back(std::move(id));
  texts.push_back(std::move(text));
}

void BeirJudgements::add(const std::string& query_id, const std::string& corpus_id, int64_t score,
                         const BeirRecords& queries, const BeirRecords& corpus, const std::string& where) {
  check_beir_id(query_id, where);
  check_beir_id(corpus_id, where);
  const auto q = queries.index_of.find(query_id);
  if (q == queries.index_of.end())
    throw DataError(where + ": the query id \"" + query_id + "\" is not in " + queries.name);
  const auto d = corpus.index_of.find(corpus_id);
  if (d == corpus.index_of.end())
    throw DataError(where + ": the corpus id \"" + corpus_id + "\" is not in " + corpus.name);
  if (score > 0) relevant[static_cast<size_t>(q->second)].push_back(d->second);
}

void BeirJudgements::finish() {
  for (auto& docs : relevant) {
    std::sort(docs.begin(), docs.end());
    docs.erase(std::unique(docs.begin(), docs.end()), docs.end());
  }
}

bool is_beir_folder(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return false;
  const fs::path root(path);
  return is_mteb_folder(path) || !beir_file(root, "corpus.jsonl").empty() ||
         !beir_file(root, "queries.jsonl").empty() || entry_at(root / "qrels") != Entry::Missing;
}

std::string default_beir_split(const std::string& folder) {
  if (is_mteb_folder(folder)) return default_mteb_split(folder);
  const fs::path qrels = fs::path(folder) / "qrels";
  const Entry entry = entry_at(qrels);
  if (entry == Entry::Missing) throw DataError(qrels.string() + ": no qrels file (" + kLayout + ")");
  if (entry == Entry::File) throw DataError(qrels.string() + ": is a file, a folder was expected (" + kLayout + ")");
  if (!beir_file(qrels, "test.tsv").empty()) return "test";
  std::vector<std::string> splits;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(qrels, ec)) {
    std::string name = entry.path().filename().string();
    if (name.size() > 3 && name.compare(name.size() - 3, 3, ".gz") == 0) name.resize(name.size() - 3);
    if (fs::path(name).extension() == ".tsv") splits.push_back(fs::path(name).stem().string());
  }
  std::sort(splits.begin(), splits.end());
  splits.erase(std::unique(splits.begin(), splits.end()), splits.end());
  if (splits.size() == 1) return splits.front();
  if (splits.empty()) throw DataError(qrels.string() + ": no qrels file (" + kLayout + ")");
  std::string names;
  for (const auto& s : splits) names += (names.empty() ? "" : ", ") + s;
  throw DataError(qrels.string() + ": no test.tsv, and several splits (" + names + "): name one");
}

BeirSet load_beir(const std::string& folder, const std::string& split, const Tokenizer& tokenizer, int max_length,
                  const std::string& query_prompt, const std::string& passage_prompt, bool keep_texts) {
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) throw DataError(folder + ": not a folder (" + kBeirLayoutNames + ")");
  BeirSet set;
  set.folder = folder;
  set.name = fs::path(folder).lexically_normal().filename().string();
  if (set.name.empty()) set.name = fs::path(folder).lexically_normal().parent_path().filename().string();
  BeirParts parts = is_mteb_folder(folder) ? read_mteb_parts(folder, split) : read_beir_folder_parts(folder, split);
  set.split = parts.split;

  std::vector<std::string> query_texts;
  for (size_t q = 0; q < parts.queries.ids.size(); ++q) {
    if (parts.relevant[q].empty()) continue;
    set.query_ids.push_back(parts.queries.ids[q]);
    set.relevant.push_back(parts.relevant[q]);
    query_texts.push_back(parts.queries.texts[q]);
  }
  if (set.query_ids.empty()) throw DataError(parts.qrels_origin + ": no query has a relevant document (score > 0)");
  set.corpus_ids = std::move(parts.corpus.ids);

  const bool wide = tokenizer.vocab_size() > 65536;
  set.tokens.reserve(wide, set.num_queries() + set.num_docs(), 0);
  for (const std::string& text : query_texts) set.tokens.append(tokenizer.encode(query_prompt + text, max_length));
  for (const std::string& text : parts.corpus.texts)
    set.tokens.append(tokenizer.encode(passage_prompt + text, max_length));
  set.tokens.shrink_to_fit();
  if (keep_texts) {
    set.query_texts = std::move(query_texts);
    set.corpus_texts = std::move(parts.corpus.texts);
  }
  return set;
}

}  // namespace ddp_embed
