#include "train/evaluate.h"

#include <algorithm>
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

}  // namespace

std::pair<at::Tensor, at::Tensor> embed_pairs(SentenceEmbedder& model, const PairDataset& data,
                                              ProcessGroup& pg, int64_t batch_size, c10::Device device) {
  std::vector<int64_t> queries, positives;
  for (const auto& p : data.pairs) {
    queries.push_back(p.query);
    positives.push_back(p.pos_begin);
  }
  // Contiguous runs of whole chunks per rank: every chunk is batched identically at any
  // world size, and concatenating the ranks' rows restores dataset order.
  const int64_t n = data.size();
  const int64_t chunks = (n + batch_size - 1) / batch_size;
  const int64_t first_chunk = chunks * pg.rank() / pg.world_size();
  const int64_t last_chunk = chunks * (pg.rank() + 1) / pg.world_size();
  const int64_t begin = std::min(n, first_chunk * batch_size), end = std::min(n, last_chunk * batch_size);

  at::Tensor q = embed_sequences(model, data.tokens, queries, begin, end, batch_size, device);
  at::Tensor p = embed_sequences(model, data.tokens, positives, begin, end, batch_size, device);
  if (pg.communicates()) {
    q = pg.all_gather_varsize(q.to(pg.device())).data.cpu();
    p = pg.all_gather_varsize(p.to(pg.device())).data.cpu();
  }
  return {q, p};
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

}  // namespace ddp_embed
