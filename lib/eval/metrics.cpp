#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace ddp_embed {

int64_t pessimistic_rank(const float* scores, int64_t num_docs, int64_t relevant) {
  if (relevant < 0 || relevant >= num_docs)
    throw std::invalid_argument("pessimistic_rank: relevant document out of range");
  const float target = scores[relevant];
  if (std::isnan(target)) return num_docs;
  int64_t at_or_above = 0;
  for (int64_t j = 0; j < num_docs; ++j) at_or_above += (scores[j] >= target) ? 1 : 0;
  return at_or_above;  // counts the relevant document itself, hence 1-based
}

MetricMap RetrievalMetrics::to_map() const {
  return {{"recall@1", recall_at_1},   {"recall@5", recall_at_5}, {"recall@10", recall_at_10},
          {"mrr@10", mrr_at_10},       {"ndcg@10", ndcg_at_10}};
}

RetrievalMetrics retrieval_metrics_from_ranks(const std::vector<int64_t>& ranks) {
  RetrievalMetrics m;
  m.num_queries = static_cast<int64_t>(ranks.size());
  if (ranks.empty()) return m;
  for (const int64_t rank : ranks) {
    if (rank < 1) throw std::invalid_argument("retrieval_metrics_from_ranks: rank < 1");
    m.recall_at_1 += rank <= 1;
    m.recall_at_5 += rank <= 5;
    m.recall_at_10 += rank <= 10;
    if (rank <= 10) {
      m.mrr_at_10 += 1.0 / static_cast<double>(rank);
      // The ideal ranking puts the single relevant document first: IDCG = 1.
      m.ndcg_at_10 += 1.0 / std::log2(static_cast<double>(rank) + 1.0);
    }
  }
  const double n = static_cast<double>(ranks.size());
  m.recall_at_1 /= n;
  m.recall_at_5 /= n;
  m.recall_at_10 /= n;
  m.mrr_at_10 /= n;
  m.ndcg_at_10 /= n;
  return m;
}

RetrievalMetrics retrieval_metrics(const float* similarity, int64_t num_queries,
                                   int64_t num_docs, const std::vector<int64_t>& relevant_doc) {
  if (num_queries < 0 || num_docs < 0)
    throw std::invalid_argument("retrieval_metrics: negative size");
  if (!relevant_doc.empty() && static_cast<int64_t>(relevant_doc.size()) != num_queries)
    throw std::invalid_argument("retrieval_metrics: one relevant document per query needed");
  if (relevant_doc.empty() && num_docs < num_queries)
    throw std::invalid_argument("retrieval_metrics: fewer documents than queries");
  std::vector<int64_t> ranks(static_cast<size_t>(num_queries));
  for (int64_t i = 0; i < num_queries; ++i) {
    const int64_t relevant = relevant_doc.empty() ? i : relevant_doc[static_cast<size_t>(i)];
    ranks[static_cast<size_t>(i)] = pessimistic_rank(similarity + i * num_docs, num_docs, relevant);
  }
  return retrieval_metrics_from_ranks(ranks);
}

namespace {

constexpr int64_t kCuts[] = {1, 3, 5, 10};
constexpr int64_t kMrrCut = 10, kNdcgCut = 10, kMapCut = kIrDepth;

// Sum of gain / log2(rank + 1) over the first k ranks (1-based), in order.
double dcg_at(const std::vector<char>& gains, int64_t k) {
  double dcg = 0;
  for (int64_t i = 0; i < std::min<int64_t>(k, static_cast<int64_t>(gains.size())); ++i)
    dcg += gains[static_cast<size_t>(i)] / std::log2(static_cast<double>(i) + 2.0);
  return dcg;
}

}  // namespace

const std::vector<std::string>& ir_metric_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const char* metric : {"accuracy", "precision", "recall"})
      for (int64_t k : kCuts) out.push_back(std::string(metric) + "@" + std::to_string(k));
    out.push_back("mrr@" + std::to_string(kMrrCut));
    out.push_back("ndcg@" + std::to_string(kNdcgCut));
    out.push_back("map@" + std::to_string(kMapCut));
    return out;
  }();
  return names;
}

std::vector<double> ir_query_metrics(const std::vector<char>& relevant_at, int64_t num_relevant) {
  if (num_relevant < 1) throw std::invalid_argument("ir_query_metrics: a query needs a relevant document");
  const int64_t ranked = static_cast<int64_t>(relevant_at.size());
  auto hits_in_top = [&](int64_t k) {
    int64_t hits = 0;
    for (int64_t i = 0; i < std::min(k, ranked); ++i) hits += relevant_at[static_cast<size_t>(i)] ? 1 : 0;
    return hits;
  };
  std::vector<double> out;
  for (int64_t k : kCuts) out.push_back(hits_in_top(k) > 0 ? 1.0 : 0.0);
  for (int64_t k : kCuts) out.push_back(static_cast<double>(hits_in_top(k)) / static_cast<double>(k));
  for (int64_t k : kCuts) out.push_back(static_cast<double>(hits_in_top(k)) / static_cast<double>(num_relevant));
  double reciprocal_rank = 0;
  for (int64_t i = 0; i < std::min(kMrrCut, ranked); ++i)
    if (relevant_at[static_cast<size_t>(i)]) {
      reciprocal_rank = 1.0 / static_cast<double>(i + 1);
      break;
    }
  out.push_back(reciprocal_rank);
  const std::vector<char> ideal(static_cast<size_t>(num_relevant), 1);
  out.push_back(dcg_at(relevant_at, kNdcgCut) / dcg_at(ideal, kNdcgCut));
  double precision_sum = 0;
  int64_t correct = 0;
  for (int64_t i = 0; i < std::min(kMapCut, ranked); ++i)
    if (relevant_at[static_cast<size_t>(i)]) precision_sum += static_cast<double>(++correct) / static_cast<double>(i + 1);
  out.push_back(precision_sum / static_cast<double>(std::min(kMapCut, num_relevant)));
  return out;
}

MetricMap StsMetrics::to_map() const { return {{"spearman", spearman}, {"pearson", pearson}}; }

double pearson_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size())
    throw std::invalid_argument("pearson_correlation: sizes differ");
  if (x.size() < 2) return 0;
  const double n = static_cast<double>(x.size());
  const double mean_x = std::accumulate(x.begin(), x.end(), 0.0) / n;
  const double mean_y = std::accumulate(y.begin(), y.end(), 0.0) / n;
  double sxy = 0, sxx = 0, syy = 0;  // centred sums: stable where raw moments cancel
  for (size_t i = 0; i < x.size(); ++i) {
    const double dx = x[i] - mean_x, dy = y[i] - mean_y;
    sxy += dx * dy;
    sxx += dx * dx;
    syy += dy * dy;
  }
  if (sxx <= 0 || syy <= 0) return 0;
  return sxy / std::sqrt(sxx * syy);
}

std::vector<double> average_ranks(const std::vector<double>& values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  // NaN sorts last (a strict weak order even then); NaNs never tie with each other.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const bool nan_a = std::isnan(values[a]), nan_b = std::isnan(values[b]);
    if (nan_a || nan_b) return !nan_a && nan_b;
    return values[a] < values[b];
  });
  std::vector<double> ranks(values.size());
  for (size_t start = 0; start < order.size();) {
    size_t end = start + 1;
    while (end < order.size() && values[order[end]] == values[order[start]]) ++end;
    // Positions start+1 .. end (1-based) share their mean.
    const double shared = (static_cast<double>(start + 1) + static_cast<double>(end)) / 2.0;
    for (size_t k = start; k < end; ++k) ranks[order[k]] = shared;
    start = end;
  }
  return ranks;
}

double spearman_correlation(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.size() != y.size())
    throw std::invalid_argument("spearman_correlation: sizes differ");
  return pearson_correlation(average_ranks(x), average_ranks(y));
}

StsMetrics sts_metrics(const std::vector<double>& predicted, const std::vector<double>& gold) {
  if (predicted.size() != gold.size())
    throw std::invalid_argument("sts_metrics: predicted and gold sizes differ");
  StsMetrics m;
  m.num_pairs = static_cast<int64_t>(gold.size());
  auto finite = [](double v) { return std::isfinite(v); };
  if (!std::all_of(predicted.begin(), predicted.end(), finite) ||
      !std::all_of(gold.begin(), gold.end(), finite)) {
    // A diverged model: say so (NaN prints as null in metrics.jsonl) rather than rank it.
    m.spearman = m.pearson = std::nan("");
    return m;
  }
  m.spearman = spearman_correlation(predicted, gold);
  m.pearson = pearson_correlation(predicted, gold);
  return m;
}

std::vector<float> cosine_similarity_matrix(const float* queries, int64_t num_queries,
                                            const float* docs, int64_t num_docs, int64_t dim) {
  auto norms = [dim](const float* rows, int64_t n) {
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t k = 0; k < dim; ++k) s += double(rows[i * dim + k]) * rows[i * dim + k];
      out[static_cast<size_t>(i)] = std::sqrt(s);
    }
    return out;
  };
  const std::vector<double> qn = norms(queries, num_queries), dn = norms(docs, num_docs);
  std::vector<float> out(static_cast<size_t>(num_queries * num_docs), 0.0f);
  for (int64_t i = 0; i < num_queries; ++i) {
    for (int64_t j = 0; j < num_docs; ++j) {
      const double denom = qn[static_cast<size_t>(i)] * dn[static_cast<size_t>(j)];
      if (denom == 0) continue;
      double dot = 0;
      for (int64_t k = 0; k < dim; ++k) dot += double(queries[i * dim + k]) * docs[j * dim + k];
      out[static_cast<size_t>(i * num_docs + j)] = static_cast<float>(dot / denom);
    }
  }
  return out;
}

}  // namespace ddp_embed
