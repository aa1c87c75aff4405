// The losses the model's forward computes (loss.* in docs/config.md). pair_loss is the
// training loss; the others are its parts that callers name on their own. What each term
// computes, and which sentence-transformers or FlagEmbedding class it is:
// docs/architecture.md, "The losses". Everything here sees embeddings only: the model
// embeds, the data-parallel seam (parallel/data_parallel.h) lends the gathers, the batch
// loader (train/batches.h) fills the labels.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "config/loss_config.h"
#include "model/model_error.h"

namespace ddp_embed {

// Cross-rank negatives: all_gather maps this rank's [n_r, D] to every rank's rows
// [sum of n_r, D] in rank order, differentiably; all_gather_ids does the same for int64
// [n_r], without gradient. `rows`: every rank's n_r, empty when all are equal. pair_loss
// gathers the candidates and, where the config needs them, the queries and the guide's
// embeddings through the first; the hashes, the owners and the guide's counts of masked
// pairs ([1] a rank) through the second. Every rank calls them in the same order.
struct CandidateExchange {
  using Gather = std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>& rows)>;
  Gather all_gather;
  Gather all_gather_ids;
  int64_t rank = 0;
};

// A micro-batch's labels, on its embeddings' device. A candidate's row is its place in
// [positives; hard negatives]: query i's positive is row i.
struct CandidateLabels {
  at::Tensor hashes;               // int64 [n + k]: each candidate's text hash; undefined: nothing masked
  at::Tensor groups;               // int64 [n, G]: query i's scored rows, its positive (i) first, -1 past the last
  at::Tensor teacher_scores;       // float [n, G]: the teacher's score of each (NaN at -1); undefined: no teacher
  std::vector<int64_t> rank_rows;  // every rank's candidate rows, in rank order; empty: all equal
  at::Tensor owners;               // int64 [n + k]: each candidate's query; undefined: k / n negatives a query
  at::Tensor guide_queries;        // [n, G']: the frozen guide's embeddings (loss.guide); undefined: no guide
  at::Tensor guide_candidates;     // [n + k, G']
};

struct PairLoss {
  at::Tensor loss;    // scalar, fp32 (fp64 for fp64 embeddings)
  at::Tensor masked;  // int64 scalar: (query, candidate) pairs of this rank's queries masked for their text
  at::Tensor guided;  // int64 scalar: those the guide masked besides (0 without a guide)
  // A sparse encoder's (LossConfig::sparse_encoder): fp64 [4], no gradient: the queries'
  // and the documents' mean active entries (this rank's), then the queries' and the
  // documents' FLOPS terms as weighted in the loss; undefined for the other models.
  at::Tensor sparse_terms;
};

// The training loss of queries q [n, D], positives pos [n, D] and hard negatives neg
// ([k, D], or undefined): at each Matryoshka size, the contrastive term (loss.type) plus
// the teacher terms; for a sparse encoder (dot products), loss.sparse's FLOPS terms besides. With `exchange`, the candidates are every rank's. fp32 (fp64 for
// fp64 embeddings) whatever the autocast. Throws ModelError for inputs that do not fit
// (shapes, labels, what the exchange returns, a temperature <= 0, a teacher term without
// teacher scores); std::logic_error for what lib/config refuses (no term, Matryoshka
// sizes beyond D) and for an exchange without all_gather_ids where it is needed.
PairLoss pair_loss(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels,
                   const LossConfig& loss, const CandidateExchange& exchange = {});

// FlagEmbedding's kl_div distillation over each query's scored candidates (groups: rows
// of `candidates`, this rank's [positives; hard negatives]), on cosines, or on dot
// products (`dot_products`: a sparse encoder's). sentence-transformers'
// SparseDistillKLDivLoss at student temperature T and teacher temperature T_t is
// T² × (this − H), H the entropy of the teacher's softmax at T_t: the same gradient × T².
// Scalar. Throws ModelError for bad shapes or temperatures.
at::Tensor distillation_loss(const at::Tensor& q /*[n, D]*/, const at::Tensor& candidates /*[n + k, D]*/,
                             const at::Tensor& groups /*[n, G]*/, const at::Tensor& teacher_scores /*[n, G]*/,
                             double temperature, double teacher_temperature, bool dot_products = false);

// sentence-transformers' MarginMSELoss (on normalized embeddings): the cosine margins of
// each query's positive (groups column 0) over its hard negatives against the teacher's;
// with `dot_products`, the dot-product margins (SparseMarginMSELoss). Scalar. Throws
// ModelError for bad shapes and for groups without a hard negative (G = 1).
at::Tensor margin_mse_loss(const at::Tensor& q /*[n, D]*/, const at::Tensor& candidates /*[n + k, D]*/,
                           const at::Tensor& groups /*[n, G]*/, const at::Tensor& teacher_scores /*[n, G]*/,
                           bool dot_products = false);

// sentence-transformers' FlopsLoss: sum over the vocabulary of (the mean over rows of
// embeddings [n, V])², the rows with `threshold` or fewer non-zero entries counted as zeros
// when threshold > 0. Scalar, in embeddings' dtype (fp32 at least). Throws ModelError for
// embeddings that are not [n, V] with n ≥ 1.
at::Tensor flops_loss(const at::Tensor& embeddings, int64_t threshold);

// sentence-transformers' GISTEmbedLoss mask_false_negatives: bool [n, M], true where the
// guide's cosine of row i and candidate j is above row i's threshold, guide_positive_sim_i
// (or, undefined, its cosine at positive_columns_i) less the margin (`strategy`). A row's
// positive column is never true. No gradient. Throws ModelError for mismatched shapes or a
// non-finite margin.
at::Tensor false_negative_mask(const at::Tensor& guide_rows /*[n, G]*/, const at::Tensor& guide_candidates /*[M, G]*/,
                               const at::Tensor& guide_positive_sim /*[n]*/, GuideMargin strategy, double margin,
                               const at::Tensor& positive_columns = {} /*int64 [n]*/);

}  // namespace ddp_embed
