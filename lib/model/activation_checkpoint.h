// Activation checkpointing: run a block of the model without keeping its intermediate
// activations, and recompute them in backward. LibTorch's C++ API has no checkpoint
// utility, so this is a custom autograd function:
//
//   forward   runs the block with autograd off and keeps only its inputs (hidden states,
//             attention bias), the state of the device's random generator and the
//             autocast state;
//   backward  restores that generator state (so dropout draws the same masks), re-enters
//             the same autocast state, runs the block again with autograd on, and
//             backpropagates through it: gradients for the input and for every parameter
//             of the module. The generator is then put back where it was, so the rest of
//             the program sees the same random numbers as without checkpointing.
//
// The result is the same loss and the same gradients as the plain block (the same
// operations on the same values), for a memory cost of one [B, L, H] tensor per block
// instead of every activation inside it (about 15 of that size per BERT layer, plus the
// attention probabilities), and roughly one more forward pass of compute. One rounding
// difference under autocast: when one autocast scope runs the block several times (the
// query and the positive passes), the plain forward casts each weight once and adds the
// passes' gradients of that cast in half precision; the recomputations cast per pass, so
// those gradients are added in fp32.
#pragma once

#include <functional>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "model/dropout.h"  // DropoutMask

namespace ddp_embed {

// The state of the device's default generator (where dropout draws), and setting it.
at::Tensor generator_state(const c10::Device& device);
void set_generator_state(const c10::Device& device, const at::Tensor& state);

// While alive, the device's generator continues from `replayed` (a generator_state()),
// so that a recomputation draws the same dropout masks; afterwards it is back where it
// was when the scope began.
class ReplayRandomness {
 public:
  ReplayRandomness(const c10::Device& device, const at::Tensor& replayed);
  ~ReplayRandomness();
  ReplayRandomness(const ReplayRandomness&) = delete;
  ReplayRandomness& operator=(const ReplayRandomness&) = delete;

 private:
  c10::Device device_;
  at::Tensor resume_;
};

// A block to checkpoint: a function of the hidden states and the additive attention
// bias whose only other tensors are the parameters of one module.
using CheckpointedBlock = std::function<at::Tensor(const at::Tensor& hidden, const at::Tensor& bias)>;

// block(hidden, bias), recomputed in backward instead of stored. `module` owns every
// parameter the block uses (they receive their gradients through this function); a bias
// that requires grad (MPNet's relative-position bias, made outside the block) gets its
// gradient too. Call it only when autograd records (GradMode on); outside of that just
// call the block.
at::Tensor checkpointed(torch::nn::Module& module, CheckpointedBlock block, const at::Tensor& hidden,
                        const at::Tensor& bias);

// One layer of an encoder's loop: layer->forward(hidden, args...), checkpointed when
// `checkpoint` is on and autograd records, else called as it is. For layers that take no
// attention bias beside the hidden states (the layout says where each text is); MPNet,
// whose shared relative-position bias needs its gradient, calls checkpointed() itself.
// `layer` is a module holder (a shared pointer); args are copied into the recomputation.
template <class LayerHolder, class... Args>
at::Tensor layer_maybe_checkpointed(bool checkpoint, LayerHolder layer, const at::Tensor& hidden, const Args&... args) {
  if (!checkpoint || !at::GradMode::is_enabled()) return layer->forward(hidden, args...);
  const auto block = [layer, args...](const at::Tensor& h, const at::Tensor& /*bias*/) mutable {
    return layer->forward(h, args...);
  };
  return checkpointed(*layer, block, hidden, at::empty({0}, hidden.options()));
}

// The CPU's attention with dropout, and wherever its probabilities should not be stored:
// softmax(q kᵀ / sqrt(head_dim) + bias) v with dropout on the probabilities, q [B, heads,
// Lq, D], k and v [B, heads, Lk, D] (or without B), bias additive and broadcastable to
// [B, heads, Lq, Lk] (0 where a key takes part, a very negative finite value where not;
// undefined: none), dropout a cpu_dropout_mask (model/dropout.h) of the probabilities' shape
// drawn by the caller (undefined: none). Computed in fp32 (fp64 for fp64 inputs),
// returned in q's dtype.
//
// Why not at::scaled_dot_product_attention: SDPA's CPU math path keeps for backward the
// softmax output, a float dropout mask and the dropped probabilities, 12 bytes an element
// of [B, heads, Lq, Lk] (MiniLM-L6 at 32 × 64 tokens: ~450 MB a step); it draws that mask
// with bernoulli_ (a double an element, on one thread) and wraps its softmax in
// _safe_softmax (an `all` over every row): together 8% of that step (docs/benchmarks.md).
// Here forward keeps q, k, v, the bias, each row's log-sum-exp and the bool mask (1 byte an
// element); backward recomputes the probabilities from them and applies softmax's backward
// by hand — flash attention's backward in ATen ops, for one more q kᵀ product. A caller
// with many small calls (one a sequence) draws one mask for all and passes each its slice.
// Differentiable in q, k and v; without autograd it is just the forward. CPU tensors
// only: others are std::logic_error (the caller's bug: attention.cpp calls it on the CPU).
at::Tensor attention_recomputed(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                                const DropoutMask& dropout);

}  // namespace ddp_embed
