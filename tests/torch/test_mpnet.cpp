// MPNet (all-mpnet-base-v2's encoder, model/mpnet.h) end to end against the Python
// libraries, on a small random-weight model in all-mpnet-base-v2's form with MPNet's real
// tokenizer (scripts/python/make_mpnet_fixtures.py, made once per build):
//  - encode and tokenize equal SentenceTransformer.encode and AutoTokenizer (parity.py:
//    every entry within 1e-5, every id equal) on the parity sentences and the WordNet texts;
//  - fine-tuning runs on 2 workers as on 1, with GradCache as without, and the folder it
//    writes loads in sentence-transformers with our embeddings;
//  - the relative-position bias each text gets from a packed batch is the one it gets
//    alone and from the padded batch, forward and in the table's gradient, with and
//    without activation checkpointing;
//  - what MPNet does not have or we do not implement is refused naming the file and key.
#include <fstream>

#include "architecture_support.h"
#include "hidden_states_support.h"
#include "e2e_support.h"
#include "model/embedder.h"
#include "model/model_folder.h"
#include "model/mpnet.h"
#include "model/weights.h"
#include "tokenize/pair_template.h"

using namespace e2e;

namespace {

// build/test-fixtures/mpnet: the fixture folders and expected.safetensors; a failure to make
// them ends the test.
fs::path mpnet_fixtures() {
  return python_fixtures::made_by_script("make_mpnet_fixtures.py", "mpnet", "--out", {"fixture_hidden_states.py"});
}

// build/test-fixtures/mpnet/mpnet: the sentence-transformers folder.
fs::path mpnet_fixture() {
  return mpnet_fixtures() / "mpnet";
}

ddp_embed::MPNetConfig tiny_mpnet() {
  ddp_embed::MPNetConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_layers = 2;
  c.num_heads = 2;
  c.intermediate_size = 24;
  c.max_position = 80;
  c.hidden_dropout = c.attention_dropout = 0.0;
  c.initializer_range = 0.3;
  return c;
}

// A right-padded batch of texts of these lengths: ids in [2, 50) (never the padding id 1).
std::pair<at::Tensor, at::Tensor> mpnet_batch_of(const std::vector<int64_t>& lengths, int64_t width) {
  at::Tensor ids = at::ones({int64_t(lengths.size()), width}, at::kLong);
  at::Tensor mask = at::zeros({int64_t(lengths.size()), width}, at::kLong);
  for (size_t i = 0; i < lengths.size(); ++i) {
    ids[i].narrow(0, 0, lengths[i]).copy_(at::randint(2, 50, {lengths[i]}, at::kLong));
    mask[i].narrow(0, 0, lengths[i]).fill_(1);
  }
  return {ids, mask};
}

void expect_mpnet_config_refused(const json& extra, const std::string& message) {
  json config = {{"model_type", "mpnet"}, {"vocab_size", 50}, {"hidden_size", 16}, {"num_hidden_layers", 2},
                 {"num_attention_heads", 2}, {"intermediate_size", 24}, {"max_position_embeddings", 80}};
  config.update(extra);
  try {
    ddp_embed::mpnet_config_from_hf_json(config, "f.json");
    ADD_FAILURE() << "accepted " << extra.dump();
  } catch (const ddp_embed::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
  }
}

}  // namespace

// all-mpnet-base-v2's modules: MPNet, mean pooling, Normalize; MPNet's WordPiece with <s> and </s>.
TEST(Mpnet, EmbeddingsAndIdsMatchSentenceTransformers) {
  expect_parity_of(mpnet_fixture(), "", ParityTexts::HardCases);
}

// Every layer against transformers' MPNetModel on a padded batch: the embeddings and each
// layer's output (the relative-position bias added in each), every real token within 1e-5.
TEST(Mpnet, EveryLayersHiddenStatesMatchTransformersWithin1e5) {
  ddp_embed::LoadedModel loaded = ddp_embed::load_model_folder(mpnet_fixture().string());
  ddp_embed::MPNetModel encoder = loaded.model->mpnet;
  ASSERT_TRUE(encoder);
  hidden_states::expect_every_layer_matches(
      mpnet_fixtures() / "expected.safetensors", encoder->config().num_layers,
      [&](const at::Tensor& ids, const at::Tensor& mask, int64_t k) { return encoder->hidden_after(ids, mask, k); },
      1e-5, "MPNet");
}

TEST(Mpnet, FineTunesOnTwoWorkersAsOnOneAndLoadsInPython) { expect_training_agrees(mpnet_fixture(), "mpnet"); }

// Texts of 1 to 70 tokens (distances past 8, where the buckets turn logarithmic, and past
// 64) in one batch: each text's output is the one it has alone, on the packed and the padded
// path, and the gradient of the relative-position table (which every layer's bias reads) is
// the same on both paths, with activation checkpointing too (its bias is an input there).
TEST(Mpnet, RelativeBiasOfAPackedBatchIsThePaddedOnes) {
  torch::manual_seed(3);
  ddp_embed::MPNetModel model(tiny_mpnet());
  model->eval();
  const std::vector<int64_t> lengths = {1, 9, 70, 23, 40};
  const auto [ids, mask] = mpnet_batch_of(lengths, 70);

  std::vector<at::Tensor> alone;
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const at::Tensor one_ids = ids.narrow(0, int64_t(i), 1).narrow(1, 0, lengths[i]);
      alone.push_back(model->forward(one_ids, at::ones_like(one_ids)).squeeze(0));
    }
  }
  const auto run = [&](ddp_embed::AttentionMode mode, bool checkpointing) {
    model->set_attention_mode(mode);
    model->set_activation_checkpointing(checkpointing);
    model->zero_grad();
    const at::Tensor out = model->forward(ids, mask);
    for (size_t i = 0; i < lengths.size(); ++i)
      EXPECT_TRUE(at::allclose(out[int64_t(i)].narrow(0, 0, lengths[i]), alone[i], 1e-5, 1e-5))
          << "text " << i << " of " << lengths[i] << " tokens";
    (out * at::linspace(-1, 1, out.size(2)).view({1, 1, -1})).sum().backward();
    return model->relative_attention_bias->weight.grad().clone();
  };
  const at::Tensor packed = run(ddp_embed::AttentionMode::Packed, false);
  const at::Tensor padded = run(ddp_embed::AttentionMode::Padded, false);
  const at::Tensor checkpointed = run(ddp_embed::AttentionMode::Auto, true);
  EXPECT_GT(packed.abs().sum().item<double>(), 0);
  // Rows 0-31 are the buckets looked up; more rows of the table would stay 0.
  EXPECT_TRUE(at::allclose(packed, padded, 1e-5, 1e-5)) << (packed - padded).abs().max();
  EXPECT_TRUE(at::allclose(packed, checkpointed, 1e-5, 1e-5)) << (packed - checkpointed).abs().max();

  // cls pooling computes the last layer for the first token alone: the same vector.
  at::NoGradGuard no_grad;
  model->set_activation_checkpointing(false);
  const at::Tensor cls = model->forward_pooled(ids, mask, ddp_embed::Pooling::Cls);
  EXPECT_TRUE(at::allclose(cls, model->forward(ids, mask).select(1, 0), 1e-5, 1e-5));
}

// transformers' relative_position_bucket at the edges of its ranges: exact up to 7 either
// way (16 + d for keys before the query), then logarithmic up to 128, then the last bucket.
TEST(Mpnet, RelativeBucketsAreTransformersOnes) {
  const at::Tensor b = ddp_embed::mpnet_relative_buckets(200, at::kCPU);
  const auto bucket = [&](int64_t query, int64_t key) { return b[query][key].item<int64_t>(); };
  EXPECT_EQ(bucket(0, 0), 0);
  EXPECT_EQ(bucket(5, 0), 5);     // key 5 before the query
  EXPECT_EQ(bucket(0, 5), 21);    // key 5 after it: 16 + 5
  EXPECT_EQ(bucket(8, 0), 8);     // the first logarithmic one
  EXPECT_EQ(bucket(16, 0), 10);   // 8 + floor(log(2) / log(16) * 8)
  EXPECT_EQ(bucket(0, 127), 31);  // 16 + 8 + floor(log(127 / 8) / log(16) * 8) = 16 + 15
  EXPECT_EQ(bucket(199, 0), 15);  // beyond 128: the last bucket of its side
  EXPECT_EQ(b.max().item<int64_t>(), 31);
}

// What MPNet's config may say that we do not implement, and a weights file of another
// shape, are refused naming the file and the key (or the tensor).
TEST(Mpnet, WhatWeDoNotImplementIsRefusedNamingTheFileAndField) {
  expect_mpnet_config_refused({{"hidden_act", "relu"}}, "f.json: hidden_act \"relu\" is not implemented");
  expect_mpnet_config_refused({{"pad_token_id", 0}}, "f.json: pad_token_id 0 is not implemented");
  expect_mpnet_config_refused({{"relative_attention_num_buckets", 16}}, "f.json: relative_attention_num_buckets 16 is below 32");
  expect_mpnet_config_refused({{"num_attention_heads", 3}}, "f.json: hidden_size 16 is not a multiple of num_attention_heads 3");
  expect_mpnet_config_refused({{"max_position_embeddings", 2}}, "f.json: max_position_embeddings 2 leaves no position");
  expect_mpnet_config_refused({{"layer_norm_eps", "small"}}, "f.json: layer_norm_eps must be a number");

  // The written config is one transformers' MPNetModel reads back: the same fields.
  const ddp_embed::MPNetConfig read = ddp_embed::mpnet_config_from_hf_json(
      ddp_embed::mpnet_config_to_hf_json(tiny_mpnet()), "written");
  EXPECT_EQ(ddp_embed::mpnet_config_to_hf_json(read), ddp_embed::mpnet_config_to_hf_json(tiny_mpnet()));

  // A relative-position table of another shape in the weights file.
  const fs::path dir = fresh_dir("mpnet-refused");
  const fs::path m = dir / "model";
  fs::copy(mpnet_fixture(), m, fs::copy_options::recursive);
  ddp_embed::NamedTensors tensors = ddp_embed::load_tensors((m / "model.safetensors").string());
  for (auto& [name, tensor] : tensors)
    if (name == "encoder.relative_attention_bias.weight") tensor = at::zeros({16, tensor.size(1)});
  ddp_embed::save_tensors((m / "model.safetensors").string(), tensors);
  const RunResult r = run(kBin + "/embed-train encode --model " + m.string() + " --input " + kSrc +
                          "/tests/fixtures/parity/sentences.txt --output " + (dir / "out.npy").string() + " 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find((m / "model.safetensors").string() + ": tensor \"encoder.relative_attention_bias.weight\" "
                          "has shape [16, 4]"),
            std::string::npos)
      << r.output;
}

// MPNet has no token types, and no cross-encoder head is implemented for it: both refused.
// Its tokenizer joins pairs as MPNetTokenizer does (RobertaProcessing), read from the
// folder's tokenizer.json, and keeps that form through a save (tokenizer_class MPNetTokenizer).
TEST(Mpnet, TakesNoTokenTypesNorACrossEncoderHeadAndJoinsPairsAsMPNetTokenizer) {
  ddp_embed::MPNetModel model(tiny_mpnet());
  const auto [ids, mask] = mpnet_batch_of({3, 2}, 3);
  try {
    model->forward_pooled(ids, mask, ddp_embed::Pooling::Mean, at::zeros_like(ids));
    ADD_FAILURE() << "token types taken";
  } catch (const ddp_embed::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("MPNet has no token types"), std::string::npos) << e.what();
  }
  ddp_embed::EncoderConfig config;
  config.architecture = ddp_embed::Architecture::MPNet;
  config.mpnet = tiny_mpnet();
  try {
    ddp_embed::SentenceEmbedderImpl(config, ddp_embed::SentenceEmbedderImpl::CrossEncoderShape{1});
    ADD_FAILURE() << "an MPNet cross-encoder was built";
  } catch (const ddp_embed::ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("a cross-encoder of MPNet (MPNetForSequenceClassification) is not implemented"),
              std::string::npos)
        << e.what();
  }

  const auto check_pairs = [](const ddp_embed::Tokenizer& tok) {
    const std::vector<int32_t> a = tok.encode("hello world", 64), b = tok.encode("good day", 64);
    ASSERT_EQ(a.front(), 0);  // <s>
    ASSERT_EQ(a.back(), 2);   // </s>
    std::vector<int32_t> want(a.begin(), a.end());
    want.push_back(2);  // </s></s> between the texts
    want.insert(want.end(), b.begin() + 1, b.end());
    const ddp_embed::PairIds pair = ddp_embed::encode_pair(tok, "hello world", "good day", 64);
    EXPECT_EQ(pair.ids, want);
    EXPECT_EQ(pair.types, std::vector<int32_t>(want.size(), 0));
  };
  const auto folder = ddp_embed::load_model_folder_tokenizer(mpnet_fixture().string());
  check_pairs(*folder.tokenizer);
  // <unk> is one of the folder's special tokens (tokenizer.json's added_tokens) as in all-mpnet-base-v2.
  EXPECT_EQ(folder.tokenizer->encode("<unk>", 64), std::vector<int32_t>({0, 3, 2}));
  const fs::path saved = fresh_dir("mpnet-tokenizer");
  folder.tokenizer->save(saved.string());
  EXPECT_NE(read_file(saved / "tokenizer_config.json").find("\"MPNetTokenizer\""), std::string::npos);
  check_pairs(*ddp_embed::load_tokenizer("auto", saved.string(), true));
}
