// `embed-train rerank`: a cross-encoder folder (model/model_folder.h loads one:
// LoadedModel.model->is_cross_encoder()) scoring (query, document) pairs on one process,
// as sentence-transformers' CrossEncoder(dir).predict scores them; and the checks that a
// command got the kind of folder it works with (a cross-encoder has no embeddings, a
// bi-encoder no pair scores).
//
// rerank: JSONL in, {"query": str, "doc": str} a line (the document may be named
//   "document" or "passage" instead, or the pair {"text1", "text2"}); blank lines are
//   skipped. JSONL out, a line per pair in input order: {"score": s} for a folder of one
//   label, {"scores": [s1, ...]} for more, each the folder's activation (sigmoid,
//   identity, tanh: LoadedModel.activation) of its logit. Each pair is joined as
//   tokenize/pair_template.h joins it (transformers' tokenizer(query, doc,
//   truncation=True, max_length=N)); pairs are batched by joined length internally (less
//   padding), which leaves each score as it is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include "model/model_folder.h"

namespace ddp_embed {

struct RerankOptions {
  std::string model_dir, input, output;
  int batch_size = 64;
  int max_length = 0;  // tokens of a joined pair; 0: the folder's (CrossEncoder's max_length)
  std::string device = "cpu";
};

// Reads the pairs, scores them with the folder, writes the scores (atomically). Throws as
// read_rerank_pairs, require_cross_encoder and load_model_folder do.
int run_rerank(const RerankOptions& options);

struct TextPair {
  std::string query, doc;
};

// A JSONL file's pairs (see above), in file order. Throws DataError "FILE:LINE: ..." for a
// line that is not a JSON object, has no query or no document (or two documents: "doc"
// and "passage"), or one that is not a string; "FILE: no pairs in it" for none; a folder
// or a missing file is a std::runtime_error naming it.
std::vector<TextPair> read_rerank_pairs(const std::string& path);

struct RerankSettings {
  int64_t batch_size = 64;
  c10::Device device{c10::kCPU};
  int max_length = 512;          // tokens of a joined pair
  std::string label = "rerank";  // names the work in the progress line
};

// The folder's scores of every pair: float32 [n, num_labels] on the CPU, in input order,
// the activation applied. Pairs are sorted by joined length (longest first, stable) and
// cut into batches of batch_size in that order. `model` must be a cross-encoder
// (require_cross_encoder); throws TokenizerError when max_length leaves no room for a
// piece of each text.
at::Tensor score_pairs(LoadedModel& model, const std::vector<TextPair>& pairs, const RerankSettings& settings);
// The same for a cross-encoder and its tokenizer as they are (the model under training).
at::Tensor score_pairs(SentenceEmbedder& model, const Tokenizer& tokenizer, ScoreActivation activation,
                       const std::vector<TextPair>& pairs, const RerankSettings& settings);

// The kind checks: std::invalid_argument saying what the folder `dir` is and which command
// serves it, when `command` ("rerank", "encode", "eval", "mine", ...) cannot use it.
void require_cross_encoder(const LoadedModel& model, const std::string& dir, const std::string& command);
void require_bi_encoder(const LoadedModel& model, const std::string& dir, const std::string& command);
// require_bi_encoder, and not a sparse encoder either: for what ranks or masks by cosines
// of dense embeddings (mine, a reranker's first stage).
void require_dense_embedder(const LoadedModel& model, const std::string& dir, const std::string& command);

}  // namespace ddp_embed
