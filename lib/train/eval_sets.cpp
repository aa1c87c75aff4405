#include "train/eval_sets.h"

#include <filesystem>
#include <memory>

#include <spdlog/spdlog.h>

#include "data/beir.h"
#include "train/rerank_candidates.h"

namespace ddp_embed {

ColumnNames column_names(const ColumnChoice& c) { return ColumnNames{c.query, c.pos, c.neg, c.score}; }

std::vector<EvalSet> load_eval_sets(const Config& cfg, const Worker& w, SourceInput first_source,
                                    const Tokenizer& tokenizer) {
  std::vector<EvalSet> sets;
  const std::vector<std::string>& paths = cfg.data.eval.paths;
  for (size_t i = 0; i < paths.size(); ++i) {
    const std::string& path = paths[i];
    const EvalSets::Choice choice = cfg.data.eval.choice(i);
    const std::string key = cfg.data.eval.choices.empty() ? "data.eval" : "data.eval[" + std::to_string(i) + "]";
    EvalSet set;
    if (cfg.model.kind == ModelKind::CrossEncoder) {
      // A reranker's set: a BEIR folder whose first stage's ranking it reorders (lib/config
      // made sure every set names its first_stage).
      RerankEvalSet two_stage = load_rerank_eval_set(path, choice.split, choice.first_stage, choice.top_k, tokenizer,
                                                     cfg.tokenizer.max_length, *w.pg, w.device, key);
      set.name = two_stage.set.name;
      spdlog::info("data: {}: {} reranks the top {} of {}'s ranking, whose ndcg@10 is {:.4f}", key, set.name,
                   two_stage.candidates.top_k, choice.first_stage, two_stage.candidates.first_stage_metrics.at("ndcg@10"));
      set.rerank = std::make_shared<const RerankCandidates>(std::move(two_stage.candidates));
      set.beir = std::move(two_stage.set);
    } else if (is_beir_folder(path)) {
      // A BEIR set's parts and columns are its layout's (data/beir.h): nothing to choose.
      if (!choice.config.empty() || !choice.columns.empty())
        throw DataError(key + (choice.config.empty() ? ".columns" : ".config") + ": " + path +
                        " is a BEIR set, whose corpus, queries and qrels and their columns are fixed by its layout; "
                        "remove it (" + key + ".split chooses the qrels' split)");
      set.beir = load_beir(path, choice.split, tokenizer, cfg.tokenizer.max_length, first_source.query_prompt,
                           first_source.passage_prompt);
      set.name = set.beir->name;
    } else if (cfg.model.kind == ModelKind::Sparse) {
      throw ConfigError(key + ": " + path + " is a file of pairs; a sparse encoder is evaluated on a BEIR folder "
                        "(corpus.jsonl, queries.jsonl, qrels/: each query against the whole corpus through an "
                        "inverted index, sentence-transformers' SparseInformationRetrievalEvaluator): give one, or "
                        "set data.eval to null");
    } else {
      // A file of pairs, or a dataset folder of pairs: its evaluation split by default.
      SourceInput eval = first_source;
      eval.name = "eval";
      eval.files = {path};
      eval.require_teacher_scores = false;  // evaluation never reads them
      eval.dataset = DatasetChoice{choice.config, {choice.split}, key};
      if (choice.split.empty()) eval.dataset.splits = {"validation", "dev", "test"};
      eval.columns = column_names(choice.columns);
      set.pairs = load_sources({eval}, tokenizer, cfg.tokenizer.max_length, cfg.data.skip_bad_lines, w.threads,
                               cfg.data.max_line_bytes);
      std::string name = path;  // a folder's name without its last '/'
      while (name.size() > 1 && name.back() == '/') name.pop_back();
      set.name = paths.size() == 1 ? "" : std::filesystem::path(name).stem().string();
    }
    for (const EvalSet& other : sets)
      if (other.name == set.name)
        throw DataError("data.eval: two sets are named \"" + set.name + "\" (" + path +
                        "): give each its own folder or file name");
    sets.push_back(std::move(set));
  }
  return sets;
}

std::string evaluation_size(const std::vector<EvalSet>& sets) {
  if (sets.empty()) return "no evaluation";
  std::string text;
  for (const EvalSet& set : sets) {
    if (!text.empty()) text += ", ";
    text += set.beir ? fmt::format("{} queries against {} documents of {}", set.beir->num_queries(),
                                   set.beir->num_docs(), set.name)
                     : fmt::format("{} evaluation pairs{}", set.size(), set.name.empty() ? "" : " of " + set.name);
  }
  return text;
}

}  // namespace ddp_embed
