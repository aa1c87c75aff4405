// What the encoders' files (model/bert.cpp, qwen3.cpp, mpnet.cpp, modernbert.cpp, gemma3.cpp)
// share to mirror Hugging Face: a module that only names its children, reading a number from
// a config.json, the input check of a forward, and rotary positions.
#pragma once

#include <ostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>

#include <c10/util/StringUtil.h>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "model/encoder.h"
#include "model/token_layout.h"

namespace ddp_embed {

// A module without parameters of its own: it only puts its children under a name, so
// that ours are called what Hugging Face calls them (attention.self.query.weight).
struct NameScope : torch::nn::Module {
  void pretty_print(std::ostream& os) const override { os << "NameScope"; }
};

// j[key] into `out` when present and not null; a value of the wrong kind is a ModelError
// naming `origin` and the key.
template <typename T>
void read_number(const nlohmann::json& j, const char* key, T& out, const std::string& origin) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if (!(std::is_integral_v<T> ? it->is_number_integer() : it->is_number()))
    throw ModelError(origin + ": " + key + " must be " + (std::is_integral_v<T> ? "an integer" : "a number") +
                     ", not " + it->dump());
  out = it->get<T>();
}

// hidden_after's `layers` (0: the embeddings, ..., num_layers: forward()'s output): else
// std::out_of_range naming `model` ("MPNetModel").
inline void check_layer_count(const char* model, int64_t layers, int64_t num_layers) {
  if (layers < 0 || layers > num_layers)
    throw std::out_of_range(std::string(model) + "::hidden_after: " + std::to_string(layers) + " layers of " +
                            std::to_string(num_layers));
}

// input_ids [B, L] of the layout's batch and length, and L within the positions: else a
// ModelError naming `model` ("Qwen3Model") or max_position_embeddings.
inline void check_ids_fit(const char* model, const at::Tensor& input_ids, const TokenLayout& layout,
                          int64_t max_position) {
  if (input_ids.dim() != 2 || input_ids.size(0) != layout.batch || input_ids.size(1) != layout.length)
    throw ModelError(c10::str(model, ": input_ids ", input_ids.sizes(), " does not match attention_mask [",
                              layout.batch, ", ", layout.length, "]"));
  if (layout.length > max_position)
    throw ModelError("sequence length " + std::to_string(layout.length) + " exceeds max_position_embeddings " +
                     std::to_string(max_position));
}

// Rotary positions as transformers computes them (default rope_type): each real token's
// (cos, sin), [tokens, head_dim] in fp32, for `theta`, from the layout's positions.
inline std::pair<at::Tensor, at::Tensor> rotary_factors(const TokenLayout& layout, int64_t head_dim, double theta) {
  const at::Tensor exponents =
      at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong).device(layout.positions.device()))
          .to(at::kFloat) /
      static_cast<double>(head_dim);
  const at::Tensor inv_freq = 1.0 / at::pow(theta, exponents);
  const at::Tensor angles = layout.positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);
  const at::Tensor both = at::cat({angles, angles}, -1);
  return {both.cos(), both.sin()};
}

// x [n, heads, head_dim] rotated by its tokens' angles (cos, sin [n, head_dim]): transformers'
// apply_rotary_pos_emb with rotate_half (the two halves of each head are the pairs).
inline at::Tensor rotate_half_pairs(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace ddp_embed
