// One JSONL line of a pair file, checked and turned into its texts.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {

struct PairRecord {
  std::string query;
  std::vector<std::string> pos;  // at least one
  std::vector<std::string> neg;
  bool has_score = false;
  float score = 0;
  // A teacher's scores of the candidates, for loss.distill: one per positive, then one per
  // negative ("pos_scores" and "neg_scores", as FlagEmbedding writes them, or one list
  // "label", as sentence-transformers' distillation sets do). Empty: none.
  std::vector<float> teacher_scores;
};

// Parses `line` into `record`. Returns "" on success, else what is wrong with the line
// (without file and line number), e.g. `missing "pos" (expected query/pos,
// anchor/positive or text1/text2)`.
std::string parse_pair_record(std::string_view line, PairRecord& record);

}  // namespace ddp_embed
