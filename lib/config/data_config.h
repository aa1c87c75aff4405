// data.*: the training sources, the evaluation sets and how batches are drawn
// (docs/config.md). The types only; config/config.h reads and validates them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "config/choices.h"

namespace ddp_embed {

// One source of training pairs (data.train). The plain form, a path or a list of paths,
// is one source named "train"; a list of objects gives each source its own settings.
struct DataSource {
  std::string name = "train";      // in the log and metrics.jsonl; the first file's stem by default
  std::vector<std::string> paths;  // JSONL files, read in order ("path": one or a list)
  double weight = 1;               // data.mixing "weighted": its share of the steps
  std::string query_prompt;        // before each query: a prompt's name (model.prompts, or the
  std::string passage_prompt;      //   init folder's) or the text itself; "" = none
  std::optional<int> negatives_per_query;  // hard negatives per query; else data.negatives_per_query
  // Written back as a list of paths: a single source with nothing but paths.
  bool plain() const;
};

// Every file of every source, in order.
std::vector<std::string> source_paths(const std::vector<DataSource>& sources);

// data.eval: the evaluation sets, each a pair file (JSONL, docs/formats.md) or a BEIR folder
// (corpus.jsonl, queries.jsonl, qrels/SPLIT.tsv: data/beir.h). Written as null (none), a
// path, or a list of paths; each set is reported under its name (train/evaluate.h).
struct EvalSets {
  std::vector<std::string> paths;
  bool empty() const { return paths.empty(); }
};

struct DataConfig {
  std::vector<DataSource> train = {DataSource{"train", {"data/demo/train.jsonl"}, 1, "", "", std::nullopt}};
  // How global batches are drawn from several sources (data/batch_plan.h): each from one
  // source, in proportion to the sources' sizes, to their weights, or in turn; or
  // "mixed", every batch from all of them.
  Mixing mixing = Mixing::Proportional;
  bool dedupe_batches = false;  // no text twice as a query or positive in one global batch
  // data.train's prepared folder (data/prepared.h): tokenized once and memory-mapped, made
  // by the run's ranks when it is not there; null = read and tokenize data.train at start.
  std::optional<std::string> prepared;
  EvalSets eval = {{"data/demo/eval.jsonl"}};
  bool shuffle = true;
  bool drop_last = true;
  int negatives_per_query = 0;
  bool skip_bad_lines = false;
  // A longer line is a bad line (a lost newline, a binary file), not a pair to truncate.
  int64_t max_line_bytes = 1 << 20;
};

}  // namespace ddp_embed
