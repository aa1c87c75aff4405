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
// entries one copy is 2 GB. Here the head runs on a chunk of tokens at a time:
//   forward   keeps the running max (or sum), [texts, vocabulary], and nothing of the chunks;
//   backward  recomputes each chunk's logits with autograd on and sends each text's
//             gradient to the token that holds its max (to every token, for sum), through
//             act and the head, into the hidden states and the head's parameters.
// Peak memory: a few [chunk, vocabulary] tensors instead of [tokens, vocabulary] ones, for
// one more run of the head in backward. The recomputation is the same operations on the
// same values, so the token holding a max is found again exactly (the same value); where
// two tokens of a text tie exactly at a positive value both get the gradient (torch.max
// picks one; distinct hidden states make such ties practically absent). A max of 0 has
// no gradient either way: relu's is 0 there.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include <ATen/ATen.h>

#include "config/choices.h"  // SpladeReduce, SpladeActivation

namespace ddp_embed {

// The vocabulary head: hidden [n, H] -> logits [n, V], the same function of each row; it
// uses no tensor that needs a gradient but the parameters passed beside it.
using VocabularyHead = std::function<at::Tensor(const at::Tensor& hidden)>;

// act(logits), elementwise.
at::Tensor splade_activation(const at::Tensor& logits, SpladeActivation act);

// The [B, V] sparse vectors of B texts. hidden: [T, H], the real tokens of the texts packed
// in order, text b's rows [offsets[b], offsets[b + 1]); offsets: int64 [B + 1] on the CPU,
// from 0 to T, not decreasing (an empty text gets a vector of zeros). chunk_tokens ≥ 1: the
// rows given to the head at once (chunks cross text boundaries). Differentiable in hidden
// and in params, which must be every tensor `head` needs a gradient for (the head's own,
// and the word embeddings its decoder is tied to). Throws std::invalid_argument naming what
// is wrong with the shapes.
at::Tensor splade_pool(const std::vector<at::Tensor>& params, VocabularyHead head, const at::Tensor& hidden,
                       const at::Tensor& offsets, SpladeReduce reduce, SpladeActivation act, int64_t chunk_tokens);

}  // namespace ddp_embed
