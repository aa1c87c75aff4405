#include "eval/metrics.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace ddp_embed {
namespace {

TEST(Metrics, RankCountsDocsAtOrAboveThePositive) {
  const std::vector<float> row = {0.1f, 0.9f, 0.5f, 0.7f};
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 1), 1);
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 3), 2);
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 2), 3);
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 0), 4);
  EXPECT_THROW(pessimistic_rank(row.data(), 4, 4), std::invalid_argument);
  EXPECT_THROW(pessimistic_rank(row.data(), 4, -1), std::invalid_argument);
}

TEST(Metrics, TiesCountAgainstThePositive) {
  const std::vector<float> row = {0.5f, 0.5f, 0.5f, 0.1f};
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 0), 3);
  EXPECT_EQ(pessimistic_rank(row.data(), 4, 2), 3);
  // A collapsed model (all scores equal) scores nothing.
  const std::vector<float> flat(4 * 4, 0.25f);
  const RetrievalMetrics m = retrieval_metrics(flat.data(), 4, 4);
  EXPECT_DOUBLE_EQ(m.recall_at_1, 0.0);
  EXPECT_DOUBLE_EQ(m.recall_at_5, 1.0);  // rank 4 of 4
  EXPECT_DOUBLE_EQ(m.mrr_at_10, 0.25);
}

TEST(Metrics, NanPositiveRanksLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> row = {nan, 0.1f, 0.2f};
  EXPECT_EQ(pessimistic_rank(row.data(), 3, 0), 3);
  EXPECT_EQ(pessimistic_rank(row.data(), 3, 2), 1);  // a NaN neighbour does not outrank
}

TEST(Metrics, PerfectRanking) {
  const int n = 12;
  std::vector<float> s(n * n, 0.0f);
  for (int i = 0; i < n; ++i) s[i * n + i] = 1.0f;
  const RetrievalMetrics m = retrieval_metrics(s.data(), n, n);
  EXPECT_EQ(m.num_queries, n);
  EXPECT_DOUBLE_EQ(m.recall_at_1, 1.0);
  EXPECT_DOUBLE_EQ(m.recall_at_5, 1.0);
  EXPECT_DOUBLE_EQ(m.recall_at_10, 1.0);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, 1.0);
  EXPECT_DOUBLE_EQ(m.ndcg_at_10, 1.0);
}

TEST(Metrics, WorstRanking) {
  const int n = 12;
  std::vector<float> s(n * n, 1.0f);
  for (int i = 0; i < n; ++i) s[i * n + i] = 0.0f;  // the positive is last: rank 12
  const RetrievalMetrics m = retrieval_metrics(s.data(), n, n);
  EXPECT_DOUBLE_EQ(m.recall_at_1, 0.0);
  EXPECT_DOUBLE_EQ(m.recall_at_10, 0.0);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, 0.0);
  EXPECT_DOUBLE_EQ(m.ndcg_at_10, 0.0);
}

TEST(Metrics, HandComputedSmallCase) {
  // 3 queries × 6 docs; positives are docs 0, 1, 2.
  const std::vector<float> s = {
      0.9f, 0.1f, 0.2f, 0.3f, 0.4f, 0.5f,  // q0: positive first → rank 1
      0.8f, 0.6f, 0.7f, 0.1f, 0.2f, 0.3f,  // q1: 0.8, 0.7 above 0.6 → rank 3
      0.9f, 0.8f, 0.1f, 0.7f, 0.6f, 0.5f,  // q2: everything above → rank 6
  };
  const RetrievalMetrics m = retrieval_metrics(s.data(), 3, 6);
  EXPECT_DOUBLE_EQ(m.recall_at_1, 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.recall_at_5, 2.0 / 3);
  EXPECT_DOUBLE_EQ(m.recall_at_10, 1.0);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, (1.0 + 1.0 / 3 + 1.0 / 6) / 3);
  // nDCG with one relevant doc: 1/log2(rank+1): 1, 1/2 (rank 3), 1/log2(7).
  EXPECT_NEAR(m.ndcg_at_10, (1.0 + 0.5 + 1.0 / std::log2(7.0)) / 3, 1e-12);

  const MetricMap map = m.to_map();
  ASSERT_EQ(map.size(), 5u);
  EXPECT_DOUBLE_EQ(map.at("recall@1"), m.recall_at_1);
  EXPECT_DOUBLE_EQ(map.at("recall@5"), m.recall_at_5);
  EXPECT_DOUBLE_EQ(map.at("recall@10"), m.recall_at_10);
  EXPECT_DOUBLE_EQ(map.at("mrr@10"), m.mrr_at_10);
  EXPECT_DOUBLE_EQ(map.at("ndcg@10"), m.ndcg_at_10);
}

TEST(Metrics, ExplicitRelevantDocs) {
  // 2 queries, 3 docs; q0's positive is doc 2, q1's is doc 0.
  const std::vector<float> s = {0.1f, 0.2f, 0.3f,   // q0: rank 1
                                0.4f, 0.5f, 0.6f};  // q1: rank 3
  const RetrievalMetrics m = retrieval_metrics(s.data(), 2, 3, {2, 0});
  EXPECT_DOUBLE_EQ(m.recall_at_1, 0.5);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, (1.0 + 1.0 / 3) / 2);
  EXPECT_THROW(retrieval_metrics(s.data(), 2, 3, {2}), std::invalid_argument);
  EXPECT_THROW(retrieval_metrics(s.data(), 2, 3, {2, 3}), std::invalid_argument);
  EXPECT_THROW(retrieval_metrics(s.data(), 4, 3), std::invalid_argument);
}

TEST(Metrics, RanksBeyondTenCountNothingAtTen) {
  const RetrievalMetrics m = retrieval_metrics_from_ranks({10, 11});
  EXPECT_DOUBLE_EQ(m.recall_at_10, 0.5);
  EXPECT_DOUBLE_EQ(m.mrr_at_10, 0.1 / 2);
  EXPECT_NEAR(m.ndcg_at_10, 1.0 / std::log2(11.0) / 2, 1e-12);
  EXPECT_EQ(retrieval_metrics_from_ranks({}).num_queries, 0);
  EXPECT_THROW(retrieval_metrics_from_ranks({0}), std::invalid_argument);
}

TEST(Metrics, AverageRanks) {
  EXPECT_EQ(average_ranks({10, 20, 20, 30}), (std::vector<double>{1, 2.5, 2.5, 4}));
  EXPECT_EQ(average_ranks({3, 1, 2}), (std::vector<double>{3, 1, 2}));
  EXPECT_EQ(average_ranks({5, 5, 5}), (std::vector<double>{2, 2, 2}));
}

TEST(Metrics, PearsonByHand) {
  // x = 1,2,3,4; y = 2,4,5,9: means 2.5, 5; dx = -1.5,-.5,.5,1.5; dy = -3,-1,0,4
  // sxy = 4.5+.5+0+6 = 11; sxx = 5; syy = 26 → r = 11 / sqrt(130).
  EXPECT_NEAR(pearson_correlation({1, 2, 3, 4}, {2, 4, 5, 9}), 11.0 / std::sqrt(130.0), 1e-12);
  EXPECT_NEAR(pearson_correlation({1, 2, 3}, {3, 2, 1}), -1.0, 1e-12);
  EXPECT_DOUBLE_EQ(pearson_correlation({1, 1, 1}, {1, 2, 3}), 0.0);  // constant side
  EXPECT_THROW(pearson_correlation({1, 2}, {1}), std::invalid_argument);
}

TEST(Metrics, SpearmanWithTiesByHand) {
  // predicted 0.1, 0.4, 0.4, 0.9, 0.2 → ranks 1, 3.5, 3.5, 5, 2
  // gold      1,   2,   3,   4,   5   → ranks 1, 2,   3,   4, 5
  // Pearson of the ranks: means 3, 3; dx = -2, .5, .5, 2, -1; dy = -2, -1, 0, 1, 2
  // sxy = 4 - .5 + 0 + 2 - 2 = 3.5; sxx = 4+.25+.25+4+1 = 9.5; syy = 10
  const double expected = 3.5 / std::sqrt(9.5 * 10.0);
  const std::vector<double> predicted = {0.1, 0.4, 0.4, 0.9, 0.2};
  const std::vector<double> gold = {1, 2, 3, 4, 5};
  EXPECT_NEAR(spearman_correlation(predicted, gold), expected, 1e-12);
  const StsMetrics m = sts_metrics(predicted, gold);
  EXPECT_EQ(m.num_pairs, 5);
  EXPECT_NEAR(m.spearman, expected, 1e-12);
  EXPECT_NEAR(m.pearson, pearson_correlation(predicted, gold), 1e-15);
  const MetricMap map = m.to_map();
  EXPECT_EQ(map.size(), 2u);
  EXPECT_NEAR(map.at("spearman"), expected, 1e-12);
}

TEST(Metrics, SpearmanIsRankOnly) {
  // A monotone but non-linear relation: Spearman 1, Pearson below 1.
  const std::vector<double> x = {1, 2, 3, 4, 5}, y = {1, 8, 27, 64, 125};
  EXPECT_NEAR(spearman_correlation(x, y), 1.0, 1e-12);
  EXPECT_LT(pearson_correlation(x, y), 0.99);
}

TEST(Metrics, StsWithNonFiniteValuesIsNan) {
  const StsMetrics m = sts_metrics({0.1, std::nan(""), 0.3}, {1, 2, 3});
  EXPECT_TRUE(std::isnan(m.spearman));
  EXPECT_TRUE(std::isnan(m.pearson));
  EXPECT_THROW(sts_metrics({1, 2}, {1}), std::invalid_argument);
}

TEST(Metrics, CosineSimilarityMatrix) {
  const std::vector<float> q = {1, 0, 0, 2, 0, 0};        // 3 × 2: (1,0) (0,2) (0,0)
  const std::vector<float> d = {3, 0, 1, 1};              // 2 × 2: (3,0) (1,1)
  const std::vector<float> s = cosine_similarity_matrix(q.data(), 3, d.data(), 2, 2);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_NEAR(s[0], 1.0, 1e-6);
  EXPECT_NEAR(s[1], 1.0 / std::sqrt(2.0), 1e-6);
  EXPECT_NEAR(s[2], 0.0, 1e-6);
  EXPECT_NEAR(s[3], 1.0 / std::sqrt(2.0), 1e-6);
  EXPECT_EQ(s[4], 0.0f);  // zero vector
  EXPECT_EQ(s[5], 0.0f);
  // Feeds retrieval: q0 → d0 rank 1, q1 → d1 rank 1.
  const RetrievalMetrics m = retrieval_metrics(s.data(), 2, 2);
  EXPECT_DOUBLE_EQ(m.recall_at_1, 1.0);
}

// InformationRetrievalEvaluator's metrics of one query, worked out by hand: 2 relevant
// documents, found at ranks 2 and 4 of the 5 ranked.
TEST(Metrics, IrQueryMetricsAreInformationRetrievalEvaluatorsByHand) {
  const std::vector<std::string>& names = ir_metric_names();
  ASSERT_EQ(names.size(), 15u);
  const std::vector<double> m = ir_query_metrics({0, 1, 0, 1, 0}, 2);
  std::map<std::string, double> by_name;
  for (size_t i = 0; i < names.size(); ++i) by_name[names[i]] = m[i];
  EXPECT_DOUBLE_EQ(by_name["accuracy@1"], 0);
  EXPECT_DOUBLE_EQ(by_name["accuracy@3"], 1);
  EXPECT_DOUBLE_EQ(by_name["precision@1"], 0);
  EXPECT_DOUBLE_EQ(by_name["precision@3"], 1.0 / 3);
  EXPECT_DOUBLE_EQ(by_name["precision@5"], 2.0 / 5);
  EXPECT_DOUBLE_EQ(by_name["precision@10"], 2.0 / 10);  // divided by k, not by the ranked
  EXPECT_DOUBLE_EQ(by_name["recall@3"], 0.5);
  EXPECT_DOUBLE_EQ(by_name["recall@5"], 1);
  EXPECT_DOUBLE_EQ(by_name["mrr@10"], 0.5);
  const double dcg = 1 / std::log2(3.0) + 1 / std::log2(5.0), ideal = 1 + 1 / std::log2(3.0);
  EXPECT_DOUBLE_EQ(by_name["ndcg@10"], dcg / ideal);
  EXPECT_DOUBLE_EQ(by_name["map@100"], (1.0 / 2 + 2.0 / 4) / 2);
  // Nothing found: every metric 0; no relevant document at all: refused.
  for (double v : ir_query_metrics({0, 0, 0}, 1)) EXPECT_EQ(v, 0);
  EXPECT_THROW(ir_query_metrics({1}, 0), std::invalid_argument);
}

}  // namespace
}  // namespace ddp_embed
