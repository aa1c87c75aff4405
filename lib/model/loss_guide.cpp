// Guided negatives (loss.guide; sentence-transformers' GISTEmbedLoss): a frozen guide's
// embeddings tell which candidates are as close to a query as its positive, and those
// leave its negatives. The guide's embeddings are gathered as the candidates are and
// never cut to a Matryoshka size.
#include <algorithm>
#include <cmath>

#include "compat/torch_compat.h"
#include "model/loss_parts.h"

namespace ddp_embed {

at::Tensor false_negative_mask(const at::Tensor& guide_rows, const at::Tensor& guide_candidates,
                               const at::Tensor& guide_positive_sim, GuideMargin strategy, double margin,
                               const at::Tensor& positive_columns) {
  using loss_parts::sizes_text;
  if (guide_rows.dim() != 2 || guide_candidates.dim() != 2 || guide_rows.size(1) != guide_candidates.size(1))
    throw ModelError("false_negative_mask needs guide rows [n, G] and candidates [M, G], got " +
                     sizes_text(guide_rows) + " and " + sizes_text(guide_candidates));
  const int64_t n = guide_rows.size(0);
  if (positive_columns.defined() && (positive_columns.dim() != 1 || positive_columns.size(0) != n))
    throw ModelError("false_negative_mask: positive columns " + sizes_text(positive_columns) + " for " +
                     std::to_string(n) + " rows");
  if (!guide_positive_sim.defined() && !positive_columns.defined())
    throw ModelError("false_negative_mask needs the positives' similarities or their columns");
  if (guide_positive_sim.defined() && (guide_positive_sim.dim() != 1 || guide_positive_sim.size(0) != n))
    throw ModelError("false_negative_mask: positive similarities " + sizes_text(guide_positive_sim) + " for " +
                     std::to_string(n) + " rows");
  if (!std::isfinite(margin)) throw ModelError("loss.guide.margin must be finite");

  at::NoGradGuard no_grad;
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_parts::loss_dtype(guide_rows, guide_candidates);
  const at::Tensor g = at::matmul(loss_parts::normalize_rows(guide_rows.detach().to(dtype)),
                                  loss_parts::normalize_rows(guide_candidates.detach().to(dtype)).t());  // [n, M]
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

namespace loss_parts {

GuideView guide_view(const CandidateLabels& labels, const Candidates& c, const LossConfig& loss,
                     const CandidateExchange& exchange, int64_t n) {
  const at::Tensor& guide_q = labels.guide_queries;
  if (guide_q.dim() != 2 || guide_q.size(0) != n || !labels.guide_candidates.defined() ||
      labels.guide_candidates.dim() != 2 || labels.guide_candidates.size(1) != guide_q.size(1))
    throw ModelError("pair_loss: guide embeddings " + sizes_text(guide_q) + " and " +
                     sizes_text(labels.guide_candidates) + " for " + std::to_string(n) + " queries");
  at::NoGradGuard no_grad;
  GuideView g;
  g.queries = guide_q.detach();
  // The guide's candidates exactly as the model's: every rank's block in rank order.
  g.candidates = exchange.all_gather ? exchange.all_gather(labels.guide_candidates.detach(), labels.rank_rows)
                                     : labels.guide_candidates.detach();
  if (g.candidates.dim() != 2 || g.candidates.size(0) != c.rows.size(0))
    throw ModelError("all_gather of the guide's candidates returned " + sizes_text(g.candidates) + " for " +
                     std::to_string(c.rows.size(0)) + " candidates");
  const auto& dirs = loss.directions;
  if (std::find(dirs.begin(), dirs.end(), LossDirection::QueryToQuery) != dirs.end() ||
      std::find(dirs.begin(), dirs.end(), LossDirection::DocToQuery) != dirs.end())
    g.all_queries = exchange.all_gather ? exchange.all_gather(g.queries, {}) : g.queries;
  // Each query's guided similarity to its positive, the threshold of every direction's
  // mask: taken from the very products false_negative_mask compares it with.
  const at::Tensor own = rows_from(c.positive_offset, n, guide_q.device());
  g.query_to_doc = false_negative_mask(g.queries, g.candidates, {}, loss.guide.margin_strategy, loss.guide.margin, own);
  compat::NoAutocast no_autocast;
  const at::ScalarType dtype = loss_dtype(g.queries, g.candidates);
  g.positive_sim = at::matmul(normalize_rows(g.queries.to(dtype)), normalize_rows(g.candidates.to(dtype)).t())
                       .gather(1, own.unsqueeze(1))
                       .squeeze(1);
  return g;
}

// GISTEmbedLoss's mask_false_negatives on the block's own guide similarities, each row's
// threshold its query's guided similarity to its positive; a row's own positive
// (query_to_doc) and own query (doc_to_query) never.
at::Tensor guide_block_mask(LossDirection d, const GuideView& g, const Candidates& c, const LossConfig& loss,
                            int64_t n) {
  const at::Tensor row = rows_from(0, n, g.queries.device());
  const at::Tensor guide_positives = g.candidates.narrow(0, c.positive_offset, n);
  const auto mask = [&](const at::Tensor& rows, const at::Tensor& columns, const at::Tensor& protect) {
    return false_negative_mask(rows, columns, g.positive_sim, loss.guide.margin_strategy, loss.guide.margin, protect);
  };
  switch (d) {
    case LossDirection::QueryToDoc: return g.query_to_doc;
    case LossDirection::QueryToQuery: return mask(g.queries, g.all_queries, {});
    case LossDirection::DocToQuery: return mask(guide_positives, g.all_queries, row + c.query_offset);
    case LossDirection::DocToDoc: return mask(guide_positives, g.candidates, {});
  }
  return {};
}

}  // namespace loss_parts
}  // namespace ddp_embed
