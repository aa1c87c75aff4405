// The model folder: what training writes at the end and what encode / eval read.
//
//   DIR/config.json  model.safetensors          Hugging Face BertModel (no "bert." prefix)
//      tokenizer files                          vocab.txt or spiece.model + tokenizer_config.json
//      modules.json  sentence_bert_config.json  config_sentence_transformers.json
//      1_Pooling/config.json                    cls or mean, as trained
//      2_Dense/config.json  2_Dense/model.safetensors   linear.{weight,bias}, Identity
//      embed_train.json                         what trained it (config, step)
//
// so that Python's SentenceTransformer(DIR) loads it and gives the same embeddings.
// A plain Hugging Face BERT folder (config.json, model.safetensors, vocab.txt) loads too:
// pooling cls unless told otherwise, no projection.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "model/embedder.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

// Writes the folder atomically: everything goes to DIR.tmp-<pid>, which replaces DIR
// only when complete. `extra` is stored in embed_train.json.
void save_model_folder(const std::string& dir, SentenceEmbedder& model, const Tokenizer& tokenizer,
                       int max_length, const nlohmann::json& extra);

struct LoadedModel {
  SentenceEmbedder model{nullptr};
  std::unique_ptr<Tokenizer> tokenizer;
  int max_length = 512;
};

// pooling: "" = as the folder says (1_Pooling/config.json), else cls | mean.
LoadedModel load_model_folder(const std::string& dir, const std::string& pooling = "");

}  // namespace ddp_embed
