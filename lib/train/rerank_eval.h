// `embed-train eval --model CROSS --beir DIR --first-stage BI --top-k K`: two-stage
// retrieval on a BEIR folder, on one process.
//
// The first stage is eval --beir of the bi-encoder folder BI (train/evaluate.h): each
// query's documents ranked by cosine, ties by corpus id, and its 15 metrics
// (eval/metrics.h) as eval --beir reports them. Then the cross-encoder CROSS scores each
// query's first-stage top K as (query text, document text) pairs, the document text as
// BEIR's reranking reads it: title and text joined by a space, outer ASCII whitespace
// stripped (BEIR's (title + " " + text).strip()). The final ranking of a query: its top K
// by the cross-encoder's score, highest first (NaN last, ties by first-stage rank), then
// the documents below the top K in their first-stage order. The same 15 metrics of that
// ranking, a query's relevant documents outside the top K counting as they fall (in its
// tail, or unranked), are the "reranked/" metrics beside the "first_stage/" ones:
//   {"task": "beir_rerank", "name", "split", "queries", "documents", "top_k",
//    "first_stage/accuracy@1": ..., ..., "reranked/map@100": ...}
// The cross-encoder must have one label (its score ranks); the prompts and --pooling
// apply to the first stage only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "data/beir.h"
#include "train/inference.h"

namespace ddp_embed {

// Runs the above for eval's options (first_stage set). Writes the metrics as eval --beir
// does (a table or JSON to stdout, --json FILE) and, with rerank_out, a JSONL line for
// each query: {"query_id", "ranking": [{"id", "score", "first_stage_rank" (1 = best),
// "first_stage_score"}, ...] (its reranked top K, best first), "first_stage": {the 15
// metrics of its first-stage ranking}, "reranked": {those of its final ranking}}. Throws
// std::invalid_argument when CROSS is not a one-label cross-encoder or BI not a
// bi-encoder, and as load_beir and load_model_folder do.
int run_eval_rerank(const EvalOptions& options);

// The first stage's top `depth` documents of each query and their cosines, ranked as
// beir_metrics ranks them (train/evaluate.h rank_beir_documents), from the embeddings of
// the queries [Q, D] and the corpus [N, D].
struct RerankFirstStage {
  std::vector<std::vector<int64_t>> docs;
  std::vector<std::vector<float>> scores;
};
RerankFirstStage rank_first_stage(const at::Tensor& queries, const at::Tensor& corpus, const BeirSet& set, int64_t depth);

// BEIR's reranking text of a document: title and text joined (as load_beir keeps it),
// outer ASCII whitespace stripped.
std::string rerank_document_text(const std::string& joined);

// One query's 15 metrics (eval/metrics.h ir_metric_names' order) of a ranking (document
// indices, best first, at least min(kIrDepth, documents) of them).
std::vector<double> rerank_ranking_metrics(const std::vector<int64_t>& ranking, const std::vector<int64_t>& relevant,
                                           int64_t num_docs);

// One query's final ranking: `first_stage` (document indices, best first) with its first
// scores.size() entries re-sorted by `scores` (highest first, NaN last, ties kept in
// first-stage order) and the rest after them as they are. Throws std::invalid_argument
// when there are more scores than documents.
std::vector<int64_t> reranked_order(const std::vector<int64_t>& first_stage, const std::vector<float>& scores);

}  // namespace ddp_embed
