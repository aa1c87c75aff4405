// Each layer of an encoder held to transformers' hidden states of one padded batch, which
// the fixture makers write (scripts/python/fixture_hidden_states.py: input_ids,
// attention_mask, hidden_states.0 .. hidden_states.N): the MPNet, ModernBERT and Gemma 3
// tests use it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "../core/tolerance.h"
#include "model/weights.h"

namespace hidden_states {

// The tensors of an expected.safetensors by name.
inline std::map<std::string, at::Tensor> read_expected(const std::filesystem::path& file) {
  std::map<std::string, at::Tensor> tensors;
  for (auto& [name, tensor] : ddp_embed::load_tensors(file.string())) tensors[name] = tensor;
  for (const char* name : {"input_ids", "attention_mask", "hidden_states.0"})
    if (!tensors.count(name)) throw std::runtime_error(file.string() + " has no " + name);
  return tensors;
}

// The largest difference between ours and theirs [B, L, H] on the batch's real tokens.
inline double worst_on_real_tokens(const at::Tensor& ours, const at::Tensor& theirs, const at::Tensor& mask) {
  const at::Tensor real = mask.ne(0).unsqueeze(-1).expand_as(theirs);
  return (ours - theirs).abs().masked_select(real).max().item<double>();
}

// hidden_after(ids, mask, k) for k = 0 .. layers against hidden_states.k: every real token
// within `bound`, each recorded for the tolerance table under "`name` hidden_states.k".
template <class HiddenAfter>
void expect_every_layer_matches(const std::filesystem::path& expected_file, int64_t layers,
                                HiddenAfter&& hidden_after, double bound, const std::string& name) {
  at::NoGradGuard no_grad;
  const auto expected = read_expected(expected_file);
  const at::Tensor ids = expected.at("input_ids"), mask = expected.at("attention_mask");
  ASSERT_GT(mask.sum(1).max().item<int64_t>(), mask.sum(1).min().item<int64_t>()) << "the batch is padded";
  for (int64_t k = 0; k <= layers; ++k) {
    const std::string key = "hidden_states." + std::to_string(k);
    ASSERT_TRUE(expected.count(key)) << expected_file << " has no " << key;
    const at::Tensor theirs = expected.at(key);
    const at::Tensor ours = hidden_after(ids, mask, k);
    ASSERT_EQ(ours.sizes(), theirs.sizes()) << key;
    const double worst = worst_on_real_tokens(ours, theirs, mask);
    EXPECT_LE(worst, bound) << name << " " << key;
    tolerance::record(name + " " + key + " against transformers", worst, bound);
  }
}

}  // namespace hidden_states
