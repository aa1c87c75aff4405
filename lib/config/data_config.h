// data.*: the training sources, the evaluation sets and how batches are drawn
// (docs/config.md). The types only; config/config.h reads and validates them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/choices.h"

namespace ddp_embed {

// data.train[i].columns, data.eval[i].columns: the columns of a table file (Parquet, Arrow,
// CSV, TSV) that hold the query, the positive, the negatives and the score (a number, or a
// list of the teacher's); "" (none) = that role by sentence-transformers' column names.
struct ColumnChoice {
  std::string query, pos;
  std::vector<std::string> neg;
  std::string score;
  bool empty() const { return query.empty() && pos.empty() && neg.empty() && score.empty(); }
  bool operator==(const ColumnChoice& o) const {
    return query == o.query && pos == o.pos && neg == o.neg && score == o.score;
  }
};

// One source of training pairs (data.train). The plain form, a path or a list of paths,
// is one source named "train"; a list of objects gives each source its own settings.
struct DataSource {
  std::string name = "train";      // in the log and metrics.jsonl; the first file's stem by default
  std::vector<std::string> paths;  // files, globs or dataset folders, read in order ("path": one or a list)
  double weight = 1;               // data.mixing "weighted": its share of the steps
  std::string query_prompt;        // before each query: a prompt's name (model.prompts, or the
  std::string passage_prompt;      //   init folder's) or the text itself; "" = none
  std::optional<int> negatives_per_query;  // hard negatives per query; else data.negatives_per_query
  // A dataset folder's config ("" = the one datasets.load_dataset takes) and split
  // (data/dataset_files.h), and its table files' columns.
  std::string config{};
  std::string split = "train";
  ColumnChoice columns{};
  // Written back as a list of paths: a single source with nothing but paths.
  bool plain() const;
};

// Every file of every source, in order.
std::vector<std::string> source_paths(const std::vector<DataSource>& sources);

// data.eval: the evaluation sets, each a file of pairs (JSONL or a table file), a dataset
// folder of pairs (data/dataset_files.h), or a BEIR folder (corpus, queries, qrels:
// data/beir.h). Written as null (none), a path, or a list of paths and objects {"path",
// "config", "split", "columns", "first_stage", "top_k"}; each set is reported under its
// name (train/evaluate.h).
struct EvalSets {
  // A dataset folder's config and split ("" = its default config; the first of
  // "validation", "dev", "test" it has), and its table files' columns. A reranker's
  // (model.kind "cross_encoder") BEIR set: the embedding model whose ranking it reorders,
  // and how many of each query's documents (train/rerank_candidates.h).
  struct Choice {
    std::string config, split;
    ColumnChoice columns;
    std::string first_stage;
    int top_k = 100;
    bool empty() const { return config.empty() && split.empty() && columns.empty() && first_stage.empty() && top_k == 100; }
  };
  std::vector<std::string> paths;
  std::vector<Choice> choices;  // per path (none: every choice the default)
  Choice choice(size_t i) const { return i < choices.size() ? choices[i] : Choice{}; }
  bool empty() const { return paths.empty(); }
};

struct DataConfig {
  std::vector<DataSource> train = {
      DataSource{"train", {"data/demo/train.jsonl"}, 1, "", "", std::nullopt, "", "train", {}}};
  // How global batches are drawn from several sources (data/batch_plan.h): each from one
  // source, in proportion to the sources' sizes, to their weights, or in turn; or
  // "mixed", every batch from all of them.
  Mixing mixing = Mixing::Proportional;
  bool dedupe_batches = false;  // no text twice as a query or positive in one global batch
  // data.train's prepared folder (data/prepared.h): tokenized once and memory-mapped, made
  // by the run's ranks when it is not there; null = read and tokenize data.train at start.
  std::optional<std::string> prepared;
  EvalSets eval = {{"data/demo/eval.jsonl"}, {}};
  bool shuffle = true;
  bool drop_last = true;
  int negatives_per_query = 0;
  bool skip_bad_lines = false;
  // A longer line is a bad line (a lost newline, a binary file), not a pair to truncate.
  int64_t max_line_bytes = 1 << 20;
};

}  // namespace ddp_embed
