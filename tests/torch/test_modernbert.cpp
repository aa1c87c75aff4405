// ModernBERT (model/modernbert.h) end to end against the Python libraries, as the other
// architectures are held (tests/torch/architecture_support.h). No ModernBERT weights can be
// downloaded here, so scripts/python/make_modernbert_fixtures.py has transformers build a
// small one with random weights (4 layers, layers 1 and 2 local with 4 tokens each side,
// shorter than most parity sentences) and a byte-level BPE tokenizer in ModernBERT's form
// ([CLS] $A [SEP]), wrapped as modernbert-embed is (mean pooling, Normalize):
//  - encode and tokenize equal SentenceTransformer.encode and AutoTokenizer (every entry
//    within 1e-5, every id equal), and the window's width shows in the embeddings;
//  - fine-tuning runs on 2 workers as on 1, and the folder written loads in Python with our
//    embeddings and the same layers;
//  - which layers are local, and their window and thetas, are what transformers' config
//    makes of config.json, as read and as written back;
//  - what we do not implement is refused naming the file and the field.
#include <gtest/gtest.h>

#include "architecture_support.h"
#include "hidden_states_support.h"
#include "e2e_support.h"
#include "model/embedder.h"
#include "model/model_folder.h"
#include "model/modernbert.h"

using namespace e2e;

namespace {

fs::path modernbert_fixtures() {
  return python_fixtures::made_by_script("make_modernbert_fixtures.py", "modernbert", "", {"fixture_hidden_states.py"});
}

// A ModernBERT config.json of 4 tiny layers with `extra` keys over it.
json tiny_modernbert_config(const json& extra) {
  json c = {{"model_type", "modernbert"}, {"vocab_size", 64},        {"hidden_size", 16},
            {"intermediate_size", 24},    {"num_hidden_layers", 4},  {"num_attention_heads", 4},
            {"max_position_embeddings", 32}, {"local_attention", 4}, {"pad_token_id", 0}};
  c.update(extra);
  return c;
}

}  // namespace

// modernbert-embed's form: ModernBertModel + mean pooling + Normalize, its BPE tokenizer.
TEST(ModernBert, EmbeddingsAndIdsMatchSentenceTransformers) {
  expect_parity_of(modernbert_fixtures() / "modernbert", "", ParityTexts::HardCases);
}

// Every layer of the fixture's encoder (layers 1 and 2 local, 4 tokens each side, the
// batch's longest text 12 tokens) against transformers' ModernBertModel on a padded batch:
// the normed embeddings, each layer's output and the final norm, every real token within
// 1e-5.
TEST(ModernBert, EveryLayersHiddenStatesMatchTransformersWithin1e5) {
  const fs::path folder = modernbert_fixtures() / "modernbert";
  ddp_embed::LoadedModel loaded = ddp_embed::load_model_folder(folder.string());
  ddp_embed::ModernBertModel encoder = loaded.model->modernbert;
  ASSERT_TRUE(encoder);
  hidden_states::expect_every_layer_matches(
      modernbert_fixtures() / "expected.safetensors", encoder->config().num_layers,
      [&](const at::Tensor& ids, const at::Tensor& mask, int64_t k) { return encoder->hidden_after(ids, mask, k); },
      1e-5, "ModernBERT");
}

// The window is where transformers puts it: one token wider each side (5 instead of 4)
// changes the embeddings of the longer parity sentences well beyond the parity tolerance,
// so the parity above holds the off-by-one too.
TEST(ModernBert, AWindowOneTokenWiderChangesTheEmbeddings) {
  const fs::path folder = modernbert_fixtures() / "modernbert";
  ddp_embed::LoadedModel loaded = ddp_embed::load_model_folder(folder.string());
  ASSERT_EQ(loaded.model->encoder().encoder_config().modernbert.half_window(), 4);
  std::vector<int32_t> ids = loaded.tokenizer->encode("the quick brown fox jumps over the lazy dog near the river", 64);
  ASSERT_GT(ids.size(), 12u);
  const at::Tensor input = at::tensor(std::vector<int64_t>(ids.begin(), ids.end())).unsqueeze(0);
  const at::Tensor mask = at::ones_like(input);
  const at::Tensor ours = loaded.model->encode_batch({input, mask});

  ddp_embed::ModernBertConfig wider = loaded.model->encoder().encoder_config().modernbert;
  wider.local_attention = 10;
  ddp_embed::ModernBertModel other(wider);
  {
    at::NoGradGuard no_grad;
    auto from = loaded.model->modernbert->named_parameters();
    for (auto& p : other->named_parameters()) p.value().copy_(from[p.key()]);
  }
  other->eval();
  at::NoGradGuard no_grad;
  const at::Tensor theirs = other->forward_pooled(input, mask, ddp_embed::Pooling::Mean);
  EXPECT_GT((ours - theirs).abs().max().item<double>(), 1e-3);
}

// 1 worker, 2 workers and 2 with GradCache train the same model; the folder written loads
// in sentence-transformers with our embeddings, and keeps the local layers as they were.
TEST(ModernBert, FineTunesOnTwoWorkersAsOnOneAndLoadsInPython) {
  const fs::path init = modernbert_fixtures() / "modernbert";
  fs::path written;
  expect_training_agrees(init, "modernbert", {}, &written);
  ASSERT_TRUE(fs::exists(written / "config.json"));
  const json before = json::parse(read_file(init / "config.json"));
  const json after = json::parse(read_file(written / "config.json"));
  for (const char* key : {"layer_types", "local_attention", "rope_parameters", "norm_bias", "vocab_size"})
    EXPECT_EQ(after.value(key, json()), before.at(key)) << key;
}

// Which layers are local, their half window and each type's theta: what transformers'
// ModernBertConfig makes of the same config.json (layer_types as given, else derived from
// global_attn_every_n_layers; thetas from rope_parameters or the older global/local keys),
// and again of the config.json we write back.
TEST(ModernBert, LocalLayersAreTheOnesTransformersMakesOfTheConfig) {
  const std::vector<json> configs = {
      json::object(),
      {{"global_attn_every_n_layers", 2}, {"local_attention", 7}},
      {{"global_attn_every_n_layers", 1}},
      {{"layer_types", {"sliding_attention", "full_attention", "full_attention", "sliding_attention"}},
       {"global_attn_every_n_layers", 2}},
      {{"global_rope_theta", 5000.0}, {"local_rope_theta", 500.0}},
      {{"rope_parameters", {{"full_attention", {{"rope_type", "default"}, {"rope_theta", 7000.0}}},
                            {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 700.0}}}}}},
  };
  const fs::path dir = fresh_dir("modernbert-configs");
  json ours = json::array();
  std::string files;
  for (size_t i = 0; i < configs.size(); ++i) {
    const json config = tiny_modernbert_config(configs[i]);
    const ddp_embed::ModernBertConfig c =
        ddp_embed::modernbert_config_from_hf_json(config, "config " + std::to_string(i));
    json types = json::array();
    for (size_t layer = 0; layer < 4; ++layer) types.push_back(c.local(layer) ? "sliding_attention" : "full_attention");
    const json ours_form = {{"layer_types", types}, {"sliding_window", c.half_window()},
                            {"thetas", {c.global_rope_theta, c.local_rope_theta}}};
    const json written = ddp_embed::modernbert_config_to_hf_json(c);
    for (const auto& [name, j] : {std::pair<std::string, json>{"read", config}, {"written", written}}) {
      const fs::path file = dir / (std::to_string(i) + "-" + name + ".json");
      std::ofstream(file) << j.dump();
      files += " " + file.string();
      ours.push_back(ours_form);
    }
  }
  std::ofstream(dir / "theirs.py") << R"py(import json, sys
import transformers
out = []
for path in sys.argv[2:]:
    c = transformers.ModernBertConfig.from_dict(json.load(open(path)))
    thetas = [c.rope_parameters[t]["rope_theta"] for t in ("full_attention", "sliding_attention")]
    out.append({"layer_types": c.layer_types, "sliding_window": c.sliding_window, "thetas": thetas})
json.dump(out, open(sys.argv[1], "w"))
)py";
  const RunResult r =
      run(kPython + " " + (dir / "theirs.py").string() + " " + (dir / "theirs.json").string() + files);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json theirs = json::parse(read_file(dir / "theirs.json"));
  ASSERT_EQ(theirs.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_EQ(ours[i], theirs[i]) << "config " << i / 2 << (i % 2 ? ", written back" : ", as read");
  // Not all of them alike: every third layer global, every other, none local, given.
  EXPECT_EQ(ours[0].at("layer_types"),
            json({"full_attention", "sliding_attention", "sliding_attention", "full_attention"}));
  EXPECT_EQ(ours[2].at("sliding_window"), 3);  // local_attention 7: 3 tokens each side
  EXPECT_EQ(ours[4].at("layer_types"), json({"full_attention", "full_attention", "full_attention", "full_attention"}));
  EXPECT_EQ(ours[6].at("layer_types").at(0), "sliding_attention");
}

// A field we do not implement, and a window that cannot bound anything, are refused naming
// the file and the field; embed-train says so before it encodes anything.
TEST(ModernBert, FieldsItDoesNotImplementAreRefusedNamingTheFileAndField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"hidden_activation", "silu"}}, "f.json: hidden_activation \"silu\" is not implemented"},
      {{{"attention_bias", true}}, "f.json: attention_bias true is not implemented"},
      {{{"mlp_bias", true}}, "f.json: mlp_bias true is not implemented"},
      {{{"norm_bias", true}}, "f.json: norm_bias true is not implemented"},
      {{{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}}, "f.json: rope_scaling"},
      {{{"rope_parameters", {{"sliding_attention", {{"rope_type", "yarn"}}}}}},
       "f.json: rope_parameters.sliding_attention.rope_type \"yarn\" is not implemented"},
      {{{"layer_types", {"full_attention", "chunked_attention", "full_attention", "full_attention"}}},
       "f.json: layer_types[1] \"chunked_attention\" is not implemented"},
      {{{"layer_types", {"full_attention"}}}, "f.json: layer_types has 1 entries for num_hidden_layers 4"},
      {{{"local_attention", 33}}, "f.json: local_attention 33 is larger than max_position_embeddings 32"},
      {{{"local_attention", 0}}, "f.json: local_attention must be positive, not 0"},
      {{{"num_attention_heads", 3}}, "f.json: hidden_size 16 is not a multiple of num_attention_heads 3"},
  };
  for (const auto& [extra, message] : cases) {
    try {
      ddp_embed::modernbert_config_from_hf_json(tiny_modernbert_config(extra), "f.json");
      ADD_FAILURE() << "accepted " << extra.dump();
    } catch (const ddp_embed::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  // At the bound, a window the length of the position table, it loads.
  EXPECT_EQ(ddp_embed::modernbert_config_from_hf_json(tiny_modernbert_config({{"local_attention", 32}}), "f.json")
                .half_window(),
            16);

  const fs::path dir = fresh_dir("modernbert-refused");
  const fs::path m = dir / "wide";
  fs::copy(modernbert_fixtures() / "modernbert", m, fs::copy_options::recursive);
  json config = json::parse(read_file(m / "config.json"));
  config["local_attention"] = 1024;
  std::ofstream(m / "config.json") << config.dump();
  const RunResult r = run(kBin + "/embed-train encode --model " + m.string() + " --input " + kSrc +
                          "/tests/fixtures/parity/sentences.txt --output " + (dir / "out.npy").string() + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find((m / "config.json").string() +
                          ": local_attention 1024 is larger than max_position_embeddings 512"),
            std::string::npos)
      << r.output;
}

// ModernBERT has no token types, and its classification head is not implemented: both are
// refused by name rather than computed some other way.
TEST(ModernBert, TokenTypesAndCrossEncodersAreRefused) {
  const ddp_embed::ModernBertConfig c = ddp_embed::modernbert_config_from_hf_json(tiny_modernbert_config(json::object()), "f");
  ddp_embed::ModernBertModel model(c);
  const at::Tensor ids = at::ones({2, 5}, at::kLong), mask = at::ones({2, 5}, at::kLong);
  EXPECT_EQ(model->forward_pooled(ids, mask, ddp_embed::Pooling::Mean).sizes(), at::IntArrayRef({2, 16}));
  try {
    model->forward_pooled(ids, mask, ddp_embed::Pooling::Cls, at::zeros({2, 5}, at::kLong));
    ADD_FAILURE() << "token types accepted";
  } catch (const ddp_embed::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("ModernBERT has no token types"), std::string::npos) << e.what();
  }
  ddp_embed::EncoderConfig encoder;
  encoder.architecture = ddp_embed::Architecture::ModernBert;
  encoder.modernbert = c;
  try {
    ddp_embed::SentenceEmbedderImpl cross(encoder, ddp_embed::SentenceEmbedderImpl::CrossEncoderShape{1});
    ADD_FAILURE() << "a ModernBERT cross-encoder was built";
  } catch (const ddp_embed::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("a ModernBERT cross-encoder is not implemented"), std::string::npos)
        << e.what();
  }
}

// Activation checkpointing and the padded attention path give the gradients the plain
// packed path gives (a batch with padding, local and global layers, cls and mean pooling).
TEST(ModernBert, CheckpointedAndPaddedAttentionGiveTheSameGradients) {
  const ddp_embed::ModernBertConfig c = ddp_embed::modernbert_config_from_hf_json(tiny_modernbert_config(json::object()), "f");
  at::manual_seed(3);
  const at::Tensor ids = at::randint(1, 64, {3, 12}, at::kLong);
  const at::Tensor mask = at::tensor(std::vector<int64_t>{12, 7, 3}).unsqueeze(1).gt(at::arange(12).unsqueeze(0)).to(at::kLong);
  for (const ddp_embed::Pooling pooling : {ddp_embed::Pooling::Mean, ddp_embed::Pooling::Cls}) {
    std::vector<std::vector<at::Tensor>> grads;
    for (int variant = 0; variant < 3; ++variant) {
      at::manual_seed(5);
      ddp_embed::ModernBertModel model(c);
      model->train();
      model->set_activation_checkpointing(variant == 1);
      model->set_attention_mode(variant == 2 ? ddp_embed::AttentionMode::Padded : ddp_embed::AttentionMode::Packed);
      model->forward_pooled(ids, mask, pooling).pow(2).sum().backward();
      std::vector<at::Tensor> g;
      for (const auto& p : model->parameters()) g.push_back(p.grad().clone());
      grads.push_back(g);
    }
    for (int variant = 1; variant < 3; ++variant)
      for (size_t i = 0; i < grads[0].size(); ++i)
        EXPECT_TRUE(at::allclose(grads[variant][i], grads[0][i], 1e-5, 1e-6))
            << "variant " << variant << " parameter " << i;
  }
}
