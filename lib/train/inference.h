// `embed-train encode` and `embed-train eval`: a trained model folder (or a plain Hugging
// Face BERT folder) applied to a file of sentences or pairs, on one process.
//
// encode: text (one sentence a line) or JSONL ("text") in; JSONL {"text", "embedding"} or
//   .npy (float32, [N, dim]) out, in input order. Sentences are batched by length
//   internally (less padding); progress goes to stderr.
// eval: retrieval (each query's positive among all positives: recall@1/5/10, mrr@10,
//   ndcg@10) or STS (spearman, pearson of cosine against "score"), as a table or as one
//   JSON object {"task", "pairs", <metric>: value, ...}.
#pragma once

#include <string>

namespace ddp_embed {

struct EncodeOptions {
  std::string model_dir, input, output;
  int batch_size = 64;
  std::string device = "cpu";
  std::string pooling;  // empty: as the folder says (cls for plain BERT folders)
  bool normalize = false;
};

struct EvalOptions {
  std::string model_dir, data;
  std::string task;  // retrieval | sts | empty: sts when every pair has a score
  int batch_size = 64;
  std::string device = "cpu";
  std::string pooling;
  std::string format = "table";  // table | json: what goes to stdout
  std::string json_out;          // also write the JSON here (empty: no file)
};

int run_encode(const EncodeOptions& options);
int run_eval(const EvalOptions& options);

}  // namespace ddp_embed
