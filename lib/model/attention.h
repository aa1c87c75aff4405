// Attention on packed tokens: the one entry point every encoder calls (BERT and XLM-RoBERTa
// bidirectional, Qwen3 causal with grouped query heads).
//
// q, k and v come packed, [tokens, heads, head_dim], the real tokens of a batch in sequence
// order (model/token_layout.h); the layout says where each sequence's rows are, on the host
// (its lengths) and on the device (cu_seqlens, int32). Which computation runs is decided per
// call, by model.attention (config/choices.h: AttentionMode) and what the device can do:
//
//   CPU   packed   one at::scaled_dot_product_attention a sequence, on its real tokens
//                  (split_with_sizes views: each backward writes its own rows)
//         grouped  (auto only) the texts sorted by length and cut into runs of about one
//                  length, each run one padded call with its probabilities stored and the
//                  encoders' cheap dropout mask; a run of one text as packed does
//         padded   q, k, v scattered into [B, heads, L, head_dim] with the padding masked,
//                  one call: with dropout or while autograd records, attention_recomputed
//                  (model/activation_checkpoint.h: a cheaper dropout mask, the probabilities
//                  recomputed in backward, not stored), else (and with a bias)
//                  scaled_dot_product_attention
//   CUDA  packed   flash attention's varlen kernel (bf16/fp16, sm80+, head_dim a multiple
//                  of 8 up to 256, grouped heads as they are; a window as its own window
//                  sizes), else the memory-efficient kernel's (cu_seqlens, batch 1; fp32
//                  too; grouped heads repeated; no window)
//         padded   scaled_dot_product_attention with a mask (or its causal flag)
//
// A window (AttentionCall) is a band in each text's SDPA mask on the CPU's paths, the
// flash kernel's window sizes on CUDA. On the CPU, a window narrow against its text (both
// sides bounded, no bias) runs as one call a block of queries over the keys that block
// reaches: a windowed layer costs its window, not its text's length (auto takes packed for
// such a batch). On CUDA, where no kernel takes the window (fp32, or the first token's
// window of one query a sequence) the padded path runs with it in the mask, and its
// first-use log line says why. A bias is in each text's SDPA mask on the CPU (the padded
// path's SDPA, not attention_recomputed, which gives a bias no gradient), and always the
// padded path on CUDA (neither varlen kernel is given one), logged the same way.
//
// auto picks per batch. On the CPU, where the batch has padding: grouped with attention
// dropout (training BERT, XLM-R), packed without; padded where it has none (cpu_packed_pays
// below, and attention.cpp the measurements behind the rule).
// On CUDA, packed whenever a varlen kernel takes the call. Each path gives the same values,
// to rounding (1e-5 in fp32: tests/torch/test_attention*.cpp); dropout draws differ between
// paths. Grouped heads: the CPU's paths and the memory-efficient kernel repeat each
// key/value head for its query heads; flash attention reads them as they are.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <ATen/ATen.h>

#include "config/choices.h"  // AttentionMode
#include "model/model_error.h"
#include "model/token_layout.h"

namespace ddp_embed {

struct AttentionCall {
  // Each query sees the keys of its own sequence up to its own position (Qwen3); else all
  // of its sequence (BERT). The same as window_right 0.
  bool causal = false;
  // The keys a query may see beside the sequence bound, as flash attention's window sizes:
  // the query at position i sees the key at position j iff i - window_left <= j <= i +
  // window_right, -1 meaning no bound on that side (causal makes window_right 0 whatever
  // it says). Positions count from each sequence's first token; a query always sees itself.
  // Sliding-window layers (ModernBERT's local ones, Qwen3's and Gemma 3's) set it; each
  // model's reader turns its config's sliding_window into these two, off-by-one included
  // (transformers' sliding causal mask, key j seen when i - sliding_window < j <= i, is
  // (sliding_window - 1, 0)).
  int64_t window_left = -1, window_right = -1;
  // q is [B, q_heads, head_dim], one query a sequence (the token a pooling reads on the last
  // layer: BERT's first, Qwen3's last); else q is [N, ...] like k. That query stands at its
  // sequence's last position when causal, at its first otherwise: without a window it sees
  // its whole sequence either way, with one the keys around that position.
  bool one_query_per_sequence = false;
  // Added to each text's scaled scores before the softmax (MPNet's relative-position bias),
  // the same for every text: [q_heads, L, L], L at least the layout's padded length, a
  // text of l tokens taking its top-left [l, l] block (one query a sequence: the row of its
  // position, above). Any floating-point dtype, used in q's; on q's device. Differentiable:
  // backward gives it its gradient. Undefined: none.
  at::Tensor bias;
  double dropout_p = 0;  // on the attention probabilities; 0 outside training
  // CPU, padded path, while autograd records: recompute the probabilities in backward
  // instead of storing them (off when the whole layer is checkpointed).
  bool recompute_padded = false;
  AttentionMode mode = AttentionMode::Auto;
};

// softmax(q kᵀ / sqrt(head_dim) + bias) v for each sequence over the keys its window
// leaves (AttentionCall), with dropout on the probabilities.
// q [N or B, q_heads, D], k and v [N, kv_heads, D] (q_heads a multiple of kv_heads: query
// head h reads key/value head h / (q_heads / kv_heads)), one device, N =
// layout.tokens; one dtype, or under autocast cast to its dtype as autocast casts SDPA
// (Qwen3: q, k in fp32 after RMSNorm and rotation, v in bf16). Returns q's shape (in that
// dtype). Differentiable in q, k, v and call.bias. Tensors of other shapes, dtypes or
// devices (the bias's included) are a ModelError saying which, and so is a window side
// below -1. The first call of each path in the process logs it (info on CUDA, with why not
// a faster kernel; debug on the CPU); later calls log nothing.
at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const TokenLayout& layout,
                     const AttentionCall& call);

// The CPU's grouped path alone, whatever call.mode and dropout say (auto takes it only with
// attention dropout): what the tests compare with the reference without dropout. The
// checks of attention(), and std::logic_error for tensors not on the CPU.
at::Tensor cpu_attention_grouped(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const TokenLayout& layout, const AttentionCall& call);

// ---- which path ---------------------------------------------------------------------------

enum class AttentionPath { CpuPacked, CpuPadded, CpuGrouped, CudaFlash, CudaEfficient, CudaPadded };
constexpr int kAttentionPaths = 6;
// "CPU packed (one scaled_dot_product_attention a sequence)", "CUDA flash attention, varlen", ...
const char* attention_path_name(AttentionPath path);

// The CPU's auto rule: whether a path on each text's real tokens (grouped with dropout, else
// packed) is the faster for this batch — it is wherever the batch has padding. See
// attention.cpp for the measurements.
bool cpu_packed_pays(const TokenLayout& layout);

// What model.attention does on this device, in a sentence for the start-up log.
std::string describe_attention_mode(AttentionMode mode, const c10::Device& device);

// How many attention calls took each path in this process (every layer's forward counts
// once; a recomputed forward counts again): the profile reports the difference over its steps.
std::array<int64_t, kAttentionPaths> attention_path_counts();

// For tests: how many times each path's first-use log line was made in this process (at
// most once a path, however many calls take it).
std::array<int64_t, kAttentionPaths> attention_log_lines_built();

}  // namespace ddp_embed
