// `embed-train encode`, `eval` and `tokenize`: a model folder (written by training, a
// sentence-transformers folder or a plain Hugging Face folder of BERT, XLM-RoBERTa or
// Qwen3: model/model_folder.h)
// applied to a file of sentences or pairs, on one process.
//
// encode: text (one sentence a line), JSONL ("text") or a table file (Parquet, Arrow IPC,
//   CSV, TSV: its column "text", else "sentence", else its first text column) in; JSONL
//   {"text", "embedding"} or .npy (float32, [N, dim]) out, in input order. Sentences are
//   batched by length internally (less padding); progress goes to stderr.
//   A folder with a Normalize module gives unit vectors (x / max(||x||, 1e-12), as
//   torch's F.normalize); --normalize does the same for any folder.
// eval: retrieval (each query's positive among all positives: recall@1/5/10, mrr@10,
//   ndcg@10) or STS (spearman, pearson of cosine against "score"), as a table or as one
//   JSON object {"task", "pairs", <metric>: value, ...}; or --beir DIR: a BEIR folder's
//   queries against its corpus (train/evaluate.h), InformationRetrievalEvaluator's metrics,
//   {"task": "beir", "name", "split", "queries", "documents", <metric>: value, ...}; with
//   --first-stage BI, a cross-encoder reranking BI's top k (train/rerank_eval.h).
// A cross-encoder folder given to encode, or to eval without --first-stage, is refused
// naming what to use instead (train/rerank_inference.h's require_bi_encoder).
// tokenize: the token ids encode feeds the model for each sentence of the same input
//   (with [CLS]/[SEP], truncated to the folder's max length, lower-cased first when
//   sentence_bert_config.json says do_lower_case), one JSON line {"ids": [...]} each, in
//   input order.
//
// Prompts (encode, and mine's queries and corpus): a text put before each input before it
// is tokenized, exactly as SentenceTransformer.encode(texts, prompt_name=..., prompt=...)
// does; without a prompt named or given, the folder's default_prompt_name applies.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "model/model_folder.h"
#include "parallel/process_group.h"
#include "util/progress.h"

namespace ddp_embed {

struct EncodeOptions {
  std::string model_dir, input, output;
  int batch_size = 64;
  std::string device = "cpu";
  // --pooling as typed, read through config/choices.h's table (cls | mean | lasttoken);
  // empty: as the folder says (a plain Hugging Face folder: cls, lasttoken for Qwen3)
  std::string pooling;
  bool normalize = false;  // also without a Normalize module in the folder
  std::optional<std::string> prompt_name;  // --prompt-name: one of the folder's prompts
  std::optional<std::string> prompt;       // --prompt: the text itself (also "": none)
  int64_t max_active_dims = 0;  // a sparse encoder: keep each vector's top k (0: as the folder says)
};

struct EvalOptions {
  std::string model_dir;
  std::string data;  // a pair file (JSONL or a table file: data/pairs.h), or
  std::string beir;  // a BEIR folder, or MTEB's Hub folder of one (data/beir.h)
  std::string split;  // BEIR: qrels/<split>.tsv (MTEB: the qrels config's split); empty = test, or the only one
  std::string query_prompt, corpus_prompt;  // BEIR: before each query / document
  std::string embeddings_out;  // BEIR: also write queries.npy and corpus.npy here (empty: no)
  std::string task;  // retrieval | sts | empty: sts when every pair has a score
  int batch_size = 64;
  std::string device = "cpu";
  std::string pooling;  // as EncodeOptions::pooling
  std::string format = "table";  // table | json: what goes to stdout
  std::string json_out;          // also write the JSON here (empty: no file)
  // --first-stage: model_dir is a cross-encoder reranking this bi-encoder folder's top_k
  // documents of each BEIR query (train/rerank_eval.h); rerank_out: each query's reranked
  // top k as JSONL (empty: no file).
  std::string first_stage;
  int top_k = 100;
  std::string rerank_out;
  int64_t max_active_dims = 0;  // as EncodeOptions::max_active_dims
};

struct TokenizeOptions {
  std::string model_dir, input, output;
};

int run_encode(const EncodeOptions& options);
int run_eval(const EvalOptions& options);
int run_tokenize(const TokenizeOptions& options);

// ---- what encode shares with mine (train/mine.h) ---------------------------------------

// One sentence a line, or JSONL objects with a "text" field (a name ending in .jsonl or
// .json), or a table file (data/table_file.h's table_format_of: .parquet, .arrow, .csv,
// .tsv, ...) read a batch at a time: its column "text", else "sentence", else its first
// text column. A bad JSONL line is an error "FILE:LINE: ..."; a table file without a text
// column, or with a null text, a DataError naming the file (and the row group and row).
std::vector<std::string> read_sentences(const std::string& path);

// The text put before each input, as sentence-transformers chooses it: `prompt` when
// given (also ""); else the folder's prompt named `prompt_name`, which must exist (else an
// error naming `flag` and listing the folder's prompts); else the folder's prompt named
// `fallback_name`, when it has one; else "". A non-empty prompt for a folder whose Pooling
// says include_prompt false is an error naming that file.
std::string resolve_prompt(const LoadedModel& model, const std::optional<std::string>& prompt,
                           const std::optional<std::string>& prompt_name, const std::string& flag,
                           const std::optional<std::string>& fallback_name);

// Rank 0's progress through long work done in steps (batches, chunks). On a terminal:
// "encode 1200/5000  24% [...] 350.2 sentences/s | 4s elapsed | ETA 11s", redrawn in
// place; elsewhere (a log file, ddp-launch's pipes) a log line at every tenth of the work,
// so logs stay short: "encode: 640/1000 sentences, 350.2 a second, ETA 1s". `shown`
// false (the other ranks): silent.
class WorkProgress {
 public:
  WorkProgress(std::string label, std::string unit, int64_t total, int64_t step_size, bool shown);
  // `done` units of `total` are done; the last step took `step_seconds`.
  void step_done(int64_t done, double step_seconds);

 private:
  std::string label_, unit_;
  int64_t total_, step_size_;
  bool shown_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  RecentStepTimes step_times_{/*warmup=*/1, /*window=*/20};
  int64_t last_tenth_ = 0;
};

struct EmbedSettings {
  int64_t batch_size = 64;
  c10::Device device{c10::kCPU};
  bool normalize = false;        // unit rows also without a Normalize module in the folder
  std::string label = "encode";  // names the work in the progress line
};

// The embeddings of prompt + text for every text: [N, dim] float32 on the CPU, in input
// order, on every rank. Texts are sorted by token length (less padding) and cut into
// batches of batch_size in that order; rank r of `pg` embeds a contiguous run of those
// batches and the rows are all-gathered, so every batch, and so every embedding, is the
// same at any world size. Rank 0 shows its progress (a line with ETA on a terminal, else
// a log line at every tenth).
at::Tensor embed_texts(LoadedModel& model, const std::vector<std::string>& texts, const std::string& prompt,
                       const EmbedSettings& settings, ProcessGroup& pg);

}  // namespace ddp_embed
