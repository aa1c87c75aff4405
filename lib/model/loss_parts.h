// The pieces pair_loss (loss.cpp) is assembled from: for lib/model/loss*.cpp only.
//   loss.cpp           the candidates gathered, the same-text mask, the assembly
//   loss_infonce.cpp   infonce: the direction blocks and their softmax
//   loss_sigmoid.cpp   pairwise_sigmoid and the divisor of its mean
//   loss_guide.cpp     the guide's false negatives (loss.guide)
//   loss_teacher.cpp   distillation and MarginMSE
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "model/loss.h"
#include "model/model_error.h"

namespace ddp_embed::loss_parts {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x / max(|x|, 1e-12) row by row, as torch.nn.functional.normalize: a zero row stays
// zero, and its cosines are 0, not NaN.
inline at::Tensor normalize_rows(const at::Tensor& x) { return x / x.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12); }

// fp32, or fp64 when both are: cosines over a small temperature and their exponentials
// do not survive half precision.
inline at::ScalarType loss_dtype(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kDouble && b.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// int64 [start, start + n) on `device`: the rows of n consecutive positives or queries.
inline at::Tensor rows_from(int64_t start, int64_t n, const at::Device& device) {
  return at::arange(start, start + n, at::TensorOptions().dtype(at::kLong).device(device));
}

// "[2, 3]": a tensor's shape, for errors.
std::string sizes_text(const at::Tensor& t);

// The candidates every query of this rank is ranked against: its own [positives; hard
// negatives], or every rank's block in rank order (loss.cpp gathers them).
struct Candidates {
  at::Tensor rows;                 // [M, D]
  at::Tensor hashes;               // int64 [M], or undefined
  int64_t positive_offset = 0;     // where this rank's positives start
  std::vector<int64_t> starts{0};  // every rank's first row (its positives come first)
  // infonce's directions and hardness (loss_infonce.cpp gathers them):
  at::Tensor queries;              // [W n, D]: every rank's queries (query_to_query, doc_to_query), or undefined
  int64_t query_offset = 0;        // where this rank's queries start among them (rank * n)
  at::Tensor owners;               // int64 [M]: each row's query among every rank's (rank r's i: r n + i), or undefined
};

// The (query, candidate) pairs the same-text mask leaves out on every rank: each positive
// whose text c candidates carry masks c - 1 of them. An int64 scalar, without a host sync.
at::Tensor same_text_pairs_everywhere(const Candidates& c, int64_t n);

// ---- the guide (loss_guide.cpp) -----------------------------------------------------------

// The guide's embeddings as the direction blocks read them, without gradient.
struct GuideView {
  at::Tensor queries;       // [n, G]: this rank's
  at::Tensor all_queries;   // [W n, G]: every rank's (query_to_query, doc_to_query), or undefined
  at::Tensor candidates;    // [M, G]: in Candidates::rows' order
  at::Tensor positive_sim;  // [n]: the guide's cosine of each query and its positive
  at::Tensor query_to_doc;  // bool [n, M]: the candidates the guide masks out of each query's negatives
};

// Gathers the guide's embeddings as the candidates (and the directions' queries) are.
GuideView guide_view(const CandidateLabels& labels, const Candidates& c, const LossConfig& loss,
                     const CandidateExchange& exchange, int64_t n);

// The guide's false negatives in one direction's block [n, M_dir].
at::Tensor guide_block_mask(LossDirection d, const GuideView& g, const Candidates& c, const LossConfig& loss,
                            int64_t n);

// ---- infonce (loss_infonce.cpp) -----------------------------------------------------------

// One direction's block of logits [n, M_dir], a row for each of this rank's queries:
// what leaves its softmax and what gets the hardness penalty. Built once a micro-batch,
// scored at each Matryoshka size.
struct DirectionBlock {
  LossDirection direction;
  at::Tensor masked;    // bool [n, M_dir], or undefined: none
  at::Tensor hardness;  // float [n, M_dir] (0 or 1), or undefined: none
};

// Every rank's queries and each candidate's query, where the directions or the hardness
// modes need them.
void gather_direction_inputs(Candidates& c, const at::Tensor& q, int64_t local_rows, const CandidateLabels& labels,
                             const LossConfig& loss, const CandidateExchange& exchange);

// loss.directions' blocks, in their order; `same_text` bool [n, M] or undefined, `guide`
// null without a guide.
std::vector<DirectionBlock> direction_blocks(const Candidates& c, const at::Tensor& same_text, const GuideView* guide,
                                             int64_t n, const LossConfig& loss);

// infonce at one Matryoshka size: the embeddings cut to their first d values.
at::Tensor infonce_loss(const std::vector<DirectionBlock>& blocks, const at::Tensor& q, const Candidates& c, int64_t d,
                        const LossConfig& loss);

// ---- pairwise_sigmoid (loss_sigmoid.cpp) ----------------------------------------------------

// The divisor of pairwise_sigmoid's mean: the pairs of every rank's queries that
// `masked` (bool [n, M], or undefined) leaves, over the ranks. fp64 scalar.
at::Tensor sigmoid_divisor(const Candidates& c, const at::Tensor& masked, bool guided, int64_t n,
                           const CandidateExchange& exchange);

// pairwise_sigmoid of q [n, d] against candidates [M, d], q's positives at rows
// positive_offset.., the masked pairs left out, the sum divided by `divisor`.
at::Tensor pairwise_sigmoid_loss(const at::Tensor& q, const at::Tensor& candidates, int64_t positive_offset,
                                 double temperature, const at::Tensor& masked, const at::Tensor& divisor);

// ---- splade's regularizers (loss_sparse.cpp) ------------------------------------------------

// SpladeLoss's FLOPS terms, each at loss_at_step's weight: the documents' over `candidates`
// (this rank's positives and hard negatives, or every rank's with cross-rank negatives) and
// the queries' over q (every rank's, gathered through `exchange`, with cross-rank
// negatives). Returns their sum (scalar, in the loss's dtype); `terms` gets PairLoss::
// sparse_terms of q, `local` (this rank's documents) and the two terms.
at::Tensor sparse_regularizers(const at::Tensor& q, const at::Tensor& local, const at::Tensor& candidates,
                               const LossConfig& loss, const CandidateExchange& exchange, at::Tensor& terms);

}  // namespace ddp_embed::loss_parts
