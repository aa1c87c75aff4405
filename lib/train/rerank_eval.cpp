// Two-stage evaluation: the bi-encoder's BEIR ranking, its top K rescored by a
// cross-encoder, and the metrics of both rankings side by side (train/rerank_eval.h).
#include "train/rerank_eval.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <stdexcept>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "compat/cuda_support.h"
#include "config/choices.h"
#include "data/beir.h"
#include "eval/metrics.h"
#include "parallel/process_group.h"
#include "train/evaluate.h"
#include "train/rerank_inference.h"
#include "util/atomic_file.h"

namespace ddp_embed {

RerankFirstStage rank_first_stage(const at::Tensor& queries, const at::Tensor& corpus, const BeirSet& set, int64_t depth) {
  RerankFirstStage out;
  rank_beir_documents(unit_rows(queries), unit_rows(corpus), set.corpus_ids, 0, queries.size(0), depth,
                      [&](int64_t, const std::vector<int64_t>& top, const float* s) {
                        out.docs.push_back(top);
                        std::vector<float> scores;
                        for (int64_t doc : top) scores.push_back(s[doc]);
                        out.scores.push_back(std::move(scores));
                      });
  return out;
}

std::string rerank_document_text(const std::string& joined) {
  constexpr const char* kSpace = " \t\n\r\f\v";
  const size_t begin = joined.find_first_not_of(kSpace);
  if (begin == std::string::npos) return "";
  return joined.substr(begin, joined.find_last_not_of(kSpace) - begin + 1);
}

std::vector<double> rerank_ranking_metrics(const std::vector<int64_t>& ranking, const std::vector<int64_t>& relevant,
                                           int64_t num_docs) {
  const int64_t depth = std::min(kIrDepth, num_docs);
  std::vector<char> relevant_at(static_cast<size_t>(depth));
  for (int64_t r = 0; r < depth; ++r)
    relevant_at[size_t(r)] = std::binary_search(relevant.begin(), relevant.end(), ranking[size_t(r)]);
  return ir_query_metrics(relevant_at, static_cast<int64_t>(relevant.size()));
}

namespace {

// The means of per-query metrics, by name.
std::map<std::string, double> rerank_mean_metrics(const std::vector<std::vector<double>>& per_query) {
  std::vector<double> sums(ir_metric_names().size(), 0.0);
  for (const std::vector<double>& m : per_query)
    for (size_t k = 0; k < m.size(); ++k) sums[k] += m[k];
  std::map<std::string, double> out;
  for (size_t k = 0; k < sums.size(); ++k) out[ir_metric_names()[k]] = sums[k] / double(per_query.size());
  return out;
}

nlohmann::json rerank_named_metrics(const std::vector<double>& values) {
  nlohmann::json j = nlohmann::json::object();
  for (size_t k = 0; k < values.size(); ++k) j[ir_metric_names()[k]] = values[k];
  return j;
}

// Each query's line of rerank_out: its reranked top k and its metrics before and after.
struct RerankQueryResult {
  std::vector<int64_t> ranking;                // the final ranking
  std::vector<double> first_stage, reranked;  // ir_metric_names' order
};

std::string rerank_jsonl_lines(const BeirSet& set, const RerankFirstStage& first, const std::vector<RerankQueryResult>& results,
                           const at::Tensor& scores, int64_t k) {
  std::string out;
  const float* s = scores.data_ptr<float>();
  for (size_t i = 0; i < results.size(); ++i) {
    nlohmann::json ranking = nlohmann::json::array();
    for (int64_t r = 0; r < k; ++r) {
      const int64_t doc = results[i].ranking[size_t(r)];
      const auto at = std::find(first.docs[i].begin(), first.docs[i].begin() + k, doc) - first.docs[i].begin();
      ranking.push_back({{"id", set.corpus_ids[size_t(doc)]},
                         {"score", s[int64_t(i) * k + at]},
                         {"first_stage_rank", at + 1},
                         {"first_stage_score", first.scores[i][size_t(at)]}});
    }
    const nlohmann::json line = {{"query_id", set.query_ids[i]},
                                 {"ranking", ranking},
                                 {"first_stage", rerank_named_metrics(results[i].first_stage)},
                                 {"reranked", rerank_named_metrics(results[i].reranked)}};
    out += line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  }
  return out;
}

// The two metric sets as stdout and --json show them.
void report_rerank_metrics(const EvalOptions& o, const BeirSet& set, int64_t k,
                           const std::map<std::string, double>& before, const std::map<std::string, double>& after) {
  nlohmann::json j = {{"task", "beir_rerank"},        {"name", set.name},   {"split", set.split},
                      {"queries", set.num_queries()}, {"documents", set.num_docs()}, {"top_k", k}};
  for (const auto& [name, value] : before) j["first_stage/" + name] = value;
  for (const auto& [name, value] : after) j["reranked/" + name] = value;
  if (o.format == "json") {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s (%s): %lld queries, %lld documents, the first stage's top %lld reranked\n", set.name.c_str(),
                set.split.c_str(), static_cast<long long>(set.num_queries()), static_cast<long long>(set.num_docs()),
                static_cast<long long>(k));
    std::printf("  %-12s %-12s %s\n", "metric", "first stage", "reranked");
    for (const std::string& name : ir_metric_names())
      std::printf("  %-12s %-12.4f %.4f\n", name.c_str(), before.at(name), after.at(name));
  }
  if (!o.json_out.empty()) write_file_atomically(o.json_out, j.dump(2) + "\n");
}

}  // namespace

std::vector<int64_t> reranked_order(const std::vector<int64_t>& first_stage, const std::vector<float>& scores) {
  const size_t k = scores.size();
  if (k > first_stage.size())
    throw std::invalid_argument("reranked_order: " + std::to_string(k) + " scores for " +
                                std::to_string(first_stage.size()) + " documents");
  std::vector<size_t> top(k);
  std::iota(top.begin(), top.end(), size_t{0});
  std::stable_sort(top.begin(), top.end(), [&](size_t a, size_t b) {
    const bool nan_a = std::isnan(scores[a]), nan_b = std::isnan(scores[b]);
    if (nan_a != nan_b) return nan_b;
    return !nan_a && scores[a] > scores[b];
  });
  std::vector<int64_t> out;
  out.reserve(first_stage.size());
  for (size_t r : top) out.push_back(first_stage[r]);
  out.insert(out.end(), first_stage.begin() + std::ptrdiff_t(k), first_stage.end());
  return out;
}

int run_eval_rerank(const EvalOptions& o) {
  if (o.top_k < 1) throw std::invalid_argument("--top-k " + std::to_string(o.top_k) + ": expected at least 1");
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  LoadedModel cross = load_model_folder(o.model_dir);
  require_cross_encoder(cross, o.model_dir, "eval --first-stage (the reranker, --model)");
  if (cross.model->head->num_labels() != 1)
    throw std::invalid_argument(o.model_dir + " has " + std::to_string(cross.model->head->num_labels()) +
                                " labels: reranking needs one score a pair (a folder of num_labels 1)");
  LoadedModel bi = load_model_folder(
      o.first_stage, o.pooling.empty() ? std::nullopt : std::optional(parse_choice<Pooling>(o.pooling, "--pooling")));
  require_dense_embedder(bi, o.first_stage, "--first-stage (the first stage ranks by embeddings)");
  bi.model->to(device);
  cross.model->to(device);

  const auto t0 = std::chrono::steady_clock::now();
  const BeirSet set = load_beir(o.beir, o.split, *bi.tokenizer, bi.max_length, o.query_prompt, o.corpus_prompt,
                                /*keep_texts=*/true);
  auto pg = ProcessGroup::single();
  const auto [queries, corpus] = embed_beir(bi.model, set, *pg, o.batch_size, device);
  const std::map<std::string, double> before = beir_metrics(queries, corpus, set, *pg);
  const int64_t k = std::min<int64_t>(o.top_k, set.num_docs());
  const RerankFirstStage first = rank_first_stage(queries, corpus, set, std::min(std::max(k, kIrDepth), set.num_docs()));

  std::vector<TextPair> pairs;
  pairs.reserve(size_t(set.num_queries() * k));
  for (int64_t i = 0; i < set.num_queries(); ++i)
    for (int64_t r = 0; r < k; ++r)
      pairs.push_back({set.query_texts[size_t(i)],
                       rerank_document_text(set.corpus_texts[size_t(first.docs[size_t(i)][size_t(r)])])});
  const at::Tensor scores =
      score_pairs(cross, pairs, {o.batch_size, device, cross.max_length, "rerank"}).reshape({-1}).contiguous();
  std::vector<RerankQueryResult> results(static_cast<size_t>(set.num_queries()));
  std::vector<std::vector<double>> reranked(results.size());
  for (size_t i = 0; i < results.size(); ++i) {
    const float* s = scores.data_ptr<float>() + int64_t(i) * k;
    RerankQueryResult& r = results[i];
    r.ranking = reranked_order(first.docs[i], std::vector<float>(s, s + k));
    r.first_stage = rerank_ranking_metrics(first.docs[i], set.relevant[i], set.num_docs());
    r.reranked = reranked[i] = rerank_ranking_metrics(r.ranking, set.relevant[i], set.num_docs());
  }
  const std::map<std::string, double> after = rerank_mean_metrics(reranked);
  spdlog::info("eval: {} queries against {} documents of {} ({}), the top {} of each reranked, in {:.2f}s",
               set.num_queries(), set.num_docs(), set.name, set.split, k,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  report_rerank_metrics(o, set, k, before, after);
  if (!o.rerank_out.empty()) write_file_atomically(o.rerank_out, rerank_jsonl_lines(set, first, results, scores, k));
  return 0;
}

}  // namespace ddp_embed
