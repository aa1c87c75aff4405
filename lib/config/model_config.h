// model.* and tokenizer.*: what the model and its tokenizer are made from (docs/config.md).
// The types only; config/config.h reads and validates them.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "config/bert_config.h"
#include "config/choices.h"

namespace ddp_embed {

// model.sparse: a sparse encoder's SPLADE pooling (model/splade_pooling.h). "auto" (no
// value): model.init's SpladePooling module, else max and relu, SPLADE v2's.
struct SparseModelConfig {
  std::optional<SpladeReduce> pooling_strategy;
  std::optional<SpladeActivation> activation_function;
  // Tokens whose vocabulary logits are made at once: the pooling's peak memory is a few
  // [chunk_tokens, vocabulary] tensors (4 MB each at 32 tokens × 30,522 entries).
  int chunk_tokens = 256;
  // At most this many non-zero entries in each vector the model encodes (its largest; the
  // rest 0), as sentence-transformers' SparseEncoder(max_active_dims=...): what encode,
  // eval and data.eval see, not the loss (training shapes every entry, as theirs does).
  // Saved in the folder; "auto" (no value): model.init's, else every entry.
  std::optional<int64_t> max_active_dims;
};

struct ModelConfig {
  // bi_encoder: the sentence embedder (model/embedder.h); cross_encoder: a reranker that
  // reads (query, document) as one sequence and scores it (model/cross_encoder.h);
  // sparse: a SPLADE encoder, the masked-LM head's logits pooled into a weight per
  // vocabulary entry (model/splade_pooling.h).
  ModelKind kind = ModelKind::BiEncoder;
  SparseModelConfig sparse;  // model.kind "sparse" only
  int num_labels = 1;  // cross_encoder: the classification head's outputs
  std::optional<std::string> init;  // a Hugging Face BERT folder; its architecture wins
  BertConfig architecture;          // model.vocab_size ... model.max_position: a model from scratch
  double dropout = 0.1;             // both of the architecture's dropouts, pretrained or not
  // "auto" is no value: model.init's Pooling module, else cls (lasttoken for a decoder).
  std::optional<Pooling> pooling;
  AttentionMode attention = AttentionMode::Auto;  // model/attention.h
  int projection_dim = 128;     // 0 = no projection
  // Named texts put before inputs ("query" -> "query: "), written into the model folder
  // (config_sentence_transformers.json) beside those model.init brings; a name here wins.
  std::map<std::string, std::string> prompts;
  // > 0: LoRA (model/lora.h): adapters of this rank on every linear layer of the encoder,
  // which is otherwise frozen; the saved model has them merged. 0: a full fine-tune.
  int lora_rank = 0;
  double lora_alpha = 16;  // the adapters' scale is lora_alpha / lora_rank
};

struct TokenizerConfig {
  TokenizerType type = TokenizerType::SentencePiece;
  std::string path = "runs/demo/tokenizer";
  int max_length = 64;
  bool lower_case = true;  // wordpiece only; a vocab folder's tokenizer_config.json wins
};

}  // namespace ddp_embed
