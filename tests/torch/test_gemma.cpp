// EmbeddingGemma's encoder (model/gemma3.h) against transformers' Gemma3TextModel with
// use_bidirectional_attention: scripts/python/make_gemma_fixtures.py has transformers make a
// small random one (sliding and global layers, grouped heads, a query_pre_attn_scalar other
// than head_dim, a window narrower than the longest text) and write its hidden states of
// every layer for a padded batch; embed-train loads the same folder and must give each of
// them within 1e-5 on every real token. Also: its config.json read, written back and refused
// as model/gemma3.h says; Gemma's tokenizer.model read by sentencepiece giving the ids
// AutoTokenizer gives from the tokenizer.json beside it; and the whole sentence-transformers
// folder in EmbeddingGemma's form (two Dense layers without biases after mean pooling, then
// Normalize) encoding as SentenceTransformer(DIR) does and fine-tuning on 2 workers as on 1;
// and that folder without tokenizer.model, its tokenizer.json read as a BPE over characters.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../core/python_fixtures.h"
#include "../core/tolerance.h"
#include "architecture_support.h"
#include "hidden_states_support.h"
#include "model/encoder.h"
#include "model/gemma3.h"
#include "model/model_error.h"
#include "model/weights.h"
#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/tokenizer.h"

using namespace ddp_embed;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

constexpr double kGemmaParityBound = 1e-5;

fs::path gemma_fixtures() {
  static const fs::path dir =
      python_fixtures::made_by_script("make_gemma_fixtures.py", "gemma", "", {"fixture_hidden_states.py"});
  return dir;
}

at::Tensor expected_tensor(const std::string& name) {
  for (auto& [key, tensor] : load_tensors((gemma_fixtures() / "expected.safetensors").string()))
    if (key == name) return tensor;
  throw std::runtime_error("expected.safetensors has no " + name);
}

// The fixture's encoder, read as the model folder reader reads it: config.json by
// model_type, model.safetensors by name.
Gemma3Model load_fixture_encoder(const Gemma3Config* override_config = nullptr) {
  const fs::path dir = gemma_fixtures() / "encoder";
  const EncoderConfig c = encoder_config_from_hf_json((dir / "config.json").string());
  EXPECT_EQ(c.architecture, Architecture::Gemma3);
  Gemma3Model model(override_config ? *override_config : c.gemma3);
  LoadOptions options;
  options.strip_prefixes = {"model."};
  const LoadReport report = load_module_from_folder(*model, dir.string(), options);
  EXPECT_TRUE(report.unused.empty()) << report.unused.front();
  model->eval();
  return model;
}

using hidden_states::worst_on_real_tokens;

json tiny_gemma3_config(const json& extra) {
  json c = {{"model_type", "gemma3_text"}, {"use_bidirectional_attention", true}, {"vocab_size", 50},
            {"hidden_size", 16}, {"intermediate_size", 24}, {"num_hidden_layers", 2}, {"num_attention_heads", 2},
            {"num_key_value_heads", 1}, {"head_dim", 8}, {"max_position_embeddings", 32}, {"sliding_window", 8}};
  c.update(extra);
  return c;
}

// The refusal's message for `extra` over the tiny config, or "" when it is read.
std::string refusal_of(const json& extra) {
  try {
    gemma3_config_from_hf_json(tiny_gemma3_config(extra), "config.json");
  } catch (const ModelError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Gemma, EveryLayersHiddenStatesMatchTransformersWithin1e5) {
  Gemma3Model model = load_fixture_encoder();
  ASSERT_EQ(model->config().num_layers, 4);
  hidden_states::expect_every_layer_matches(
      gemma_fixtures() / "expected.safetensors", model->config().num_layers,
      [&](const at::Tensor& ids, const at::Tensor& mask, int64_t k) { return model->hidden_after(ids, mask, k); },
      kGemmaParityBound, "Gemma 3");
}

// Each CPU attention path (model/attention.h) bands the sliding layers alike.
TEST(Gemma, LastHiddenStateMatchesTransformersOnEveryCpuAttentionPath) {
  at::NoGradGuard no_grad;
  Gemma3Model model = load_fixture_encoder();
  const at::Tensor ids = expected_tensor("input_ids"), mask = expected_tensor("attention_mask");
  const at::Tensor theirs = expected_tensor("hidden_states.4");
  for (AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
    model->set_attention_mode(mode);
    EXPECT_LE(worst_on_real_tokens(model->forward(ids, mask), theirs, mask), kGemmaParityBound) << choice_name(mode);
  }
}

// Pooling reads the same states: mean over the real tokens, and cls through the last layer's
// one-query path.
TEST(Gemma, PooledOutputsAreThePoolOfTheLastHiddenState) {
  at::NoGradGuard no_grad;
  Gemma3Model model = load_fixture_encoder();
  const at::Tensor ids = expected_tensor("input_ids"), mask = expected_tensor("attention_mask");
  const at::Tensor last = expected_tensor("hidden_states.4");
  for (Pooling p : {Pooling::Mean, Pooling::Cls, Pooling::LastToken}) {
    const double worst = (model->forward_pooled(ids, mask, p) - pool(last, mask, p)).abs().max().item<double>();
    EXPECT_LE(worst, kGemmaParityBound) << choice_name(p);
  }
}

// The fixture tests what it claims: its texts are longer than the window, so the sliding
// layers attend differently from global ones, and a window one token wider or narrower than
// transformers' (|i - j| <= sliding_window / 2) would be seen.
TEST(Gemma, TheFixturesWindowChangesTheOutputByMoreThanTheBound) {
  at::NoGradGuard no_grad;
  const at::Tensor ids = expected_tensor("input_ids"), mask = expected_tensor("attention_mask");
  const at::Tensor theirs = expected_tensor("hidden_states.4");
  const Gemma3Config read = load_fixture_encoder()->config();
  ASSERT_EQ(read.sliding_window, 4);
  ASSERT_EQ(read.window_half_width(), 2);
  for (int64_t other_window : {2, 6, 64}) {  // half widths 1, 3, 32 (every text inside)
    Gemma3Config c = read;
    c.sliding_window = other_window;
    const double worst = worst_on_real_tokens(load_fixture_encoder(&c)->forward(ids, mask), theirs, mask);
    EXPECT_GT(worst, 100 * kGemmaParityBound) << "sliding_window " << other_window;
  }
}

TEST(Gemma, ConfigIsWrittenBackAsReadAndTransformers4xRopeKeysAreRead) {
  const Gemma3Config fixture = load_fixture_encoder()->config();
  EXPECT_EQ(fixture.rope_theta_full, 1000000.0);
  EXPECT_EQ(fixture.rope_theta_sliding, 10000.0);
  EXPECT_EQ(fixture.query_pre_attn_scalar, 16);
  const json written = gemma3_config_to_hf_json(fixture);
  const Gemma3Config again = gemma3_config_from_hf_json(written, "written");
  EXPECT_EQ(gemma3_config_to_hf_json(again), written);
  EXPECT_EQ(written["model_type"], "gemma3_text");
  EXPECT_EQ(written["sliding_window"], 4);
  EXPECT_EQ(written["use_bidirectional_attention"], true);
  // EmbeddingGemma's own config.json (transformers 4.57): rope_theta, rope_local_base_freq,
  // no layer_types here: every sixth layer global.
  const Gemma3Config old = gemma3_config_from_hf_json(
      tiny_gemma3_config({{"num_hidden_layers", 7}, {"rope_theta", 500.0}, {"rope_local_base_freq", 50.0},
                          {"rope_scaling", nullptr}, {"attn_logit_softcapping", nullptr}}),
      "config.json");
  EXPECT_EQ(old.rope_theta_full, 500.0);
  EXPECT_EQ(old.rope_theta_sliding, 50.0);
  ASSERT_EQ(old.layer_types.size(), 7u);
  for (size_t i = 0; i < 7; ++i) EXPECT_EQ(old.sliding(i), i != 5) << i;
}

TEST(Gemma, WhatIsNotImplementedIsRefusedNamingTheField) {
  EXPECT_EQ(refusal_of(json::object()), "");
  const auto expect_refused = [](const json& extra, const std::string& words) {
    const std::string message = refusal_of(extra);
    EXPECT_NE(message.find(words), std::string::npos) << extra.dump() << " gave: " << message;
  };
  expect_refused({{"use_bidirectional_attention", false}},
                 "config.json: use_bidirectional_attention false is not implemented");
  expect_refused({{"use_bidirectional_attention", nullptr}}, "use_bidirectional_attention null is not implemented");
  expect_refused({{"attn_logit_softcapping", 50.0}}, "config.json: attn_logit_softcapping 50.0 is not implemented");
  expect_refused({{"final_logit_softcapping", 30.0}}, "config.json: final_logit_softcapping 30.0 is not implemented");
  expect_refused({{"hidden_activation", "gelu"}}, "config.json: hidden_activation \"gelu\" is not implemented");
  expect_refused({{"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}},
                 "config.json: rope_scaling.rope_type \"linear\" is not implemented");
  expect_refused({{"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}}}}}},
                 "config.json: rope_parameters.full_attention.rope_type \"yarn\" is not implemented");
  expect_refused({{"layer_types", {"full_attention", "chunked_attention"}}},
                 "config.json: layer_types[1] \"chunked_attention\" is not implemented");
  expect_refused({{"num_attention_heads", 3}}, "hidden_size 16 is not a multiple of num_attention_heads 3");
  expect_refused({{"sliding_window", nullptr}}, "config.json: sliding_window null is not implemented");
  // The folder reader names the file.
  const fs::path dir = fs::temp_directory_path() / ("gemma-causal-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << tiny_gemma3_config({{"use_bidirectional_attention", false}}).dump();
  try {
    encoder_config_from_hf_json((dir / "config.json").string());
    ADD_FAILURE() << "a causal Gemma 3 was read";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "config.json").string() + ": use_bidirectional_attention false"),
              std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

// The route to EmbeddingGemma's tokenizer: its folder holds tokenizer.model beside
// tokenizer.json, and sentencepiece on the model file, with <bos> first and <eos> last (the
// model's own BOS and EOS pieces), gives AutoTokenizer's ids: spaces, digits, tabs, bytes
// of characters the vocabulary lacks, and the user pieces <start_of_turn>/<end_of_turn>.
TEST(Gemma, TokenizerModelThroughSentencepieceGivesAutoTokenizersIds) {
  const fs::path folder = gemma_fixtures() / "tokenizer";
  // The folder's files decide: sentencepiece, not the byte-fallback BPE of tokenizer.json.
  EXPECT_EQ(detect_tokenizer_type(folder.string()), "sentencepiece");
  const auto tokenizer = load_tokenizer("auto", folder.string());
  std::ifstream in(gemma_fixtures() / "tokenizer_ids.json");
  const json expected = json::parse(in);
  ASSERT_GT(expected["texts"].size(), 200u);
  size_t differ = 0;
  for (size_t i = 0; i < expected["texts"].size(); ++i) {
    const std::string text = expected["texts"][i].get<std::string>();
    const std::vector<int32_t> ids = tokenizer->encode(text, 1 << 20);
    const auto theirs = expected["ids"][i].get<std::vector<int32_t>>();
    if (ids != theirs && ++differ <= 5)
      ADD_FAILURE() << text << ": ours " << json(ids).dump() << ", AutoTokenizer's " << json(theirs).dump();
  }
  EXPECT_EQ(differ, 0u);

  // Saved, the folder's own files come back as they were (transformers loads tokenizer.json),
  // model_max_length set; read again, the same ids.
  const fs::path saved = fs::temp_directory_path() / ("gemma-tokenizer-" + std::to_string(::getpid()));
  fs::remove_all(saved);
  tokenizer->set_model_max_length(48);
  tokenizer->save(saved.string());
  const auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (const char* name : {"tokenizer.model", "tokenizer.json"})
    EXPECT_EQ(bytes(saved / name), bytes(folder / name)) << name;
  EXPECT_EQ(json::parse(bytes(saved / "tokenizer_config.json"))["model_max_length"], 48);
  EXPECT_FALSE(fs::exists(saved / "spiece.model"));
  const auto again = load_tokenizer("auto", saved.string());
  const std::string text = expected["texts"][0].get<std::string>();
  EXPECT_EQ(again->encode(text, 1 << 20), tokenizer->encode(text, 1 << 20));
  fs::remove_all(saved);
}

// Training reaches every parameter the same way with checkpointed layers as without
// (model/activation_checkpoint.h: each layer recomputed in backward), and LoRA adapts every
// linear layer of every Gemma 3 layer: 7 a layer.
TEST(Gemma, CheckpointedLayersGiveTheSameGradientsAndLoraAdaptsEveryProjection) {
  const at::Tensor ids = expected_tensor("input_ids"), mask = expected_tensor("attention_mask");
  const auto gradients = [&](bool checkpoint) {
    Gemma3Model model = load_fixture_encoder();
    model->train();
    model->set_activation_checkpointing(checkpoint);
    model->forward_pooled(ids, mask, Pooling::Mean).pow(2).sum().backward();
    std::vector<at::Tensor> grads;
    for (const auto& p : model->parameters()) {
      EXPECT_TRUE(p.grad().defined());
      grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
    }
    return grads;
  };
  const auto plain = gradients(false), checkpointed = gradients(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(plain[i].defined() && checkpointed[i].defined()) << i;
    EXPECT_TRUE(at::allclose(plain[i], checkpointed[i], 1e-5, 1e-6)) << "parameter " << i;
  }
  Gemma3Model model = load_fixture_encoder();
  const LoraSummary lora = apply_lora(*model, 2, 4.0);
  EXPECT_EQ(lora.layers, 4 * 7);
}

// What embed-train writes of a Gemma 3 (hf_config_json and the weights by name) is the same
// model to transformers: AutoModel loads it as a bidirectional Gemma3TextModel whose last
// hidden state is the fixture's within 1e-5 (make_gemma_fixtures.py --check).
TEST(Gemma, WrittenConfigAndWeightsLoadInTransformersAsTheSameModel) {
  Gemma3Model model = load_fixture_encoder();
  const fs::path dir = fs::temp_directory_path() / ("gemma-written-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << model->hf_config_json().dump(2);
  save_module(*model, (dir / "model.safetensors").string());
  using python_fixtures::shell_quote;
  const std::string script = std::string(DDP_EMBED_SOURCE_DIR) + "/scripts/python/make_gemma_fixtures.py";
  std::string output;
  const int rc = python_fixtures::run_command("HF_HUB_OFFLINE=1 " + shell_quote(DDP_EMBED_PYTHON) + " " +
                                                  shell_quote(script) + " --check " + shell_quote(dir.string()) + " " +
                                                  shell_quote((gemma_fixtures() / "expected.safetensors").string()),
                                              output);
  EXPECT_EQ(rc, 0) << output;
  EXPECT_NE(output.find("max difference"), std::string::npos) << output;
  fs::remove_all(dir);
}

// EmbeddingGemma's whole folder (make_gemma_fixtures.py's OUT/st: tokenizer.model beside a
// byte-fallback tokenizer.json, mean pooling, Dense 32 -> 64 -> 16 without biases, Normalize,
// as sentence-transformers 6 saves it): embed-train encode gives SentenceTransformer(DIR).encode
// within 1e-5 and tokenize AutoTokenizer's ids, on the 160 hard cases (parity.py).
TEST(Gemma, EmbeddingGemmaFolderEncodesAsSentenceTransformers) {
  e2e::expect_parity_of(gemma_fixtures() / "st", "", e2e::ParityTexts::HardCases);
}

// The same folder with tokenizer.json alone (mmBERT's form, and Gemma folders exported without
// tokenizer.model): its GemmaTokenizer file is read as a BPE over characters with byte
// fallback (tokenize/bpe.h), and encoding and ids are sentence-transformers' again.
TEST(Gemma, FolderWithoutTokenizerModelEncodesThroughTokenizerJson) {
  const fs::path folder = fs::temp_directory_path() / ("gemma-json-only-" + std::to_string(::getpid()));
  fs::remove_all(folder);
  fs::copy(gemma_fixtures() / "st", folder, fs::copy_options::recursive);
  ASSERT_TRUE(fs::remove(folder / "tokenizer.model"));
  EXPECT_EQ(detect_tokenizer_type(folder.string()), "bpe");
  e2e::expect_parity_of(folder, "", e2e::ParityTexts::HardCases);
  fs::remove_all(folder);
}

// Fine-tuning it (the encoder and both Dense layers) on 2 workers, and with GradCache, trains
// what 1 worker trains; the folder it writes keeps the chain and loads in Python with our
// embeddings.
TEST(Gemma, EmbeddingGemmaFolderFineTunesOnTwoWorkersAsOnOneAndLoadsInPython) {
  fs::path written;
  e2e::expect_training_agrees(gemma_fixtures() / "st", "gemma", {}, &written);
  const json modules = json::parse(std::ifstream(written / "modules.json"));
  ASSERT_EQ(modules.size(), 5u) << modules.dump();
  EXPECT_EQ(json::parse(std::ifstream(written / "3_Dense" / "config.json"))["bias"], false);
  EXPECT_TRUE(fs::exists(written / "tokenizer.model"));
}
