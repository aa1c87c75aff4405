#include "model/lora.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <ATen/ops/linear.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/init.h>

namespace ddp_embed {

at::Tensor AdaptableLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = torch::nn::LinearImpl::forward(x);
  if (!adapted()) return y;
  return y + at::linear(at::linear(x, lora_A), lora_B).mul(scale);
}

void AdaptableLinearImpl::add_adapter(int64_t rank, double alpha) {
  if (adapted()) throw std::logic_error("AdaptableLinear: an adapter was already added");
  if (rank <= 0) throw ModelError("model.lora_rank must be positive, not " + std::to_string(rank));
  torch::NoGradGuard no_grad;
  const auto options = weight.options().requires_grad(false);
  // PEFT's reset_lora_parameters: A as nn.Linear's default (Kaiming-uniform, a = √5), B zero.
  at::Tensor a = at::empty({rank, weight.size(1)}, options);
  torch::nn::init::kaiming_uniform_(a, std::sqrt(5.0));
  lora_A = register_parameter("lora_A", a);
  lora_B = register_parameter("lora_B", at::zeros({weight.size(0), rank}, options));
  scale = alpha / double(rank);
}

at::Tensor AdaptableLinearImpl::merged_weight() const {
  torch::NoGradGuard no_grad;
  if (!adapted()) return weight.detach();
  return weight.detach() + at::matmul(lora_B.detach(), lora_A.detach()).mul(scale);
}

LoraSummary apply_lora(torch::nn::Module& encoder, int64_t rank, double alpha) {
  LoraSummary s;
  // A rank above a layer's smaller side adds no expressiveness (B·A has at most that
  // rank) and only memory: a rank of 100,000 would fail in the allocator, naming nothing.
  for (const auto& item : encoder.named_modules("", /*include_self=*/false))
    if (const auto* linear = dynamic_cast<const AdaptableLinearImpl*>(item.value().get())) {
      const int64_t out = linear->weight.size(0), in = linear->weight.size(1);
      if (rank > std::min(in, out))
        throw ModelError("model.lora_rank " + std::to_string(rank) + " is larger than layer " + item.key() + " (" +
                         std::to_string(in) + " in, " + std::to_string(out) +
                         " out) allows: a LoRA rank is at most min(in, out) = " + std::to_string(std::min(in, out)) +
                         " of every adapted layer");
    }
  for (auto& p : encoder.parameters()) {
    p.set_requires_grad(false);
    s.frozen += p.numel();
  }
  for (const auto& m : encoder.modules(/*include_self=*/false))
    if (auto* linear = dynamic_cast<AdaptableLinearImpl*>(m.get())) {
      linear->add_adapter(rank, alpha);
      s.trainable += linear->lora_A.numel() + linear->lora_B.numel();
      ++s.layers;
    }
  if (s.layers == 0) throw std::logic_error("apply_lora: the encoder has no adaptable linear layer");
  return s;
}

std::vector<std::pair<std::string, at::Tensor>> merged_tensors(const torch::nn::Module& module) {
  // "layers.0.self_attn.q_proj.weight" -> its layer, for every layer that has an adapter.
  std::map<std::string, const AdaptableLinearImpl*> merged;
  for (const auto& item : module.named_modules("", /*include_self=*/false))
    if (const auto* linear = dynamic_cast<const AdaptableLinearImpl*>(item.value().get()); linear && linear->adapted())
      merged[item.key() + ".weight"] = linear;
  const auto is_adapter = [](const std::string& name) {
    const std::string leaf = name.substr(name.rfind('.') + 1);
    return leaf == "lora_A" || leaf == "lora_B";
  };
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (is_adapter(p.key())) continue;
    const auto it = merged.find(p.key());
    // Merged copies go to host memory at once: all of them on the device together would
    // be a second model there (28 GB for 8B) at the end of training.
    out.emplace_back(p.key(), it == merged.end() ? p.value().detach() : it->second->merged_weight().to(at::kCPU));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value().detach());
  return out;
}

}  // namespace ddp_embed
