// data.eval's sets as a run reads them (train/setup.h load_inputs): pair files, dataset
// folders of pairs and BEIR folders for an embedder; for a reranker, BEIR folders with the
// first stage whose ranking it reorders (train/rerank_candidates.h).
#pragma once

#include <string>
#include <vector>

#include "config/config.h"
#include "data/pairs.h"
#include "tokenize/tokenizer.h"
#include "train/evaluate.h"
#include "train/worker.h"

namespace ddp_embed {

// A table file's columns as data.train[i].columns / data.eval[i].columns name them.
ColumnNames column_names(const ColumnChoice& c);

// data.eval's sets, embedded as the first source's texts are: with its prompts. A set is
// named after its folder or its file's stem; a single pair file is unnamed (eval/recall@10).
// Throws DataError for two sets of one name and as the readers do.
std::vector<EvalSet> load_eval_sets(const Config& cfg, const Worker& w, SourceInput first_source,
                                    const Tokenizer& tokenizer);

// "1000 evaluation pairs", "95 queries against 1393 documents of trecqa", ...: for the log.
std::string evaluation_size(const std::vector<EvalSet>& sets);

}  // namespace ddp_embed
