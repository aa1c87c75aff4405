// `embed-train encode`, `eval` and `tokenize`: a model folder (written by training, a
// sentence-transformers folder or a plain Hugging Face BERT folder: model/model_folder.h)
// applied to a file of sentences or pairs, on one process.
//
// encode: text (one sentence a line) or JSONL ("text") in; JSONL {"text", "embedding"} or
//   .npy (float32, [N, dim]) out, in input order. Sentences are batched by length
//   internally (less padding); progress goes to stderr.
//   A folder with a Normalize module gives unit vectors (x / max(||x||, 1e-12), as
//   torch's F.normalize); --normalize does the same for any folder.
// eval: retrieval (each query's positive among all positives: recall@1/5/10, mrr@10,
//   ndcg@10) or STS (spearman, pearson of cosine against "score"), as a table or as one
//   JSON object {"task", "pairs", <metric>: value, ...}.
// tokenize: the token ids encode feeds the model for each sentence of the same input
//   (with [CLS]/[SEP], truncated to the folder's max length, lower-cased first when
//   sentence_bert_config.json says do_lower_case), one JSON line {"ids": [...]} each, in
//   input order.
#pragma once

#include <string>

namespace ddp_embed {

struct EncodeOptions {
  std::string model_dir, input, output;
  int batch_size = 64;
  std::string device = "cpu";
  std::string pooling;  // empty: as the folder says (cls for plain BERT folders)
  bool normalize = false;  // also without a Normalize module in the folder
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

struct TokenizeOptions {
  std::string model_dir, input, output;
};

int run_encode(const EncodeOptions& options);
int run_eval(const EvalOptions& options);
int run_tokenize(const TokenizeOptions& options);

}  // namespace ddp_embed
