// The ModernBERT encoder's architecture (answerdotai/ModernBERT-base/-large, gte-modernbert,
// modernbert-embed, mmBERT): its one description, read from a folder's config.json
// (model/modernbert.h: modernbert_config_from_hf_json, whose missing keys take
// transformers' ModernBertConfig defaults, ModernBERT-base's). Apart from BERT's because
// almost nothing is shared: pre-norm layers without biases, rotary positions with a theta
// for each layer type, GeGLU, and local layers that see a window around each token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp_embed {

struct ModernBertConfig {
  int64_t vocab_size = 50368;
  int64_t hidden_size = 768;
  int64_t intermediate_size = 1152;  // the GeGLU's width: Wi is [2 * this, hidden]
  int64_t num_layers = 22;
  int64_t num_heads = 12;  // head_dim = hidden_size / num_heads
  int64_t max_position = 8192;
  double norm_eps = 1e-5;
  double initializer_range = 0.02;
  double initializer_cutoff_factor = 2.0;  // weights drawn from N(0, std) cut at ± this many stds
  double embedding_dropout = 0.0, attention_dropout = 0.0, mlp_dropout = 0.0;
  // Rotary positions: theta of the global ("full_attention") and local ("sliding_attention")
  // layers, over all head_dim dimensions.
  double global_rope_theta = 160000.0, local_rope_theta = 10000.0;
  // A local layer's token at position i sees the tokens j with |i - j| <= local_attention / 2
  // (transformers' bidirectional sliding mask, config.sliding_window = local_attention // 2).
  int64_t local_attention = 128;
  // Without layer_types, layer i is local unless i is a multiple of this (transformers'
  // ModernBertConfig.__post_init__); kept to be written back as read.
  int64_t global_attn_every_n_layers = 3;
  // Each layer's "full_attention" or "sliding_attention", num_layers of them; empty: derived
  // as above.
  std::vector<std::string> layer_types;
  int64_t pad_token_id = 50283, cls_token_id = 50281, sep_token_id = 50282, bos_token_id = 50281,
          eos_token_id = 50282;
  bool tie_word_embeddings = true;  // written back; the encoder has no output head
  // What transformers' classification head of the same folder would be: not used by the
  // encoder, written back as read so that the folder we write still says it.
  std::string classifier_pooling = "cls", classifier_activation = "gelu";
  double classifier_dropout = 0.0;
  bool classifier_bias = false, decoder_bias = true;

  // Whether layer `layer` (0-based) is local (attends through the window).
  bool local(size_t layer) const {
    if (layer < layer_types.size()) return layer_types[layer] == "sliding_attention";
    return layer_types.empty() && global_attn_every_n_layers > 0 &&
           static_cast<int64_t>(layer) % global_attn_every_n_layers != 0;
  }
  // The window each side of a token in a local layer.
  int64_t half_window() const { return local_attention / 2; }
};

}  // namespace ddp_embed
