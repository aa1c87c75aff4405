// LoRA (Hu et al. 2021; PEFT's LoraConfig with target_modules "all-linear"): each linear
// layer of the encoder learns a low-rank change of its weight while the weight itself, and
// every other encoder parameter, stays as the pretrained model has it:
//
//   y = x·Wᵀ + b + (alpha / r)·(x·Aᵀ)·Bᵀ        A [r, in], B [out, r]
//
// A starts as PEFT's (Kaiming-uniform), B at zero, so training starts from the pretrained
// model exactly. What trains is r·(in + out) values a layer instead of in·out (0.8 % of
// Qwen3-Embedding-4B at r = 16), so the gradients and AdamW's moments shrink with them:
// the frozen weights need no gradient and no optimizer state. The projection head, new,
// trains whole.
//
// The encoders build their linear layers as AdaptableLinear (torch::nn::Linear until an
// adapter is added); apply_lora adds the adapters and freezes the rest; a model folder is
// written with the adapters merged (merged_tensors), a plain model any library loads.
// Checkpoints keep the adapters apart ("…query.lora_A"), so a run resumes with them.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/modules/linear.h>

#include "model/model_error.h"

namespace ddp_embed {

class AdaptableLinearImpl : public torch::nn::LinearImpl {
 public:
  using torch::nn::LinearImpl::LinearImpl;
  at::Tensor forward(const at::Tensor& x);
  // Registers lora_A [rank, in] and lora_B [out, rank] (trainable) with scale alpha / rank.
  // A rank <= 0 is a ModelError; a second adapter std::logic_error (the caller's bug).
  void add_adapter(int64_t rank, double alpha);
  bool adapted() const { return lora_A.defined(); }
  // weight + scale·B·A, detached; the weight itself without an adapter.
  at::Tensor merged_weight() const;

  at::Tensor lora_A, lora_B;
  double scale = 0;
};
TORCH_MODULE(AdaptableLinear);

struct LoraSummary {
  int64_t layers = 0;     // linear layers adapted
  int64_t trainable = 0;  // adapter values
  int64_t frozen = 0;     // encoder values no longer trained
};

// Adds an adapter of `rank` (> 0) to every AdaptableLinear under `encoder` and freezes
// every other parameter of it. Once, before the optimizer takes the parameters. A rank
// above min(in, out) of any of those layers is a ModelError naming the layer and
// model.lora_rank, before anything is allocated. An encoder without AdaptableLinear
// layers is std::logic_error (the encoder's bug, not the config's).
LoraSummary apply_lora(torch::nn::Module& encoder, int64_t rank, double alpha);

// The module's parameters and buffers by name as a model folder holds them: each adapted
// layer's weight merged (merged_weight), the adapters themselves left out.
std::vector<std::pair<std::string, at::Tensor>> merged_tensors(const torch::nn::Module& module);

}  // namespace ddp_embed
