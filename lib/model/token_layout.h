// Where a batch's real tokens are. The encoders (model/bert.h, model/qwen3.h) run on the real
// tokens alone, packed into [N, H] rows in sequence order, from the embeddings to the pooling:
// every per-token op (linear layers, norms, activations, dropout) sees the same row it would
// see in the padded [B, L, H] layout, and attention (model/attention.h) takes the packed rows
// with each sequence's bounds. Padding costs nothing: with short texts padded to a batch's
// longest that is half or more of a padded encoder's work.
//
// A batch is right-padded: each sequence's real tokens come first. Its lengths are known on
// the host (the collator counts them: train/batches.h), so nothing is read back from a GPU
// to learn the shapes, and the index tensors below are made on the host and copied to the
// device in one asynchronous copy.
#pragma once

#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "config/choices.h"  // Pooling
#include "model/model_error.h"

namespace ddp_embed {

struct TokenLayout {
  // From a right-padded mask [B, L] (1, or any nonzero value = real token). The mask is read
  // on the host: one copy (and wait) when it is on a GPU. Throws ModelError for a mask that
  // is not [B, L] or has padding before a real token.
  explicit TokenLayout(const at::Tensor& attention_mask);
  // From each sequence's count of real tokens (each in [0, padded_length]), for tensors on
  // `device`. Nothing is read back from the device. Throws ModelError for a count outside
  // [0, padded_length], or more than 2^31 - 1 tokens in all.
  TokenLayout(std::vector<int64_t> sequence_lengths, int64_t padded_length, const c10::Device& device);

  at::Tensor pack(const at::Tensor& padded /*[B, L, ...]*/) const;  // → [N, ...]
  at::Tensor unpack(const at::Tensor& packed /*[N, H]*/) const;     // → [B, L, H], zeros at padding
  // The packed rows of each sequence's first / last real token ([B] int64).
  const at::Tensor& rows_of(Pooling p) const { return p == Pooling::LastToken ? last_index : first_index; }
  // The mean of each sequence's rows: [N, H] → [B, H] (a sequence without tokens gives 0, as
  // sentence-transformers' mean pooling does).
  at::Tensor mean(const at::Tensor& packed) const;
  // The additive attention mask of padded keys, [B, 1, 1, L] with `options`' dtype: 0 for a
  // real key, the dtype's lowest finite value for padding (exp() of it is exactly 0, and a
  // row of padding alone cannot make NaN as -inf would).
  at::Tensor padding_bias(const at::TensorOptions& options) const;

  int64_t batch = 0, length = 0;  // B, and L, the padded length
  int64_t tokens = 0;             // N, the real tokens
  int64_t longest = 0;            // the longest sequence
  std::vector<int64_t> lengths;   // each sequence's real tokens (host)
  at::Tensor cu_seqlens;   // [B + 1] int32: where each sequence's rows begin (0, l0, l0 + l1, ..., N)
  at::Tensor cu_one_each;  // [B + 1] int32: 0, 1, ..., B (one row a sequence: a pooled token's query)
  at::Tensor token_index;  // [N] int64: flat positions (b · L + t) of the real tokens, in order
  at::Tensor positions;    // [N] int64: t, each real token's position in its sequence
  at::Tensor sequence_of;  // [N] int64: b, each real token's sequence
  at::Tensor first_index;  // [B] int64: row of each sequence's position 0 (clamped to [0, N))
  at::Tensor last_index;   // [B] int64: row of each sequence's last real token (clamped)
  bool dense = false;      // no padding at all: pack and unpack are views
};

}  // namespace ddp_embed
