// The ModernBERT encoder (answerdotai/ModernBERT-base/-large, gte-modernbert, modernbert-embed,
// mmBERT) with transformers' ModernBertModel parameter names, so that a Hugging Face
// model.safetensors loads by name (a ModernBertForMaskedLM file's "model." prefix is
// stripped, its head and decoder unused) and ours loads in transformers:
//
//   embeddings.tok_embeddings.weight   embeddings.norm.weight   final_norm.weight
//   layers.N.attn_norm.weight (not layer 0: an identity there)   layers.N.mlp_norm.weight
//   layers.N.attn.Wqkv.weight   layers.N.attn.Wo.weight   layers.N.mlp.Wi.weight   layers.N.mlp.Wo.weight
//
// Embeddings: the token's row, LayerNorm (no bias), dropout; no positions there. A layer:
// x + Wo(attention(rotary(Wqkv(LayerNorm(x))))), then + Wo(gelu(input) * gate) of
// Wi(LayerNorm(·)) = [input, gate]. Attention is bidirectional; rotary positions
// (rotate-half over all head_dim dimensions) take global_rope_theta in global layers and
// local_rope_theta in local ones, and a local layer's token at position i sees only the
// tokens j with |i - j| <= local_attention / 2 (transformers' bidirectional sliding mask):
// model/attention.h's window_left = window_right = local_attention / 2. LayerNorms without
// bias, linear layers without bias, exact-erf GELU. Dropout: embedding_dropout after the
// embeddings' norm, attention_dropout on the probabilities and after attn.Wo, mlp_dropout
// before mlp.Wo (0 in the published models).
//
// As BERT does (model/token_layout.h), every per-token op runs on the real tokens only and
// attention takes them packed. ModernBERT has no token types; a cross-encoder of it
// (ModernBertForSequenceClassification's head) is not implemented (model/embedder.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/pimpl.h>

#include "config/encoder_config.h"
#include "model/encoder.h"
#include "model/lora.h"
#include "model/token_layout.h"

namespace ddp_embed {

// The architecture from a Hugging Face config.json's JSON (`origin` names it in errors):
// the keys of transformers' ModernBertConfig, transformers' defaults for missing ones;
// layer_types as given, else derived from global_attn_every_n_layers; rope thetas from
// rope_parameters.{full_attention,sliding_attention}.rope_theta, else global_rope_theta /
// local_rope_theta. What this encoder does not implement is refused by name:
// hidden_activation other than "gelu", attention_bias, mlp_bias or norm_bias true, a rope
// type other than "default" or any rope_scaling, a layer type other than "full_attention"
// and "sliding_attention". Throws ModelError naming `origin` and the key.
// The writer gives back what the reader took (layer_types always, one a layer;
// rope_parameters and the older global/local_rope_theta both), so that transformers
// builds the same model from it.
ModernBertConfig modernbert_config_from_hf_json(const nlohmann::json& j, const std::string& origin);
nlohmann::json modernbert_config_to_hf_json(const ModernBertConfig& c);
// Throws ModelError naming `origin` and the key if a size is not positive, the heads do not
// divide hidden_size or head_dim is odd, a dropout is negative, a theta or norm_eps is not
// positive, local_attention is below 1 or larger than max_position_embeddings, or
// layer_types is not empty and not one known type a layer.
void validate_modernbert_config(const ModernBertConfig& c, const std::string& origin = "modernbert config");

// nn.LayerNorm(hidden, eps, bias=False): weight * (x - mean) / sqrt(var + eps).
class BiasFreeLayerNormImpl : public torch::nn::Module {
 public:
  BiasFreeLayerNormImpl(int64_t size, double eps);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
};
TORCH_MODULE(BiasFreeLayerNorm);

class ModernBertLayerImpl : public torch::nn::Module {
 public:
  // Layer `index` of the model: local when c.local(index); no attn_norm when index is 0.
  ModernBertLayerImpl(const ModernBertConfig& c, size_t index);
  // x: the real tokens, [N, H]; cos, sin: their rotary factors for this layer's theta
  // [N, head_dim] (fp32). With out_rows ([B] packed rows: each sequence's first token), only
  // their outputs are computed ([B, H]); attention then sees that query at position 0.
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& cos, const at::Tensor& sin,
                     const at::Tensor& out_rows = {});

  BiasFreeLayerNorm attn_norm{nullptr}, mlp_norm{nullptr};  // attn_norm null in layer 0
  // Linear layers that take a LoRA adapter when one is asked for (model/lora.h).
  AdaptableLinear Wqkv{nullptr}, attn_Wo{nullptr}, Wi{nullptr}, mlp_Wo{nullptr};

  // As BertLayerImpl::recompute_attention: on the CPU's padded path while autograd records,
  // attention probabilities are recomputed in backward instead of stored.
  bool recompute_attention = true;
  AttentionMode attention_mode = AttentionMode::Auto;  // model.attention (model/attention.h)
  const bool is_local;

 private:
  int64_t num_heads_, head_dim_, half_window_;
  double attention_dropout_, mlp_dropout_;
};
TORCH_MODULE(ModernBertLayer);

class ModernBertModelImpl : public TextEncoderImpl {
 public:
  // Builds the layers and initializes them as transformers does: weights from N(0, std)
  // cut at ± initializer_cutoff_factor stds, std initializer_range (the output projections
  // attn.Wo and mlp.Wo: initializer_range / sqrt(2 num_layers)); norm weights 1.
  explicit ModernBertModelImpl(const ModernBertConfig& c);

  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) override;
  // Pooling cls computes the last layer for the first token alone; mean and lasttoken read
  // every row. token_types must be undefined (ModernBERT has none), else a ModelError.
  at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                            const at::Tensor& token_types = {}) override;

  // transformers' output_hidden_states entry `layers` [B, L, H]: the normed embeddings (0),
  // the output of layer `layers` - 1, or with every layer forward() (after the final norm,
  // as transformers' last entry is); forward() is hidden_after(num_layers).
  // 0 <= layers <= num_layers, else std::out_of_range.
  at::Tensor hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t layers);

  const EncoderConfig& encoder_config() const override { return encoder_config_; }
  nlohmann::json hf_config_json() const override;
  void set_activation_checkpointing(bool on) override {
    checkpoint_layers_ = on;
    for (auto& layer : layers_) layer->recompute_attention = !on;
  }
  void set_sparse_word_gradient(bool on) override { tok_embeddings->options.sparse(on); }
  void set_attention_mode(AttentionMode mode) override {
    for (auto& layer : layers_) layer->attention_mode = mode;
  }

  const ModernBertConfig& config() const { return encoder_config_.modernbert; }
  std::vector<ModernBertLayer>& layers() { return layers_; }

  torch::nn::Embedding tok_embeddings{nullptr};
  BiasFreeLayerNorm embeddings_norm{nullptr}, final_norm{nullptr};

 private:
  // The first `layers` layers on the packed real tokens (then the final norm when all of
  // them ran); out_rows as in ModernBertLayerImpl::forward, for the last of them.
  at::Tensor run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows, int64_t layers);

  EncoderConfig encoder_config_;
  std::vector<ModernBertLayer> layers_;  // also registered as layers.N
  bool checkpoint_layers_ = false;
};
TORCH_MODULE(ModernBertModel);

}  // namespace ddp_embed
