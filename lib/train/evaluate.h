// Evaluation on data.eval's sets (pair files and BEIR folders), spread over the ranks.
//
// The texts are cut into fixed chunks of `batch_size`; rank r embeds a contiguous run of
// chunks, and the embeddings are all-gathered in order. Each chunk is embedded the same
// way whatever the world size, so the metrics equal a single-process evaluation's.
//   retrieval: each query against the positives of all pairs → recall@1/5/10, MRR@10,
//              nDCG@10;
//   sts:       cosine(text1, text2) against the gold score → Spearman, Pearson;
//   BEIR:      each query against the whole corpus (embedded once per evaluation), each
//              rank ranking its share of the queries → InformationRetrievalEvaluator's
//              metrics (eval/metrics.h: accuracy/precision/recall@1,3,5,10, mrr@10,
//              ndcg@10, map@100), equal to it on the same embeddings. Ties in score are
//              broken by corpus id, ascending, as it breaks them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/beir.h"
#include "data/pairs.h"
#include "parallel/process_group.h"
#include "model/embedder.h"

namespace ddp_embed {

// Embeddings of the dataset's queries and first positives, in dataset order, on every
// rank: {queries [N, D], positives [N, D]} (fp32, CPU).
std::pair<at::Tensor, at::Tensor> embed_pairs(SentenceEmbedder& model, const PairDataset& data,
                                              ProcessGroup& pg, int64_t batch_size, c10::Device device);

// task: "retrieval", "sts" or "" (sts when the data has scores, else retrieval).
// Returns the metric names of metrics.jsonl without the "eval/" prefix. `sizes` (the
// Matryoshka sizes, loss.matryoshka_dims): the metrics of the embeddings cut to each size
// smaller than the whole too, named "d<size>/<metric>" ("d64/recall@10"), each cut
// re-normalized as sentence-transformers' truncate_dim and cosine similarity do.
std::map<std::string, double> evaluate(SentenceEmbedder& model, const PairDataset& data, ProcessGroup& pg,
                                       int64_t batch_size, c10::Device device, const std::string& task = "",
                                       const std::vector<int64_t>& sizes = {});

// A BEIR folder's embeddings on every rank: {queries [Q, D], corpus [N, D]} (fp32, CPU),
// in the set's order.
std::pair<at::Tensor, at::Tensor> embed_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                             int64_t batch_size, c10::Device device);

// The metrics of those embeddings (see above), each rank ranking its share of the queries
// (one all-reduce), with the Matryoshka sizes as evaluate() has them.
std::map<std::string, double> beir_metrics(const at::Tensor& queries, const at::Tensor& corpus, const BeirSet& set,
                                           ProcessGroup& pg, const std::vector<int64_t>& sizes = {});

// BEIR's ranking, the one beir_metrics scores and a reranker's first stage reorders
// (train/rerank_eval.h): for queries [begin, end) of unit rows q [Q, D] against the corpus
// c [N, D] (fp32, CPU), in blocks of 256, each query's top min(depth, N) documents by cosine,
// descending, NaN last, ties by corpus id (their order as text). `visit(query, top, scores)`
// gets the documents' indices and the query's cosines with every document.
using RankedQuery = std::function<void(int64_t query, const std::vector<int64_t>& top, const float* scores)>;
void rank_beir_documents(const at::Tensor& q, const at::Tensor& c, const std::vector<std::string>& corpus_ids,
                         int64_t begin, int64_t end, int64_t depth, const RankedQuery& visit);
// The same ranking of other scores: `scores(first, rows)` gives queries [first, first +
// rows)' scores with each of the `docs` documents, [rows, docs] fp32 contiguous on the CPU
// (a sparse encoder's dot products: train/sparse_eval.h).
using ScoreBlock = std::function<at::Tensor(int64_t first, int64_t rows)>;
void rank_scored_documents(const ScoreBlock& scores, int64_t docs, const std::vector<std::string>& corpus_ids,
                           int64_t begin, int64_t end, int64_t depth, const RankedQuery& visit);
// Every rank's sums of ir_query_metrics over its share of `queries` queries, all-reduced
// (every rank calls it), as the means by name (eval/metrics.h ir_metric_names).
std::map<std::string, double> mean_ir_metrics(std::vector<double> sums, int64_t queries, ProcessGroup& pg);
// Rows scaled to unit length (norms at least 1e-12), contiguous: the cosines' inputs.
at::Tensor unit_rows(const at::Tensor& x);

// embed_beir, then beir_metrics.
std::map<std::string, double> evaluate_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                            int64_t batch_size, c10::Device device,
                                            const std::vector<int64_t>& sizes = {});

// One of data.eval's sets, with the name its metrics are reported under: a BEIR folder's
// name, a pair file's stem; "" for data.eval a single pair file (its metrics unprefixed,
// "eval/recall@10", as before BEIR folders).
struct RerankCandidates;  // train/rerank_candidates.h

struct EvalSet {
  std::string name;
  std::optional<PairDataset> pairs;  // a pair file
  std::optional<BeirSet> beir;       // or a BEIR folder
  // A reranker's BEIR set: its first stage's candidates, which the model reorders.
  std::shared_ptr<const RerankCandidates> rerank;
  int64_t size() const;              // pairs, or evaluated queries
};

// Every set's metrics, each prefixed with "NAME/" (none for an unnamed set).
std::map<std::string, double> evaluate_sets(SentenceEmbedder& model, const std::vector<EvalSet>& sets,
                                            ProcessGroup& pg, int64_t batch_size, c10::Device device,
                                            const std::vector<int64_t>& sizes = {});

}  // namespace ddp_embed
