// The masks of model/attention_parts.h: an AttentionCall's causal bound, window and bias
// as the additive SDPA masks attention's CPU paths (and CUDA's padded fallback) pass on.
#include "model/attention_parts.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <vector>

#include <ATen/Dispatch.h>

namespace ddp_embed::attention_parts {

double lowest_of(const at::Tensor& t) {
  double lowest = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, t.scalar_type(), "lowest", [&] {
    lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
  });
  return lowest;
}

at::Tensor causal_bias(const at::Tensor& q) {
  const int64_t length = q.size(-2);
  return at::full({length, length}, lowest_of(q), q.options()).triu(1);
}

bool windowed(const AttentionCall& call) {
  return call.window_left >= 0 || (call.window_right >= 0 && !call.causal);
}

at::Tensor in_window(const at::Tensor& query_positions, int64_t keys, const AttentionCall& call) {
  const int64_t left = call.window_left, right = call.causal ? 0 : call.window_right;
  const at::Tensor distance = at::arange(keys, query_positions.options()) - query_positions;  // key - query
  at::Tensor seen;
  const auto and_also = [&](const at::Tensor& t) { seen = seen.defined() ? seen.logical_and(t) : t; };
  if (left >= 0) and_also(distance.ge(-left));
  if (right >= 0) and_also(distance.le(right));
  return seen.defined() ? seen : at::ones_like(distance, at::kBool);
}

int64_t one_query_position(int64_t length, const AttentionCall& call) {
  return call.causal ? std::max<int64_t>(length - 1, 0) : 0;
}

TextMasks text_masks(const at::Tensor& q, const TokenLayout& layout, const AttentionCall& call) {
  TextMasks m;
  const int64_t longest = layout.longest;
  // A bias is the text's mask: causal goes in it then, not in SDPA's flag.
  if (windowed(call) || (call.bias.defined() && call.causal)) {
    const at::Tensor positions = at::arange(longest, q.options().dtype(at::kLong)).unsqueeze(1);
    m.hidden = in_window(positions, longest, call).logical_not();
    m.band = at::zeros({longest, longest}, q.options()).masked_fill_(m.hidden, lowest_of(q));
  }
  if (!call.bias.defined()) return m;
  // Each text's (query row, key) pairs, as flat indices into the bias's [L, L] and the
  // window's [longest, longest].
  const int64_t side = call.bias.size(1);
  std::vector<int64_t> in_bias, in_band, sizes;
  for (const int64_t l : layout.lengths) {
    const int64_t first = call.one_query_per_sequence ? one_query_position(l, call) : 0;
    const int64_t rows = call.one_query_per_sequence ? std::min<int64_t>(l, 1) : l;
    for (int64_t i = first; i < first + rows; ++i)
      for (int64_t j = 0; j < l; ++j) {
        in_bias.push_back(i * side + j);
        in_band.push_back(i * longest + j);
      }
    sizes.push_back(rows * l);
  }
  at::Tensor blocks =
      call.bias.to(q.scalar_type()).reshape({call.bias.size(0), side * side}).index_select(1, at::tensor(in_bias));
  if (m.hidden.defined())
    blocks = at::where(m.hidden.reshape(-1).index_select(0, at::tensor(in_band)), lowest_of(q), blocks);
  m.text_bias = blocks.split_with_sizes(sizes, 1);
  return m;
}

int64_t band_block(const AttentionCall& call, int64_t length) {
  const int64_t left = call.window_left, right = call.causal ? 0 : call.window_right;
  if (left < 0 || right < 0 || call.bias.defined()) return 0;
  // At least 16 queries a block: below that, the calls' own cost outweighs the keys saved.
  const int64_t block = std::max<int64_t>(left + right + 1, 16);
  return 2 * (block + left + right) <= length ? block : 0;
}

namespace {

// one_text's banded form (band_block() > 0): each block of `block` queries attends over the
// keys from its first query's window start to its last one's window end, the band's slice
// masking the keys a query's window leaves out (every query sees itself: no row is all
// masked). The same sums as the whole text's call over fewer keys; autograd keeps each
// block's slices.
at::Tensor banded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& band,
                  const AttentionCall& call, int64_t block) {
  const int64_t length = k.size(1), left = call.window_left, right = call.causal ? 0 : call.window_right;
  if (q.size(1) == 1) {  // one query a sequence: exactly its window's keys, no mask
    const int64_t position = one_query_position(length, call);
    const int64_t first = std::max<int64_t>(0, position - left), end = std::min(length, position + right + 1);
    return at::scaled_dot_product_attention(q, k.narrow(1, first, end - first), v.narrow(1, first, end - first),
                                           std::nullopt, call.dropout_p, false);
  }
  std::vector<at::Tensor> parts;
  parts.reserve(static_cast<size_t>((length + block - 1) / block));
  for (int64_t start = 0; start < length; start += block) {
    const int64_t rows = std::min(block, length - start);
    const int64_t first = std::max<int64_t>(0, start - left), end = std::min(length, start + rows + right);
    const at::Tensor mask = band.narrow(0, start, rows).narrow(1, first, end - first);
    parts.push_back(at::scaled_dot_product_attention(q.narrow(1, start, rows), k.narrow(1, first, end - first),
                                                     v.narrow(1, first, end - first), mask, call.dropout_p, false));
  }
  return at::cat(parts, 1);
}

}  // namespace

at::Tensor one_text(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TextMasks& masks,
                    const AttentionCall& call, size_t text) {
  const int64_t length = k.size(1);
  if (masks.text_bias.empty() && masks.band.defined())
    if (const int64_t block = band_block(call, length); block > 0) return banded(q, k, v, masks.band, call, block);
  at::Tensor mask;
  if (!masks.text_bias.empty()) {
    mask = masks.text_bias[text].view({q.size(0), q.size(1), length});
  } else if (masks.band.defined()) {
    const int64_t first = call.one_query_per_sequence ? one_query_position(length, call) : 0;
    mask = masks.band.narrow(0, first, q.size(1)).narrow(1, 0, length);
  }
  // One query a sequence sees its whole sequence without a window (the pooled token: BERT's
  // first, Qwen3's last); every query of a causal sequence, the keys up to its own.
  const bool causal = call.causal && !call.one_query_per_sequence && !mask.defined();
  return at::scaled_dot_product_attention(q, k, v, mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt,
                                         call.dropout_p, causal);
}

}  // namespace ddp_embed::attention_parts
