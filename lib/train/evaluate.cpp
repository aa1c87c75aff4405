#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <spdlog/fmt/fmt.h>

#include "eval/metrics.h"
#include "train/batches.h"
#include "train/rerank_candidates.h"
#include "train/sparse_eval.h"

namespace ddp_embed {
namespace {

// Embeds the sequences `seqs` of `store` in batches, in order.
at::Tensor embed_sequences(SentenceEmbedder& model, const TokenStore& store, const std::vector<int64_t>& seqs,
                           int64_t begin, int64_t end, int64_t batch_size, c10::Device device) {
  std::vector<at::Tensor> parts;
  for (int64_t b = begin; b < end; b += batch_size) {
    std::vector<int64_t> chunk(seqs.begin() + b, seqs.begin() + std::min(end, b + batch_size));
    EncoderInput in = collate(store, chunk);
    in.ids = in.ids.to(device);
    in.mask = in.mask.to(device);
    parts.push_back(model->encode_batch(in).to(at::kFloat).cpu());
  }
  if (parts.empty()) return at::zeros({0, model->embedding_dim()}, at::kFloat);
  return at::cat(parts, 0);
}

// The sequences `seqs` of `store` embedded on every rank, in order: rank r embeds a
// contiguous run of whole chunks of `batch_size`, so every chunk is batched identically at
// any world size, and concatenating the ranks' rows restores the order.
at::Tensor embed_in_order(SentenceEmbedder& model, const TokenStore& store, const std::vector<int64_t>& seqs,
                          ProcessGroup& pg, int64_t batch_size, c10::Device device) {
  const int64_t n = static_cast<int64_t>(seqs.size());
  const int64_t chunks = (n + batch_size - 1) / batch_size;
  const int64_t first_chunk = chunks * pg.rank() / pg.world_size();
  const int64_t last_chunk = chunks * (pg.rank() + 1) / pg.world_size();
  const int64_t begin = std::min(n, first_chunk * batch_size), end = std::min(n, last_chunk * batch_size);
  at::Tensor mine = embed_sequences(model, store, seqs, begin, end, batch_size, device);
  return pg.communicates() ? pg.all_gather_varsize(mine.to(pg.device())).data.cpu() : mine;
}

}  // namespace

std::pair<at::Tensor, at::Tensor> embed_pairs(SentenceEmbedder& model, const PairDataset& data,
                                              ProcessGroup& pg, int64_t batch_size, c10::Device device) {
  std::vector<int64_t> queries, positives;
  for (const auto& p : data.pairs) {
    queries.push_back(p.query);
    positives.push_back(p.pos_begin);
  }
  return {embed_in_order(model, data.tokens, queries, pg, batch_size, device),
          embed_in_order(model, data.tokens, positives, pg, batch_size, device)};
}

namespace {

// The metrics of one embedding of the queries and positives (unit rows, CPU, fp32).
std::map<std::string, double> metrics_of(const at::Tensor& q, const at::Tensor& p, const PairDataset& data,
                                         const std::string& kind) {
  if (kind == "sts") {
    at::Tensor cos = (q * p).sum(1).to(at::kDouble).contiguous();
    std::vector<double> predicted(cos.data_ptr<double>(), cos.data_ptr<double>() + cos.numel());
    std::vector<double> gold;
    for (const auto& pair : data.pairs) gold.push_back(pair.score);
    return sts_metrics(predicted, gold).to_map();
  }
  // Rank each query's positive among all positives, a block of queries at a time so that
  // the similarity matrix never has to exist whole.
  const int64_t n = q.size(0);
  std::vector<int64_t> ranks(static_cast<size_t>(n));
  const int64_t block = 1024;
  for (int64_t b = 0; b < n; b += block) {
    const int64_t rows = std::min(block, n - b);
    at::Tensor sim = at::matmul(q.narrow(0, b, rows), p.t()).contiguous();
    const float* s = sim.data_ptr<float>();
    for (int64_t i = 0; i < rows; ++i) ranks[size_t(b + i)] = pessimistic_rank(s + i * n, n, b + i);
  }
  return retrieval_metrics_from_ranks(ranks).to_map();
}



}  // namespace

std::map<std::string, double> evaluate(SentenceEmbedder& model, const PairDataset& data, ProcessGroup& pg,
                                       int64_t batch_size, c10::Device device, const std::string& task,
                                       const std::vector<int64_t>& sizes) {
  const std::string kind = task.empty() ? (data.has_scores ? "sts" : "retrieval") : task;
  if (kind != "retrieval" && kind != "sts")
    throw std::invalid_argument("unknown evaluation task '" + kind + "' (expected retrieval or sts)");
  if (kind == "sts" && !data.has_scores)
    throw std::invalid_argument("the sts task needs a numeric \"score\" on every pair");

  const auto [q, p] = embed_pairs(model, data, pg, batch_size, device);
  std::map<std::string, double> out = metrics_of(unit_rows(q), unit_rows(p), data, kind);
  // The smaller Matryoshka sizes: the same embeddings, cut and re-normalized.
  for (int64_t d : sizes) {
    if (d >= q.size(1)) continue;  // the whole embedding: the metrics above
    const std::string prefix = fmt::format("d{}/", d);
    for (const auto& [name, value] : metrics_of(unit_rows(q.narrow(1, 0, d)), unit_rows(p.narrow(1, 0, d)), data, kind))
      out[prefix + name] = value;
  }
  return out;
}


// ---- BEIR folders -------------------------------------------------------------------------

std::pair<at::Tensor, at::Tensor> embed_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                             int64_t batch_size, c10::Device device) {
  std::vector<int64_t> queries(static_cast<size_t>(set.num_queries())), corpus(static_cast<size_t>(set.num_docs()));
  std::iota(queries.begin(), queries.end(), int64_t{0});
  std::iota(corpus.begin(), corpus.end(), set.num_queries());
  return {embed_in_order(model, set.tokens, queries, pg, batch_size, device),
          embed_in_order(model, set.tokens, corpus, pg, batch_size, device)};
}

at::Tensor unit_rows(const at::Tensor& x) { return (x / x.norm(2, 1, true).clamp_min(1e-12)).contiguous(); }

void rank_beir_documents(const at::Tensor& q, const at::Tensor& c, const std::vector<std::string>& corpus_ids,
                         int64_t begin, int64_t end, int64_t depth, const RankedQuery& visit) {
  rank_scored_documents(
      [&](int64_t first, int64_t rows) { return at::matmul(q.narrow(0, first, rows), c.t()).contiguous(); },
      c.size(0), corpus_ids, begin, end, depth, visit);
}

void rank_scored_documents(const ScoreBlock& scores, int64_t docs, const std::vector<std::string>& corpus_ids,
                           int64_t begin, int64_t end, int64_t depth, const RankedQuery& visit) {
  // Each corpus document's place among the ids sorted as text: the tie-break.
  std::vector<int64_t> id_rank(corpus_ids.size()), order(corpus_ids.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(),
            [&](int64_t a, int64_t b) { return corpus_ids[size_t(a)] < corpus_ids[size_t(b)]; });
  for (size_t i = 0; i < order.size(); ++i) id_rank[size_t(order[i])] = static_cast<int64_t>(i);

  const int64_t block = 256;
  depth = std::min(depth, docs);
  std::vector<int64_t> top;
  for (int64_t b = begin; b < end; b += block) {
    const int64_t rows = std::min(block, end - b);
    const at::Tensor sim = scores(b, rows);
    for (int64_t i = 0; i < rows; ++i) {
      const float* s = sim.data_ptr<float>() + i * docs;
      auto better = [&](int64_t x, int64_t y) {
        const bool nan_x = std::isnan(s[x]), nan_y = std::isnan(s[y]);
        if (nan_x != nan_y) return nan_y;
        if (!nan_x && s[x] != s[y]) return s[x] > s[y];
        return id_rank[size_t(x)] < id_rank[size_t(y)];
      };
      std::iota(order.begin(), order.end(), int64_t{0});
      std::partial_sort(order.begin(), order.begin() + depth, order.end(), better);
      top.assign(order.begin(), order.begin() + depth);
      visit(b + i, top, s);
    }
  }
}

namespace {

// The metrics of one embedding of the queries and corpus (unit rows): each rank ranks its
// contiguous share of the queries (the sums of ir_query_metrics over its top kIrDepth);
// the sums meet in one all-reduce.
std::map<std::string, double> beir_metrics_of(const at::Tensor& q, const at::Tensor& c, const BeirSet& set,
                                              ProcessGroup& pg) {
  const int64_t n = q.size(0);
  const int64_t begin = n * pg.rank() / pg.world_size(), end = n * (pg.rank() + 1) / pg.world_size();
  std::vector<double> sums(ir_metric_names().size(), 0.0);
  rank_beir_documents(q, c, set.corpus_ids, begin, end, kIrDepth,
                      [&](int64_t query, const std::vector<int64_t>& top, const float*) {
                        const std::vector<int64_t>& relevant = set.relevant[size_t(query)];
                        std::vector<char> relevant_at(top.size());
                        for (size_t r = 0; r < top.size(); ++r)
                          relevant_at[r] = std::binary_search(relevant.begin(), relevant.end(), top[r]);
                        const std::vector<double> m = ir_query_metrics(relevant_at, static_cast<int64_t>(relevant.size()));
                        for (size_t k = 0; k < m.size(); ++k) sums[k] += m[k];
                      });
  return mean_ir_metrics(std::move(sums), n, pg);
}

}  // namespace

std::map<std::string, double> mean_ir_metrics(std::vector<double> sums, int64_t queries, ProcessGroup& pg) {
  if (pg.communicates()) {
    at::Tensor t = at::tensor(sums, at::kDouble).to(pg.device());
    pg.allreduce_sum_(t);
    t = t.cpu().contiguous();
    sums.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  std::map<std::string, double> out;
  for (size_t k = 0; k < sums.size(); ++k) out[ir_metric_names()[k]] = sums[k] / static_cast<double>(queries);
  return out;
}

std::map<std::string, double> beir_metrics(const at::Tensor& queries, const at::Tensor& corpus, const BeirSet& set,
                                           ProcessGroup& pg, const std::vector<int64_t>& sizes) {
  std::map<std::string, double> out = beir_metrics_of(unit_rows(queries), unit_rows(corpus), set, pg);
  for (int64_t d : sizes) {
    if (d >= queries.size(1)) continue;  // the whole embedding: the metrics above
    const std::string prefix = fmt::format("d{}/", d);
    for (const auto& [name, value] : beir_metrics_of(unit_rows(queries.narrow(1, 0, d)),
                                                     unit_rows(corpus.narrow(1, 0, d)), set, pg))
      out[prefix + name] = value;
  }
  return out;
}

std::map<std::string, double> evaluate_beir(SentenceEmbedder& model, const BeirSet& set, ProcessGroup& pg,
                                            int64_t batch_size, c10::Device device,
                                            const std::vector<int64_t>& sizes) {
  const auto [q, c] = embed_beir(model, set, pg, batch_size, device);
  return beir_metrics(q, c, set, pg, sizes);
}

// ---- data.eval's sets -----------------------------------------------------------------------

int64_t EvalSet::size() const { return pairs ? pairs->size() : beir ? beir->num_queries() : 0; }

std::map<std::string, double> evaluate_sets(SentenceEmbedder& model, const std::vector<EvalSet>& sets,
                                            ProcessGroup& pg, int64_t batch_size, c10::Device device,
                                            const std::vector<int64_t>& sizes) {
  std::map<std::string, double> out;
  for (const EvalSet& set : sets) {
    const auto metrics = set.rerank ? evaluate_reranking(model, *set.beir, *set.rerank, pg, batch_size, device)
                         : set.beir && model->is_sparse() ? evaluate_sparse_beir(model, *set.beir, pg, batch_size, device)
                         : set.beir ? evaluate_beir(model, *set.beir, pg, batch_size, device, sizes)
                                    : evaluate(model, *set.pairs, pg, batch_size, device, "", sizes);
    for (const auto& [name, value] : metrics) out[set.name.empty() ? name : set.name + "/" + name] = value;
  }
  return out;
}

}  // namespace ddp_embed
