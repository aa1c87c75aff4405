// pair_loss, read top-down: the inputs checked; the candidates gathered, masked and cut
// into infonce's blocks once a micro-batch; then each Matryoshka size's terms. The terms
// themselves live in loss_infonce.cpp, loss_sigmoid.cpp and loss_teacher.cpp
// (loss_parts.h lists the files).
#include "model/loss.h"

#include <cmath>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "model/loss_parts.h"

namespace ddp_embed {
namespace {

using namespace loss_parts;

void check_inputs(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels,
                  const LossConfig& loss) {
  if (q.dim() != 2 || pos.dim() != 2 || q.sizes() != pos.sizes() || q.size(0) == 0)
    throw ModelError("pair_loss needs queries and positives of one [n, D] shape, got " + sizes_text(q) + " and " +
                     sizes_text(pos));
  if (neg.defined() && (neg.dim() != 2 || neg.size(1) != q.size(1)))
    throw ModelError("pair_loss: hard negatives " + sizes_text(neg) + " for queries " + sizes_text(q));
  const int64_t rows = pos.size(0) + (neg.defined() ? neg.size(0) : 0);
  if (labels.hashes.defined() && (labels.hashes.dim() != 1 || labels.hashes.size(0) != rows))
    throw ModelError("pair_loss: text hashes " + sizes_text(labels.hashes) + " for " + std::to_string(rows) +
                     " candidates");
  if (!(loss.temperature > 0) || !std::isfinite(loss.temperature))
    throw ModelError("loss.temperature must be positive, not " + std::to_string(loss.temperature));
  const bool teacher = loss.distill.weight > 0 || margin_mse_weight(loss) > 0;
  if (teacher && !labels.teacher_scores.defined())
    throw ModelError(teacher_scores_key(loss) + " is set but the batch carries no teacher scores");
}

// The (size, weight) pairs the loss is summed over: loss.matryoshka_*, or the whole
// embedding once. lib/config and the trainee (which knows the embedding size) tell the
// user of bad sizes; here they are a precondition.
std::vector<std::pair<int64_t, double>> matryoshka_sizes(const LossConfig& loss, int64_t dim) {
  const auto& dims = loss.matryoshka_dims;
  const auto& weights = loss.matryoshka_weights;
  if (dims.empty()) return {{dim, 1.0}};
  std::vector<std::pair<int64_t, double>> sizes;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] <= 0 || dims[i] > dim || (!weights.empty() && weights.size() != dims.size()))
      throw std::logic_error("pair_loss: Matryoshka sizes or weights not validated (lib/config, train/trainee.cpp)");
    sizes.emplace_back(dims[i], weights.empty() ? 1.0 : weights[i]);
  }
  return sizes;
}

Candidates gather_candidates(const at::Tensor& local, const CandidateLabels& labels,
                             const CandidateExchange& exchange) {
  Candidates c;
  c.rows = local;
  c.hashes = labels.hashes;
  if (!exchange.all_gather) return c;
  c.rows = exchange.all_gather(local, labels.rank_rows);
  const int64_t m = c.rows.dim() == 2 ? c.rows.size(0) : -1, n = local.size(0);
  // Every rank's block: as rank_rows says, else all of this rank's size.
  std::vector<int64_t> rows = labels.rank_rows;
  if (rows.empty() && m > 0 && m % n == 0) rows.assign(size_t(m / n), n);
  int64_t total = 0;
  for (const int64_t r : rows) total += r;
  if (m < 0 || total != m || exchange.rank < 0 || exchange.rank >= int64_t(rows.size()) ||
      rows[size_t(exchange.rank)] != n)
    throw ModelError("all_gather of " + std::to_string(n) + " candidates returned " + sizes_text(c.rows) +
                     " for rank " + std::to_string(exchange.rank));
  c.starts.clear();
  for (int64_t r = 0, start = 0; r < int64_t(rows.size()); start += rows[size_t(r)], ++r) c.starts.push_back(start);
  c.positive_offset = c.starts[size_t(exchange.rank)];
  if (!labels.hashes.defined()) return c;
  // The mask needs the other ranks' texts too: a duplicate is as likely there as here.
  if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with text hashes need all_gather_ids");
  c.hashes = exchange.all_gather_ids(labels.hashes, labels.rank_rows);
  if (c.hashes.dim() != 1 || c.hashes.size(0) != m)
    throw ModelError("all_gather_ids of " + std::to_string(n) + " text hashes returned " + sizes_text(c.hashes) +
                     ", not [" + std::to_string(m) + "]");
  return c;
}

// bool [n, M]: candidate j has the text of query i's positive and is not that positive.
at::Tensor same_text_mask(const Candidates& c, int64_t n) {
  const at::Tensor own = rows_from(c.positive_offset, n, c.hashes.device());
  at::Tensor masked = c.hashes.index_select(0, own).unsqueeze(1) == c.hashes.unsqueeze(0);
  return masked.scatter_(1, own.unsqueeze(1), false);
}

}  // namespace

at::Tensor loss_parts::same_text_pairs_everywhere(const Candidates& c, int64_t n) {
  // Every rank's positives are known here (rank r's at rows starts[r]..). Their copies
  // are counted by binary search in the sorted hashes: unique would copy its output's
  // size to the host, a device sync each micro-batch.
  std::vector<at::Tensor> blocks;
  for (const int64_t start : c.starts) blocks.push_back(c.hashes.narrow(0, start, n));
  const at::Tensor positives = at::cat(blocks);
  const at::Tensor sorted = std::get<0>(c.hashes.sort());
  const at::Tensor copies = at::searchsorted(sorted, positives, /*out_int32=*/false, /*right=*/true) -
                            at::searchsorted(sorted, positives);
  return (copies - 1).sum();
}

namespace {

// The contrastive term's inputs: the same at every Matryoshka size, so built once.
struct Contrastive {
  Candidates candidates;
  std::vector<DirectionBlock> blocks;  // infonce
  at::Tensor masked, divisor;          // pairwise_sigmoid: the pairs left out, its mean's divisor
};

Contrastive contrastive_inputs(const at::Tensor& q, const at::Tensor& local, const CandidateLabels& labels,
                               const LossConfig& loss, const CandidateExchange& exchange, PairLoss& out) {
  const int64_t n = q.size(0);
  Contrastive c;
  c.candidates = gather_candidates(local, labels, exchange);
  at::Tensor same;
  if (c.candidates.hashes.defined()) {
    same = same_text_mask(c.candidates, n);
    out.masked = same.sum();
  }
  GuideView guide;
  if (labels.guide_queries.defined()) {  // loss.guide: the guide's false negatives besides
    guide = guide_view(labels, c.candidates, loss, exchange, n);
    out.guided = (same.defined() ? guide.query_to_doc & ~same : guide.query_to_doc).sum();
  }
  if (uses_infonce(loss)) {
    gather_direction_inputs(c.candidates, q, local.size(0), labels, loss, exchange);
    c.blocks = direction_blocks(c.candidates, same, guide.candidates.defined() ? &guide : nullptr, n, loss);
    return c;
  }
  if (c.candidates.rows.size(0) < 2) throw ModelError("pairwise_sigmoid needs at least one negative (2 candidates)");
  const at::Tensor& guided = guide.query_to_doc;
  c.masked = same.defined() && guided.defined() ? (same | guided) : same.defined() ? same : guided;
  c.divisor = sigmoid_divisor(c.candidates, c.masked, guided.defined(), n, exchange);
  return c;
}

}  // namespace

PairLoss pair_loss(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels,
                   const LossConfig& loss, const CandidateExchange& exchange) {
  check_inputs(q, pos, neg, labels, loss);
  const bool contrastive = loss.type != LossType::None && loss.type != LossType::MarginMse;
  const double distill = loss.distill.weight, margin = margin_mse_weight(loss);
  if (!contrastive && !(distill > 0) && !(margin > 0))
    throw std::logic_error("pair_loss: no term (lib/config refuses loss.type none alone)");
  const auto sizes = matryoshka_sizes(loss, q.size(1));
  const at::Tensor local = neg.defined() ? at::cat({pos, neg}) : pos;

  PairLoss out;
  out.masked = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(q.device()));
  out.guided = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(q.device()));
  Contrastive c;
  if (contrastive) c = contrastive_inputs(q, local, labels, loss, exchange, out);
  // Each size cuts the embeddings to their first d values; the cosines re-normalize the
  // cut (sentence-transformers' MatryoshkaLoss does the same).
  for (const auto& [d, weight] : sizes) {
    std::vector<at::Tensor> terms;
    if (uses_infonce(loss)) terms.push_back(infonce_loss(c.blocks, q, c.candidates, d, loss));
    if (loss.type == LossType::PairwiseSigmoid)
      terms.push_back(pairwise_sigmoid_loss(q.narrow(1, 0, d), c.candidates.rows.narrow(1, 0, d),
                                            c.candidates.positive_offset, loss.temperature, c.masked, c.divisor));
    if (distill > 0)
      terms.push_back(distill * distillation_loss(q.narrow(1, 0, d), local.narrow(1, 0, d), labels.groups,
                                                  labels.teacher_scores, loss.temperature, loss.distill.temperature,
                                                  loss.sparse_encoder));
    if (margin > 0)
      terms.push_back(margin * margin_mse_loss(q.narrow(1, 0, d), local.narrow(1, 0, d), labels.groups,
                                               labels.teacher_scores, loss.sparse_encoder));
    at::Tensor term = terms.front();
    for (size_t i = 1; i < terms.size(); ++i) term = term + terms[i];
    out.loss = out.loss.defined() ? out.loss + weight * term : weight * term;
  }
  // SpladeLoss's FLOPS terms, around whichever terms a sparse encoder trains on, over the
  // documents of the contrastive term's candidates, else this rank's own: every rank's with
  // cross-rank negatives (the global batch's terms, as one process computes them).
  if (loss.sparse_encoder) {
    const at::Tensor documents = contrastive          ? c.candidates.rows
                                 : exchange.all_gather ? exchange.all_gather(local, labels.rank_rows)
                                                       : local;
    out.loss = out.loss + sparse_regularizers(q, local, documents, loss, exchange, out.sparse_terms);
  }
  return out;
}

std::string loss_parts::sizes_text(const at::Tensor& t) {
  if (!t.defined()) return "(none)";
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

}  // namespace ddp_embed
