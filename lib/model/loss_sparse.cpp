// A sparse encoder's regularizers: sentence-transformers' SpladeLoss adds to its base
// loss (the contrastive term, loss_infonce.cpp, on dot products, or the teacher terms)
//   document_regularizer_weight × FlopsLoss(the documents: positives and hard negatives)
//   query_regularizer_weight    × FlopsLoss(the queries)
// FLOPS (Paria et al. 2020) is the expected number of multiplications of a sparse dot
// product, relaxed: the sum over vocabulary entries of the squared mean weight. Pushing it
// down empties the entries many texts share, which is what makes an inverted index fast.
#include "compat/torch_compat.h"
#include "model/loss_parts.h"

namespace ddp_embed {

at::Tensor flops_loss(const at::Tensor& embeddings, int64_t threshold) {
  if (!embeddings.defined() || embeddings.dim() != 2 || embeddings.size(0) < 1)
    throw ModelError("flops_loss: embeddings must be [n, V] with n >= 1, not " + loss_parts::sizes_text(embeddings));
  at::Tensor e = embeddings.scalar_type() == at::kDouble ? embeddings : embeddings.to(at::kFloat);
  if (threshold > 0) {
    // FlopsLoss: rows with more than `threshold` active entries keep their values.
    const at::Tensor keep = e.ne(0).sum(1).gt(threshold).to(e.scalar_type());
    e = e * keep.unsqueeze(1);
  }
  return e.mean(0).pow(2).sum();
}

namespace loss_parts {

at::Tensor sparse_regularizers(const at::Tensor& q, const at::Tensor& local, const at::Tensor& candidates,
                               const LossConfig& loss, const CandidateExchange& exchange, at::Tensor& terms) {
  compat::NoAutocast no_autocast;
  const SparseLossConfig& s = loss.sparse;
  const at::Tensor documents = s.document_regularizer_weight * flops_loss(candidates, s.document_regularizer_threshold);
  at::Tensor queries = at::zeros_like(documents);
  if (s.query_regularizer_weight > 0) {
    // With cross-rank negatives the documents are every rank's, and so are the queries:
    // the terms are those of the global batch, as one process computes them.
    const at::Tensor all = exchange.all_gather ? exchange.all_gather(q, {}) : q;
    queries = s.query_regularizer_weight * flops_loss(all, s.query_regularizer_threshold);
  }
  const auto active = [](const at::Tensor& x) { return x.detach().ne(0).sum(1).to(at::kDouble).mean(); };
  terms = at::stack({active(q), active(local), queries.detach().to(at::kDouble), documents.detach().to(at::kDouble)});
  return documents + queries;
}

}  // namespace loss_parts
}  // namespace ddp_embed
