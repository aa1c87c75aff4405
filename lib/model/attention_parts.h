// The masks attention's paths share (model/attention.cpp, attention_masks.cpp): for
// lib/model/attention*.cpp only. What they build is model/attention.h's AttentionCall
// turned into SDPA masks: the causal bound, the window's band and the bias, each text's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include <ATen/ATen.h>

#include "model/attention.h"

namespace ddp_embed::attention_parts {

// The lowest finite value of t's dtype: exp() of it is exactly 0, and a row of it alone
// cannot make NaN as -inf would.
double lowest_of(const at::Tensor& t);

// [L, L], broadcast over the leading dimensions: each query sees the keys up to its own
// position (q [..., L, D]).
at::Tensor causal_bias(const at::Tensor& q);

// Whether the call bounds the keys a query sees beyond its sequence (and causal's bound):
// without one, the paths keep causal's cheaper forms (SDPA's flag, the flash kernel's).
bool windowed(const AttentionCall& call);

// Whether the query at each position of query_positions ([..., 1], int64) may see each key
// 0 .. keys - 1 (AttentionCall's window, causal folded in): bool [..., keys].
at::Tensor in_window(const at::Tensor& query_positions, int64_t keys, const AttentionCall& call);

// Where the one query of each sequence stands (model/attention.h): its last position when
// causal, its first otherwise. length: the sequence's.
int64_t one_query_position(int64_t length, const AttentionCall& call);

// A text's queries in blocks of this many, each block's SDPA given only the keys its
// window reaches (a text of 4,096 tokens under ModernBERT's 128-token window reads 192 keys
// a block, not 4,096), where that pays: both sides of the window bounded (causal bounds the
// right), no bias, and a block's keys at most half the text's. 0 where the whole text is
// the one call.
int64_t band_block(const AttentionCall& call, int64_t length);

// The additive masks of a call's texts, made once a call: each text's is a view of these.
// band: [longest, longest] in q's dtype, 0 where the window lets query row i see key j,
// the lowest finite value where not (exp() of it is 0, and no row is all of it: a query
// sees itself); hidden, where it is that value; both undefined without a window (and
// without a causal bias).
// text_bias: with call.bias, each text's block of it in q's dtype, [heads, lq · l] in the
// layout's order, the keys the window hides at the lowest value. One index_select gathers
// them all: its backward adds every text's gradient into one [heads, L · L] buffer, where a
// narrow a text would write a full-size zero-padded gradient each.
struct TextMasks {
  at::Tensor band, hidden;
  std::vector<at::Tensor> text_bias;
};
TextMasks text_masks(const at::Tensor& q, const TokenLayout& layout, const AttentionCall& call);

// One text's call (the layout's text-th): q [heads, lq, D] (lq = l, or 1 for one query a
// sequence), k and v [heads, l, D], on its real tokens alone; the bias and the window as an
// SDPA mask (views of the batch's; SDPA's backward gives the bias its gradient), else
// causal as SDPA's flag. A window that band_block() finds narrow enough: one call a block
// of queries over the keys it reaches (one query: over its window's keys alone).
at::Tensor one_text(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TextMasks& masks,
                    const AttentionCall& call, size_t text);

}  // namespace ddp_embed::attention_parts
