#include "train/evaluate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <spdlog/fmt/fmt.h>

#include "eval/metrics.h"
#include "train/batches.h"

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

at::Tensor unit_rows(const at::Tensor& x) { return (x / x.norm(2, 1, true).clamp_min(1e-12)).contiguous(); }

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

namespace {

// Each corpus document's place among the ids sorted as text: the tie-break.
std::vector<int64_t> id_ranks(const std::vector<std::string>& ids) {
  std::vector<int64_t> order(ids.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[size_t(a)] < ids[size_t(b)]; });
  std::vector<int64_t> rank(ids.size());
  for (size_t i = 0; i < order.size(); ++i) rank[size_t(order[i])] = static_cast<int64_t>(i);
  return rank;
}

// The sums over queries [begin, end) of ir_query_metrics (unit rows, CPU, fp32): each
// query's top kIrDepth documents by score, descending (NaN last), ties by id.
std::vector<double> beir_metric_sums(const at::Tensor& q, const at::Tensor& c, const BeirSet& set,
                                     const std::vector<int64_t>& id_rank, int64_t begin, int64_t end) {
  std::vector<double> sums(ir_metric_names().size(), 0.0);
  const int64_t docs = c.size(0), depth = std::min(kIrDepth, docs), block = 256;
  std::vector<int64_t> order(static_cast<size_t>(docs));
  for (int64_t b = begin; b < end; b += block) {
    const int64_t rows = std::min(block, end - b);
    const at::Tensor sim = at::matmul(q.narrow(0, b, rows), c.t()).contiguous();
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
      const std::vector<int64_t>& relevant = set.relevant[size_t(b + i)];
      std::vector<char> relevant_at(static_cast<size_t>(depth));
      for (int64_t r = 0; r < depth; ++r)
        relevant_at[size_t(r)] = std::binary_search(relevant.begin(), relevant.end(), order[size_t(r)]);
      const std::vector<double> m = ir_query_metrics(relevant_at, static_cast<int64_t>(relevant.size()));
      for (size_t k = 0; k < m.size(); ++k) sums[k] += m[k];
    }
  }
  return sums;
}

// The metrics of one embedding of the queries and corpus (unit rows): each rank ranks its
// contiguous share of the queries; the sums meet in one all-reduce.
std::map<std::string, double> beir_metrics_of(const at::Tensor& q, const at::Tensor& c, const BeirSet& set,
                                              const std::vector<int64_t>& id_rank, ProcessGroup& pg) {
  const int64_t n = q.size(0);
  const int64_t begin = n * pg.rank() / pg.world_size(), end = n * (pg.rank() + 1) / pg.world_size();
  std::vector<double> sums = beir_metric_sums(q, c, set, id_rank, begin, end);
  if (pg.communicates()) {
    at::Tensor t = at::tensor(sums, at::kDouble).to(pg.device());
    pg.allreduce_sum_(t);
    t = t.cpu().contiguous();
    sums.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
  }
  std::map<std::string, double> out;
  for (size_t k = 0; k < sums.size(); ++k) out[ir_metric_names()[k]] = sums[k] / static_cast<double>(n);
  return out;
}

}  // namespace

std::map<std::string, double> beir_metrics(const at::Tensor& queries, const at::Tensor& corpus, const BeirSet& set,
                                           ProcessGroup& pg, const std::vector<int64_t>& sizes) {
  const std::vector<int64_t> id_rank = id_ranks(set.corpus_ids);
  std::map<std::string, double> out = beir_metrics_of(unit_rows(queries), unit_rows(corpus), set, id_rank, pg);
  for (int64_t d : sizes) {
    if (d >= queries.size(1)) continue;  // the whole embedding: the metrics above
    const std::string prefix = fmt::format("d{}/", d);
    for (const auto& [name, value] : beir_metrics_of(unit_rows(queries.narrow(1, 0, d)),
                                                     unit_rows(corpus.narrow(1, 0, d)), set, id_rank, pg))
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
    const auto metrics = set.beir ? evaluate_beir(model, *set.beir, pg, batch_size, device, sizes)
                                  : evaluate(model, *set.pairs, pg, batch_size, device, "", sizes);
    for (const auto& [name, value] : metrics) out[set.name.empty() ? name : set.name + "/" + name] = value;
  }
  return out;
}

}  // namespace ddp_embed
