#include "data/beir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace ddp_embed {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLayout = "a BEIR folder holds corpus.jsonl, queries.jsonl and qrels/SPLIT.tsv";

std::ifstream open_in(const fs::path& folder, const std::string& file) {
  const fs::path path = folder / file;
  std::ifstream in(path);
  if (!in) throw DataError(path.string() + ": cannot open (" + kLayout + ")");
  return in;
}

// An id as text: BEIR writes strings; a number is taken as written.
std::string id_of(const nlohmann::json& record, const std::string& where) {
  const auto it = record.find("_id");
  if (it == record.end()) throw DataError(where + ": missing \"_id\"");
  if (it->is_string() && !it->get<std::string>().empty()) return it->get<std::string>();
  if (it->is_number_integer()) return it->dump();
  throw DataError(where + ": \"_id\" must be a non-empty string, not " + it->dump());
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

// A JSONL file of {"_id", "text"(, "title")} records: ids and texts in file order, each id
// once. `where_of_id` maps each id to its index.
struct Records {
  std::vector<std::string> ids, texts;
  std::unordered_map<std::string, int64_t> index_of;
};

Records read_records(const fs::path& folder, const std::string& file, bool with_title) {
  std::ifstream in = open_in(folder, file);
  Records out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = (folder / file).string() + ":" + std::to_string(number);
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object()) throw DataError(where + ": not a JSON object");
    std::string id = id_of(record, where);
    std::string text = text_field(record, "text", /*required=*/true, where);
    if (with_title) {
      const std::string title = text_field(record, "title", /*required=*/false, where);
      if (!title.empty()) text = text.empty() ? title : title + " " + text;
    }
    if (!out.index_of.emplace(id, static_cast<int64_t>(out.ids.size())).second)
      throw DataError(where + ": the id \"" + id + "\" appears twice in " + file);
    out.ids.push_back(std::move(id));
    out.texts.push_back(std::move(text));
  }
  if (out.ids.empty()) throw DataError((folder / file).string() + ": no records");
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

// qrels/<split>.tsv → per query index (of `queries`), its relevant documents (of `corpus`).
std::vector<std::vector<int64_t>> read_qrels(const fs::path& folder, const std::string& split,
                                             const Records& queries, const Records& corpus) {
  const std::string file = "qrels/" + split + ".tsv";
  std::ifstream in = open_in(folder, file);
  std::vector<std::vector<int64_t>> relevant(queries.ids.size());
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = (folder / file).string() + ":" + std::to_string(number);
    const std::vector<std::string> f = split_tabs(line);
    if (f.size() != 3) throw DataError(where + ": expected 3 tab-separated fields (query-id, corpus-id, score)");
    int64_t score = 0;
    try {
      size_t used = 0;
      score = std::stoll(f[2], &used);
      if (used != f[2].size()) throw std::invalid_argument("trailing text");
    } catch (const std::exception&) {
      if (number == 1) continue;  // the header line ("query-id corpus-id score")
      throw DataError(where + ": the score \"" + f[2] + "\" is not an integer");
    }
    const auto q = queries.index_of.find(f[0]);
    if (q == queries.index_of.end())
      throw DataError(where + ": the query id \"" + f[0] + "\" is not in queries.jsonl");
    const auto d = corpus.index_of.find(f[1]);
    if (d == corpus.index_of.end())
      throw DataError(where + ": the corpus id \"" + f[1] + "\" is not in corpus.jsonl");
    if (score > 0) relevant[static_cast<size_t>(q->second)].push_back(d->second);
  }
  for (auto& docs : relevant) {
    std::sort(docs.begin(), docs.end());
    docs.erase(std::unique(docs.begin(), docs.end()), docs.end());
  }
  return relevant;
}

}  // namespace

bool is_beir_folder(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

std::string default_beir_split(const std::string& folder) {
  const fs::path qrels = fs::path(folder) / "qrels";
  if (fs::exists(qrels / "test.tsv")) return "test";
  std::vector<std::string> splits;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(qrels, ec))
    if (entry.path().extension() == ".tsv") splits.push_back(entry.path().stem().string());
  if (splits.size() == 1) return splits.front();
  if (splits.empty()) throw DataError(qrels.string() + ": no qrels file (" + kLayout + ")");
  std::sort(splits.begin(), splits.end());
  std::string names;
  for (const auto& s : splits) names += (names.empty() ? "" : ", ") + s;
  throw DataError(qrels.string() + ": no test.tsv, and several splits (" + names + "): name one");
}

BeirSet load_beir(const std::string& folder, const std::string& split, const Tokenizer& tokenizer, int max_length,
                  const std::string& query_prompt, const std::string& passage_prompt) {
  if (!is_beir_folder(folder)) throw DataError(folder + ": not a folder (" + kLayout + ")");
  // A folder with none of BEIR's files was most likely meant as something else: say both.
  const fs::path root(folder);
  if (!fs::exists(root / "corpus.jsonl") && !fs::exists(root / "queries.jsonl") && !fs::exists(root / "qrels"))
    throw DataError(folder + " is a folder, not a file of pairs (JSONL, or .gz); nor is it a BEIR folder: " + kLayout);
  BeirSet set;
  set.folder = folder;
  set.name = fs::path(folder).lexically_normal().filename().string();
  if (set.name.empty()) set.name = fs::path(folder).lexically_normal().parent_path().filename().string();
  set.split = split.empty() ? default_beir_split(folder) : split;

  // queries.jsonl first: a folder without queries is told so before its corpus is read.
  const Records queries = read_records(folder, "queries.jsonl", /*with_title=*/false);
  Records corpus = read_records(folder, "corpus.jsonl", /*with_title=*/true);
  const std::vector<std::vector<int64_t>> relevant = read_qrels(folder, set.split, queries, corpus);

  std::vector<std::string> query_texts;
  for (size_t q = 0; q < queries.ids.size(); ++q) {
    if (relevant[q].empty()) continue;
    set.query_ids.push_back(queries.ids[q]);
    set.relevant.push_back(relevant[q]);
    query_texts.push_back(queries.texts[q]);
  }
  if (set.query_ids.empty())
    throw DataError(folder + "/qrels/" + set.split + ".tsv: no query has a relevant document (score > 0)");
  set.corpus_ids = std::move(corpus.ids);

  const bool wide = tokenizer.vocab_size() > 65536;
  set.tokens.reserve(wide, set.num_queries() + set.num_docs(), 0);
  for (const std::string& text : query_texts) set.tokens.append(tokenizer.encode(query_prompt + text, max_length));
  for (const std::string& text : corpus.texts) set.tokens.append(tokenizer.encode(passage_prompt + text, max_length));
  set.tokens.shrink_to_fit();
  return set;
}

}  // namespace ddp_embed
