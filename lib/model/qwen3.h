// The Qwen3 decoder as an embedder's encoder (Qwen3-Embedding 0.6B / 4B / 8B), with
// transformers' Qwen3Model parameter names, so that a Hugging Face model.safetensors loads
// by name (a Qwen3ForCausalLM file's "model." prefix is stripped, its lm_head unused):
//
//   embed_tokens.weight   norm.weight
//   layers.N.input_layernorm.weight   layers.N.post_attention_layernorm.weight
//   layers.N.self_attn.{q,k,v,o}_proj.weight   layers.N.self_attn.{q,k}_norm.weight
//   layers.N.mlp.{gate,up,down}_proj.weight
//
// A layer: x + attention(RMSNorm(x)), then + SwiGLU(RMSNorm(·)). Attention is causal and
// grouped (num_kv_heads key/value heads shared by num_heads query heads); queries and keys
// get an RMSNorm over each head and then rotary positions (rotate-half, theta rope_theta,
// over all head_dim dimensions). No biases, no dropout but attention's. A sliding layer
// (config layer_types, Qwen3Config::sliding) attends only to the sliding_window tokens
// ending at each query, itself included, as transformers' sliding causal mask does.
//
// As BERT does (model/encoder.h: TokenLayout), every per-token op runs on the real tokens
// only; attention sees them right-padded, where the causal mask alone keeps each real
// token from the padding after it, so no padding mask is needed and the flash kernel can
// run. Pooling the last token (what Qwen3-Embedding does) computes the last layer for
// that token alone.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "config/encoder_config.h"
#include "model/encoder.h"
#include "model/lora.h"
#include "model/token_layout.h"

namespace ddp_embed {

// The architecture from a Hugging Face config.json's JSON (`origin` names it in errors):
// vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
// num_key_value_heads, head_dim, rms_norm_eps, rope_theta (or rope_parameters.rope_theta),
// max_position_embeddings, initializer_range, tie_word_embeddings, and the sliding windows:
// use_sliding_window, sliding_window, layer_types (without them, derived from
// max_window_layers as transformers derives them). What this encoder does not implement is
// refused by name: hidden_act other than "silu", attention_bias, a layer type other than
// "full_attention" and "sliding_attention", rope scaling other than "default". Throws
// ModelError naming `origin` and the key.
// The writer gives back what the reader took, sliding fields included (layer_types always,
// one a layer), so that transformers builds the same model from it.
Qwen3Config qwen3_config_from_hf_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json qwen3_config_to_hf_json(const Qwen3Config& c);
// Throws ModelError naming `origin` if a size is not positive, the query heads are not a
// multiple of the key/value heads, head_dim is odd, an epsilon or rope_theta is not
// positive, sliding_window is negative or larger than max_position_embeddings, or
// layer_types is not empty and not one known type a layer, or has a sliding layer without
// a window.
void validate_qwen3_config(const Qwen3Config& c, const std::string& origin = "qwen3 config");

// weight * x / sqrt(mean(x^2) + eps), computed in fp32 as transformers' Qwen3RMSNorm does.
class RMSNormImpl : public torch::nn::Module {
 public:
  RMSNormImpl(int64_t size, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(RMSNorm);

class Qwen3LayerImpl : public torch::nn::Module {
 public:
  // Layer `index` of the model: a sliding one when c.sliding(index).
  Qwen3LayerImpl(const Qwen3Config& c, size_t index);
  // x: the real tokens, [N, H]; cos, sin: their rotary factors [N, head_dim]. Attention is
  // causal, on the packed tokens (model/attention.h), in a sliding layer over the window
  // ending at each token. With out_rows ([B] packed rows: each sequence's last real
  // token), only their outputs are computed ([B, H]).
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& out_rows = {});

  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  // Linear layers that take a LoRA adapter when one is asked for (model/lora.h).
  AdaptableLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};
  AdaptableLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

  // As BertLayerImpl::recompute_attention: on the CPU's padded path while autograd records,
  // attention probabilities are recomputed in backward instead of stored.
  bool recompute_attention = true;
  AttentionMode attention_mode = AttentionMode::Auto;  // model.attention (model/attention.h)

 private:
  int64_t num_heads_, num_kv_heads_, head_dim_;
  int64_t window_left_;  // sliding_window - 1 in a sliding layer, else -1 (no bound)
};
TORCH_MODULE(Qwen3Layer);

class Qwen3ModelImpl : public TextEncoderImpl {
 public:
  // Builds the layers and initializes them as transformers does: N(0, initializer_range)
  // for Linear and Embedding weights, RMSNorm weights 1.
  explicit Qwen3ModelImpl(const Qwen3Config& c);

  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) override;
  at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                            const at::Tensor& token_types = {}) override;

  const EncoderConfig& encoder_config() const override { return encoder_config_; }
  nlohmann::json hf_config_json() const override;
  void set_activation_checkpointing(bool on) override {
    checkpoint_layers_ = on;
    for (auto& layer : layers_) layer->recompute_attention = !on;
  }
  void set_sparse_word_gradient(bool on) override { embed_tokens->options.sparse(on); }
  void set_attention_mode(AttentionMode mode) override {
    for (auto& layer : layers_) layer->attention_mode = mode;
  }

  const Qwen3Config& config() const { return encoder_config_.qwen3; }
  std::vector<Qwen3Layer>& layers() { return layers_; }

  torch::nn::Embedding embed_tokens{nullptr};
  RMSNorm norm{nullptr};

 private:
  // The layers on the packed real tokens; out_rows as in Qwen3LayerImpl::forward.
  at::Tensor run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows);

  EncoderConfig encoder_config_;
  std::vector<Qwen3Layer> layers_;  // also registered as layers.N
  bool checkpoint_layers_ = false;
};
TORCH_MODULE(Qwen3Model);

}  // namespace ddp_embed
