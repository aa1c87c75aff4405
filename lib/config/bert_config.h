// The BERT encoder's architecture: its one description. A model trained from scratch
// takes it from the config's "model" section (model.vocab_size ... model.max_position,
// the defaults below); a pretrained one from its folder's Hugging Face config.json
// (model/bert.h: bert_config_from_hf_json, whose missing keys take BERT-base's values).
#pragma once

#include <cstdint>

namespace ddp_embed {

struct BertConfig {
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
};

}  // namespace ddp_embed
