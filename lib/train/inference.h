// `embed-train encode` and `embed-train eval`: a trained model folder (or a plain Hugging
// Face BERT folder) applied to a file of sentences or pairs, on one process.
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
  std::string json_out;
};

int run_encode(const EncodeOptions& options);
int run_eval(const EvalOptions& options);

}  // namespace ddp_embed
