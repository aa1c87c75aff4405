// The BERT encoder (post-LayerNorm transformer, exact erf GELU, learned absolute
// positions) with Hugging Face BertModel's parameter names, so that a Hugging Face
// model.safetensors loads by name and ours loads in transformers:
//
//   embeddings.{word,position,token_type}_embeddings.weight, embeddings.LayerNorm.*
//   encoder.layer.N.attention.self.{query,key,value}.*
//   encoder.layer.N.attention.output.{dense,LayerNorm}.*
//   encoder.layer.N.intermediate.dense.*   encoder.layer.N.output.{dense,LayerNorm}.*
//
// There is no pooler: sentence embeddings pool the last hidden state (model/encoder.h).
// XLM-RoBERTa is the same model with other position ids (BertFlavor::XlmRoberta).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "config/bert_config.h"
#include "model/dropout.h"  // fast_dropout, which the tests call too
#include "model/encoder.h"
#include "model/lora.h"
#include "model/token_layout.h"

namespace ddp_embed {

// The architecture from a Hugging Face config.json (a file, or its JSON; `origin` names it
// in errors). Keys: hidden_size, num_hidden_layers, num_attention_heads,
// intermediate_size, max_position_embeddings, vocab_size, type_vocab_size,
// layer_norm_eps, hidden_dropout_prob, attention_probs_dropout_prob, pad_token_id,
// initializer_range; a missing one takes BERT-base's value, as in transformers. hidden_act
// must be "gelu" (exact erf) and position_embedding_type "absolute". model_type "bert"
// or "xlm-roberta" (the flavor; XLM-R's missing pad_token_id is 1). Throws ModelError
// naming the file and key.
BertConfig bert_config_from_hf_json(const std::string& path);
BertConfig bert_config_from_hf_json(const nlohmann::json& j, const std::string& origin);
// A config.json that transformers' BertModel (XLMRobertaModel) reads back.
nlohmann::json bert_config_to_hf_json(const BertConfig& c);
// Throws ModelError naming `origin` if a size is not positive, hidden_size % num_heads != 0,
// pad_token_id is outside the vocabulary, no position is left after the padding index
// (XLM-R) or a dropout is not in [0, 1).
void validate_bert_config(const BertConfig& c, const std::string& origin = "bert config");

// word + position + token type embeddings, LayerNorm, dropout.
class BertEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit BertEmbeddingsImpl(const BertConfig& c);
  // [B, L] int64 → [B, L, H]. token_types: int64 [B, L] below type_vocab_size (a pair's
  // segments); undefined = all 0, added as one row.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& token_types = {});
  // XLM-RoBERTa: positions from the ids, as transformers computes them (see forward).

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr},
      token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};

 private:
  double dropout_;
  BertFlavor flavor_;
  int64_t pad_token_id_;
};
TORCH_MODULE(BertEmbeddings);

// One encoder layer: self-attention and feed-forward, each followed by residual +
// LayerNorm. Registered under HF's nested names (attention.self.query, ...).
class BertLayerImpl : public torch::nn::Module {
 public:
  explicit BertLayerImpl(const BertConfig& c);
  // x: the real tokens only, [N, H] (model/token_layout.h), which attention takes packed
  // (model/attention.h). Returns [N, H]; given out_rows ([B] packed rows, one a sequence:
  // TokenLayout::rows_of), the output of those tokens alone ([B, H]) — keys and values
  // still come from every token.
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& out_rows = {});

  // Linear layers that take a LoRA adapter when one is asked for (model/lora.h).
  AdaptableLinear query{nullptr}, key{nullptr}, value{nullptr};
  AdaptableLinear attention_dense{nullptr};        // attention.output.dense
  torch::nn::LayerNorm attention_norm{nullptr};    // attention.output.LayerNorm
  AdaptableLinear intermediate_dense{nullptr};     // intermediate.dense
  AdaptableLinear output_dense{nullptr};           // output.dense
  torch::nn::LayerNorm output_norm{nullptr};       // output.LayerNorm

  // On the CPU's padded path, while autograd records: recompute the attention probabilities
  // in backward instead of storing them (attention_recomputed, model/activation_checkpoint.h).
  // Off while the whole layer is checkpointed: its backward recomputes everything anyway.
  bool recompute_attention = true;
  AttentionMode attention_mode = AttentionMode::Auto;  // model.attention (model/attention.h)

 private:
  int64_t num_heads_;
  double hidden_dropout_, attention_dropout_;
};
TORCH_MODULE(BertLayer);

// linear(gelu(pre), weight, bias) — a feed-forward block's second half — keeping only `pre`
// ([N, intermediate]) for backward, which recomputes gelu(pre): autograd would keep both
// pre (for GELU's backward) and gelu(pre) (for the weight's gradient), the largest
// activations of a BERT layer (MiniLM at 32 × 64-token pairs: 151 MB of a 1.4 GB step), for
// one more GELU a layer (1% of that step). Exact erf GELU, as "gelu" in HF. For fp32/fp64
// without autocast; elsewhere the caller composes at::linear and at::gelu.
at::Tensor gelu_then_linear(const at::Tensor& pre, const at::Tensor& weight, const at::Tensor& bias);

class BertModelImpl : public TextEncoderImpl {
 public:
  // Builds the layers and initializes them as BERT does (init_weights()).
  explicit BertModelImpl(const BertConfig& c);

  // input_ids int64 [B, L]; attention_mask [B, L], 1 = real token, 0 = padding (any
  // integer, bool or float dtype; right-padded). Token types are all 0 (forward_pooled
  // takes others), positions 0..L-1
  // (XLM-R: from the padding index on). Returns the last hidden state [B, L, H]. Padding
  // never changes a real token's output: attention sees each text's real tokens alone.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) override;
  at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                            const at::Tensor& token_types = {}) override;

  // The last hidden state at position 0 ([CLS]), [B, H]: forward(...)[:, 0] without
  // computing the last layer for the other positions (~20% of the FLOPs of a 4-layer
  // model, forward and backward).
  at::Tensor forward_cls(const at::Tensor& input_ids, const at::Tensor& attention_mask);

  // BERT's initialization, deterministic under torch::manual_seed: N(0,
  // initializer_range) for Linear and Embedding weights, zero biases and padding row,
  // LayerNorm weight 1 and bias 0. The constructor makes the same random draws, in the
  // same order, as transformers' BertModel(config) and a plain PyTorch reference that
  // draws in module order (their pooler's draws are made and thrown away), so that a
  // given seed gives their initial weights (checked against the latter, test_bert.cpp).
  void init_weights();

  void set_sparse_word_gradient(bool on) override { embeddings->word_embeddings->options.sparse(on); }
  void set_attention_mode(AttentionMode mode) override {
    for (auto& layer : layers_) layer->attention_mode = mode;
  }
  void set_activation_checkpointing(bool on) override {
    checkpoint_layers_ = on;
    for (auto& layer : layers_) layer->recompute_attention = !on;
  }
  bool activation_checkpointing() const { return checkpoint_layers_; }

  const BertConfig& config() const { return config_; }
  const EncoderConfig& encoder_config() const override { return encoder_config_; }
  nlohmann::json hf_config_json() const override;
  std::vector<BertLayer>& layers() { return layers_; }

  BertEmbeddings embeddings{nullptr};

 private:
  // Layer i on x, checkpointed when that is on and autograd records.
  at::Tensor run_layer(size_t i, const at::Tensor& x, const TokenLayout& layout, const at::Tensor& out_rows);

  BertConfig config_;
  EncoderConfig encoder_config_;
  std::vector<BertLayer> layers_;  // also registered as encoder.layer.N
  bool checkpoint_layers_ = false;
};
TORCH_MODULE(BertModel);

}  // namespace ddp_embed
