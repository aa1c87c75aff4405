// The losses computed inside the model's forward (loss.* in docs/config.md), read
// top-down:
//
//   pair_loss           the training loss of a micro-batch of embedded pairs: the
//                       candidates of every rank gathered, the same-text ones masked, then
//                       the contrastive and distillation terms at each Matryoshka size
//   contrastive_loss    each query against every candidate, its positive the right one
//                       (pairwise_sigmoid; infonce's directions live in loss.cpp)
//   distillation_loss   a teacher's scores over each query's own scored candidates
//   margin_mse_loss     a teacher's margins (positive - each hard negative), MSE
//
// Everything here sees embeddings only: the model embeds, the data-parallel seam
// (parallel/data_parallel.h) lends the gathers, the batch loader (train/batches.h)
// fills the labels.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>

#include "config/config.h"  // LossConfig, the loss section as the config gives it

namespace ddp_embed {

// Cross-rank negatives: when all_gather is set, the loss compares each query with the
// candidates (positives, then hard negatives) of every rank. all_gather maps this rank's
// [n_r, D] to [sum of n_r, D], the ranks' blocks in rank order, differentiable;
// all_gather_ids does the same for the candidates' int64 text hashes [n_r], without
// gradient. `rows` is every rank's n_r (CandidateLabels::rank_rows: the same list on
// every rank; empty when all are equal) — ranks hold as many positives but may hold
// different numbers of hard negatives (a pair with fewer than negatives_per_query). The
// data-parallel seam provides both (parallel/data_parallel.h). This rank's positives then
// start at the sum of the earlier ranks' rows. loss.directions' query_to_query and
// doc_to_query gather every rank's queries through all_gather too (rows empty: ranks
// hold as many queries), and doc_to_doc and the hardness modes every candidate's query
// (CandidateLabels::owners, made global) through all_gather_ids.
struct CandidateExchange {
  using Gather = std::function<at::Tensor(const at::Tensor&, const std::vector<int64_t>& rows)>;
  Gather all_gather;
  Gather all_gather_ids;
  int64_t rank = 0;
};

// What the loss knows of a micro-batch's candidates besides their embeddings. A
// candidate's row is its place in [positives; hard negatives]: query i's positive is row
// i, the hard negatives follow the n positives.
struct CandidateLabels {
  // int64 [n + k]: each candidate's text hash (data/pairs.h text_hash, its bits). A
  // candidate with the hash of query i's positive is left out of query i's negatives.
  // Undefined: nothing is masked.
  at::Tensor hashes;
  // Distillation. groups, int64 [n, G]: query i's scored candidates, its positive's row
  // (i) then its own hard negatives' rows, -1 after the last (a query with fewer
  // negatives); teacher_scores, float [n, G]: the teacher's score of each (NaN at -1).
  // Undefined: the data has no teacher scores.
  at::Tensor groups;
  at::Tensor teacher_scores;
  // Cross-rank negatives: every rank's candidate rows this micro-batch, in rank order
  // (the batch plan tells every rank every rank's pairs); empty: all equal.
  std::vector<int64_t> rank_rows;
  // int64 [n + k]: the query (0..n-1) each candidate belongs to: i for positive i, and
  // for a hard negative the query it was mined for. doc_to_doc leaves a query's own
  // candidates out of its positive's negatives, and the hardness modes tell in-batch
  // from own hard negatives by it. Undefined: positives own themselves, and hard
  // negatives follow in query order, negatives_per_query each (k / n).
  at::Tensor owners;
  // Guided negatives (loss.guide): the frozen guide's embeddings, without gradient, of
  // the queries [n, G] and of the candidates [n + k, G] (positives, then hard negatives),
  // G the guide's own size (train/guide.h). Undefined: no guide.
  at::Tensor guide_queries;
  at::Tensor guide_candidates;
};

struct PairLoss {
  at::Tensor loss;    // scalar, fp32 (fp64 for fp64 embeddings)
  at::Tensor masked;  // int64 scalar: (query, candidate) pairs of this rank's queries masked for their text
  at::Tensor guided;  // int64 scalar: those the guide masked besides (0 without a guide)
};

// The training loss of embedded queries q [n, D], positives [n, D] and hard negatives
// ([k, D], or undefined), with the config's loss section. With S the Matryoshka sizes and
// weights (the whole embedding, weight 1, when there are none), each embedding cut to its
// first d values:
//
//   loss = sum over (d, w) in S of  w * ( contrastive term                       (pairwise_sigmoid, infonce)
//                                        + distill.weight * distillation_loss(q_d, ...)
//                                        + margin_mse_weight(loss) * margin_mse_loss(q_d, ...) )
//
// infonce is sentence-transformers 6's MultipleNegativesRankingLoss with its
// loss.directions, partition_mode and hardness_* (scale = 1 / temperature). Each
// direction is a block of logits [n, M_dir], a row for each of this rank's queries i,
// with P(i) its positive, g(i) its index among every rank's queries (rank * n + i):
//   query_to_doc    cos(q_i, c_j) over every candidate j (gathered across ranks)
//   query_to_query  cos(q_i, q_j) over every rank's queries, j = g(i) masked
//   doc_to_query    cos(P(i), q_j) over every rank's queries
//   doc_to_doc      cos(P(i), c_j) over every candidate, those of query g(i) masked (its
//                   positive and its own hard negatives: CandidateLabels::owners)
// each divided by the temperature; the hardness modes add strength * cos(q_i, c_j),
// detached and after the scaling, to query_to_doc's in-batch negatives (candidates of
// other queries), own hard negatives, or both. loss = mean over i of log Z_i - the
// query_to_doc logit of P(i), Z_i the softmax denominator over every block's row i
// (joint) or exp of the mean of each block's log-denominator (per_direction). The
// same-text mask below applies to query_to_doc and doc_to_doc (the blocks whose columns
// are candidates: a candidate with P(i)'s text is P(i) again); query_to_query and
// doc_to_query compare queries, which carry no text hash, and are not masked.
//
// A block is built once a micro-batch (loss.cpp's DirectionBlock: its direction, its
// bool mask and its hardness weights) and scored at each Matryoshka size.
//
// Guided negatives (labels.guide_*, loss.guide; GISTEmbedLoss): the guide's embeddings are
// gathered as the candidates (and queries) are, and each block ORs in false_negative_mask()
// on the guide's similarities of its own rows and columns (query_to_doc: the queries and
// candidates; query_to_query: the queries and every rank's queries; doc_to_query: the
// positives and every rank's queries; doc_to_doc: the positives and the candidates), each
// row's threshold its query's guided similarity to its positive, the same at every
// Matryoshka size (the guide's embeddings are never cut); a row's own positive
// (query_to_doc) and own query (doc_to_query) never. GISTEmbedLoss's contrast_anchors and
// contrast_positives are query_to_query and doc_to_doc, on pairs; with hard negatives its
// positive-positive block leaves them out where doc_to_doc takes every rank's (not the
// row's own). PairLoss::guided counts query_to_doc's pairs the guide masks besides the
// same-text ones.
//
// candidates = this rank's [positives; hard negatives], or every rank's gathered
// (`exchange`). The mask (labels.hashes) leaves candidate j out of query i's negatives
// when j has the text of i's positive P(i), j != P(i): another pair's positive, or a hard
// negative, with the same normalized text. pairwise_sigmoid has query_to_doc only; the
// guide's mask is OR-ed into the same-text one there. pairwise_sigmoid's mean is over the pairs
// that remain among every rank's queries (so that W ranks train what one process would
// on the same global batch). `loss` is as lib/config validated it, and its Matryoshka
// sizes at most D (the trainee checks them against the model); a caller that breaks that
// gets std::logic_error. Throws std::invalid_argument for distillation or MarginMSE
// without teacher scores and for bad shapes.
PairLoss pair_loss(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels,
                   const LossConfig& loss, const CandidateExchange& exchange = {});

// Query i's positive is candidates[positive_offset + i]; every other row of
// `candidates` is one of its negatives, unless `masked` (bool [B, M], optional) is set
// at (i, j). This covers
//   in-batch negatives:   candidates = p [B, D], offset 0;
//   cross-rank negatives: candidates = all ranks' p gathered in rank order, offset rank * B;
//   hard negatives:       further rows (after the positives, or after each rank's block).
// With s_ij = cos(q_i, c_j) / temperature, P(i) = positive_offset + i, N(i) = the j !=
// P(i) not masked:
//   PairwiseSigmoid: sum over i and j in N(i) of softplus(s_ij - s_iP(i)), divided by
//                    `pairs` (a scalar tensor; undefined = the number of (i, j in N(i)),
//                    i.e. the mean) (softplus(-d) = -log sigmoid(d), without underflow);
//   Infonce:         mean over i of cross-entropy(softmax over {P(i)} ∪ N(i) of s_i, P(i)).
// P(i) itself is never masked. Cosines use x / max(|x|, 1e-12), so a
// zero vector gives cos 0, not NaN. Everything runs in fp32 (fp64 for fp64 inputs),
// with autocast off, whatever q's dtype. Returns a scalar. Throws std::invalid_argument
// for bad shapes, offsets or temperature, and for LossType::None (no contrastive loss).
at::Tensor contrastive_loss(const at::Tensor& q /*[B, D]*/, const at::Tensor& candidates /*[M, D]*/,
                            int64_t positive_offset, LossType type, double temperature,
                            const at::Tensor& masked = {}, const at::Tensor& pairs = {});

// FlagEmbedding's "kl_div" distillation: with student_ij = cos(q_i, c_groups[i][j]) /
// temperature and teacher_ij = softmax_j(teacher_scores_ij / teacher_temperature), over
// the valid entries of row i (groups >= 0),
//   mean over i of  - sum_j teacher_ij * log_softmax_j(student_i)
// — the cross-entropy of the student's distribution under the teacher's, which is
// KL(teacher || student) plus the teacher's entropy: the same gradient, a value larger
// by that constant. `candidates` are this rank's [positives; hard negatives] rows.
// fp32 (fp64 for fp64 inputs), autocast off. Throws std::invalid_argument for bad shapes.
at::Tensor distillation_loss(const at::Tensor& q /*[n, D]*/, const at::Tensor& candidates /*[n + k, D]*/,
                             const at::Tensor& groups /*[n, G]*/, const at::Tensor& teacher_scores /*[n, G]*/,
                             double temperature, double teacher_temperature);

// sentence-transformers' MarginMSELoss on a model that ends in Normalize (ours do): with
// s_ij = cos(q_i, c_groups[i][j]) (unscaled) and t_ij = teacher_scores[i][j],
//   mean over the (i, j >= 1) with groups[i][j] >= 0 of ((s_i0 - s_ij) - (t_i0 - t_ij))^2
// — the predicted margin of the positive (j = 0) over each hard negative against the
// teacher's. A query with fewer hard negatives than others adds the margins it has: the
// mean is over the margins that exist (sentence-transformers' MSELoss over equal groups is
// the same). fp32 (fp64 for fp64 inputs), autocast off. Throws std::invalid_argument for
// bad shapes and for groups without a hard negative column (G = 1).
at::Tensor margin_mse_loss(const at::Tensor& q /*[n, D]*/, const at::Tensor& candidates /*[n + k, D]*/,
                           const at::Tensor& groups /*[n, G]*/, const at::Tensor& teacher_scores /*[n, G]*/);
// Guided negatives, sentence-transformers' GISTEmbedLoss mask_false_negatives: with
// g_ij = cos(guide_rows_i, guide_candidates_j) (as nn.CosineSimilarity; a zero row gives
// 0) and p_i = guide_positive_sim_i (the guide's cosine of row i and its positive, from
// the same matrix when the positive is among the candidates), entry (i, j) is true —
// candidate j left out of row i's negatives — when
//   absolute:  g_ij > p_i - margin
//   relative:  g_ij > p_i - |p_i| * margin
// `positive_columns` (int64 [n], optional): each row's own positive column, never masked.
// Rows are any direction's anchors (queries) and candidates any block of that direction,
// so the same function serves every direction's block. Runs without gradient, in fp32
// (fp64 for fp64 inputs). Returns bool [n, M] on the inputs' device. Throws
// std::invalid_argument for mismatched shapes or a non-finite margin.
at::Tensor false_negative_mask(const at::Tensor& guide_rows /*[n, G]*/, const at::Tensor& guide_candidates /*[M, G]*/,
                               const at::Tensor& guide_positive_sim /*[n]*/, GuideMargin strategy, double margin,
                               const at::Tensor& positive_columns = {} /*int64 [n]*/);

}  // namespace ddp_embed
