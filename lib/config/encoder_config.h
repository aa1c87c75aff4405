// The encoders embed-train builds, each by its one description: BERT and XLM-RoBERTa
// (config/bert_config.h), MPNet (all-mpnet-base-v2), ModernBERT (config/modernbert_config.h)
// and Qwen3, the decoder that Qwen3-Embedding turns into an embedder (causal attention, the
// last token pooled). A pretrained model's comes from its
// folder's config.json (model/encoder.h: encoder_config_from_hf_json).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/bert_config.h"
#include "config/modernbert_config.h"
#include "config/gemma3_config.h"

namespace ddp_embed {

// Qwen3's decoder layers as transformers' Qwen3Model has them: RMSNorm before attention and
// before the SwiGLU feed-forward, grouped-query attention with an RMSNorm over each head of
// the queries and keys before rotary positions. head_dim need not be hidden/heads
// (Qwen3-Embedding-0.6B: 1024 hidden, 16 heads of 128).
struct Qwen3Config {
  int64_t vocab_size = 151669;
  int64_t hidden_size = 1024;
  int64_t intermediate_size = 3072;
  int64_t num_layers = 28;
  int64_t num_heads = 16;
  int64_t num_kv_heads = 8;
  int64_t head_dim = 128;
  double rms_norm_eps = 1e-6;
  double rope_theta = 1000000.0;
  int64_t max_position = 32768;
  double initializer_range = 0.02;
  bool tie_word_embeddings = true;  // written back to config.json; the encoder has no output head
  // config.json's pad_token_id (-1: none): a cross-encoder's score head reads the last token
  // that is not it (transformers' Qwen3ForSequenceClassification; model/cross_encoder.h).
  int64_t pad_token_id = -1;
  // Sliding-window attention, as transformers' Qwen3Config says it. sliding_window W (0:
  // none, what use_sliding_window false or sliding_window null mean): a sliding layer's
  // token at position i sees the tokens at i - W < j <= i. layer_types: each layer's
  // "full_attention" or "sliding_attention", num_layers of them, or empty for every layer
  // full. max_window_layers only derives layer_types when config.json has none (layers at
  // that index and after slide); it is kept to be written back as it was read.
  int64_t sliding_window = 0;
  int64_t max_window_layers = 28;
  std::vector<std::string> layer_types;

  // Whether layer `layer` (0-based) attends through the window.
  bool sliding(size_t layer) const { return layer < layer_types.size() && layer_types[layer] == "sliding_attention"; }
};

// MPNet's encoder as transformers' MPNetModel has it (all-mpnet-base-v2, multi-qa-mpnet-*):
// BERT's post-LayerNorm layers without token types, positions counted after the padding
// index as XLM-R's are, and a relative-position bias added to every layer's attention
// scores from relative_attention_num_buckets learned rows a head. transformers fixes the
// padding index at 1 and buckets the relative positions into 32 whatever the config says.
struct MPNetConfig {
  int64_t vocab_size = 30527;
  int64_t hidden_size = 768;
  int64_t num_layers = 12;
  int64_t num_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position = 514;
  int64_t relative_attention_num_buckets = 32;
  double layer_norm_eps = 1e-5;
  double hidden_dropout = 0.1;
  double attention_dropout = 0.1;
  double initializer_range = 0.02;
  int64_t bos_token_id = 0, eos_token_id = 2;  // written back as read
  bool tie_word_embeddings = true;

  static constexpr int64_t kPaddingIndex = 1;  // transformers' MPNetEmbeddings.padding_idx
  static constexpr int64_t kBuckets = 32;      // the buckets MPNetEncoder.compute_position_bias uses
  // Positions run from kPaddingIndex + 1: the longest input in tokens.
  int64_t max_length() const { return max_position - kPaddingIndex - 1; }
};

enum class Architecture { Bert, XlmRoberta, Qwen3, MPNet, ModernBert, Gemma3 };

// "bert" | "xlm-roberta" | "qwen3" | "mpnet" | "modernbert" | "gemma3_text":
// config.json's model_type.
std::string architecture_name(Architecture a);

struct EncoderConfig {
  Architecture architecture = Architecture::Bert;
  BertConfig bert;    // Bert and XlmRoberta (bert.flavor says which)
  Qwen3Config qwen3;  // Qwen3
  MPNetConfig mpnet;            // MPNet
  ModernBertConfig modernbert;  // ModernBert
  Gemma3Config gemma3;          // Gemma3 (bidirectional: not a decoder here)

  bool is_decoder() const { return architecture == Architecture::Qwen3; }
  bool is_mpnet() const { return architecture == Architecture::MPNet; }
  bool is_modernbert() const { return architecture == Architecture::ModernBert; }
  bool is_gemma3() const { return architecture == Architecture::Gemma3; }

  // The sizes every architecture has, each from its own description.
  struct Sizes {
    int64_t hidden, vocab, layers, heads, max_length;
  };
  Sizes sizes() const {
    switch (architecture) {
      case Architecture::Qwen3:
        return {qwen3.hidden_size, qwen3.vocab_size, qwen3.num_layers, qwen3.num_heads, qwen3.max_position};
      case Architecture::MPNet:
        return {mpnet.hidden_size, mpnet.vocab_size, mpnet.num_layers, mpnet.num_heads, mpnet.max_length()};
      case Architecture::ModernBert:
        return {modernbert.hidden_size, modernbert.vocab_size, modernbert.num_layers, modernbert.num_heads,
                modernbert.max_position};
      case Architecture::Gemma3:
        return {gemma3.hidden_size, gemma3.vocab_size, gemma3.num_layers, gemma3.num_heads, gemma3.max_position};
      case Architecture::Bert:
      case Architecture::XlmRoberta: break;
    }
    return {bert.hidden_size, bert.vocab_size, bert.num_layers, bert.num_heads, bert.max_length()};
  }
  int64_t hidden_size() const { return sizes().hidden; }
  int64_t vocab_size() const { return sizes().vocab; }
  int64_t num_layers() const { return sizes().layers; }
  int64_t num_heads() const { return sizes().heads; }
  // The longest input in tokens the positions allow.
  int64_t max_length() const { return sizes().max_length; }
};

inline EncoderConfig encoder_config(const BertConfig& bert) {
  EncoderConfig c;
  c.architecture = bert.flavor == BertFlavor::XlmRoberta ? Architecture::XlmRoberta : Architecture::Bert;
  c.bert = bert;
  return c;
}

inline std::string architecture_name(Architecture a) {
  switch (a) {
    case Architecture::Bert: return "bert";
    case Architecture::XlmRoberta: return "xlm-roberta";
    case Architecture::Qwen3: return "qwen3";
    case Architecture::MPNet: return "mpnet";
    case Architecture::ModernBert: return "modernbert";
    case Architecture::Gemma3: return "gemma3_text";
  }
  return "?";
}

}  // namespace ddp_embed
