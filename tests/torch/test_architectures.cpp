// The encoders besides BERT, end to end against the Python libraries: XLM-RoBERTa (BGE-M3's
// and multilingual-E5's architecture, with XLM-R's own Unigram tokenizer) and Qwen3
// (Qwen3-Embedding's, with Qwen3's real byte-level BPE tokenizer from the pinned package).
// No such weights can be downloaded here, so scripts/python/make_model_fixtures.py has
// transformers build small ones of each architecture with random weights and
// sentence-transformers wrap them as the public models are wrapped; the tests then hold
// embed-train to those libraries:
//  - encode and tokenize equal SentenceTransformer.encode and AutoTokenizer
//    (scripts/python/parity.py: every entry within 1e-5, every id equal), on the parity
//    sentences and the WordNet test texts, with Qwen3-Embedding's query instruction too;
//  - fine-tuning runs on 2 workers as on 1 (the same weights), with GradCache as without,
//    and the folder it writes loads in sentence-transformers with our embeddings; with a
//    guide (loss.guide) too: the starting model itself for XLM-R, an XLM-R (another
//    tokenizer) for Qwen3, masking the same pairs on 2 workers (cross-rank) as on 1.
#include <numeric>
#include <set>

#include "architecture_support.h"
#include "e2e_support.h"
#include "model/lora.h"
#include "model/qwen3.h"
#include "train/setup.h"

using namespace e2e;

namespace {


class Architectures : public ::testing::Test {
 protected:
  // A fixture model's folder. The folders are made when a test first asks for one (the
  // tests of single layers need none); a failure to make them ends the test (an exception
  // that gtest reports).
  fs::path fixture(const std::string& kind) {
    if (fixtures_.empty()) {
      std::string error;
      fixtures_ = architecture_fixtures(error);
      if (!error.empty()) throw std::runtime_error("make_model_fixtures.py failed:\n" + error);
    }
    return fixtures_ / kind;
  }

  void expect_parity(const std::string& kind, const std::string& extra = "") {
    expect_parity_of(fixture(kind), extra);
  }

  fs::path fixtures_;
};

// A Qwen3 config.json of 2 tiny layers with `extra` keys over it.
json tiny_qwen3_config(const json& extra) {
  json c = {{"model_type", "qwen3"}, {"vocab_size", 100}, {"hidden_size", 16}, {"intermediate_size", 24},
            {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 8},
            {"max_position_embeddings", 16}};
  c.update(extra);
  return c;
}

}  // namespace

// BGE-M3's modules: XLM-R, CLS pooling, Normalize; its tokenizer from sentencepiece.bpe.model.
TEST_F(Architectures, XlmRobertaWithClsPoolingMatchesSentenceTransformers) { expect_parity("xlmr-cls"); }

// multilingual-E5's modules: XLM-R, mean pooling, Normalize; the tokenizer from tokenizer.json.
TEST_F(Architectures, XlmRobertaWithMeanPoolingMatchesSentenceTransformers) { expect_parity("xlmr-mean"); }

// BGE-M3's length: 8194 positions, inputs of 8192 tokens (and a longer one cut there), with
// short ones in the same batch. On the CPU attention holds [heads, 8192, 8192] scores per
// layer while it runs (4 heads here: 1 GB in fp32).
TEST_F(Architectures, XlmRobertaTakes8192TokenInputs) {
  const fs::path dir = fresh_dir("xlmr-long");
  std::string corpus;
  {
    std::istringstream lines(read_file(kSrc + "/tests/fixtures/unigram/corpus.txt"));
    for (std::string line; std::getline(lines, line);) corpus += line + " ";
  }
  std::string long_text;
  while (long_text.size() < 60000) long_text += corpus;
  std::ofstream(dir / "long.txt") << "a short one\n" << long_text << "\n" << long_text.substr(0, 20000) << "\n";
  const RunResult r = run(kPython + " " + kSrc + "/scripts/python/parity.py --model " + fixture("xlmr-long").string() +
                          " --embed-train " + kBin + "/embed-train --sentences " + (dir / "long.txt").string() + " 2>&1");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max_seq_length 8192"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("parity: OK"), std::string::npos) << r.output;
}

// multilingual-E5-small's shape: a BERT (positions from 0, two token types) with XLM-R's tokenizer.
TEST_F(Architectures, BertWithTheXlmRobertaTokenizerMatchesSentenceTransformers) { expect_parity("e5"); }

// Qwen3-Embedding: Qwen3, last-token pooling with <|endoftext|> appended, Normalize; bf16 file.
TEST_F(Architectures, Qwen3WithLastTokenPoolingMatchesSentenceTransformers) { expect_parity("qwen3"); }

// Qwen3 with sliding-window layers (qwen3-sliding: windows of 4 tokens in layers 0 and 2,
// the last one included, on texts mostly longer than that), in both the layer that
// computes every token and the last layer's one query a text.
TEST_F(Architectures, Qwen3WithSlidingWindowLayersMatchesSentenceTransformers) {
  const json config = json::parse(read_file(fixture("qwen3-sliding") / "config.json"));
  ASSERT_EQ(config.at("layer_types"), json({"sliding_attention", "full_attention", "sliding_attention"}));
  ASSERT_EQ(config.at("sliding_window"), 4);
  // One parity run: the window's code is the same with a prompt before the text (the
  // prompt's tokens are the text's first), which Qwen3QueriesWith... holds apart.
  expect_parity("qwen3-sliding");
}

// ... and its queries, with the instruction prompt before them.
TEST_F(Architectures, Qwen3QueriesWithTheInstructionPromptMatchSentenceTransformers) {
  expect_parity("qwen3", "--prompt-name query");
}

// A Qwen3ForCausalLM folder ("model." names, an lm_head) and a folder of shards
// (model.safetensors.index.json) hold the same encoder: a plain folder pools the last token,
// and gives the sentence-transformers folder's embeddings unnormalized.
TEST_F(Architectures, Qwen3CausalLmAndShardedFoldersLoadTheSameEncoder) {
  const fs::path dir = fresh_dir("qwen3-causal");
  // The parity sentences shorter than both folders' input lengths (512 and 4096 tokens).
  const std::string input = (dir / "short.txt").string();
  {
    std::istringstream lines(read_file(kSrc + "/tests/fixtures/parity/sentences.txt"));
    std::ofstream out(input);
    for (std::string line; std::getline(lines, line);)
      if (line.size() < 300) out << line << "\n";
  }
  ASSERT_TRUE(fs::exists(fixture("qwen3-sharded") / "model.safetensors.index.json"));
  ASSERT_FALSE(fs::exists(fixture("qwen3-sharded") / "model.safetensors"));
  for (const auto& [kind, extra] : {std::pair<std::string, std::string>{"qwen3", ""}, {"qwen3-causal", " --normalize"},
                                    {"qwen3-sharded", " --normalize"}}) {
    const RunResult r = run(kBin + "/embed-train encode --model " + fixture(kind).string() + " --input " + input +
                            " --output " + (dir / (kind + ".jsonl")).string() + extra + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  const std::string a = read_file(dir / "qwen3.jsonl");
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a, read_file(dir / "qwen3-causal.jsonl"));
  EXPECT_EQ(a, read_file(dir / "qwen3-sharded.jsonl"));
}

TEST_F(Architectures, XlmRobertaFineTunesOnTwoWorkersAsOnOneAndLoadsInPython) {
  expect_training_agrees(fixture("xlmr-cls"), "arch-xlmr", /*guide=*/fixture("xlmr-cls"));
}

TEST_F(Architectures, Qwen3FineTunesOnTwoWorkersAsOnOneAndLoadsInPython) {
  expect_training_agrees(fixture("qwen3"), "arch-qwen3", /*guide=*/fixture("xlmr-cls"));
}

// The sliding layers train, and the folder written keeps them: its config.json says the
// window and each layer's type as the starting model's did (sentence-transformers then
// builds the same model: the embeddings check inside).
TEST_F(Architectures, Qwen3WithSlidingWindowLayersFineTunesOnTwoWorkersAsOnOneAndLoadsInPython) {
  fs::path written;
  expect_training_agrees(fixture("qwen3-sliding"), "arch-qwen3-sliding", {}, &written);
  ASSERT_TRUE(fs::exists(written / "config.json"));
  const json before = json::parse(read_file(fixture("qwen3-sliding") / "config.json"));
  const json after = json::parse(read_file(written / "config.json"));
  for (const char* key : {"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"})
    EXPECT_EQ(after.value(key, json()), before.at(key)) << key;
}

// Which layers slide, and with what window, is what transformers' Qwen3Config makes of the
// same config.json: layer_types as given, else derived from use_sliding_window,
// sliding_window (4096 when missing, none when null or not used) and max_window_layers;
// and again of the config.json we write back.
TEST_F(Architectures, Qwen3SlidingLayersAreTheOnesTransformersMakesOfTheConfig) {
  const std::vector<json> configs = {
      json::object(),
      {{"use_sliding_window", true}, {"sliding_window", 3}, {"max_window_layers", 1}},
      {{"use_sliding_window", true}, {"sliding_window", 3}, {"max_window_layers", 0}},
      {{"use_sliding_window", false}, {"sliding_window", 3}, {"max_window_layers", 0}},
      {{"use_sliding_window", true}, {"sliding_window", nullptr}, {"max_window_layers", 0}},
      {{"use_sliding_window", true}, {"max_window_layers", 1}, {"max_position_embeddings", 8192}},
      {{"use_sliding_window", true}, {"sliding_window", 2}, {"max_window_layers", 0},
       {"layer_types", {"full_attention", "sliding_attention"}}},
  };
  const fs::path dir = fresh_dir("qwen3-sliding-configs");
  json ours = json::array();
  std::string files;
  for (size_t i = 0; i < configs.size(); ++i) {
    const json config = tiny_qwen3_config(configs[i]);
    const ddp_embed::Qwen3Config c = ddp_embed::qwen3_config_from_hf_json(config, "config " + std::to_string(i));
    const json theirs_form = {{"layer_types", c.layer_types},
                              {"sliding_window", c.sliding_window > 0 ? json(c.sliding_window) : json()}};
    const json written = ddp_embed::qwen3_config_to_hf_json(c);
    for (const auto& [name, j] : {std::pair<std::string, json>{"read", config}, {"written", written}}) {
      const fs::path file = dir / (std::to_string(i) + "-" + name + ".json");
      std::ofstream(file) << j.dump();
      files += " " + file.string();
      ours.push_back(theirs_form);
    }
  }
  // Into a file: transformers may log on either stream.
  std::ofstream(dir / "theirs.py") << R"py(import json, sys
import transformers
out = []
for path in sys.argv[2:]:
    c = transformers.Qwen3Config.from_dict(json.load(open(path)))
    out.append({"layer_types": c.layer_types, "sliding_window": c.sliding_window})
json.dump(out, open(sys.argv[1], "w"))
)py";
  const RunResult r =
      run(kPython + " " + (dir / "theirs.py").string() + " " + (dir / "theirs.json").string() + files);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json theirs = json::parse(read_file(dir / "theirs.json"));
  ASSERT_EQ(theirs.size(), ours.size());
  for (size_t i = 0; i < ours.size(); ++i)
    EXPECT_EQ(ours[i], theirs[i]) << "config " << i / 2 << (i % 2 ? ", written back" : ", as read");
  // Not all of them alike: derived sliding layers, explicit ones, and none.
  EXPECT_EQ(ours[2].at("layer_types"), json({"full_attention", "sliding_attention"}));
  EXPECT_EQ(ours[10].at("sliding_window"), 4096);
  EXPECT_EQ(ours[12].at("layer_types"), json({"full_attention", "sliding_attention"}));
}

// A window Qwen3 cannot run is refused naming the file and the field: one longer than the
// position table, below 1, a layer type we do not implement, a sliding layer without a
// window (transformers cannot build its mask either), a layer_types of the wrong length.
TEST_F(Architectures, Qwen3WindowsThatCannotRunAreRefusedNamingTheField) {
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"use_sliding_window", true}, {"sliding_window", 17}},
       "f.json: sliding_window 17 is larger than max_position_embeddings 16"},
      {{{"use_sliding_window", true}, {"sliding_window", 0}}, "f.json: sliding_window 0 must be at least 1"},
      {{{"use_sliding_window", true}, {"sliding_window", 4}, {"layer_types", {"full_attention", "chunked_attention"}}},
       "f.json: layer_types[1] \"chunked_attention\" is not implemented"},
      {{{"layer_types", {"full_attention", "sliding_attention"}}},
       "f.json: layer_types[1] \"sliding_attention\" has no window: it needs use_sliding_window true"},
      {{{"layer_types", {"full_attention"}}}, "f.json: layer_types has 1 entries for num_hidden_layers 2"},
  };
  for (const auto& [extra, message] : cases) {
    try {
      ddp_embed::qwen3_config_from_hf_json(tiny_qwen3_config(extra), "f.json");
      ADD_FAILURE() << "accepted " << extra.dump();
    } catch (const ddp_embed::ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  // At the bound, a window the length of the position table, it loads.
  EXPECT_EQ(ddp_embed::qwen3_config_from_hf_json(
                tiny_qwen3_config({{"use_sliding_window", true}, {"sliding_window", 16}, {"max_window_layers", 1}}),
                "f.json")
                .layer_types,
            std::vector<std::string>({"full_attention", "sliding_attention"}));
}

// LoRA on Qwen3 (model.lora_rank): 1 worker, and 2 workers with GradCache and activation
// checkpointing, train the same adapters; a run resumed from the step-2 checkpoint ends
// where the uninterrupted one does; only the adapters move (the encoder's other tensors
// are the init folder's, bit for bit); the final folder is the init weights with PEFT's
// merge W + (alpha / r)·B·A of the checkpoint's adapters (scripts/python/
// check_lora_merge.py, in torch), holds no adapter, and loads in sentence-transformers
// with our embeddings.
TEST_F(Architectures, Qwen3LoraTrainsTheAdaptersAndWritesTheMergedModel) {
  const fs::path one = fresh_dir("lora-1"), two = fresh_dir("lora-2"), resumed = fresh_dir("lora-resumed");
  auto config = [&](const fs::path& dir, int64_t chunk) {
    json c = finetune_config(dir / "out", fixture("qwen3"), chunk);
    c["model"]["lora_rank"] = 4;
    c["model"]["lora_alpha"] = 8;
    c["train"]["activation_checkpointing"] = chunk > 0;
    c["output"]["save_every"] = 2;
    c["output"]["keep_last"] = 2;
    return c;
  };
  RunResult r = train(one, config(one, 0), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("LoRA: rank 4 (alpha 8) on 14 linear layers"), std::string::npos) << r.output;
  r = train(two, config(two, 8), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  expect_same_series(series(one / "out", "loss"), series(two / "out", "loss"), step_bound(config(one, 0)), "loss");
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), step_bound(config(one, 0)),
                     "grad_norm");
  expect_same_model(one / "out", two / "out", config(one, 0));
  const auto loss = series(one / "out", "loss");
  ASSERT_EQ(loss.size(), 4u);
  EXPECT_LT(loss.back(), loss.front());
  json cr = config(resumed, 0);
  cr["output"]["resume"] = (one / "out/checkpoints/step-2").string();
  r = train(resumed, cr, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  // Resumed on the world size it was saved at: the same operations on the same values in
  // the same order as the uninterrupted run's last two steps, bit for bit on any CPU.
  expect_same_series({loss[2], loss[3]}, series(resumed / "out", "loss"), 0, "resumed loss");
  expect_identical_models(one / "out", resumed / "out", "resumed from step 2");
  const RunResult merge = run(kPython + " " + kSrc + "/scripts/python/check_lora_merge.py --init " +
                              fixture("qwen3").string() + " --checkpoint " + (one / "out/checkpoints/step-4").string() +
                              " --final " + (one / "out/final").string() + " --rank 4 --alpha 8 2>&1");
  EXPECT_EQ(merge.exit_code, 0) << merge.output;
  EXPECT_NE(merge.output.find("lora merge: OK (14 adapted layers merged, 14 moved"), std::string::npos) << merge.output;
  const RunResult check = run(kPython + " " + kSrc + "/scripts/check-st-load.py " + (one / "out/final").string() +
                              " " + kSrc + "/tests/fixtures/parity/sentences.txt --embed-train " + kBin +
                              "/embed-train 2>&1");
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_NE(check.output.find("OK: every sentence has cosine >= 0.9999"), std::string::npos) << check.output;
}

// What embed-train does not implement is refused by name, before anything trains.
TEST_F(Architectures, UnknownArchitecturesAndTokenizersAreRefusedNamingTheFile) {
  const fs::path dir = fresh_dir("arch-refused");
  const auto copy_of = [&](const std::string& kind, const std::string& name) {
    const fs::path to = dir / name;
    fs::copy(fixture(kind), to, fs::copy_options::recursive);
    return to;
  };
  const auto encode = [&](const fs::path& model) {
    return run(kBin + "/embed-train encode --model " + model.string() + " --input " + kSrc +
               "/tests/fixtures/parity/sentences.txt --output " + (dir / "out.npy").string() + " 2>&1");
  };
  {  // An architecture: named, with the list of those there are.
    const fs::path m = copy_of("xlmr-cls", "mistral");
    json config = json::parse(read_file(m / "config.json"));
    config["model_type"] = "mistral";
    std::ofstream(m / "config.json") << config.dump();
    const RunResult r = encode(m);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find((m / "config.json").string() + ": model_type \"mistral\" is not implemented "
                            "(embed-train trains bert, xlm-roberta, mpnet, modernbert, qwen3 and gemma3_text)"),
              std::string::npos)
        << r.output;
  }
  {  // A feature of an architecture: a Qwen3 layer type other than full and sliding attention.
    const fs::path m = copy_of("qwen3", "chunked");
    json config = json::parse(read_file(m / "config.json"));
    config["layer_types"] = {"full_attention", "chunked_attention"};
    std::ofstream(m / "config.json") << config.dump();
    const RunResult r = encode(m);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find((m / "config.json").string() + ": layer_types[1] \"chunked_attention\" is not implemented"),
              std::string::npos)
        << r.output;
  }
  {  // A tokenizer.json model type.
    const fs::path m = copy_of("qwen3", "wordlevel");
    json tok = json::parse(read_file(m / "tokenizer.json"));
    tok["model"]["type"] = "WordLevel";
    std::ofstream(m / "tokenizer.json") << tok.dump();
    const RunResult r = encode(m);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find((m / "tokenizer.json").string() + ": model type \"WordLevel\" is not implemented"),
              std::string::npos)
        << r.output;
  }
  {  // A tokenizer larger than the model's vocabulary.
    const fs::path m = copy_of("qwen3", "small-vocab");
    json config = json::parse(read_file(m / "config.json"));
    config["vocab_size"] = 1000;
    std::ofstream(m / "config.json") << config.dump();
    const RunResult r = encode(m);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("the tokenizer has 151669 ids but config.json's vocab_size is 1000"), std::string::npos)
        << r.output;
  }
  {  // A chat-template modality, which sentence-transformers would render and we would not.
    const fs::path m = copy_of("qwen3", "message");
    std::ofstream(m / "sentence_bert_config.json")
        << R"({"modality_config": {"text": {"method": "forward"}, "message": {"method": "forward"}}})";
    const RunResult r = encode(m);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find((m / "sentence_bert_config.json").string() + ": modality_config.message"),
              std::string::npos)
        << r.output;
  }
}

// Weight decay spares biases and every norm parameter, as transformers' Trainer decides
// (Trainer.get_decay_parameter_names on the same names, in Python): for Qwen3 that is
// input_layernorm, post_attention_layernorm, q_norm, k_norm and the final norm.
// The adapted layer's forward is the plain layer with the merged weight (what the model
// folder holds), for a BERT-shaped layer with a bias; its gradients reach the adapters
// only; without an adapter it is torch::nn::Linear.
TEST_F(Architectures, ALoraLayerComputesTheMergedLayer) {
  at::manual_seed(3);
  ddp_embed::AdaptableLinear layer(12, 20);
  const at::Tensor x = at::randn({5, 12});
  EXPECT_TRUE(at::equal(layer(x), at::linear(x, layer->weight, layer->bias)));
  for (auto& p : layer->parameters()) p.set_requires_grad(false);
  layer->add_adapter(4, 6.0);
  EXPECT_TRUE(at::equal(layer(x), at::linear(x, layer->weight, layer->bias))) << "B starts at zero";
  {
    at::NoGradGuard no_grad;
    layer->lora_B.normal_();
  }
  const at::Tensor y = layer(x);
  EXPECT_TRUE(at::allclose(y, at::linear(x, layer->merged_weight(), layer->bias), 1e-5, 1e-6));
  EXPECT_FALSE(at::allclose(y, at::linear(x, layer->weight, layer->bias), 1e-3, 1e-3));
  y.sum().backward();
  EXPECT_TRUE(layer->lora_A.grad().defined());
  EXPECT_TRUE(layer->lora_B.grad().defined());
  EXPECT_FALSE(layer->weight.grad().defined());
  EXPECT_DOUBLE_EQ(layer->scale, 1.5);
}

TEST_F(Architectures, WeightDecaySparesTheNormsAsTransformersTrainerDoes) {
  ddp_embed::EncoderConfig qwen3;
  qwen3.architecture = ddp_embed::Architecture::Qwen3;
  qwen3.qwen3.vocab_size = 50;
  qwen3.qwen3.hidden_size = 16;
  qwen3.qwen3.intermediate_size = 24;
  qwen3.qwen3.num_layers = 2;
  qwen3.qwen3.num_heads = 4;
  qwen3.qwen3.num_kv_heads = 2;
  qwen3.qwen3.head_dim = 8;
  ddp_embed::BertConfig bert;
  bert.vocab_size = 50;
  bert.hidden_size = 16;
  bert.num_layers = 1;
  bert.num_heads = 2;
  bert.intermediate_size = 24;
  for (const auto& config : {qwen3, ddp_embed::encoder_config(bert)}) {
    ddp_embed::SentenceEmbedder model(config, 8, ddp_embed::Pooling::LastToken);
    const auto groups = ddp_embed::optimizer_groups(model, 0.01);
    std::map<const void*, bool> decayed;  // parameter storage -> in the decay group
    for (const auto& p : groups[0].params) decayed[p.data_ptr()] = true;
    for (const auto& p : groups[1].params) decayed[p.data_ptr()] = false;
    json names = json::array();
    for (const auto& item : model->named_parameters()) names.push_back(item.key());
    const fs::path dir = fresh_dir("decay-names");
    std::ofstream(dir / "names.json") << names.dump();
    // Trainer's rule without building a Trainer: its ALL_LAYERNORM_LAYERS by name, biases.
    std::ofstream(dir / "rule.py") << R"py(import json, re, sys
names = json.load(open(sys.argv[1]))
patterns = [r"bias", r"layernorm", r"rmsnorm", r"(?:^|\.)norm(?:$|\.)", r"_norm(?:$|\.)"]
print(json.dumps([n for n in names if not any(re.search(p, n.lower()) for p in patterns)]))
)py";
    const RunResult r = run(kPython + " " + (dir / "rule.py").string() + " " + (dir / "names.json").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::set<std::string> expected;
    for (const auto& n : json::parse(r.output)) expected.insert(n.get<std::string>());
    for (const auto& item : model->named_parameters())
      EXPECT_EQ(decayed.at(item.value().data_ptr()), expected.count(item.key()) == 1) << item.key();
    if (config.is_decoder()) {
      EXPECT_EQ(expected.count("qwen3.layers.0.input_layernorm.weight"), 0u);
      EXPECT_EQ(expected.count("qwen3.norm.weight"), 0u);
      EXPECT_EQ(expected.count("qwen3.layers.1.mlp.gate_proj.weight"), 1u);
    }
  }
}
