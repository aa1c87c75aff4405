// SPLADE's sparse vector of each text, as sentence-transformers' SpladePooling computes it:
//
//   v[b, j] = reduce over the real tokens t of text b of act(logits[t, j])
//   act(x)  = log(1 + relu(x))             (relu: every SPLADE model)
//           = log(1 + log(1 + relu(x)))    (log1p_relu: OpenSearch's sparse encoders)
//   reduce  = max (SPLADE v2 and later) or sum (the first SPLADE)
//
// where logits [tokens, vocabulary] are the masked-language-model head's on the encoder's
// last hidden states.
//
// Why it streams. Those logits are the largest tensor of sparse training: 2,048 tokens ×
// 30,522 entries (BERT) is 250 MB in fp32, and autograd keeps about four such tensors
// (logits, the activation's input and output, the mask) for backward; with XLM-R's 250,002
// entries one copy is 2 GB. Here the head runs on a chunk of tokens at a time, and forward
// keeps the running max (or sum), [texts, vocabulary], and nothing of the chunks.
//
// Why max needs no second run of the head. A text's entry gets its gradient through one
// logit only, the token's that holds the max; forward keeps that token ([texts,
// vocabulary] int32; only when a gradient will be asked for: encode and eval do not pay
// for it), and act'(that logit) follows from the pooled value itself
// (log1p(relu(x)) = y gives 1/(1 + x) = e^-y). So backward's gradient of the logits is
// known without them, non-zero only at each text's active entries (a few hundred of
// 30,522), and the decoder's products with it are sparse: the hidden states' gradient
// (sum over a token's entries of g × the decoder's row) and the decoder's (each active
// row gets g × its token's transformed state) cost entries × hidden, not tokens ×
// vocabulary × hidden twice over; only the transform (dense, GELU, LayerNorm: tokens ×
// hidden²) runs again, with autograd. Three of the four tokens × vocabulary × hidden
// products of a plain backward are gone. Where two tokens of a text tie exactly at a
// positive value one gets the gradient, as torch.max's backward gives it to one. A max of
// 0 has no gradient: relu's is 0 there.
//
// Sum sends every token's logit a gradient, so its backward recomputes each chunk's
// logits with autograd on (the same operations on the same values), through act and the
// head, a chunk at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "config/choices.h"  // SpladeReduce, SpladeActivation

namespace ddp_embed {

// The vocabulary head, split where max's backward needs it (logits = transform(hidden) ·
// weightᵀ + bias): `transform` maps hidden [n, H] to [n, H'], the same function of each
// row, and uses no tensor that needs a gradient but `transform_params`; weight [V, H'] is
// the decoder's (the word embeddings, for a tied head), bias [V] or undefined.
struct VocabularyHead {
  std::function<at::Tensor(const at::Tensor& hidden)> transform;
  std::vector<at::Tensor> transform_params;
  at::Tensor weight;
  at::Tensor bias;
  at::Tensor logits(const at::Tensor& hidden) const { return at::linear(transform(hidden), weight, bias); }
};

// act(logits), elementwise.
at::Tensor splade_activation(const at::Tensor& logits, SpladeActivation act);

// The [B, V] sparse vectors of B texts. hidden: [T, H], the real tokens of the texts packed
// in order, text b's rows [offsets[b], offsets[b + 1]); offsets: int64 [B + 1] on the CPU,
// from 0 to T, not decreasing (an empty text gets a vector of zeros). chunk_tokens ≥ 1: the
// rows given to the head at once (chunks cross text boundaries). Differentiable in hidden,
// the transform's parameters, the weight and the bias. The head (its functions and
// tensors) must live until backward has run. Throws std::invalid_argument naming what is
// wrong with the shapes.
at::Tensor splade_pool(VocabularyHead head, const at::Tensor& hidden, const at::Tensor& offsets, SpladeReduce reduce,
                       SpladeActivation act, int64_t chunk_tokens);

}  // namespace ddp_embed
