// A reranker's evaluation during training (model.kind "cross_encoder", data.eval[i] a BEIR
// folder with first_stage and top_k): what `embed-train eval --first-stage` does
// (train/rerank_eval.h), with the model under training as the reranker.
//
// At start-up, on every rank alike, the embedding model `first_stage` ranks the set's
// corpus for each query (train/evaluate.h rank_beir_documents) and is freed; each query
// keeps its ranking and its top k as (query, document text) pairs. At each evaluation each
// rank scores its contiguous share of the queries' pairs with the model (eval mode, no
// gradient), reorders their top k (the rest below in first-stage order), and the 15
// metrics of eval --beir meet in one all-reduce: the same numbers on any world size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <c10/core/Device.h>

#include "data/beir.h"
#include "model/embedder.h"
#include "parallel/process_group.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct RerankCandidates {
  int64_t top_k = 0;
  std::vector<std::vector<int64_t>> first_stage;  // each query's documents, best first
  std::vector<std::vector<std::string>> documents;  // each query's top k documents' texts
  std::map<std::string, double> first_stage_metrics;  // eval --beir's of the first stage
  // The reranker's tokenizer and input length (the run's: it outlives the candidates).
  const Tokenizer* tokenizer = nullptr;
  int max_length = 512;
};

// The BEIR set at `path` (`split`'s qrels), read with the first stage's tokenizer, and its
// candidates. `key` ("data.eval[0]") names the setting in errors: a first stage that is no
// embedding model, a folder that is no BEIR set. Throws as load_beir and load_model_folder do.
struct RerankEvalSet {
  BeirSet set;
  RerankCandidates candidates;
};
RerankEvalSet load_rerank_eval_set(const std::string& path, const std::string& split, const std::string& first_stage,
                                   int64_t top_k, const Tokenizer& tokenizer, int max_length, ProcessGroup& pg,
                                   c10::Device device, const std::string& key);

// The reranked metrics of `model` (ir_metric_names' names) on every rank.
std::map<std::string, double> evaluate_reranking(SentenceEmbedder& model, const BeirSet& set,
                                                 const RerankCandidates& candidates, ProcessGroup& pg,
                                                 int64_t batch_size, c10::Device device);

}  // namespace ddp_embed
