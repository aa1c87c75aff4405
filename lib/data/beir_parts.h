// What the two readers of a BEIR set share (data/beir.h): BEIR's own folder of JSONL and
// TSV files (beir.cpp) and MTEB's Hub folder of Parquet or other table files
// (beir_mteb.cpp). Both hand their records and judgements to the same checks, so a
// duplicate id, an unknown id or a score that is not whole is refused alike in either.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace ddp_embed {

// Queries or documents: ids and texts in reading order, each id once.
struct BeirRecords {
  std::string name;  // what they were read from, for messages: "corpus.jsonl", "the corpus (config corpus: FILES)"
  std::vector<std::string> ids, texts;
  std::unordered_map<std::string, int64_t> index_of;

  // Appends a record. Throws DataError "<where>: the id "x" appears twice in <name>", or
  // check_beir_id's.
  void add(std::string id, std::string text, const std::string& where);
};

// Throws DataError "<where>: an id holds a byte-order mark ..." when `id` holds one: ids
// are compared byte for byte, so it would match nothing.
void check_beir_id(const std::string& id, const std::string& where);

// Appends the records of a JSONL file of {"_id", "text"(, "title")} objects, plain or
// gzip-compressed whatever its name says. Throws DataError "<path>:<line>: ..." for a line
// that is not an object with a string or integer "_id" and a string "text", or add()'s.
void read_jsonl_records(const std::string& path, bool with_title, BeirRecords& out);

// A document's text as BEIR's sentence-transformers models read it: title and text joined
// by a space, either may be empty.
std::string beir_document_text(const std::string& title, const std::string& text);

// Per query (index into the queries' records), the indices of its relevant documents.
struct BeirJudgements {
  std::vector<std::vector<int64_t>> relevant;

  explicit BeirJudgements(size_t queries) : relevant(queries) {}
  // One judgement: relevant when score > 0. Throws DataError "<where>: the query id "q7"
  // is not in <queries.name>" (or the corpus id, in <corpus.name>), or check_beir_id's.
  void add(const std::string& query_id, const std::string& corpus_id, int64_t score, const BeirRecords& queries,
           const BeirRecords& corpus, const std::string& where);
  // Each query's documents ascending, each once.
  void finish();
};

// The three parts of a BEIR set, read and checked.
struct BeirParts {
  BeirRecords queries, corpus;
  std::vector<std::vector<int64_t>> relevant;  // per query of `queries`
  std::string split;
  std::string qrels_origin;  // the qrels read, for messages: "FOLDER/qrels/test.tsv"
};

// MTEB's Hub folder (beir_mteb.cpp): whether `folder` is one — a README.md whose configs
// block has the configs "corpus" and "queries" — and its set, read through data/table_file.h
// (Parquet, Arrow IPC, CSV, TSV) or as JSONL (MTEB's older copies). `split` empty: "test"
// when the qrels config has it, else its only split. Throws DataError as load_beir does.
bool is_mteb_folder(const std::string& folder);
std::string default_mteb_split(const std::string& folder);
BeirParts read_mteb_parts(const std::string& folder, const std::string& split);

}  // namespace ddp_embed
