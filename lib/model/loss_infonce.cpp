// infonce: sentence-transformers 6's MultipleNegativesRankingLoss with its directions,
// partition_mode and hardness_* (scale = 1 / temperature); splade's contrastive term is
// the same on dot products instead of cosines (SparseMultipleNegativesRankingLoss). Each direction is a block of
// logits, a row for each of this rank's queries i (P(i) its positive):
//   query_to_doc    cos(q_i, c_j) over every candidate j (it holds the positive)
//   query_to_query  cos(q_i, q_j) over every rank's queries, q_i itself left out
//   doc_to_query    cos(P(i), q_j) over every rank's queries
//   doc_to_doc      cos(P(i), c_j) over every candidate but query i's own
// divided by the temperature; the loss is the mean over i of log Z_i - the query_to_doc
// logit of P(i).
#include <algorithm>

#include "compat/torch_compat.h"
#include "model/loss_parts.h"

namespace ddp_embed::loss_parts {
namespace {

bool has_direction(const LossConfig& loss, LossDirection d) {
  return std::find(loss.directions.begin(), loss.directions.end(), d) != loss.directions.end();
}

// Each local candidate's query (0..n-1): the labels', or the layout they default to, the
// positives, then k / n hard negatives for each query in turn.
at::Tensor local_owners(const CandidateLabels& labels, int64_t n, int64_t rows, const at::Device& device) {
  if (labels.owners.defined()) {
    if (labels.owners.dim() != 1 || labels.owners.size(0) != rows || labels.owners.scalar_type() != at::kLong)
      throw ModelError("pair_loss: candidate owners " + sizes_text(labels.owners) + " for " + std::to_string(rows) +
                       " candidates (int64 needed)");
    return labels.owners;
  }
  const int64_t k = rows - n;
  if (k % n != 0)
    throw ModelError("pair_loss: " + std::to_string(k) + " hard negatives for " + std::to_string(n) +
                     " queries need CandidateLabels::owners");
  const at::Tensor queries = rows_from(0, n, device);
  return k == 0 ? queries : at::cat({queries, queries.repeat_interleave(k / n)});
}

// query_to_doc's hardness: which negatives get strength * their detached cosine.
at::Tensor hardness_weights(const Candidates& c, const at::Tensor& row, const LossConfig& loss) {
  const at::Tensor own = c.owners.unsqueeze(0) == (row + c.query_offset).unsqueeze(1);  // [n, M]
  at::Tensor positive = at::zeros_like(own);
  positive.scatter_(1, (row + c.positive_offset).unsqueeze(1), true);
  at::Tensor hard;
  switch (loss.hardness_mode) {
    case HardnessMode::InBatchNegatives: hard = ~own; break;          // other queries' candidates
    case HardnessMode::HardNegatives: hard = own & ~positive; break;  // its own hard negatives
    case HardnessMode::AllNegatives: hard = ~positive; break;         // every negative
    case HardnessMode::None: break;
  }
  return hard.to(c.rows.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
}

// The embeddings at one Matryoshka size, normalized (splade: as they are, its scores dot
// products of sparse vectors), in the loss's dtype.
struct Normalized {
  at::Tensor q, candidates, positives, queries;
};

Normalized normalized_at(const at::Tensor& q, const Candidates& c, int64_t d, bool dot) {
  const at::ScalarType dtype = loss_dtype(q, c.rows);
  const auto prepared = [&](const at::Tensor& x) {
    const at::Tensor cut = x.narrow(1, 0, d).to(dtype);
    return dot ? cut : normalize_rows(cut);
  };
  Normalized e;
  e.q = prepared(q);
  e.candidates = prepared(c.rows);
  e.positives = e.candidates.narrow(0, c.positive_offset, q.size(0));
  if (c.queries.defined()) e.queries = prepared(c.queries);
  return e;
}

// A block's logits: cos / temperature, + strength * the detached cosine where the
// hardness weights say (after the scaling, as sentence-transformers adds it), -inf where
// masked (exp(-inf) = 0: out of the softmax).
at::Tensor block_logits(const DirectionBlock& b, const Normalized& e, const LossConfig& loss) {
  at::Tensor cos;
  switch (b.direction) {
    case LossDirection::QueryToDoc: cos = at::matmul(e.q, e.candidates.t()); break;
    case LossDirection::QueryToQuery: cos = at::matmul(e.q, e.queries.t()); break;
    case LossDirection::DocToQuery: cos = at::matmul(e.positives, e.queries.t()); break;
    case LossDirection::DocToDoc: cos = at::matmul(e.positives, e.candidates.t()); break;
  }
  at::Tensor logits = cos / loss.temperature;
  if (b.hardness.defined()) logits = logits + loss.hardness_strength * cos.detach() * b.hardness;
  return b.masked.defined() ? logits.masked_fill(b.masked, -kInf) : logits;
}

}  // namespace

void gather_direction_inputs(Candidates& c, const at::Tensor& q, int64_t local_rows, const CandidateLabels& labels,
                             const LossConfig& loss, const CandidateExchange& exchange) {
  const int64_t n = q.size(0);
  const bool gathered = bool(exchange.all_gather);
  c.query_offset = gathered ? exchange.rank * n : 0;  // ranks hold as many queries; the owners are numbered so too
  if (has_direction(loss, LossDirection::QueryToQuery) || has_direction(loss, LossDirection::DocToQuery)) {
    c.queries = gathered ? exchange.all_gather(q, {}) : q;
    if (c.queries.dim() != 2 || c.queries.size(0) < c.query_offset + n)
      throw ModelError("all_gather of " + std::to_string(n) + " queries returned " + sizes_text(c.queries));
  }
  if (!has_direction(loss, LossDirection::DocToDoc) && loss.hardness_mode == HardnessMode::None) return;
  const at::Tensor own = local_owners(labels, n, local_rows, q.device()) + c.query_offset;
  if (!gathered) {
    c.owners = own;
    return;
  }
  if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with directions need all_gather_ids");
  c.owners = exchange.all_gather_ids(own, labels.rank_rows);
  if (c.owners.dim() != 1 || c.owners.size(0) != c.rows.size(0))
    throw ModelError("all_gather_ids of " + std::to_string(local_rows) + " candidate owners returned " +
                     sizes_text(c.owners));
}

// The same-text mask applies to the blocks whose columns are candidates (a candidate with
// P(i)'s text is P(i) again); queries carry no text hash.
std::vector<DirectionBlock> direction_blocks(const Candidates& c, const at::Tensor& same_text, const GuideView* guide,
                                             int64_t n, const LossConfig& loss) {
  const at::Tensor row = rows_from(0, n, c.rows.device());
  const auto either = [](const at::Tensor& a, const at::Tensor& b) { return a.defined() ? (a | b) : b; };
  std::vector<DirectionBlock> blocks;
  for (const LossDirection d : loss.directions) {
    DirectionBlock b{d, {}, {}};
    if (d == LossDirection::QueryToDoc || d == LossDirection::DocToDoc) b.masked = same_text;
    if (d == LossDirection::QueryToQuery) {  // a query is not its own negative
      b.masked = at::zeros({n, c.queries.size(0)}, row.options().dtype(at::kBool));
      b.masked.scatter_(1, (row + c.query_offset).unsqueeze(1), true);
    }
    if (d == LossDirection::DocToDoc)  // nor its positive's own candidates (itself and its hard negatives)
      b.masked = either(b.masked, c.owners.unsqueeze(0) == (row + c.query_offset).unsqueeze(1));
    if (guide) b.masked = either(b.masked, guide_block_mask(d, *guide, c, loss, n));
    blocks.push_back(b);
  }
  if (loss.hardness_mode != HardnessMode::None && loss.hardness_strength > 0)
    blocks.front().hardness = hardness_weights(c, row, loss);
  return blocks;
}

// log Z_i is one softmax's over every block's row i (joint), or the mean of each block's
// own log-denominator (per_direction).
at::Tensor infonce_loss(const std::vector<DirectionBlock>& blocks, const at::Tensor& q, const Candidates& c, int64_t d,
                        const LossConfig& loss) {
  compat::NoAutocast no_autocast;
  const Normalized e = normalized_at(q, c, d, loss.sparse_encoder);
  std::vector<at::Tensor> logits;
  for (const auto& b : blocks) logits.push_back(block_logits(b, e, loss));
  const at::Tensor positives = rows_from(c.positive_offset, q.size(0), q.device()).unsqueeze(1);
  const at::Tensor positive = logits.front().gather(1, positives).squeeze(1);
  at::Tensor log_z;
  if (loss.partition_mode == PartitionMode::Joint) {
    log_z = at::logsumexp(at::cat(logits, 1), 1);
  } else {
    for (const auto& l : logits) log_z = log_z.defined() ? log_z + at::logsumexp(l, 1) : at::logsumexp(l, 1);
    log_z = log_z / double(logits.size());
  }
  return (log_z - positive).mean();
}

}  // namespace ddp_embed::loss_parts
