// The MPNet encoder (all-mpnet-base-v2, multi-qa-mpnet-*) with transformers' MPNetModel
// parameter names, so that a Hugging Face model.safetensors loads by name and ours loads in
// transformers:
//
//   embeddings.{word,position}_embeddings.weight   embeddings.LayerNorm.*
//   encoder.layer.N.attention.attn.{q,k,v,o}.*     encoder.layer.N.attention.LayerNorm.*
//   encoder.layer.N.intermediate.dense.*           encoder.layer.N.output.{dense,LayerNorm}.*
//   encoder.relative_attention_bias.weight         [relative_attention_num_buckets, heads]
//
// BERT's post-LayerNorm layers (exact erf GELU) with three differences: no token types;
// positions counted after the padding index 1 as XLM-R's are (transformers'
// create_position_ids_from_input_ids; a literal <pad> sits at position 1); and a bias
// added to every layer's attention scores, one [heads, L, L] a forward, looked up from the
// bucketed distance j - i of key j to query i (transformers' relative_position_bucket: 32
// buckets, bidirectional, max_distance 128). Padding never changes a real token's output:
// each text's [l, l] block of that bias is the one its own length gives. The pooler of an
// MPNet folder (pooler.dense.*) is not part of the encoder: the model folder carries it
// over as it does BERT's (model_folder.h: carried_init_tensors).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include "config/encoder_config.h"
#include "model/encoder.h"
#include "model/lora.h"
#include "model/token_layout.h"

namespace ddp_embed {

// The architecture from a Hugging Face config.json's JSON (`origin` names it in errors):
// vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size,
// max_position_embeddings, relative_attention_num_buckets, layer_norm_eps,
// hidden_dropout_prob, attention_probs_dropout_prob, initializer_range, bos_token_id,
// eos_token_id, tie_word_embeddings; a missing one takes transformers' MPNetConfig default.
// Refused by name: hidden_act other than "gelu", pad_token_id other than 1 (transformers'
// MPNetEmbeddings pads at 1 whatever the config says), relative_attention_num_buckets below
// 32 (transformers looks up 32 buckets). Throws ModelError naming `origin` and the key.
MPNetConfig mpnet_config_from_hf_json(const nlohmann::json& j, const std::string& origin);
// A config.json that transformers' MPNetModel reads back to the same model.
nlohmann::json mpnet_config_to_hf_json(const MPNetConfig& c);
// Throws ModelError naming `origin` if a size is not positive, hidden_size % heads != 0,
// no position is left after the padding index, there are fewer than 32 buckets or a
// dropout is not in [0, 1).
void validate_mpnet_config(const MPNetConfig& c, const std::string& origin = "mpnet config");

// transformers' MPNetEncoder.relative_position_bucket of the distances j - i in a sequence
// of `length` tokens: [length, length] int64 on `device`, each in [0, 32).
at::Tensor mpnet_relative_buckets(int64_t length, const c10::Device& device);

// word + position embeddings, LayerNorm, dropout.
class MPNetEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit MPNetEmbeddingsImpl(const MPNetConfig& c);
  // [B, L] int64 → [B, L, H]. L beyond the positions is a ModelError.
  at::Tensor forward(const at::Tensor& input_ids);

  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};

 private:
  double dropout_;
};
TORCH_MODULE(MPNetEmbeddings);

class MPNetLayerImpl : public torch::nn::Module {
 public:
  explicit MPNetLayerImpl(const MPNetConfig& c);
  // x: the real tokens, [N, H] (model/token_layout.h); position_bias [heads, L, L], L at
  // least the layout's padded length (MPNetModelImpl::position_bias). Returns [N, H]; given
  // out_rows ([B] packed rows: each sequence's first token), those tokens' outputs alone.
  at::Tensor forward(const at::Tensor& x, const TokenLayout& layout, const at::Tensor& position_bias,
                     const at::Tensor& out_rows = {});

  AdaptableLinear q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};  // attention.attn.*
  torch::nn::LayerNorm attention_norm{nullptr};                    // attention.LayerNorm
  AdaptableLinear intermediate_dense{nullptr};                     // intermediate.dense
  AdaptableLinear output_dense{nullptr};                           // output.dense
  torch::nn::LayerNorm output_norm{nullptr};                       // output.LayerNorm

  // As BertLayerImpl's (model/bert.h).
  bool recompute_attention = true;
  AttentionMode attention_mode = AttentionMode::Auto;

 private:
  int64_t num_heads_;
  double hidden_dropout_, attention_dropout_;
};
TORCH_MODULE(MPNetLayer);

class MPNetModelImpl : public TextEncoderImpl {
 public:
  // Builds the layers, initialized as transformers initializes MPNet (N(0,
  // initializer_range) weights, zero biases and padding rows, LayerNorm 1 and 0; not its
  // random draws in order: a pretrained folder fills them). ModelError for a bad config.
  explicit MPNetModelImpl(const MPNetConfig& c);

  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) override;
  // token_types must be undefined (MPNet has none; a ModelError otherwise). cls computes the
  // last layer for the first token alone; mean and lasttoken pool every row.
  at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                            const at::Tensor& token_types = {}) override;

  // transformers' output_hidden_states entry `layers` [B, L, H]: the embeddings (0) or the
  // output of layer `layers` - 1; forward() is hidden_after(num_layers).
  // 0 <= layers <= num_layers, else std::out_of_range.
  at::Tensor hidden_after(const at::Tensor& input_ids, const at::Tensor& attention_mask, int64_t layers);

  // The bias every layer adds to its attention scores for a padded length L: [heads, L, L],
  // relative_attention_bias looked up at mpnet_relative_buckets(L), differentiable.
  at::Tensor position_bias(int64_t length) const;

  const EncoderConfig& encoder_config() const override { return encoder_config_; }
  nlohmann::json hf_config_json() const override;
  void set_activation_checkpointing(bool on) override {
    checkpoint_layers_ = on;
    for (auto& layer : layers_) layer->recompute_attention = !on;
  }
  void set_sparse_word_gradient(bool on) override { embeddings->word_embeddings->options.sparse(on); }
  void set_attention_mode(AttentionMode mode) override {
    for (auto& layer : layers_) layer->attention_mode = mode;
  }

  const MPNetConfig& config() const { return encoder_config_.mpnet; }
  std::vector<MPNetLayer>& layers() { return layers_; }

  MPNetEmbeddings embeddings{nullptr};
  torch::nn::Embedding relative_attention_bias{nullptr};  // encoder.relative_attention_bias

 private:
  // The first `layers` layers on the packed real tokens; out_rows as in
  // MPNetLayerImpl::forward, for the last of them.
  at::Tensor run(const at::Tensor& input_ids, const TokenLayout& layout, const at::Tensor& out_rows, int64_t layers);

  EncoderConfig encoder_config_;
  std::vector<MPNetLayer> layers_;  // also registered as encoder.layer.N
  bool checkpoint_layers_ = false;
};
TORCH_MODULE(MPNetModel);

}  // namespace ddp_embed
