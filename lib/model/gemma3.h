// Gemma 3's text model as an embedder's encoder: EmbeddingGemma (google/embeddinggemma-300m)
// is transformers' Gemma3TextModel with use_bidirectional_attention, then mean pooling and two
// Dense layers in its sentence-transformers folder. Parameter names are Gemma3TextModel's, so
// that its model.safetensors loads by name (a Gemma3ForCausalLM file's "model." prefix is
// stripped by the loader):
//
//   embed_tokens.weight   norm.weight
//   layers.N.{input,post_attention,pre_feedforward,post_feedforward}_layernorm.weight
//   layers.N.self_attn.{q,k,v,o}_proj.weight   layers.N.self_attn.{q,k}_norm.weight
//   layers.N.mlp.{gate,up,down}_proj.weight
//
// The maths, transformers' modeling_gemma3.py:
//  - word embeddings × sqrt(hidden_size) (that factor rounded to the weights' dtype);
//  - every RMSNorm is Gemma's: x / sqrt(mean(x²) + eps) · (1 + weight), in fp32, weights
//    starting at 0;
//  - a layer: x + post_attention_norm(attention(input_norm(x))), then
//    + post_feedforward_norm(GeGLU(pre_feedforward_norm(·))), GeGLU being
//    down(gelu_tanh(gate(h)) · up(h));
//  - attention: grouped heads (num_kv_heads shared by num_heads), an RMSNorm over each head
//    of the queries and keys, then rotary positions (rotate-half, over all head_dim) with
//    theta rope_theta_full in global layers and rope_theta_sliding in sliding ones; scores
//    scaled by 1 / sqrt(query_pre_attn_scalar); bidirectional: every token sees every real
//    token of its text in a global layer, those within window_half_width() on either side
//    in a sliding one (Gemma3Config::sliding_window says why half).
// Then the final norm. No biases, no dropout but attention's (0 in every Gemma 3).
//
// As BERT and Qwen3 do (model/token_layout.h), every per-token op runs on the real tokens only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "config/gemma3_config.h"
#include "model/encoder.h"
#include "model/lora.h"
#include "model/token_layout.h"

namespace ddp_embed {

// The architecture from a Hugging Face config.json's JSON (`origin` names it in errors):
// the sizes, rms_norm_eps, max_position_embeddings, initializer_range, query_pre_attn_scalar,
// the token ids, sliding_window and layer_types (without them, from sliding_window_pattern,
// default 6, as transformers derives them), and the two rope thetas from rope_parameters
// (transformers 5) or rope_theta and rope_local_base_freq (4.x). Refused by name, as not
// implemented: use_bidirectional_attention other than true (a causal Gemma 3), hidden_activation
// other than "gelu_pytorch_tanh", attention_bias, attn_logit_softcapping or
// final_logit_softcapping set, a rope_type other than "default" (rope scaling), a layer type
// other than "full_attention" and "sliding_attention". Throws ModelError naming `origin` and
// the key. The writer gives back what the reader took (transformers 5's form).
Gemma3Config gemma3_config_from_hf_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json gemma3_config_to_hf_json(const Gemma3Config& c);
// Throws ModelError naming `origin` if a size is not positive, hidden_size is not a multiple
// of num_attention_heads (transformers' own rule), the query heads are not a multiple of the
// key/value heads, head_dim is odd, an epsilon, theta or query_pre_attn_scalar is not
// positive, layer_types has not one known type a layer, or a layer slides with
// sliding_window below 1.
void validate_gemma3_config(const Gemma3Config& c, const std::string& origin = "gemma3 config");

// x / sqrt(mean(x²) + eps) · (1 + weight), in fp32, back in x's dtype (Gemma3RMSNorm).
class Gemma3RMSNormImpl : public torch::nn::Module {
 public:
  Gemma3RMSNormImpl(int64_t size, double eps);  // weight starts at 0: the identity scale
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(Gemma3RMSNorm);

class Gemma3LayerImpl : public torch::nn::Module {
 public:
  // Layer `index` of the model: a sliding one when c.sliding(index).
  Gemma3LayerImpl(const Gemma3Config& c, size_t index);
  // x: the real tokens, [N, H]; cos, sin: their rotary factors for this layer's type
  // [N, head_dim]. With out_rows ([B] packed rows: each sequence's first token), only their
  // outputs are computed ([B, H]) (in a sliding layer, on CUDA, through the padded path:
  // attention.h).
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& out_rows = {});
  bool sliding() const { return window_ >= 0; }

  Gemma3RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Gemma3RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
  // Linear layers that take a LoRA adapter when one is asked for (model/lora.h).
  AdaptableLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Gemma3RMSNorm q_norm{nullptr}, k_norm{nullptr};
  AdaptableLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

  bool recompute_attention = true;  // as Qwen3LayerImpl's
  AttentionMode attention_mode = AttentionMode::Auto;

 private:
  int64_t num_heads_, num_kv_heads_, head_dim_;
  int64_t window_;       // window_half_width() in a sliding layer, else -1 (no bound)
  double query_factor_;  // sqrt(head_dim / query_pre_attn_scalar): attention() divides by sqrt(head_dim)
};
TORCH_MODULE(Gemma3Layer);

class Gemma3ModelImpl : public TextEncoderImpl {
 public:
  // Builds the layers and initializes them as transformers does: N(0, initializer_range)
  // for Linear and Embedding weights (the padding row of the embedding 0), norms 0.
  explicit Gemma3ModelImpl(const Gemma3Config& c);

  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) override;
  // cls: the last layer for the first tokens alone; mean and lasttoken: every row. Token
  // types: none (a ModelError if given).
  at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                            const at::Tensor& token_types = {}) override;
  // transformers' output_hidden_states entry `layers` [B, L, H]: the scaled word embeddings
  // (0), the output of layer `layers` - 1, or with every layer forward() (after the final
  // norm, as transformers' last entry is); forward() is hidden_after(num_layers).
  // 0 <= layers <= num_layers, else std::out_of_range.
  at::Tensor hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t layers);

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

  const Gemma3Config& config() const { return encoder_config_.gemma3; }
  std::vector<Gemma3Layer>& layers() { return layers_; }

  torch::nn::Embedding embed_tokens{nullptr};
  Gemma3RMSNorm norm{nullptr};

 private:
  // The first `layers` layers on the packed real tokens (then the final norm when all of
  // them ran); out_rows as in Gemma3LayerImpl::forward, for the last layer.
  at::Tensor run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows, int64_t layers);

  EncoderConfig encoder_config_;
  std::vector<Gemma3Layer> layers_;  // also registered as layers.N
  bool checkpoint_layers_ = false;
};
TORCH_MODULE(Gemma3Model);

}  // namespace ddp_embed
