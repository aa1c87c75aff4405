// The BERT encoder's architecture: its one description. A model trained from scratch
// takes it from the config's "model" section (model.vocab_size ... model.max_position,
// the defaults below); a pretrained one from its folder's Hugging Face config.json
// (model/bert.h: bert_config_from_hf_json, whose missing keys take BERT-base's values).
// XLM-RoBERTa (BGE-M3, multilingual-E5) is this architecture too: the same layers and
// parameter names, only its position ids start after the padding index.
#pragma once

#include <cstdint>

namespace ddp_embed {

enum class BertFlavor {
  Bert,        // positions 0, 1, 2 ... (model_type "bert")
  XlmRoberta,  // positions pad_token_id + 1, + 2 ...; padding at pad_token_id (model_type "xlm-roberta")
};

struct BertConfig {
  BertFlavor flavor = BertFlavor::Bert;
  int64_t vocab_size = 8000;
  int64_t hidden_size = 256;
  int64_t num_layers = 4;
  int64_t num_heads = 4;
  int64_t intermediate_size = 1024;
  int64_t max_position = 512;
  int64_t type_vocab_size = 2;
  double layer_norm_eps = 1e-12;
  double hidden_dropout = 0.1;     // embeddings and every sub-layer's output
  double attention_dropout = 0.1;  // attention probabilities
  int64_t pad_token_id = 0;
  double initializer_range = 0.02;  // std of the normal init of weights

  // The position id of a sequence's first token, and so the longest input in tokens.
  int64_t position_offset() const { return flavor == BertFlavor::XlmRoberta ? pad_token_id + 1 : 0; }
  int64_t max_length() const { return max_position - position_offset(); }
};

}  // namespace ddp_embed
