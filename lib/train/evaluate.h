// Evaluation on a pair set, spread over the ranks.
//
// The pairs are cut into fixed chunks of `batch_size`; rank r embeds a contiguous run of
// chunks, and the embeddings are all-gathered in order. Each chunk is embedded the same
// way whatever the world size, so the metrics equal a single-process evaluation's.
//   retrieval: each query against the positives of all pairs → recall@1/5/10, MRR@10,
//              nDCG@10;
//   sts:       cosine(text1, text2) against the gold score → Spearman, Pearson.
#pragma once

#include <map>
#include <string>
#include <vector>

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

}  // namespace ddp_embed
