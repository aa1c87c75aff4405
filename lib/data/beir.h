// A retrieval benchmark in BEIR's folder format, or in MTEB's, read and tokenized for
// evaluation.
//
// A BEIR folder (docs/formats.md, "BEIR folders"):
//   corpus.jsonl     {"_id": "d1", "title": "...", "text": "..."} a line (title optional)
//   queries.jsonl    {"_id": "q1", "text": "..."} a line
//   qrels/SPLIT.tsv  query-id <tab> corpus-id <tab> score, after a header line
// Each file may instead be gzip-compressed as NAME.gz (the Hugging Face copies), and a
// file whose bytes are gzip's is read as such whatever its name. A UTF-8 byte-order mark
// at the start of a file is skipped. A document's text is its title and text joined by a
// space (either may be empty), as BEIR's own sentence-transformers models read them. A qrels
// line with score > 0 makes the document relevant to the query; score 0 is a judged
// non-relevant document (BEIR's and pytrec_eval's meaning). Only queries with at least one
// relevant document are evaluated, in queries.jsonl's order, as sentence-transformers'
// InformationRetrievalEvaluator does.
//
// Every id the qrels name must be in corpus.jsonl / queries.jsonl, and ids are unique in
// each: anything else is a DataError naming the file and line. Ids are compared byte for
// byte, so one holding a byte-order mark is an error too, and so is a score that is not
// an integer ("0.5"); the header is the first line when its score field is a word. The
// folder is read whole (a BEIR corpus of a few million passages takes a few GB of text
// while it is tokenized).
//
// MTEB's copy on the Hugging Face Hub (mteb/scifact, ...), a snapshot folder as it is
// downloaded: a README.md whose configs block names the files of the configs "corpus"
// ("_id", "title", "text"), "queries" ("_id", "text") and "default" or "qrels"
// ("query-id", "corpus-id", "score"; a split each: test, dev, train), in Parquet (or
// another table format of data/table_file.h, or JSONL). Read as mteb reads it: the
// qrels' split asked for; the corpus' and the queries' split of that name when they have
// one, else their first; an id a string or a whole number (its digits); a score a whole
// number (int64, or a whole float64). The same checks apply, naming the file, row group
// and row; a corpus without "_id" is an error naming the columns it has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/pairs.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct BeirSet {
  std::string name;    // the folder's own name ("scifact")
  std::string folder;  // as given
  std::string split;   // the qrels read: qrels/<split>.tsv, or the split of MTEB's qrels config
  std::vector<std::string> query_ids;   // the evaluated queries, in queries.jsonl order
  std::vector<std::string> corpus_ids;  // every document, in corpus.jsonl order
  // Per evaluated query: the indices into corpus_ids of its relevant documents, ascending.
  std::vector<std::vector<int64_t>> relevant;
  // The tokenized texts: queries are sequences [0, num_queries), documents follow them.
  TokenStore tokens;
  // The texts themselves, without prompts (a document's is its title and text joined as
  // above), in the same orders; filled only when load_beir is asked to keep them.
  std::vector<std::string> query_texts, corpus_texts;

  int64_t num_queries() const { return static_cast<int64_t>(query_ids.size()); }
  int64_t num_docs() const { return static_cast<int64_t>(corpus_ids.size()); }
};

// Whether `path` is a folder in either layout: BEIR's (corpus.jsonl, queries.jsonl or
// qrels/ there, plain or .gz) or MTEB's (README.md's configs "corpus" and "queries"). A
// folder of pair files (a Hub dataset of pairs, a save_to_disk folder) is not. Throws
// DataError for a loop of symbolic links at BEIR's names, or a README.md whose configs
// block is not YAML that datasets writes.
bool is_beir_folder(const std::string& path);

// The qrels split read when none is asked for: "test" when qrels/test.tsv(.gz) exists (MTEB:
// when the qrels' config has it), else the only one. Throws DataError naming the folder
// when neither holds.
std::string default_beir_split(const std::string& folder);

// Reads and tokenizes a BEIR folder, or MTEB's; `split` empty = default_beir_split(). The prompts
// (their texts) go before each query and each document. Throws DataError naming the file
// and line: a missing file, a folder or a loop of symbolic links where a file belongs, a
// file there both plain and as .gz, a cut .gz file, a line that is not a JSON object with
// a string "_id" and "text", a duplicate id, an id holding a byte-order mark, a qrels line
// that is not 3 tab-separated fields, has a score that is not an integer or names an id
// that is not there, no query with a relevant document; in MTEB's layout, the file and
// its row group and row for the same faults, a missing column ("did you mean"), a null
// text or id, a config or split not there, and data/table_file.h's and
// data/dataset_files.h's errors (a corrupt file, a pattern matching no file).
// keep_texts: also fill query_texts and corpus_texts (a reranker reads them as pairs).
BeirSet load_beir(const std::string& folder, const std::string& split, const Tokenizer& tokenizer, int max_length,
                  const std::string& query_prompt = "", const std::string& passage_prompt = "",
                  bool keep_texts = false);

}  // namespace ddp_embed
