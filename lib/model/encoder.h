// What every encoder embed-train trains gives the embedder (model/embedder.h): token ids
// and their mask in, hidden states or pooled sentence vectors out. BERT and XLM-RoBERTa
// (model/bert.h) and Qwen3 (model/qwen3.h) implement it; the embedder, the trainer and the
// model folder see only this. Also here: how a batch's real tokens are packed (TokenLayout,
// which both encoders run their per-token layers on) and pooling.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <nlohmann/json_fwd.hpp>
#include <torch/nn/module.h>

#include "config/choices.h"  // Pooling
#include "config/encoder_config.h"

namespace ddp_embed {

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sentence embeddings from a last hidden state [B, L, H] and its mask [B, L] (1 = real
// token), as sentence-transformers' Pooling computes them: cls takes the first position whose
// mask is 1, lasttoken the last one, mean averages the real tokens. → [B, H]
at::Tensor pool(const at::Tensor& hidden, const at::Tensor& attention_mask, Pooling mode);

// Where a batch's real tokens are. The encoders run their linear layers, norms,
// activations and dropout — nearly all of their FLOPs — on the real tokens alone, packed
// into [N, H] rows, and scatter them into the padded [B, L, H] layout only for attention.
// Padding costs nothing but attention's share: with short pairs (the demo's average 8
// tokens a text, padded to the batch's longest) that is about half of a padded encoder's
// work. The real tokens' outputs are the same as the padded computation's: every per-token
// op sees the same row, and attention masks the padding either way. Rows are right-padded:
// a sequence's real tokens come first.
struct TokenLayout {
  explicit TokenLayout(const at::Tensor& attention_mask /*[B, L]*/);
  at::Tensor pack(const at::Tensor& padded /*[B, L, H]*/) const;   // → [N, H]
  at::Tensor unpack(const at::Tensor& packed /*[N, H]*/) const;    // → [B, L, H], zeros at padding
  // The packed rows of each sequence's first / last real token.
  const at::Tensor& rows_of(Pooling p) const { return p == Pooling::LastToken ? last_index : first_index; }
  int64_t batch, length;
  at::Tensor token_index;  // [N] int64: flat positions (b * L + t) of the real tokens, in order
  at::Tensor positions;    // [N] int64: t, each real token's position in its sequence
  at::Tensor first_index;  // [B] int64: row of each sequence's position 0 in the packed [N, H]
  at::Tensor last_index;   // [B] int64: row of each sequence's last real token
  bool dense;              // no padding at all: pack and unpack are views
};

class TextEncoderImpl : public torch::nn::Module {
 public:
  // input_ids int64 [B, L]; attention_mask [B, L], 1 = real token, 0 = padding (right
  // padding: real tokens first). Returns the last hidden state [B, L, H]; padding never
  // changes a real token's output.
  virtual at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) = 0;
  // pool(forward(...), mask, p), computing only what the pooling reads where that is less
  // (cls and lasttoken: the last layer for one token a sequence).
  virtual at::Tensor forward_pooled(const at::Tensor& input_ids, const at::Tensor& attention_mask, Pooling p) = 0;

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
};

// A config.json's JSON; throws ModelError naming the file when it cannot be read or parsed.
nlohmann::json read_config_json(const std::string& path);

// The encoder a Hugging Face config.json describes (a file; `origin` names it in errors),
// by its model_type: "bert", "xlm-roberta" (model/bert.h) or "qwen3" (model/qwen3.h).
// Another model_type is a ModelError that names the file and lists these.
EncoderConfig encoder_config_from_hf_json(const std::string& path);

}  // namespace ddp_embed
