// Evaluation metrics on plain arrays (no LibTorch): retrieval over a similarity matrix
// and STS correlations. The map keys are the names metrics.jsonl uses after "eval/".
//
// Retrieval: one relevant document per query. Its rank is 1 + the number of other
// documents scoring >= it, i.e. ties count against the query (pessimistic). Why: a
// collapsed model that gives every document the same score must score 0, not 1; and the
// result does not depend on document order. A NaN score for the relevant document ranks
// it last; NaN scores of other documents never outrank it. Counting is O(num_docs) per
// query: no sort.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddp_embed {

using MetricMap = std::map<std::string, double>;

// 1-based rank of `relevant` among `num_docs` scores (see above).
int64_t pessimistic_rank(const float* scores, int64_t num_docs, int64_t relevant);

struct RetrievalMetrics {
  int64_t num_queries = 0;
  double recall_at_1 = 0, recall_at_5 = 0, recall_at_10 = 0;
  double mrr_at_10 = 0;   // mean of 1/rank, 0 beyond rank 10
  double ndcg_at_10 = 0;  // one relevant doc: mean of 1/log2(rank + 1), 0 beyond rank 10
  // "recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10".
  MetricMap to_map() const;
};

// From the 1-based rank of each query's relevant document. Useful when the similarity
// matrix is produced in row blocks and ranked block by block.
RetrievalMetrics retrieval_metrics_from_ranks(const std::vector<int64_t>& ranks);

// `similarity`: row-major [num_queries × num_docs]. `relevant_doc[i]`: the index of query
// i's relevant document; empty means doc i (needs num_docs >= num_queries).
// Throws std::invalid_argument on sizes or indices that do not fit.
RetrievalMetrics retrieval_metrics(const float* similarity, int64_t num_queries,
                                   int64_t num_docs,
                                   const std::vector<int64_t>& relevant_doc = {});

// ---- retrieval with several relevant documents (BEIR folders) ----------------------------
// The metrics and cuts that sentence-transformers' InformationRetrievalEvaluator reports by
// default, computed as it computes them: accuracy@k (a relevant document in the top k),
// precision@k, recall@k (k = 1, 3, 5, 10), mrr@10, ndcg@10 (binary gains, the ideal
// ranking all relevant documents first) and map@100 (divided by min(100, relevant)).

// The deepest cut any metric reads (map@100): rank this many documents per query.
inline constexpr int64_t kIrDepth = 100;

// "accuracy@1" ... "map@100": the order of ir_query_metrics' values.
const std::vector<std::string>& ir_metric_names();

// One query's metrics, in ir_metric_names() order. `relevant_at[i]`: whether the document
// ranked i-th (0 = best) is relevant, for the top min(kIrDepth, num_docs) documents;
// `num_relevant` (>= 1): the query's relevant documents in the whole corpus. The metrics
// of a set are the means over its queries. Throws std::invalid_argument on num_relevant < 1.
std::vector<double> ir_query_metrics(const std::vector<char>& relevant_at, int64_t num_relevant);

struct StsMetrics {
  int64_t num_pairs = 0;
  double spearman = 0;
  double pearson = 0;
  MetricMap to_map() const;  // "spearman", "pearson"
};

// Pearson correlation; 0 when either side is constant (undefined, and JSON has no NaN).
double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y);

// 1-based ranks with tied values sharing the average of their positions
// ({10, 20, 20, 30} → {1, 2.5, 2.5, 4}).
std::vector<double> average_ranks(const std::vector<double>& values);

// Spearman = Pearson of the average ranks.
double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y);

// predicted[i] (e.g. a cosine) against gold[i]; both NaN when any value is not finite
// (a diverged model). Throws std::invalid_argument when the
// sizes differ.
StsMetrics sts_metrics(const std::vector<double>& predicted, const std::vector<double>& gold);

// Cosine similarities of row-major embeddings: queries [nq × dim] against docs [nd × dim]
// → [nq × nd]. Zero vectors have cosine 0 with everything. For `encode`/`eval` paths
// that hold embeddings in plain memory, and for tests.
std::vector<float> cosine_similarity_matrix(const float* queries, int64_t num_queries,
                                            const float* docs, int64_t num_docs, int64_t dim);

}  // namespace ddp_embed
