#include "train/rerank_candidates.h"

#include <algorithm>
#include <stdexcept>

#include <ATen/ATen.h>

#include "config/config_error.h"
#include "eval/metrics.h"
#include "model/model_folder.h"
#include "train/evaluate.h"
#include "train/rerank_eval.h"
#include "train/rerank_inference.h"

namespace ddp_embed {

RerankEvalSet load_rerank_eval_set(const std::string& path, const std::string& split, const std::string& first_stage,
                                   int64_t top_k, const Tokenizer& tokenizer, int max_length, ProcessGroup& pg,
                                   c10::Device device, const std::string& key) {
  if (!is_beir_folder(path))
    throw ConfigError(key + ": " + path + " is not a BEIR folder (corpus, queries, qrels): a reranker is evaluated "
                      "by reordering an embedding model's ranking of a BEIR set's corpus");
  LoadedModel bi = load_model_folder(first_stage);
  try {
    require_dense_embedder(bi, first_stage, key + ".first_stage (the first stage ranks by embeddings)");
  } catch (const std::invalid_argument& e) {
    throw ConfigError(e.what());
  }
  bi.model->to(device);
  RerankEvalSet out{load_beir(path, split, *bi.tokenizer, bi.max_length, "", "", /*keep_texts=*/true), {}};
  const BeirSet& set = out.set;
  RerankCandidates& c = out.candidates;
  const auto [queries, corpus] = embed_beir(bi.model, set, pg, /*batch_size=*/64, device);
  c.first_stage_metrics = beir_metrics(queries, corpus, set, pg);
  c.top_k = std::min<int64_t>(top_k, set.num_docs());
  const RerankFirstStage first =
      rank_first_stage(queries, corpus, set, std::min(std::max(c.top_k, kIrDepth), set.num_docs()));
  c.first_stage = first.docs;
  for (const auto& docs : first.docs) {
    std::vector<std::string> texts;
    for (int64_t r = 0; r < c.top_k; ++r) texts.push_back(rerank_document_text(set.corpus_texts[size_t(docs[size_t(r)])]));
    c.documents.push_back(std::move(texts));
  }
  c.tokenizer = &tokenizer;
  c.max_length = max_length;
  return out;
}

std::map<std::string, double> evaluate_reranking(SentenceEmbedder& model, const BeirSet& set,
                                                 const RerankCandidates& c, ProcessGroup& pg, int64_t batch_size,
                                                 c10::Device device) {
  const int64_t n = set.num_queries();
  const int64_t begin = n * pg.rank() / pg.world_size(), end = n * (pg.rank() + 1) / pg.world_size();
  std::vector<TextPair> pairs;
  for (int64_t i = begin; i < end; ++i)
    for (const std::string& doc : c.documents[size_t(i)]) pairs.push_back({set.query_texts[size_t(i)], doc});
  std::vector<double> sums(ir_metric_names().size(), 0.0);
  if (!pairs.empty()) {
    // The order is what counts: the logits as they are (each activation keeps it).
    const at::Tensor scores = score_pairs(model, *c.tokenizer, ScoreActivation::Identity, pairs,
                                          {batch_size, device, c.max_length, "eval"})
                                  .reshape({-1})
                                  .contiguous();
    for (int64_t i = begin; i < end; ++i) {
      const float* s = scores.data_ptr<float>() + (i - begin) * c.top_k;
      const std::vector<int64_t> ranking =
          reranked_order(c.first_stage[size_t(i)], std::vector<float>(s, s + c.top_k));
      const std::vector<double> m = rerank_ranking_metrics(ranking, set.relevant[size_t(i)], set.num_docs());
      for (size_t k = 0; k < m.size(); ++k) sums[k] += m[k];
    }
  }
  return mean_ir_metrics(std::move(sums), n, pg);
}

}  // namespace ddp_embed
