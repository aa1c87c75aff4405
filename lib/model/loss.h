// The losses computed inside the model's forward (loss.* in docs/config.md), read
// top-down:
//
//   pair_loss           the training loss of a micro-batch of embedded pairs: the
//                       candidates of every rank gathered, the same-text ones masked, then
//                       the contrastive and distillation terms at each Matryoshka size
//   contrastive_loss    each query against every candidate, its positive the right one
//   distillation_loss   a teacher's scores over each query's own scored candidates
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
// start at the sum of the earlier ranks' rows.
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
//   loss = sum over (d, w) in S of  w * ( contrastive_loss(q_d, candidates_d)   (type not None)
//                                        + distill.weight * distillation_loss(q_d, ...) )
//
// candidates = this rank's [positives; hard negatives], or every rank's gathered
// (`exchange`). The mask (labels.hashes) leaves candidate j out of query i's negatives
// when j has the text of i's positive P(i), j != P(i): another pair's positive, or a hard
// negative, with the same normalized text. With a guide (labels.guide_*, loss.guide), the
// guide's candidate embeddings are gathered as the candidates are and
// false_negative_mask() is OR-ed into that mask, the same at every Matryoshka size (the
// guide's embeddings are never cut). pairwise_sigmoid's mean is over the pairs
// that remain among every rank's queries (so that W ranks train what one process would
// on the same global batch). `loss` is as lib/config validated it, and its Matryoshka
// sizes at most D (the trainee checks them against the model); a caller that breaks that
// gets std::logic_error. Throws std::invalid_argument for distillation without teacher
// scores and for bad shapes.
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
