// Dropout as the model applies it, and the CPU's cheap dropout mask that the encoders'
// dropout and the CPU's attention (model/activation_checkpoint.h) share.
//
// Why our own mask on the CPU: LibTorch's CPU bernoulli_ draws one double per element on
// one thread (~6 ns/element): with dropout 0.1 that was ~20% of a BERT-small training step
// on 2 threads, and SDPA's dropout on the attention probabilities ~6% of a MiniLM step at
// 64 tokens. Here each 31-bit draw of random_() on the default generator gives two 15-bit
// uniforms, compared with p quantized to 1/32768 (the scale uses the quantized p, so the
// expectation stays exact); the rest is parallel elementwise work. Same generator state,
// same mask. The mask is bool, applied with masked_fill (no conversion to the values' type):
// backward keeps 1 byte an element, not a float's 4.
#pragma once

#include <ATen/ATen.h>

namespace ddp_embed {

struct DropoutMask {
  at::Tensor dropped;  // bool, the shape asked for: true where the value is dropped
  double scale = 1.0;  // what a kept value is multiplied by: 1 / (1 - p quantized)
};

// A fresh mask of `sizes` for dropout probability p in (0, 1), drawn from the CPU's
// default generator.
DropoutMask cpu_dropout_mask(at::IntArrayRef sizes, double p);

// Dropout as the model applies it (identity unless training and p > 0). On the CPU with
// cpu_dropout_mask; elsewhere at::dropout (fused on GPUs).
at::Tensor fast_dropout(const at::Tensor& x, double p, bool training);

}  // namespace ddp_embed
