#include "model/attention.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/record_function.h>
#include <c10/util/StringUtil.h>

#include "compat/cuda_support.h"
#include "compat/torch_compat.h"
#include "model/activation_checkpoint.h"
#include "model/attention_parts.h"
#include "model/dropout.h"
#include "util/log.h"

namespace ddp_embed {
namespace {

using namespace attention_parts;

// Relaxed counters: each is read alone (a profile's difference, a test), never to order
// other memory.
std::array<std::atomic<int64_t>, kAttentionPaths> g_path_counts{};
std::array<std::atomic<bool>, kAttentionPaths> g_path_logged{};
std::array<std::atomic<int64_t>, kAttentionPaths> g_log_lines_built{};  // attention_log_lines_built()

// ---- CPU: one scaled_dot_product_attention per sequence -------------------------------------

// Each sequence's rows alone, [heads, l, D] for SDPA: split_with_sizes gives views whose
// backward writes each gradient into its own rows of one buffer (narrow's or a slice's
// backward would write a full-size zero-padded gradient per sequence). Grouped heads: each
// key/value head repeated for the query heads that share it, once for the batch.
// SDPA here even with dropout, not attention_recomputed (model/activation_checkpoint.h):
// measured on STS-B pairs (MiniLM, 32 pairs, one thread, --profile), its extra small ops
// per sequence (the mask's fill, the copies) cost more than SDPA's bernoulli_ (1% of the
// step) saves; the probabilities it stores are small at real lengths (l² a sequence).
at::Tensor cpu_sequence_loop(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                             const AttentionCall& call) {
  const int64_t group = q.size(1) / k.size(1);
  const auto shared = [&](const at::Tensor& t) { return group == 1 ? t : t.repeat_interleave(group, 1); };
  const std::vector<int64_t> one_each(static_cast<size_t>(layout.batch), 1);
  const auto queries = q.split_with_sizes(call.one_query_per_sequence ? one_each : layout.lengths);
  const auto keys = shared(k).split_with_sizes(layout.lengths);
  const auto values = shared(v).split_with_sizes(layout.lengths);
  const TextMasks masks = text_masks(q, layout, call);
  std::vector<at::Tensor> context;
  context.reserve(queries.size());
  for (size_t b = 0; b < queries.size(); ++b) {
    if (keys[b].size(0) == 0) {  // a text without tokens: nothing to attend to
      context.push_back(at::zeros_like(queries[b]));
      continue;
    }
    context.push_back(
        one_text(queries[b].transpose(0, 1), keys[b].transpose(0, 1), values[b].transpose(0, 1), masks, call, b)
            .transpose(0, 1));
  }
  return at::cat(context);
}

// The padded path (below), which the groups call with store_probabilities.
at::Tensor padded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                  const AttentionCall& call, bool store_probabilities = false);

// ---- CPU: texts grouped by length, one padded call a group ----------------------------------

// At real lengths the loop above pays for its calls more than for its arithmetic: some 25
// LibTorch ops a text, forward and backward (MiniLM on STS-B pairs, --profile: 230 ms of a
// 1.3 s step in attention, of which the products themselves are about 10 ms). Texts of about
// the same length share one padded call instead, for a little padding: the texts sorted by
// length, cut into runs where the cost model below says a cut pays (dynamic programming over
// the sorted lengths, B² steps). A dense batch comes out as one group, a batch of very
// different lengths as the loop.
struct LengthGroups {
  // The key: what the groups were made for.
  std::vector<int64_t> lengths;
  int64_t width = 0;  // q_heads × head_dim
  bool one_query = false;
  // Packed rows (and, for one query a sequence, sequences) in group order, and back.
  at::Tensor row_order, row_inverse, sequence_order, sequence_inverse;
  std::vector<int64_t> group_rows, group_sequences;  // each group's, in order
  std::vector<TokenLayout> layouts;                  // each group's texts, padded to its longest
};

// The modelled cost of one call on `count` texts padded to `longest` tokens, in elements of
// the probabilities' products (query × key × width): a call's fixed cost — its ops' dispatch,
// the dropout mask's draw, the copies in and out: about 0.2 ms forward and backward, as much
// as 300k elements cost at the ~0.6 ns each measured — and the products over every (query,
// key) pair, padding included. From one layer's attention, forward and backward, dropout 0.1,
// 12 heads of 32, fp32, one thread, 64 texts (scripts/bench-attention.sh).
double group_cost(int64_t count, int64_t longest, bool one_query, int64_t width) {
  constexpr double kCallCost = 300e3;
  const double queries = one_query ? 1.0 : static_cast<double>(longest);
  return kCallCost + static_cast<double>(count) * queries * static_cast<double>(longest) * static_cast<double>(width);
}

LengthGroups make_length_groups(const TokenLayout& layout, bool one_query, int64_t width) {
  LengthGroups g;
  g.lengths = layout.lengths;
  g.width = width;
  g.one_query = one_query;
  const int64_t batch = layout.batch;
  std::vector<int64_t> order(static_cast<size_t>(batch));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return layout.lengths[a] < layout.lengths[b]; });
  // Texts without tokens first, as a group of their own (their output is zeros).
  const int64_t empty = std::count(layout.lengths.begin(), layout.lengths.end(), int64_t{0});
  // best[j]: the cheapest cut of the sorted texts empty .. empty + j - 1; cut[j]: where its last group starts.
  const int64_t texts = batch - empty;
  std::vector<double> best(static_cast<size_t>(texts + 1), 0.0);
  std::vector<int64_t> cut(static_cast<size_t>(texts + 1), 0);
  for (int64_t j = 1; j <= texts; ++j) {
    const int64_t longest = layout.lengths[size_t(order[size_t(empty + j - 1)])];
    best[size_t(j)] = std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < j; ++i) {
      const double c = best[size_t(i)] + group_cost(j - i, longest, one_query, width);
      if (c < best[size_t(j)]) best[size_t(j)] = c, cut[size_t(j)] = i;
    }
  }
  std::vector<int64_t> bounds;  // group starts in sorted order, then the end
  for (int64_t j = texts; j > 0; j = cut[size_t(j)]) bounds.push_back(empty + cut[size_t(j)]);
  if (empty > 0) bounds.push_back(0);
  std::reverse(bounds.begin(), bounds.end());
  bounds.push_back(batch);

  std::vector<int64_t> starts(static_cast<size_t>(batch), 0);
  for (int64_t b = 1; b < batch; ++b) starts[size_t(b)] = starts[size_t(b - 1)] + layout.lengths[size_t(b - 1)];
  std::vector<int64_t> rows;
  rows.reserve(static_cast<size_t>(layout.tokens));
  for (size_t gi = 0; gi + 1 < bounds.size(); ++gi) {
    std::vector<int64_t> lengths;
    const int64_t before = static_cast<int64_t>(rows.size());
    for (int64_t s = bounds[gi]; s < bounds[gi + 1]; ++s) {
      const int64_t b = order[size_t(s)], l = layout.lengths[size_t(b)];
      lengths.push_back(l);
      for (int64_t t = 0; t < l; ++t) rows.push_back(starts[size_t(b)] + t);
    }
    g.group_rows.push_back(static_cast<int64_t>(rows.size()) - before);
    g.group_sequences.push_back(bounds[gi + 1] - bounds[gi]);
    const int64_t longest = lengths.empty() ? 0 : *std::max_element(lengths.begin(), lengths.end());
    g.layouts.emplace_back(std::move(lengths), longest, c10::Device(c10::kCPU));
  }
  const auto index = [](const std::vector<int64_t>& v) {
    return at::from_blob(const_cast<int64_t*>(v.data()), {static_cast<int64_t>(v.size())}, at::kLong).clone();
  };
  g.row_order = index(rows);
  g.row_inverse = at::empty_like(g.row_order).index_put_({g.row_order}, at::arange(layout.tokens, at::kLong));
  g.sequence_order = index(order);
  g.sequence_inverse = at::empty_like(g.sequence_order).index_put_({g.sequence_order}, at::arange(batch, at::kLong));
  return g;
}

// The groups of the layout's texts, made once for each batch: every layer (and a recomputed
// forward) of a micro-batch asks again with the same lengths.
const LengthGroups& length_groups(const TokenLayout& layout, bool one_query, int64_t width) {
  thread_local LengthGroups last, last_one_query;  // the last layer's call asks for one query a sequence
  LengthGroups& cached = one_query ? last_one_query : last;
  if (cached.width != width || cached.lengths != layout.lengths) cached = make_length_groups(layout, one_query, width);
  return cached;
}

at::Tensor cpu_grouped(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                       const AttentionCall& call) {
  const bool one_query = call.one_query_per_sequence;
  const LengthGroups& g = length_groups(layout, one_query, q.size(1) * q.size(2));
  // One run holding the whole batch: the padded path as it is (no reordering; it recomputes
  // the probabilities, as a batch this size may hold many).
  if (g.layouts.size() == 1 && g.group_rows[0] > 0) return padded(q, k, v, layout, call);
  const int64_t group = q.size(1) / k.size(1);
  const auto shared = [&](const at::Tensor& t) { return group == 1 ? t : t.repeat_interleave(group, 1); };
  const at::Tensor& q_order = one_query ? g.sequence_order : g.row_order;
  const auto queries = q.index_select(0, q_order).split_with_sizes(one_query ? g.group_sequences : g.group_rows);
  const auto keys = shared(k).index_select(0, g.row_order).split_with_sizes(g.group_rows);
  const auto values = shared(v).index_select(0, g.row_order).split_with_sizes(g.group_rows);
  const TextMasks masks = text_masks(q, layout, call);
  const int64_t* text_of = g.sequence_order.data_ptr<int64_t>();  // the layout's text at each sorted place
  std::vector<at::Tensor> context;
  context.reserve(g.layouts.size());
  for (size_t i = 0, first = 0; i < g.layouts.size(); first += size_t(g.group_sequences[i]), ++i) {
    if (g.group_rows[i] == 0) {  // texts without tokens: nothing to attend to
      context.push_back(at::zeros_like(queries[i]));
    } else if (g.group_sequences[i] == 1) {  // a text alone: as the loop does
      context.push_back(one_text(queries[i].transpose(0, 1), keys[i].transpose(0, 1), values[i].transpose(0, 1), masks,
                                 call, size_t(text_of[first]))
                            .transpose(0, 1));
    } else {
      context.push_back(padded(queries[i], keys[i], values[i], g.layouts[i], call, /*store_probabilities=*/true));
    }
  }
  return at::cat(context).index_select(0, one_query ? g.sequence_inverse : g.row_inverse);
}

// ---- padded: scaled_dot_product_attention on [B, heads, L, head_dim] ------------------------

at::Tensor padded(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                  const AttentionCall& call, bool store_probabilities) {
  const int64_t batch = layout.batch, length = layout.length;
  const int64_t q_heads = q.size(1), kv_heads = k.size(1), dims = q.size(2), group = q_heads / kv_heads;
  // [N, heads, D] → [B, heads, L, D], zeros at padding.
  const auto to_heads = [&](const at::Tensor& t) {
    const int64_t heads = t.size(1);
    return layout.unpack(t.reshape({t.size(0), heads * dims})).view({batch, length, heads, dims}).transpose(1, 2);
  };
  // Each key/value head repeated for the query heads that share it (transformers' repeat_kv).
  const auto shared = [&](const at::Tensor& t) { return group == 1 ? t : t.repeat_interleave(group, 1); };
  const at::Tensor queries = call.one_query_per_sequence ? q.view({batch, 1, q_heads, dims}).transpose(1, 2) : to_heads(q);
  const at::Tensor keys = shared(to_heads(k)), values = shared(to_heads(v));
  const bool cpu = q.device().is_cpu();
  // The bias in q's dtype (SDPA adds it to the scores), its lowest finite value at a masked
  // key: exp() of it is exactly 0, and a row of padding alone cannot make NaN as -inf would.
  const at::TensorOptions bias_options = q.options();
  at::Tensor bias;
  bool causal_flag = false;
  if (windowed(call) || call.bias.defined()) {
    // Each query's keys: real, and in its window (causal folded in). One mask, not a sum of
    // the padding's and the window's: a padded query row whose window holds only padding
    // gets the lowest value everywhere, not twice it (-inf: a row of NaN in backward).
    const at::Tensor counts =
        (layout.cu_seqlens.narrow(0, 1, batch) - layout.cu_seqlens.narrow(0, 0, batch)).to(at::kLong);
    const at::Tensor key_positions = at::arange(length, counts.options());
    const at::Tensor real = key_positions.unsqueeze(0).lt(counts.unsqueeze(1)).view({batch, 1, 1, length});
    const at::Tensor query_positions =  // one query a sequence: where each stands
        call.causal ? (counts - 1).clamp_min(0) : at::zeros_like(counts);
    const at::Tensor seen = call.one_query_per_sequence
                                ? in_window(query_positions.unsqueeze(1), length, call).view({batch, 1, 1, length})
                                : in_window(key_positions.unsqueeze(1), length, call).view({1, 1, length, length});
    const at::Tensor hidden = real.logical_and(seen).logical_not();  // [B, 1, Lq, L]
    if (call.bias.defined()) {
      // The bias's top-left [L, L] block, each one query's row of it: [1 or B, heads, Lq, L].
      const at::Tensor block = call.bias.to(q.scalar_type()).narrow(1, 0, length).narrow(2, 0, length);
      const at::Tensor rows = call.one_query_per_sequence
                                  ? block.index_select(1, query_positions).transpose(0, 1).unsqueeze(2)
                                  : block.unsqueeze(0);
      bias = at::where(hidden, lowest_of(q), rows);
    } else {
      bias = at::zeros(hidden.sizes(), bias_options).masked_fill_(hidden, lowest_of(q));
    }
  } else if (call.causal && !call.one_query_per_sequence) {
    // Right padding: the causal mask alone keeps every real query from the padding after it.
    // A GPU takes SDPA's causal flag (its flash kernel); the CPU a bias (attention_recomputed
    // takes one).
    if (cpu) {
      bias = causal_bias(queries);
    } else {
      causal_flag = true;
    }
  } else {
    bias = layout.padding_bias(bias_options);
  }
  // The CPU's own attention (model/activation_checkpoint.h) where it pays: with dropout
  // (its cheaper mask), and while autograd records (nothing [B, heads, L, L] stored).
  const bool recording = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  // Not with a bias: attention_recomputed gives its bias no gradient, SDPA does.
  const bool recompute =
      cpu && !call.bias.defined() && (call.dropout_p > 0 || (call.recompute_padded && recording));
  at::Tensor context;
  if (cpu && store_probabilities) {
    // A group of short texts (cpu_grouped): the probabilities are small, and storing them
    // costs less than recomputing them; the encoders' cheap dropout mask.
    const at::Tensor scores = at::matmul(queries, keys.transpose(-2, -1)).mul_(1.0 / std::sqrt(double(dims))).add_(bias);
    at::Tensor probabilities = at::softmax(scores, -1);
    if (call.dropout_p > 0) {
      const DropoutMask mask = cpu_dropout_mask(probabilities.sizes(), call.dropout_p);
      probabilities = probabilities.masked_fill(mask.dropped, 0.0).mul_(mask.scale);
    }
    context = at::matmul(probabilities, values);
  } else if (causal_flag)
    context = at::scaled_dot_product_attention(queries, keys, values, {}, call.dropout_p, /*is_causal=*/true);
  else if (recompute)
    context = attention_recomputed(
        queries, keys, values, bias,
        call.dropout_p > 0 ? cpu_dropout_mask({batch, q_heads, queries.size(2), length}, call.dropout_p) : DropoutMask{});
  else
    context = compat::scaled_dot_product_attention(queries, keys, values, bias, call.dropout_p);
  context = context.transpose(1, 2);  // [B, Lq, q_heads, D]
  if (call.one_query_per_sequence) return context.reshape({batch, q_heads, dims});
  return layout.pack(context.reshape({batch, length, q_heads * dims})).view({layout.tokens, q_heads, dims});
}

// ---- CUDA: the varlen kernels ---------------------------------------------------------------

// A kernel's refusal: false, and the reason into *why when asked for one. The reason is
// text made only for the log line (log_first_use), never on a call's way.
template <class Text>
bool refuse(std::string* why, const Text& text) {
  if (why != nullptr) *why = text();
  return false;
}

// Whether flash attention takes the call.
bool flash_takes(const at::Tensor& q, const AttentionCall& call, std::string* why = nullptr) {
  // Its one query a sequence stands at the sequence's end (bottom-right aligned): right for
  // a causal one, not for the first token's window.
  if (windowed(call) && call.one_query_per_sequence && !call.causal)
    return refuse(why, [] { return std::string("flash places one query at its text's end, not at its first token"); });
  if (call.bias.defined()) return refuse(why, [] { return std::string("flash takes no bias"); });
  const auto type = q.scalar_type();
  if (type != at::kBFloat16 && type != at::kHalf)
    return refuse(why, [&] { return "flash takes bf16 or fp16, this is " + std::string(c10::toString(type)); });
  const int64_t dims = q.size(2);
  if (dims % 8 != 0 || dims > 256)
    return refuse(why, [&] { return "flash needs head_dim a multiple of 8 up to 256, this is " + std::to_string(dims); });
  const int capability = compat::cuda_capability(q.device().index());
  if (capability < 80)
    return refuse(why, [&] { return "flash needs sm80 or newer, this GPU is sm" + std::to_string(capability); });
  return true;
}

// Whether the memory-efficient kernel takes the call.
bool efficient_takes(const at::Tensor& q, const AttentionCall& call, std::string* why = nullptr) {
  // Its window_size is one-sided (causal local attention): the padded path's mask says
  // every window the same way.
  if (windowed(call)) return refuse(why, [] { return std::string("the memory-efficient kernel is given no window"); });
  // Its bias on packed tokens would be one [heads, N, N] for the whole batch.
  if (call.bias.defined())
    return refuse(why, [] { return std::string("the memory-efficient kernel is given no bias on packed tokens"); });
  const auto type = q.scalar_type();
  const int64_t dims = q.size(2), alignment = type == at::kFloat ? 4 : 8;  // 16 bytes
  if (type != at::kFloat && type != at::kHalf && type != at::kBFloat16)
    return refuse(why, [&] { return "no varlen kernel takes " + std::string(c10::toString(type)); });
  if (type == at::kBFloat16 && compat::cuda_capability(q.device().index()) < 80)
    return refuse(why, [] { return std::string("bf16 needs sm80 or newer"); });
  if (dims % alignment != 0)
    return refuse(why, [&] { return "the memory-efficient kernel needs head_dim a multiple of " + std::to_string(alignment); });
  return true;
}

// The query side's sequence starts: the layout's, or 0, 1, ..., B for one query a sequence.
const at::Tensor& query_starts(const TokenLayout& layout, const AttentionCall& call) {
  return call.one_query_per_sequence ? layout.cu_one_each : layout.cu_seqlens;
}

at::Tensor cuda_flash(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                      const AttentionCall& call) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  const int64_t max_q = call.one_query_per_sequence ? 1 : layout.longest;
  const bool causal = call.causal && !call.one_query_per_sequence;
  if (!windowed(call))
    return compat::flash_attention_varlen(q.contiguous(), k.contiguous(), v.contiguous(), query_starts(layout, call),
                                          layout.cu_seqlens, max_q, layout.longest, call.dropout_p, causal, scale);
  // The window as the kernel's own (-1: no bound), bottom-right aligned as model/attention.h
  // places one causal query a sequence; autograd hands both sizes to its backward.
  return std::get<0>(at::_flash_attention_forward(
      q.contiguous(), k.contiguous(), v.contiguous(), query_starts(layout, call), layout.cu_seqlens, max_q,
      layout.longest, call.dropout_p, causal, /*return_debug_mask=*/false, std::optional<double>(scale),
      std::optional<int64_t>(call.window_left), std::optional<int64_t>(call.causal ? 0 : call.window_right)));
}

at::Tensor cuda_efficient(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                          const AttentionCall& call) {
  const int64_t group = q.size(1) / k.size(1);
  // This kernel has no grouped heads: each key/value head is repeated for its query heads.
  const auto shared = [&](const at::Tensor& t) { return (group == 1 ? t : t.repeat_interleave(group, 1)).contiguous(); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  const bool needs_grad = at::GradMode::is_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad());
  return compat::efficient_attention_varlen(q.contiguous().unsqueeze(0), shared(k).unsqueeze(0),
                                            shared(v).unsqueeze(0), query_starts(layout, call), layout.cu_seqlens,
                                            call.one_query_per_sequence ? 1 : layout.longest, layout.longest,
                                            call.dropout_p, call.causal && !call.one_query_per_sequence, needs_grad,
                                            scale)
      .squeeze(0);
}

// The shapes, dtypes and devices attention() takes (model/attention.h), else a ModelError
// that says which tensor and what it is.
void check_call(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                const AttentionCall& call) {
  const auto fail = [](const auto&... what) { throw ModelError(c10::str("attention: ", what...)); };
  if (q.dim() != 3 || k.dim() != 3 || v.dim() != 3)
    fail("q ", q.sizes(), ", k ", k.sizes(), " and v ", v.sizes(), " must be [tokens, heads, head_dim]");
  if (k.sizes() != v.sizes()) fail("k ", k.sizes(), " and v ", v.sizes(), " differ");
  if (k.size(0) != layout.tokens) fail("k has ", k.size(0), " rows, the layout ", layout.tokens, " tokens");
  if (q.size(0) != (call.one_query_per_sequence ? layout.batch : layout.tokens))
    fail("q has ", q.size(0), " rows for ", layout.batch, " sequences of ", layout.tokens, " tokens",
         call.one_query_per_sequence ? " (one query a sequence)" : "");
  if (q.size(2) != k.size(2) || k.size(1) == 0 || q.size(1) % k.size(1) != 0)
    fail("q ", q.sizes(), " does not fit k ", k.sizes(), " (query heads must be a multiple of key/value heads)");
  if (q.scalar_type() != k.scalar_type() || k.scalar_type() != v.scalar_type())
    fail("q, k and v have different dtypes (", q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type(), ")");
  if (q.device() != k.device() || k.device() != v.device() || layout.cu_seqlens.device() != q.device())
    fail("q, k, v and the layout are on different devices (", q.device(), ", ", k.device(), ", ", v.device(), ", ",
         layout.cu_seqlens.device(), ")");
  if (call.window_left < -1 || call.window_right < -1)
    fail("window (", call.window_left, ", ", call.window_right, ") must be sizes of at least 0, or -1 for no bound");
  if (const at::Tensor& bias = call.bias; bias.defined()) {
    if (!at::isFloatingType(bias.scalar_type())) fail("bias is ", bias.scalar_type(), ", not a floating-point dtype");
    if (bias.dim() != 3 || bias.size(0) != q.size(1) || bias.size(1) != bias.size(2) || bias.size(1) < layout.length)
      fail("bias ", bias.sizes(), " must be [q_heads ", q.size(1), ", L, L] with L at least the padded length ",
           layout.length);
    if (bias.device() != q.device()) fail("bias is on ", bias.device(), ", q on ", q.device());
  }
}

AttentionPath choose_path(const at::Tensor& q, const TokenLayout& layout, const AttentionCall& call) {
  if (q.device().is_cpu()) {
    if (call.mode == AttentionMode::Padded) return AttentionPath::CpuPadded;
    if (call.mode == AttentionMode::Packed) return AttentionPath::CpuPacked;
    if (!at::isFloatingType(q.scalar_type()) || q.scalar_type() == at::kDouble) return AttentionPath::CpuPadded;
    // A window narrow against the longest text: each text's call reads only its band.
    if (band_block(call, layout.longest) > 0) return AttentionPath::CpuPacked;
    if (!cpu_packed_pays(layout)) return AttentionPath::CpuPadded;
    return call.dropout_p > 0 ? AttentionPath::CpuGrouped : AttentionPath::CpuPacked;
  }
  if (!q.device().is_cuda() || call.mode == AttentionMode::Padded) return AttentionPath::CudaPadded;
  if (flash_takes(q, call)) return AttentionPath::CudaFlash;
  if (efficient_takes(q, call)) return AttentionPath::CudaEfficient;
  return AttentionPath::CudaPadded;
}

// Why choose_path did not take a faster CUDA kernel for this call ("" where none was
// refused: the CPU's paths, flash itself, model.attention padded).
std::string why_not_faster(AttentionPath path, const at::Tensor& q, const AttentionCall& call) {
  std::string flash, efficient;
  if (path == AttentionPath::CudaEfficient) return flash_takes(q, call, &flash) ? "" : flash;
  if (path != AttentionPath::CudaPadded || !q.device().is_cuda() || call.mode == AttentionMode::Padded) return "";
  flash_takes(q, call, &flash);
  efficient_takes(q, call, &efficient);
  return flash + "; " + efficient;
}

// The first call of each path in the process writes one log line: what runs, and why not a
// faster kernel (info on CUDA, where the kernel decides the speed; debug on the CPU, whose
// auto mode changes path from batch to batch). Every later call costs one relaxed load:
// the line is made only when it is written.
void log_first_use(AttentionPath path, const at::Tensor& q, const AttentionCall& call) {
  std::atomic<bool>& logged = g_path_logged[static_cast<size_t>(path)];
  if (logged.load(std::memory_order_relaxed) || logged.exchange(true, std::memory_order_relaxed)) return;
  g_log_lines_built[static_cast<size_t>(path)].fetch_add(1, std::memory_order_relaxed);
  const std::string why = why_not_faster(path, q, call);
  const std::string line = std::string("attention: ") + attention_path_name(path) + (why.empty() ? "" : " (" + why + ")");
  if (q.device().is_cpu())
    spdlog::debug("{}", line);
  else
    spdlog::info("{}", line);
}

}  // namespace

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::CpuPacked: return "CPU packed (one scaled_dot_product_attention a sequence)";
    case AttentionPath::CpuPadded: return "CPU padded (one call, the padding masked)";
    case AttentionPath::CpuGrouped: return "CPU grouped (texts of about one length share a padded call)";
    case AttentionPath::CudaFlash: return "CUDA flash attention, varlen";
    case AttentionPath::CudaEfficient: return "CUDA memory-efficient attention, varlen";
    case AttentionPath::CudaPadded: return "padded (scaled_dot_product_attention)";
  }
  return "?";
}

// The CPU's auto rule, from forward + backward of one layer's attention on 32 sequences
// (fp32, one thread, 12 heads of 32 and of 64, with and without dropout 0.1; the table is in
// docs/models.md): wherever a batch has padding, the loop over its sequences is the faster —
// 3× on STS-B-like lengths (6 to 40 tokens), 4-7× on skewed ones (one in twenty near the
// longest), still ahead at 75% fill (48 to 64 tokens) — and a dense batch (every sequence the
// same length, no padding) is faster as one batched call than as 32 small ones (32 × 64:
// 111 ms against 142; 32 × 16: 14 against 23). With dropout (training BERT and XLM-R) the
// loop's calls cost twice as much each (SDPA draws its mask per call), and texts of about one
// length sharing a call (cpu_grouped) beat it: 64 texts of one layer, forward and backward,
// STS-B lengths 16.7 ms against 23.1, texts of 7-13 tokens 9.3 against 18.3, one in twenty
// at 64 among 4-20 13.1 against 22.6, uniform 8-64 even (scripts/bench-attention.sh; the
// table in docs/models.md). Without dropout it did not pay reliably (0.92× to 1.1×).
bool cpu_packed_pays(const TokenLayout& layout) {
  for (const int64_t l : layout.lengths)
    if (l != layout.length) return true;
  return false;
}

std::string describe_attention_mode(AttentionMode mode, const c10::Device& device) {
  const std::string head = "model.attention " + choice_name(mode) + ": ";
  if (device.is_cpu()) {
    switch (mode) {
      case AttentionMode::Packed: return head + "one scaled_dot_product_attention a sequence, for every batch";
      case AttentionMode::Padded: return head + "padded with a mask, one call, for every batch";
      case AttentionMode::Auto:
        return head + "per batch on the CPU: where the batch has padding, texts of about one length sharing a "
                      "padded call while training with attention dropout, else one scaled_dot_product_attention "
                      "a text; one padded call where it has no padding";
    }
  }
  switch (mode) {
    case AttentionMode::Padded: return head + "padded with a mask (scaled_dot_product_attention) for every batch";
    default:
      return head + "CUDA's varlen kernels (flash for bf16/fp16 on sm80+ with head_dim a multiple of 8 up to 256, "
                    "else the memory-efficient one), padded where neither takes the call; the first use of each "
                    "is logged";
  }
}

at::Tensor cpu_attention_grouped(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const TokenLayout& layout, const AttentionCall& call) {
  check_call(q, k, v, layout, call);
  if (!q.device().is_cpu())
    throw std::logic_error(c10::str("cpu_attention_grouped: the CPU's path, called with q on ", q.device()));
  return cpu_grouped(q, k, v, layout, call);
}

// Each counter's value now, read alone.
static std::array<int64_t, kAttentionPaths> read_counters(const std::array<std::atomic<int64_t>, kAttentionPaths>& c) {
  std::array<int64_t, kAttentionPaths> values{};
  for (size_t i = 0; i < values.size(); ++i) values[i] = c[i].load(std::memory_order_relaxed);
  return values;
}

std::array<int64_t, kAttentionPaths> attention_path_counts() { return read_counters(g_path_counts); }
std::array<int64_t, kAttentionPaths> attention_log_lines_built() { return read_counters(g_log_lines_built); }

// What autocast does to scaled_dot_product_attention (a lower-precision op on the CPU and
// on CUDA), done here because the packed paths call kernels autocast does not see whole:
// under autocast, q, k and v meet in its dtype — Qwen3's q and k leave their RMSNorm and
// rotation in fp32 while v leaves its projection in bf16.
static std::array<at::Tensor, 3> as_autocast_would(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const c10::DeviceType device = q.device().type();
  if ((device != c10::kCPU && device != c10::kCUDA) || !at::isFloatingType(q.scalar_type())) return {q, k, v};
  const compat::AutocastState autocast = compat::autocast_state(device);
  if (!autocast.enabled) return {q, k, v};
  return {q.to(autocast.dtype), k.to(autocast.dtype), v.to(autocast.dtype)};
}

at::Tensor attention(const at::Tensor& q_in, const at::Tensor& k_in, const at::Tensor& v_in, const TokenLayout& layout,
                     const AttentionCall& call) {
  const auto [q, k, v] = as_autocast_would(q_in, k_in, v_in);
  check_call(q, k, v, layout, call);
  const AttentionPath path = choose_path(q, layout, call);
  g_path_counts[static_cast<size_t>(path)].fetch_add(1, std::memory_order_relaxed);
  log_first_use(path, q, call);
  RECORD_FUNCTION(attention_path_name(path), std::vector<c10::IValue>());  // the profile's name for it
  switch (path) {
    case AttentionPath::CpuPacked: return cpu_sequence_loop(q, k, v, layout, call);
    case AttentionPath::CpuGrouped: return cpu_grouped(q, k, v, layout, call);
    case AttentionPath::CudaFlash: return cuda_flash(q, k, v, layout, call);
    case AttentionPath::CudaEfficient: return cuda_efficient(q, k, v, layout, call);
    case AttentionPath::CpuPadded:
    case AttentionPath::CudaPadded: return padded(q, k, v, layout, call);
  }
  return padded(q, k, v, layout, call);
}

}  // namespace ddp_embed
