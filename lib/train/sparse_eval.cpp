// A sparse encoder's BEIR evaluation through an inverted index (sparse_eval.h).
#include "train/sparse_eval.h"

#include <algorithm>
#include <numeric>

#include "eval/metrics.h"
#include "train/batches.h"
#include "train/evaluate.h"

namespace ddp_embed {

void SparseRows::append_dense(const at::Tensor& rows) {
  const at::Tensor dense = rows.to(at::kFloat).contiguous();
  vocabulary = dense.size(1);
  const float* p = dense.data_ptr<float>();
  for (int64_t i = 0; i < dense.size(0); ++i) {
    const float* row = p + i * vocabulary;
    for (int64_t j = 0; j < vocabulary; ++j)
      if (row[j] != 0) {
        terms.push_back(static_cast<int32_t>(j));
        weights.push_back(row[j]);
      }
    offsets.push_back(static_cast<int64_t>(terms.size()));
  }
}

namespace {

// A rank's rows as three tensors for the gathers: each row's entry count, the entries, the weights.
struct PackedRows {
  at::Tensor counts, terms, weights;
};

PackedRows pack(const SparseRows& rows) {
  PackedRows p;
  std::vector<int64_t> counts(static_cast<size_t>(rows.rows()));
  for (int64_t i = 0; i < rows.rows(); ++i) counts[size_t(i)] = rows.offsets[size_t(i + 1)] - rows.offsets[size_t(i)];
  p.counts = at::tensor(counts, at::kLong);
  p.terms = at::tensor(std::vector<int64_t>(rows.terms.begin(), rows.terms.end()), at::kLong);
  p.weights = at::tensor(rows.weights, at::kFloat);
  return p;
}

SparseRows unpack(const at::Tensor& counts, const at::Tensor& terms, const at::Tensor& weights, int64_t vocabulary) {
  SparseRows rows;
  rows.vocabulary = vocabulary;
  const at::Tensor c = counts.cpu().contiguous(), t = terms.cpu().contiguous(), w = weights.cpu().contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) rows.offsets.push_back(rows.offsets.back() + c.data_ptr<int64_t>()[i]);
  rows.terms.assign(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
  rows.weights.assign(w.data_ptr<float>(), w.data_ptr<float>() + w.numel());
  return rows;
}

}  // namespace

SparseRows embed_sparse_in_order(SentenceEmbedder& model, const TokenStore& store, const std::vector<int64_t>& seqs,
                                 ProcessGroup& pg, int64_t batch_size, c10::Device device) {
  if (!model->is_sparse()) throw ModelError("embed_sparse_in_order: the model is not a sparse encoder");
  // As the dense evaluation's embed_in_order: rank r a contiguous run of whole batches.
  const int64_t n = static_cast<int64_t>(seqs.size());
  const int64_t chunks = (n + batch_size - 1) / batch_size;
  const int64_t begin = std::min(n, chunks * pg.rank() / pg.world_size() * batch_size);
  const int64_t end = std::min(n, chunks * (pg.rank() + 1) / pg.world_size() * batch_size);
  SparseRows mine;
  mine.vocabulary = model->embedding_dim();
  for (int64_t b = begin; b < end; b += batch_size) {
    std::vector<int64_t> chunk(seqs.begin() + b, seqs.begin() + std::min(end, b + batch_size));
    EncoderInput in = collate(store, chunk);
    in.ids = in.ids.to(device);
    in.mask = in.mask.to(device);
    mine.append_dense(model->encode_batch(in).to(at::kFloat).cpu());
  }
  if (!pg.communicates()) return mine;
  const PackedRows p = pack(mine);
  const at::Tensor counts = pg.all_gather_varsize(p.counts.to(pg.device())).data;
  const at::Tensor terms = pg.all_gather_varsize(p.terms.to(pg.device())).data;
  const at::Tensor weights = pg.all_gather_varsize(p.weights.to(pg.device())).data;
  return unpack(counts, terms, weights, mine.vocabulary);
}

InvertedIndex::InvertedIndex(const SparseRows& corpus) : docs_(corpus.rows()) {
  // Counting sort by entry: documents stay ascending within each entry's postings.
  starts_.assign(static_cast<size_t>(corpus.vocabulary + 1), 0);
  for (int32_t t : corpus.terms) ++starts_[size_t(t) + 1];
  std::partial_sum(starts_.begin(), starts_.end(), starts_.begin());
  std::vector<int64_t> next(starts_.begin(), starts_.end() - 1);
  doc_.resize(corpus.terms.size());
  weight_.resize(corpus.terms.size());
  for (int64_t d = 0; d < docs_; ++d)
    for (int64_t k = corpus.offsets[size_t(d)]; k < corpus.offsets[size_t(d + 1)]; ++k) {
      const int64_t at = next[size_t(corpus.terms[size_t(k)])]++;
      doc_[size_t(at)] = static_cast<int32_t>(d);
      weight_[size_t(at)] = corpus.weights[size_t(k)];
    }
}

at::Tensor InvertedIndex::scores(const SparseRows& queries, int64_t first, int64_t rows) const {
  at::Tensor out = at::empty({rows, docs_}, at::kFloat);
  std::vector<double> sums(static_cast<size_t>(docs_));
  for (int64_t i = 0; i < rows; ++i) {
    std::fill(sums.begin(), sums.end(), 0.0);
    const int64_t q = first + i;
    for (int64_t k = queries.offsets[size_t(q)]; k < queries.offsets[size_t(q + 1)]; ++k) {
      const int64_t term = queries.terms[size_t(k)];
      if (term >= static_cast<int64_t>(starts_.size()) - 1) continue;  // no document uses it
      const double w = queries.weights[size_t(k)];
      for (int64_t p = starts_[size_t(term)]; p < starts_[size_t(term) + 1]; ++p)
        sums[size_t(doc_[size_t(p)])] += w * double(weight_[size_t(p)]);
    }
    float* row = out.data_ptr<float>() + i * docs_;
    for (int64_t d = 0; d < docs_; ++d) row[d] = static_cast<float>(sums[size_t(d)]);
  }
  return out;
}

std::map<std::string, double> sparsity_metrics(const SparseRows& queries, const SparseRows& corpus) {
  std::map<std::string, double> out;
  const int64_t vocabulary = std::max(queries.vocabulary, corpus.vocabulary);
  std::vector<double> q_share(static_cast<size_t>(vocabulary)), d_share(static_cast<size_t>(vocabulary));
  for (int32_t t : queries.terms) q_share[size_t(t)] += 1.0 / double(std::max<int64_t>(1, queries.rows()));
  for (int32_t t : corpus.terms) d_share[size_t(t)] += 1.0 / double(std::max<int64_t>(1, corpus.rows()));
  const auto active = [](const SparseRows& r) { return r.rows() ? double(r.terms.size()) / double(r.rows()) : 0.0; };
  out["query_active_dims"] = active(queries);
  out["corpus_active_dims"] = active(corpus);
  out["query_sparsity_ratio"] = 1.0 - active(queries) / double(vocabulary);
  out["corpus_sparsity_ratio"] = 1.0 - active(corpus) / double(vocabulary);
  double flops = 0;
  for (int64_t j = 0; j < vocabulary; ++j) flops += q_share[size_t(j)] * d_share[size_t(j)];
  out["avg_flops"] = flops;
  return out;
}

std::map<std::string, double> evaluate_sparse_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                                   int64_t batch_size, c10::Device device) {
  std::vector<int64_t> query_seqs(static_cast<size_t>(set.num_queries())), corpus_seqs(static_cast<size_t>(set.num_docs()));
  std::iota(query_seqs.begin(), query_seqs.end(), int64_t{0});
  std::iota(corpus_seqs.begin(), corpus_seqs.end(), set.num_queries());
  const SparseRows queries = embed_sparse_in_order(model, set.tokens, query_seqs, pg, batch_size, device);
  const SparseRows corpus = embed_sparse_in_order(model, set.tokens, corpus_seqs, pg, batch_size, device);
  const InvertedIndex index(corpus);

  const int64_t n = queries.rows();
  const int64_t begin = n * pg.rank() / pg.world_size(), end = n * (pg.rank() + 1) / pg.world_size();
  std::vector<double> sums(ir_metric_names().size(), 0.0);
  rank_scored_documents([&](int64_t first, int64_t rows) { return index.scores(queries, first, rows); },
                        index.docs(), set.corpus_ids, begin, end, kIrDepth,
                        [&](int64_t query, const std::vector<int64_t>& top, const float*) {
                          const std::vector<int64_t>& relevant = set.relevant[size_t(query)];
                          std::vector<char> relevant_at(top.size());
                          for (size_t r = 0; r < top.size(); ++r)
                            relevant_at[r] = std::binary_search(relevant.begin(), relevant.end(), top[r]);
                          const std::vector<double> m = ir_query_metrics(relevant_at, int64_t(relevant.size()));
                          for (size_t k = 0; k < m.size(); ++k) sums[k] += m[k];
                        });
  std::map<std::string, double> out = mean_ir_metrics(std::move(sums), n, pg);
  for (const auto& [name, value] : sparsity_metrics(queries, corpus)) out[name] = value;
  return out;
}

}  // namespace ddp_embed
