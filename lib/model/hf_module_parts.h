// What the encoders' files (model/bert.cpp, model/qwen3.cpp) share to mirror Hugging Face:
// a module that only names its children, and reading a number from a config.json.
#pragma once

#include <ostream>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>
#include <torch/nn/module.h>

#include "model/encoder.h"

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

}  // namespace ddp_embed
