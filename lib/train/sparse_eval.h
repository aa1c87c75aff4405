// A sparse encoder's evaluation on a BEIR folder, as sentence-transformers'
// SparseInformationRetrievalEvaluator computes it: each query against the whole corpus by
// dot product, the 15 retrieval metrics of the dense evaluation (train/evaluate.h), and
// the vectors' sparsity:
//   query_active_dims, corpus_active_dims        the mean number of non-zero entries a text
//   query_sparsity_ratio, corpus_sparsity_ratio  1 - that / the vocabulary size
//   avg_flops                                    sum over entries of (the share of queries
//                                                using it) × (the share of documents using it):
//                                                the expected multiplications of a query's
//                                                lookup, what FLOPS regularization pushes down
//
// Why an inverted index. A sparse vector has a weight per vocabulary entry (30,522 for
// BERT, 250,002 for XLM-R), almost all 0: the corpus held as dense rows would be that many
// floats a document (a 100,000-document corpus: 12 GB). Here each batch's vectors become
// (entry, weight) lists as soon as they are made, the corpus is indexed by entry (each
// entry's documents and weights), and a query's scores add up the postings of its own
// entries only, the work a search engine does. The ranking and the metrics are the dense
// evaluation's (rank_scored_documents, ir_query_metrics): ties by corpus id.
//
// Sharded as the dense evaluation is: every rank embeds a contiguous share of the texts
// (the vectors exchanged as lists), holds the whole index, and ranks its share of the
// queries; one all-reduce sums the metrics.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "data/beir.h"
#include "model/embedder.h"
#include "parallel/process_group.h"

namespace ddp_embed {

// Sparse vectors row by row: row i's non-zero entries are terms[offsets[i], offsets[i + 1]),
// ascending, with their weights.
struct SparseRows {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> terms;
  std::vector<float> weights;
  int64_t vocabulary = 0;

  int64_t rows() const { return static_cast<int64_t>(offsets.size()) - 1; }
  // Appends dense rows [n, vocabulary] (fp32, CPU): their non-zero entries.
  void append_dense(const at::Tensor& rows);
};

// The sequences `seqs` of `store` through a sparse encoder, in order, on every rank.
SparseRows embed_sparse_in_order(SentenceEmbedder& model, const TokenStore& store, const std::vector<int64_t>& seqs,
                                 ProcessGroup& pg, int64_t batch_size, c10::Device device);

// The corpus by vocabulary entry: each entry's documents, ascending, with their weights.
class InvertedIndex {
 public:
  explicit InvertedIndex(const SparseRows& corpus);
  int64_t docs() const { return docs_; }
  // The dot products of `queries`' rows [first, first + rows) with every document: [rows,
  // docs] fp32, each summed in double over the query's entries in ascending order.
  at::Tensor scores(const SparseRows& queries, int64_t first, int64_t rows) const;

 private:
  int64_t docs_ = 0;
  std::vector<int64_t> starts_;  // [vocabulary + 1]: entry j's postings are [starts_[j], starts_[j + 1])
  std::vector<int32_t> doc_;
  std::vector<float> weight_;
};

// The sparsity metrics above, of the queries' and the corpus' vectors.
std::map<std::string, double> sparsity_metrics(const SparseRows& queries, const SparseRows& corpus);

// The evaluation above: the metrics by name (ir_metric_names(), then the sparsity ones).
// ModelError for a model that is not a sparse encoder.
std::map<std::string, double> evaluate_sparse_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                                   int64_t batch_size, c10::Device device);

}  // namespace ddp_embed
