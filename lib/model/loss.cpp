#include "model/loss.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "compat/torch_compat.h"

namespace ddp_embed {
namespace {

// x / max(|x|, eps) row by row, as torch.nn.functional.normalize: a zero row stays zero.
at::Tensor normalize_rows(const at::Tensor& x) { return x / x.norm(2, {1}, /*keepdim=*/true).clamp_min(1e-12); }

std::string sizes_text(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

// fp32 (or fp64 when every input is) whatever autocast would do: similarities divided by
// a small temperature and their exponentials do not survive half precision.
at::ScalarType loss_dtype(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == at::kDouble && b.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

// ---- pair_loss's parts --------------------------------------------------------------------

// The (size, weight) pairs the loss is summed over: loss.matryoshka_*, or the whole
// embedding once. The sizes and weights are the user's to get right, and lib/config and
// the trainee tell them so (train/trainee.cpp knows the embedding size); here they are a
// precondition.
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

// The candidates every query of this rank is compared with: its own [positives; hard
// negatives], or every rank's, each rank's block in rank order.
struct Candidates {
  at::Tensor rows;                // [M, D]
  at::Tensor hashes;              // int64 [M], or undefined
  int64_t positive_offset = 0;    // where this rank's positives start
  std::vector<int64_t> starts{0};  // every rank's first row (its positives come first)
  at::Tensor owners;              // int64 [M]: each row's query, among every rank's (rank r's i: r * n + i)
  at::Tensor queries;             // [W * n, D]: every rank's queries (query_to_query, doc_to_query), or undefined
  int64_t query_offset = 0;       // where this rank's queries start among them (rank * n)
};

Candidates gather_candidates(const at::Tensor& local, const at::Tensor& hashes, const std::vector<int64_t>& rank_rows,
                             const CandidateExchange& exchange) {
  Candidates c;
  c.rows = local;
  c.hashes = hashes;
  if (!exchange.all_gather) return c;
  c.rows = exchange.all_gather(local, rank_rows);
  const int64_t m = c.rows.dim() == 2 ? c.rows.size(0) : -1, n = local.size(0);
  // Every rank's block: as rank_rows says, else all of this rank's size.
  std::vector<int64_t> rows = rank_rows;
  if (rows.empty() && m > 0 && m % n == 0) rows.assign(size_t(m / n), n);
  int64_t total = 0;
  for (int64_t r : rows) total += r;
  if (m < 0 || total != m || exchange.rank >= int64_t(rows.size()) || rows[size_t(exchange.rank)] != n)
    throw std::runtime_error("all_gather of " + std::to_string(n) + " candidates returned " + std::to_string(m) +
                             " rows for rank " + std::to_string(exchange.rank));
  c.starts.clear();
  for (int64_t r = 0, start = 0; r < int64_t(rows.size()); start += rows[size_t(r)], ++r) c.starts.push_back(start);
  c.positive_offset = c.starts[size_t(exchange.rank)];
  if (hashes.defined()) {
    // The mask needs the other ranks' texts too: a duplicate is as likely there as here.
    if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with text hashes need all_gather_ids");
    c.hashes = exchange.all_gather_ids(hashes, rank_rows);
    if (c.hashes.dim() != 1 || c.hashes.size(0) != m)
      throw std::runtime_error("all_gather_ids of " + std::to_string(n) + " text hashes returned " +
                               sizes_text(c.hashes) + ", not [" + std::to_string(m) + "]");
  }
  return c;
}

// Which candidates share the text of a query's positive, from the candidates' hashes.
struct SameText {
  at::Tensor masked;  // bool [n, M]: this rank's queries
  at::Tensor pairs;   // pairwise_sigmoid's divisor: the unmasked pairs of every rank's queries / ranks
};

SameText same_text(const Candidates& c, int64_t n, bool count_pairs) {
  const at::Tensor& h = c.hashes;
  const auto longs = at::TensorOptions().dtype(at::kLong).device(h.device());
  const at::Tensor own = at::arange(c.positive_offset, c.positive_offset + n, longs);
  SameText out;
  out.masked = h.index_select(0, own).unsqueeze(1) == h.unsqueeze(0);
  out.masked.scatter_(1, own.unsqueeze(1), false);  // the positive itself stays
  if (!count_pairs) return out;
  // pairwise_sigmoid's mean runs over the unmasked pairs of the whole exchange: with W
  // ranks each rank's share of the loss is its sum divided by (that count / W), so that
  // the mean over ranks, and the averaged gradient, are those of one process holding
  // every rank's queries. Every rank's positives are known here (rank r's at rows
  // starts[r] + i); a positive whose text appears c times among the candidates masks
  // c - 1 of them.
  const int64_t m = h.size(0), ranks = int64_t(c.starts.size());
  at::Tensor counts, inverse;
  std::tie(std::ignore, inverse, counts) = at::_unique2(h, /*sorted=*/true, /*return_inverse=*/true,
                                                        /*return_counts=*/true);
  const at::Tensor copies = counts.index_select(0, inverse.reshape({-1}));  // [M]: of each candidate's text
  const at::Tensor positives = at::tensor(c.starts, at::kLong).to(h.device()).unsqueeze(1) +
                               at::arange(n, longs).unsqueeze(0);  // [W, n]
  const at::Tensor masked_everywhere = (copies.index_select(0, positives.reshape({-1})) - 1).sum();
  out.pairs = (double(ranks * n * (m - 1)) - masked_everywhere.to(at::kDouble)) / double(ranks);
  return out;
}

// Each local candidate's query (0..n-1), from the labels or, without them, from the layout
// they default to: the positives, then k / n hard negatives for each query in turn.
at::Tensor local_owners(const CandidateLabels& labels, int64_t n, int64_t rows, const at::Device& device) {
  if (labels.owners.defined()) {
    if (labels.owners.dim() != 1 || labels.owners.size(0) != rows)
      throw std::invalid_argument("pair_loss: candidate owners " + sizes_text(labels.owners) + " for " +
                                  std::to_string(rows) + " candidates");
    return labels.owners.to(device, at::kLong);
  }
  const int64_t k = rows - n;
  if (k % n != 0)
    throw std::invalid_argument("pair_loss: " + std::to_string(k) + " hard negatives for " + std::to_string(n) +
                                " queries need CandidateLabels::owners");
  const auto longs = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor queries = at::arange(n, longs);
  return k == 0 ? queries : at::cat({queries, queries.repeat_interleave(k / n)});
}

// What the directions and hardness modes need beyond the candidates: every rank's
// queries (ranks hold as many) and each candidate's query among them (rank r's query i
// is r * n + i).
void gather_directions_inputs(Candidates& c, const at::Tensor& q, int64_t local_rows, const CandidateLabels& labels,
                              const LossConfig& loss, const CandidateExchange& exchange) {
  const auto has = [&](LossDirection d) {
    return std::find(loss.directions.begin(), loss.directions.end(), d) != loss.directions.end();
  };
  const int64_t n = q.size(0);
  const bool gathered = bool(exchange.all_gather);
  c.query_offset = gathered ? exchange.rank * n : 0;  // the owners below are numbered so too
  if (has(LossDirection::QueryToQuery) || has(LossDirection::DocToQuery)) {
    c.queries = gathered ? exchange.all_gather(q, {}) : q;
    if (c.queries.dim() != 2 || c.queries.size(0) < c.query_offset + n)
      throw std::runtime_error("all_gather of " + std::to_string(n) + " queries returned " + sizes_text(c.queries));
  }
  if (!has(LossDirection::DocToDoc) && loss.hardness_mode == HardnessMode::None) return;
  const at::Tensor own = local_owners(labels, n, local_rows, q.device()) + (gathered ? exchange.rank * n : 0);
  if (!gathered) {
    c.owners = own;
    return;
  }
  if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with directions need all_gather_ids");
  c.owners = exchange.all_gather_ids(own, labels.rank_rows);
  if (c.owners.dim() != 1 || c.owners.size(0) != c.rows.size(0))
    throw std::runtime_error("all_gather_ids of " + std::to_string(local_rows) + " candidate owners returned " +
                             sizes_text(c.owners));
}

// Guided negatives (loss.guide): the pairs of this rank's queries that the guide masks
// (false_negative_mask) and that the same-text mask did not, and pairwise_sigmoid's divisor
// with both masks: the unmasked pairs of every rank's queries / ranks, from each rank's count
// of its own (exchanged through all_gather_ids, as the texts' hashes are).
// The guide's embeddings as the direction blocks read them (no gradient).
struct GuideView {
  at::Tensor queries;       // [n, G]: this rank's
  at::Tensor all_queries;   // [W n, G]: every rank's (query_to_query, doc_to_query), or undefined
  at::Tensor candidates;    // [M, G]: every rank's, in Candidates::rows' order
  at::Tensor positive_sim;  // [n]: the guide's cosine of each query and its positive
};

struct Guided {
  at::Tensor masked;  // bool [n, M]: query_to_doc's pairs the guide masks and the same-text mask does not
  at::Tensor pairs;   // undefined: contrastive_loss's local mean is right (one rank)
  GuideView view;
};

Guided guided(const CandidateLabels& labels, const Candidates& c, const SameText& same, const LossConfig& loss,
              const CandidateExchange& exchange, int64_t n) {
  const at::Tensor& guide_q = labels.guide_queries;
  if (guide_q.dim() != 2 || guide_q.size(0) != n || !labels.guide_candidates.defined() ||
      labels.guide_candidates.dim() != 2 || labels.guide_candidates.size(1) != guide_q.size(1))
    throw std::invalid_argument("pair_loss: guide embeddings " + sizes_text(guide_q) + " and " +
                                sizes_text(labels.guide_candidates) + " for " + std::to_string(n) + " queries");
  at::NoGradGuard no_grad;
  // The guide's candidates exactly as the model's: every rank's block in rank order.
  const at::Tensor guide_c = exchange.all_gather ? exchange.all_gather(labels.guide_candidates.detach(), labels.rank_rows)
                                                 : labels.guide_candidates;
  if (guide_c.size(0) != c.rows.size(0))
    throw std::runtime_error("all_gather of the guide's candidates returned " + sizes_text(guide_c) + " for " +
                             std::to_string(c.rows.size(0)) + " candidates");
  const at::Tensor own = at::arange(c.positive_offset, c.positive_offset + n,
                                    at::TensorOptions().dtype(at::kLong).device(guide_q.device()));
  const at::Tensor guide = false_negative_mask(guide_q, guide_c, {}, loss.guide.margin_strategy, loss.guide.margin, own);
  Guided out;
  // Each query's guided similarity to its positive, the threshold of every direction's mask:
  // the same products false_negative_mask takes it from.
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_dtype(guide_q, guide_c);
  out.view = {guide_q.detach(), {}, guide_c.detach(), {}};
  out.view.positive_sim = at::matmul(normalize_rows(guide_q.detach().to(dtype)), normalize_rows(guide_c.detach().to(dtype)).t())
                              .gather(1, own.unsqueeze(1))
                              .squeeze(1);
  out.masked = same.masked.defined() ? guide & ~same.masked : guide;
  if (loss.type != LossType::PairwiseSigmoid || !exchange.all_gather) return out;
  const at::Tensor both = same.masked.defined() ? (guide | same.masked) : guide;
  at::Tensor masked_everywhere = both.sum().reshape({1});
  if (!exchange.all_gather_ids) throw std::logic_error("cross-rank negatives with a guide need all_gather_ids");
  masked_everywhere = exchange.all_gather_ids(masked_everywhere, {}).sum();
  const int64_t ranks = int64_t(c.starts.size()), m = c.rows.size(0);
  out.pairs = (double(ranks * n * (m - 1)) - masked_everywhere.to(at::kDouble)) / double(ranks);
  return out;
}

// Every rank's guide query embeddings, where a direction compares with queries.
void gather_guide_queries(GuideView& view, const LossConfig& loss, const CandidateExchange& exchange) {
  const auto& dirs = loss.directions;
  if (std::find(dirs.begin(), dirs.end(), LossDirection::QueryToQuery) == dirs.end() &&
      std::find(dirs.begin(), dirs.end(), LossDirection::DocToQuery) == dirs.end())
    return;
  at::NoGradGuard no_grad;
  view.all_queries = exchange.all_gather ? exchange.all_gather(view.queries, {}) : view.queries;
}

// ---- infonce's directions ------------------------------------------------------------------

// One direction's block of scores, [n, M_dir], a row for each of this rank's queries: its
// columns (query_to_doc, doc_to_doc: every candidate; query_to_query, doc_to_query: every
// rank's queries), the entries left out of the softmax and those given the hardness
// penalty. Built once a micro-batch; scored at each Matryoshka size.
struct DirectionBlock {
  LossDirection direction;
  at::Tensor masked;    // bool [n, M_dir], or undefined: none
  at::Tensor hardness;  // float [n, M_dir] (0 or 1), or undefined: none
};

// The guide's false negatives in one direction's block (GISTEmbedLoss's mask_false_negatives
// on that block's guide similarities, each row's threshold its query's guided similarity to
// its positive); a row's own positive (query_to_doc) or own query (doc_to_query) never.
at::Tensor guide_block_mask(LossDirection d, const GuideView& g, const Candidates& c, const at::Tensor& row,
                            const LossConfig& loss) {
  const int64_t n = row.size(0);
  const at::Tensor guide_positives = g.candidates.narrow(0, c.positive_offset, n);
  const auto mask = [&](const at::Tensor& rows, const at::Tensor& columns, const at::Tensor& protect) {
    return false_negative_mask(rows, columns, g.positive_sim, loss.guide.margin_strategy, loss.guide.margin, protect);
  };
  switch (d) {
    case LossDirection::QueryToDoc: return mask(g.queries, g.candidates, row + c.positive_offset);
    case LossDirection::QueryToQuery: return mask(g.queries, g.all_queries, {});
    case LossDirection::DocToQuery: return mask(guide_positives, g.all_queries, row + c.query_offset);
    case LossDirection::DocToDoc: return mask(guide_positives, g.candidates, {});
  }
  return {};
}

std::vector<DirectionBlock> direction_blocks(const Candidates& c, const at::Tensor& same_text, const GuideView& guide,
                                             int64_t n, const LossConfig& loss) {
  const auto longs = at::TensorOptions().dtype(at::kLong).device(c.rows.device());
  const at::Tensor row = at::arange(n, longs);
  std::vector<DirectionBlock> blocks;
  for (const LossDirection d : loss.directions) {
    DirectionBlock b{d, {}, {}};
    if (d == LossDirection::QueryToDoc || d == LossDirection::DocToDoc) b.masked = same_text;
    if (d == LossDirection::QueryToQuery) {  // a query is not its own negative
      b.masked = at::zeros({n, c.queries.size(0)}, longs.dtype(at::kBool));
      b.masked.scatter_(1, (row + c.query_offset).unsqueeze(1), true);
    }
    if (d == LossDirection::DocToDoc) {  // nor its own positive's, nor its hard negatives
      const at::Tensor own = c.owners.unsqueeze(0) == (row + c.query_offset).unsqueeze(1);
      b.masked = b.masked.defined() ? (b.masked | own) : own;
    }
    if (guide.candidates.defined()) {
      const at::Tensor guided = guide_block_mask(d, guide, c, row, loss);
      b.masked = b.masked.defined() ? (b.masked | guided) : guided;
    }
    blocks.push_back(b);
  }
  if (loss.hardness_mode == HardnessMode::None || !(loss.hardness_strength > 0)) return blocks;
  // query_to_doc's hardness: which negatives get strength * their detached cosine.
  const at::Tensor own = c.owners.unsqueeze(0) == (row + c.query_offset).unsqueeze(1);  // [n, M]
  at::Tensor positive = at::zeros_like(own);
  positive.scatter_(1, (row + c.positive_offset).unsqueeze(1), true);
  at::Tensor hard;
  switch (loss.hardness_mode) {
    case HardnessMode::InBatchNegatives: hard = ~own; break;               // other queries' candidates
    case HardnessMode::HardNegatives: hard = own & ~positive; break;       // its own hard negatives
    case HardnessMode::AllNegatives: hard = ~positive; break;              // every negative
    case HardnessMode::None: break;
  }
  blocks.front().hardness = hard.to(c.rows.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return blocks;
}

// The embeddings at one Matryoshka size, normalized, in the loss's dtype.
struct Normalized {
  at::Tensor q, candidates, positives, queries;
};

Normalized normalized_at(const at::Tensor& q, const Candidates& c, int64_t d, int64_t n) {
  const at::ScalarType dtype = loss_dtype(q, c.rows);
  Normalized e;
  e.q = normalize_rows(q.narrow(1, 0, d).to(dtype));
  e.candidates = normalize_rows(c.rows.narrow(1, 0, d).to(dtype));
  e.positives = e.candidates.narrow(0, c.positive_offset, n);
  if (c.queries.defined()) e.queries = normalize_rows(c.queries.narrow(1, 0, d).to(dtype));
  return e;
}

// A block's logits: cos / temperature, + strength * the detached cosine where the
// hardness mask says (after the scaling, unscaled, as sentence-transformers adds it), -inf
// where masked.
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

// sentence-transformers 6's MultipleNegativesRankingLoss: the mean over this rank's
// queries of log Z - the positive's logit, Z one softmax's denominator over every block
// (joint) or the mean of each block's log-denominator (per_direction).
at::Tensor infonce_directions(const std::vector<DirectionBlock>& blocks, const Normalized& e, int64_t positive_offset,
                              const LossConfig& loss) {
  std::vector<at::Tensor> logits;
  for (const auto& b : blocks) logits.push_back(block_logits(b, e, loss));
  const int64_t n = e.q.size(0);
  const at::Tensor positives =
      at::arange(positive_offset, positive_offset + n, at::TensorOptions().dtype(at::kLong).device(e.q.device()));
  const at::Tensor positive = logits.front().gather(1, positives.unsqueeze(1)).squeeze(1);
  at::Tensor log_z;
  if (loss.partition_mode == PartitionMode::Joint) {
    log_z = at::logsumexp(at::cat(logits, 1), 1);
  } else {
    for (const auto& l : logits) log_z = log_z.defined() ? log_z + at::logsumexp(l, 1) : at::logsumexp(l, 1);
    log_z = log_z / double(logits.size());
  }
  return (log_z - positive).mean();
}

void check_embeddings(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels) {
  if (q.dim() != 2 || pos.dim() != 2 || q.sizes() != pos.sizes() || q.size(0) == 0)
    throw std::invalid_argument("pair_loss needs queries and positives of one [n, D] shape, got " + sizes_text(q) +
                                " and " + sizes_text(pos));
  if (neg.defined() && (neg.dim() != 2 || neg.size(1) != q.size(1)))
    throw std::invalid_argument("pair_loss: hard negatives " + sizes_text(neg) + " for queries " + sizes_text(q));
  const int64_t rows = pos.size(0) + (neg.defined() ? neg.size(0) : 0);
  if (labels.hashes.defined() && (labels.hashes.dim() != 1 || labels.hashes.size(0) != rows))
    throw std::invalid_argument("pair_loss: text hashes " + sizes_text(labels.hashes) + " for " +
                                std::to_string(rows) + " candidates");
}

}  // namespace

PairLoss pair_loss(const at::Tensor& q, const at::Tensor& pos, const at::Tensor& neg, const CandidateLabels& labels,
                   const LossConfig& loss, const CandidateExchange& exchange) {
  check_embeddings(q, pos, neg, labels);
  const bool contrastive = loss.type != LossType::None && loss.type != LossType::MarginMse;
  const double distill = loss.distill.weight, margin = margin_mse_weight(loss);
  if (!contrastive && !(distill > 0) && !(margin > 0))
    throw std::logic_error("pair_loss: no term (lib/config refuses loss.type none alone)");
  if ((distill > 0 || margin > 0) && !labels.teacher_scores.defined())
    throw std::invalid_argument(teacher_scores_key(loss) + " is set but the batch carries no teacher scores");
  const auto sizes = matryoshka_sizes(loss, q.size(1));
  const int64_t n = q.size(0);
  const at::Tensor local = neg.defined() ? at::cat({pos, neg}) : pos;

  PairLoss out;
  out.masked = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(q.device()));
  out.guided = at::zeros({}, at::TensorOptions().dtype(at::kLong).device(q.device()));
  // The candidates, the masks and the direction blocks are the same at every size:
  // gathered and built once.
  Candidates candidates;
  SameText same;
  Guided guide;
  std::vector<DirectionBlock> blocks;
  if (contrastive) {
    candidates = gather_candidates(local, labels.hashes, labels.rank_rows, exchange);
    if (candidates.hashes.defined()) {
      same = same_text(candidates, n, loss.type == LossType::PairwiseSigmoid);
      out.masked = same.masked.sum();
    }
    if (labels.guide_queries.defined()) {  // loss.guide: the guide's false negatives
      guide = guided(labels, candidates, same, loss, exchange, n);
      out.guided = guide.masked.sum();
    }
    if (loss.type == LossType::Infonce) {
      gather_directions_inputs(candidates, q, local.size(0), labels, loss, exchange);
      if (guide.view.candidates.defined()) gather_guide_queries(guide.view, loss, exchange);
      blocks = direction_blocks(candidates, same.masked, guide.view, n, loss);
    } else if (guide.masked.defined()) {  // pairwise_sigmoid: one mask, its divisor over both
      same.masked = same.masked.defined() ? same.masked | guide.masked : guide.masked;
      same.pairs = guide.pairs;
    }
  }
  // Each size cuts the embeddings to their first d values; the cosines re-normalize the
  // cut (sentence-transformers' MatryoshkaLoss does the same).
  for (const auto& [d, weight] : sizes) {
    std::vector<at::Tensor> terms;
    if (loss.type == LossType::Infonce) {
      compat::NoAutocast no_autocast;
      terms.push_back(infonce_directions(blocks, normalized_at(q, candidates, d, n), candidates.positive_offset, loss));
    } else if (contrastive) {
      terms.push_back(contrastive_loss(q.narrow(1, 0, d), candidates.rows.narrow(1, 0, d), candidates.positive_offset,
                                       loss.type, loss.temperature, same.masked, same.pairs));
    }
    if (distill > 0)
      terms.push_back(distill * distillation_loss(q.narrow(1, 0, d), local.narrow(1, 0, d), labels.groups,
                                                  labels.teacher_scores, loss.temperature, loss.distill.temperature));
    if (margin > 0)
      terms.push_back(margin * margin_mse_loss(q.narrow(1, 0, d), local.narrow(1, 0, d), labels.groups,
                                               labels.teacher_scores));
    at::Tensor term = terms.front();
    for (size_t i = 1; i < terms.size(); ++i) term = term + terms[i];
    out.loss = out.loss.defined() ? out.loss + weight * term : weight * term;
  }
  return out;
}

at::Tensor contrastive_loss(const at::Tensor& q, const at::Tensor& candidates, int64_t positive_offset,
                            LossType type, double temperature, const at::Tensor& masked,
                            const at::Tensor& pairs) {
  if (type == LossType::None) throw std::invalid_argument("contrastive_loss of loss type none (no contrastive term)");
  if (!(temperature > 0) || !std::isfinite(temperature))
    throw std::invalid_argument("loss temperature must be positive, not " + std::to_string(temperature));
  if (q.dim() != 2 || candidates.dim() != 2 || q.size(1) != candidates.size(1))
    throw std::invalid_argument("contrastive_loss needs q [B, D] and candidates [M, D], got " + sizes_text(q) +
                                " and " + sizes_text(candidates));
  const int64_t batch = q.size(0), num_candidates = candidates.size(0);
  if (batch == 0) throw std::invalid_argument("contrastive_loss of an empty batch");
  if (positive_offset < 0 || positive_offset + batch > num_candidates)
    throw std::invalid_argument("positives " + std::to_string(positive_offset) + ".." +
                                std::to_string(positive_offset + batch) + " are not all among the " +
                                std::to_string(num_candidates) + " candidates");
  if (type == LossType::PairwiseSigmoid && num_candidates < 2)
    throw std::invalid_argument("pairwise_sigmoid needs at least one negative (2 candidates)");
  if (masked.defined() && (masked.scalar_type() != at::kBool || masked.dim() != 2 || masked.size(0) != batch ||
                           masked.size(1) != num_candidates))
    throw std::invalid_argument("contrastive_loss: a mask " + sizes_text(masked) + " for " + std::to_string(batch) +
                                " queries and " + std::to_string(num_candidates) + " candidates (bool needed)");

  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_dtype(q, candidates);
  const at::Tensor s =
      at::matmul(normalize_rows(q.to(dtype)), normalize_rows(candidates.to(dtype)).t()) / temperature;  // [B, M]
  const at::Tensor positives =
      at::arange(positive_offset, positive_offset + batch, at::TensorOptions().dtype(at::kLong).device(s.device()))
          .unsqueeze(1);  // [B, 1]

  if (type == LossType::Infonce) {
    // A masked candidate is out of the softmax: exp(-inf) = 0. The positive never is, so
    // every row keeps a finite entry.
    const at::Tensor logits = masked.defined() ? s.masked_fill(masked, -kInf) : s;
    return -at::log_softmax(logits, 1).gather(1, positives).mean();
  }

  // softplus(s_ij - s_iP(i)) = -log sigmoid(d_ij); the positive's own column is
  // softplus(0) and is zeroed out of the sum rather than masked with a huge value, and
  // so are the masked pairs.
  const at::Tensor terms = at::softplus(s - s.gather(1, positives));
  at::Tensor negatives = at::ones_like(s).scatter_(1, positives, 0.0);
  if (masked.defined()) negatives.masked_fill_(masked, 0.0);
  const at::Tensor sum = (terms * negatives).sum();
  if (pairs.defined()) return sum / pairs.to(dtype).clamp_min(1);
  if (masked.defined()) return sum / negatives.sum().clamp_min(1);  // every pair masked: 0, not 0/0
  return sum / static_cast<double>(batch * (num_candidates - 1));
}

namespace {

// The cosine of each query with each of its own scored candidates (groups[i]: rows of
// `candidates`, -1 past the last), [n, G] in the loss dtype: what the teacher-score losses
// compare with the teacher. Checks the shapes both need; `who` names the caller in the error.
at::Tensor own_candidate_cosines(const char* who, const at::Tensor& q, const at::Tensor& candidates,
                                 const at::Tensor& groups, const at::Tensor& teacher_scores) {
  const int64_t n = q.dim() == 2 ? q.size(0) : -1;
  if (n <= 0 || candidates.dim() != 2 || candidates.size(1) != q.size(1) || !groups.defined() || groups.dim() != 2 ||
      groups.size(0) != n || groups.size(1) < 1 || groups.scalar_type() != at::kLong || !teacher_scores.defined() ||
      teacher_scores.sizes() != groups.sizes())
    throw std::invalid_argument(std::string(who) + " needs q [n, D], candidates [m, D], groups int64 [n, G] and "
                                "teacher scores [n, G], got " + sizes_text(q) + ", " + sizes_text(candidates) + ", " +
                                sizes_text(groups) + ", " + sizes_text(teacher_scores));
  const at::ScalarType dtype = loss_dtype(q, candidates);
  const at::Tensor rows = groups.clamp_min(0).reshape({-1});
  const at::Tensor c = normalize_rows(candidates.to(dtype)).index_select(0, rows).view({n, groups.size(1), -1});
  return at::matmul(c, normalize_rows(q.to(dtype)).unsqueeze(2)).squeeze(2);
}

}  // namespace

at::Tensor distillation_loss(const at::Tensor& q, const at::Tensor& candidates, const at::Tensor& groups,
                             const at::Tensor& teacher_scores, double temperature, double teacher_temperature) {
  if (!(temperature > 0) || !(teacher_temperature > 0))
    throw std::invalid_argument("distillation needs positive temperatures");
  compat::NoAutocast no_autocast;
  // The student's scores of each query's own candidates: cos / temperature, [n, G].
  const at::Tensor student = own_candidate_cosines("distillation_loss", q, candidates, groups, teacher_scores) / temperature;
  const at::Tensor valid = groups >= 0;  // [n, G]
  const at::Tensor log_student = at::log_softmax(student.masked_fill(~valid, -kInf), 1);
  const at::Tensor teacher =
      at::softmax((teacher_scores.to(student.scalar_type()) / teacher_temperature).masked_fill(~valid, -kInf), 1)
          .detach();
  // An entry past a query's last candidate has teacher 0 and student -inf: left out
  // (0 * -inf would be NaN).
  const at::Tensor cross = at::where(valid, teacher * log_student, at::zeros({}, student.options()));
  return -cross.sum(1).mean();
}

at::Tensor margin_mse_loss(const at::Tensor& q, const at::Tensor& candidates, const at::Tensor& groups,
                           const at::Tensor& teacher_scores) {
  compat::NoAutocast no_autocast;
  const at::Tensor student = own_candidate_cosines("margin_mse_loss", q, candidates, groups, teacher_scores);  // [n, G]
  const int64_t g = groups.size(1);
  if (g == 1) throw std::invalid_argument("MarginMSE needs hard negatives (data.negatives_per_query > 0)");
  const at::Tensor valid = groups.narrow(1, 1, g - 1) >= 0;  // [n, G - 1]: the hard negatives that exist
  const at::Tensor predicted = student.narrow(1, 0, 1) - student.narrow(1, 1, g - 1);
  const at::Tensor teacher = teacher_scores.to(student.scalar_type()).detach();
  const at::Tensor target = teacher.narrow(1, 0, 1) - teacher.narrow(1, 1, g - 1);
  // A margin past a query's last hard negative is left out (its target is NaN).
  const at::Tensor squared = at::where(valid, (predicted - target.nan_to_num(0)).pow(2), at::zeros({}, student.options()));
  return squared.sum() / valid.sum().clamp_min(1).to(student.scalar_type());
}

at::Tensor false_negative_mask(const at::Tensor& guide_rows, const at::Tensor& guide_candidates,
                               const at::Tensor& guide_positive_sim, GuideMargin strategy, double margin,
                               const at::Tensor& positive_columns) {
  if (guide_rows.dim() != 2 || guide_candidates.dim() != 2 || guide_rows.size(1) != guide_candidates.size(1))
    throw std::invalid_argument("false_negative_mask needs guide rows [n, G] and candidates [M, G], got " +
                                sizes_text(guide_rows) + " and " + sizes_text(guide_candidates));
  const int64_t n = guide_rows.size(0);
  if (positive_columns.defined() && (positive_columns.dim() != 1 || positive_columns.size(0) != n))
    throw std::invalid_argument("false_negative_mask: positive columns " + sizes_text(positive_columns) + " for " +
                                std::to_string(n) + " rows");
  if (!guide_positive_sim.defined() && !positive_columns.defined())
    throw std::invalid_argument("false_negative_mask needs the positives' similarities or their columns");
  if (guide_positive_sim.defined() && (guide_positive_sim.dim() != 1 || guide_positive_sim.size(0) != n))
    throw std::invalid_argument("false_negative_mask: positive similarities " + sizes_text(guide_positive_sim) +
                                " for " + std::to_string(n) + " rows");
  if (!std::isfinite(margin)) throw std::invalid_argument("loss.guide.margin must be finite");

  at::NoGradGuard no_grad;
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_dtype(guide_rows, guide_candidates);
  const at::Tensor g = at::matmul(normalize_rows(guide_rows.detach().to(dtype)),
                                  normalize_rows(guide_candidates.detach().to(dtype)).t());  // [n, M]
  // The positive's similarity from the same matrix when it is among the candidates: a
  // candidate rated exactly as the positive is then not above it by rounding.
  const at::Tensor positive = guide_positive_sim.defined() ? guide_positive_sim.detach().to(dtype).unsqueeze(1)
                                                           : g.gather(1, positive_columns.unsqueeze(1));  // [n, 1]
  const at::Tensor threshold =
      strategy == GuideMargin::Absolute ? positive - margin : positive - positive.abs() * margin;
  at::Tensor mask = g > threshold;
  if (positive_columns.defined()) mask.scatter_(1, positive_columns.unsqueeze(1), false);  // never the positive
  return mask;
}

}  // namespace ddp_embed
