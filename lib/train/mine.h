// `embed-train mine`: hard negatives for a pairs file, mined with a model — what
// sentence-transformers' util.mine_hard_negatives does with sampling_strategy "top" and
// output_format "n-tuple", on one process or on any number of workers (ddp-launch), with
// the same output for any number of them.
//
//   pairs ──► unique queries ─────────────────────────embed──┐
//   their positives (+ --corpus) ──► the corpus, unique ──embed──┴─► exact scores, a chunk
//   of queries at a time ──► each query's best range_max + max_positives candidates ──►
//   its positives out, the margins and score bounds applied ──► after range_min, the next
//   num_negatives are its "neg"
//
// Input: JSONL pairs (docs/formats.md; query/pos, anchor/positive or text1/text2, pos a
// string or a list), or a table file of them (Parquet, Arrow IPC, CSV, TSV: its columns by
// the names data.train reads, data/table_files.h); --corpus likewise a text file or a
// table file (train/inference.h's read_sentences). As in sentence-transformers, a query that appears on several lines
// has all their positives as its positives, a text is one corpus entry however often it
// appears (so a candidate whose text equals a positive is that positive), and the margins
// compare with the query's lowest positive score.
// Output: one line {"query", "pos", "neg": [num_negatives texts, best first]} per input
// line, in input order (its "neg" replaced); a line whose query keeps fewer than
// range_min + num_negatives candidates is dropped and counted in the log. Written by
// rank 0, atomically.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ddp_embed {

// sentence-transformers' parameters, with its defaults.
struct MineOptions {
  std::string model_dir, input, output;
  std::string corpus;  // more candidates: one text a line, JSONL "text" or a table; "" = the positives only
  int64_t num_negatives = 3;
  int64_t range_min = 0;
  // Unset: range_min + num_negatives + max_positives, or range_min + 10 x num_negatives +
  // max_positives when a margin or max_score may skip candidates (max_positives: the most
  // positives of one query).
  std::optional<int64_t> range_max;
  std::optional<double> max_score, min_score;  // skip candidates scoring above / below
  // Skip candidates scoring above (lowest positive score - absolute_margin), or above
  // (lowest positive score - |lowest positive score| x relative_margin).
  std::optional<double> absolute_margin, relative_margin;
  // The text before each query: --query-prompt, else the folder's prompt
  // --query-prompt-name, else the folder's "query" prompt if it has one (what
  // SentenceTransformer.encode_query does). Before each corpus text likewise, with the
  // folder's "document" prompt (encode_document).
  std::optional<std::string> query_prompt_name, query_prompt, corpus_prompt_name, corpus_prompt;
  // Also write the model's cosine scores of each line's positives and negatives
  // ("pos_scores", "neg_scores"): teacher scores for loss.distill (sentence-transformers'
  // output_scores).
  bool output_scores = false;
  int64_t batch_size = 32;
  std::string device = "cpu";  // cpu, cuda (worker i: cuda:<local rank i mod devices>) or cuda:N
};

int run_mine(const MineOptions& options);

}  // namespace ddp_embed
