// What every encoder embed-train trains gives the embedder (model/embedder.h): token ids
// and their mask in, hidden states or pooled sentence vectors out. BERT and XLM-RoBERTa
// (model/bert.h), Qwen3 (model/qwen3.h) and ModernBERT (model/modernbert.h) implement it; the embedder, the trainer and the
// model folder see only this. Also here: pooling. How a batch's real tokens are packed is
// model/token_layout.h; how the encoders attend over them, model/attention.h.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include "config/choices.h"  // Pooling, AttentionMode
#include "config/encoder_config.h"
#include "model/model_error.h"

namespace ddp_embed {

// Sentence embeddings from a last hidden state [B, L, H] and its mask [B, L] (1 = real
// token), as sentence-transformers' Pooling computes them: cls takes the first position whose
// mask is 1, lasttoken the last one, mean averages the real tokens. → [B, H]
at::Tensor pool(const at::Tensor& hidden, const at::Tensor& attention_mask, Pooling mode);

class TextEncoderImpl : public torch::nn::Module {
 public:
  // input_ids int64 [B, L]; attention_mask [B, L], 1 = real token, 0 = padding (right
  // padding: real tokens first). Returns the last hidden state [B, L, H]; padding never
  // changes a real token's output. Ids and mask of other shapes, a mask padded elsewhere,
  // or L beyond the model's positions are a ModelError.
  virtual at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) = 0;
  // pool(forward(...), mask, p), computing only what the pooling reads where that is less
  // (cls and lasttoken: the last layer for one token a sequence). token_types: int64 [B, L],
  // each token's segment (a cross-encoder's pair: model/cross_encoder.h); undefined = all 0.
  // An encoder without token types (Qwen3) takes only undefined (else a ModelError); types
  // must be below the model's type_vocab_size (never checked on the device: the batch's
  // maker, tokenize/pair_template.h, gives the model's own).
  virtual at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p,
                                    const at::Tensor& token_types = {}) = 0;

  virtual const EncoderConfig& encoder_config() const = 0;
  // Hugging Face's config.json for this model (model_type, architectures, sizes ...).
  virtual nlohmann::json hf_config_json() const = 0;

  // Activation checkpointing (model/activation_checkpoint.h): while autograd records, each
  // layer keeps only its input and is recomputed in backward. Same numbers, less memory,
  // about one more forward pass of compute. Off by default.
  virtual void set_activation_checkpointing(bool on) = 0;
  // The word embeddings' gradient as the rows a batch used (a sparse tensor) instead of a
  // dense [vocab, hidden] one, which autograd would zero-fill and then add into .grad on
  // every pass (MiniLM: 47 MB written twice per pass; Qwen3-0.6B: 620 MB). Autograd adds
  // the rows into .grad in place, so .grad must already be a defined dense tensor
  // (FlatAdamW's); with no .grad, .grad itself would become sparse.
  virtual void set_sparse_word_gradient(bool on) = 0;
  // model.attention (model/attention.h): packed, padded, or per batch the faster. Auto by
  // default; any mode gives the same values to rounding.
  virtual void set_attention_mode(AttentionMode mode) = 0;
};

// A config.json's JSON; throws ModelError naming the file when it cannot be read or parsed.
nlohmann::json read_config_json(const std::string& path);

// The encoder a Hugging Face config.json describes (a file; `origin` names it in errors),
// by its model_type: "bert", "xlm-roberta" (model/bert.h), "mpnet" (model/mpnet.h),
// "modernbert" (model/modernbert.h), "qwen3" (model/qwen3.h) or "gemma3_text" (model/gemma3.h).
// Another model_type is a ModelError that names the file and lists these.
EncoderConfig encoder_config_from_hf_json(const std::string& path);

}  // namespace ddp_embed
