// Gemma 3's text encoder as EmbeddingGemma uses it (google/embeddinggemma-300m): transformers'
// Gemma3TextModel with use_bidirectional_attention, described once here; model/gemma3.h reads
// it from config.json and builds the model. Apart from BERT's and Qwen3's descriptions
// (config/encoder_config.h) because its fields are its own: two rope thetas, a symmetric
// sliding window, the attention scale from query_pre_attn_scalar.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ddp_embed {

// Defaults: transformers' Gemma3TextConfig (what a config.json without the key means), except
// use_bidirectional_attention, the one value embed-train implements (a causal Gemma 3 is
// refused when read).
struct Gemma3Config {
  int64_t vocab_size = 262208;
  int64_t hidden_size = 2304;
  int64_t intermediate_size = 9216;
  int64_t num_layers = 26;
  int64_t num_heads = 8;
  int64_t num_kv_heads = 4;
  int64_t head_dim = 256;
  double rms_norm_eps = 1e-6;
  int64_t max_position = 131072;
  double initializer_range = 0.02;
  bool tie_word_embeddings = true;  // written back; the encoder has no output head
  int64_t pad_token_id = 0;         // the embedding's padding_idx in transformers (no gradient for its row)
  int64_t bos_token_id = 2, eos_token_id = 1;
  // Attention scores are q·k / sqrt(query_pre_attn_scalar), not / sqrt(head_dim). An integer:
  // transformers 5's strict Gemma3TextConfig refuses a config.json that writes 256.0.
  int64_t query_pre_attn_scalar = 256;
  // Rotary positions: one theta for the global layers, one for the sliding ones.
  double rope_theta_full = 1000000.0;
  double rope_theta_sliding = 10000.0;
  // config.json's sliding_window W, as the file has it. transformers' bidirectional Gemma 3
  // (Gemma3TextConfig.__post_init__) attends with W // 2 + 1 as an exclusive bound: a sliding
  // layer's token i sees the tokens j with |i - j| <= W // 2 (window_half_width()).
  int64_t sliding_window = 4096;
  // Each layer's "sliding_attention" or "full_attention", num_layers of them (the reader fills
  // them from sliding_window_pattern when config.json has none; empty: every layer full).
  std::vector<std::string> layer_types;

  bool sliding(size_t layer) const { return layer < layer_types.size() && layer_types[layer] == "sliding_attention"; }
  // How far a sliding layer's token sees on each side.
  int64_t window_half_width() const { return sliding_window / 2; }
};

}  // namespace ddp_embed
