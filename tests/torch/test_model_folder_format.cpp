// The model folder that training writes, file by file, against what Python's
// sentence-transformers (SentenceTransformer(dir)) and transformers (AutoConfig,
// AutoModel, AutoTokenizer) read: every key and value is checked against those libraries'
// documented formats, and scripts/check-st-load.py does the real load with the project's
// Python (the last test).
//
// What the readers do with the files (why the checks are strict):
//  - modules.json: a list of {idx, name, path, type}; each type is imported and its
//    load() reads the module's folder.
//  - 1_Pooling/config.json and 2_Dense/config.json become the keyword arguments of
//    Pooling(...) and Dense(...): an unknown key is a TypeError, a missing one a default
//    (Dense's activation defaults to Tanh, Pooling's mode to mean).
//  - 2_Dense/model.safetensors is loaded strictly into Dense: exactly linear.weight
//    [out, in] and linear.bias [out].
//  - sentence_bert_config.json: the Transformer module's max_seq_length and
//    do_lower_case (lower-casing done by sentence-transformers itself, before the
//    tokenizer; ours is the tokenizer's job, so false).
//  - config.json: a BertConfig (model_type "bert"); model.safetensors: BertModel's
//    parameter names, without a "bert." prefix; transformers requires the safetensors
//    metadata {"format": "pt"}.
//  - tokenizer_config.json: tokenizer_class picks the class; its keys are the class's
//    constructor arguments (BertTokenizer: do_lower_case, strip_accents,
//    tokenize_chinese_chars, the special tokens; AlbertTokenizer, which reads
//    spiece.model: do_lower_case, keep_accents, remove_space, the special tokens).
#include <set>

#include "../core/golden_fixture.h"
#include "e2e_support.h"
#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/tokenizer.h"

using namespace e2e;

namespace {

json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  if (!in) return json();
  return json::parse(in);
}

std::set<std::string> keys_of(const json& object) {
  std::set<std::string> keys;
  for (const auto& item : object.items()) keys.insert(item.key());
  return keys;
}

std::vector<std::string> lines_of(const fs::path& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// Every file under `dir`, as paths relative to it.
std::set<std::string> files_under(const fs::path& dir) {
  std::set<std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files.insert(fs::relative(entry.path(), dir).string());
  return files;
}

// The tiny training run of e2e_support, cut to one step.
json one_step_config(const fs::path& out) {
  json cfg = tiny_config(out);
  cfg["train"]["max_steps"] = 1;
  return cfg;
}

// Two folders written by real runs: WordPiece with mean pooling, and a sentencepiece
// tokenizer trained on first use with CLS pooling. Trained once for all the tests here
// (and again only when embed-train changes).
constexpr int kSpmVocab = 600;

json sentencepiece_config(const fs::path& dir) {
  json cfg = one_step_config(dir / "out");
  cfg["model"]["vocab_size"] = kSpmVocab;
  cfg["model"]["pooling"] = "cls";
  cfg["tokenizer"] = {{"type", "sentencepiece"}, {"path", (dir / "tok").string()}, {"max_length", 24}};
  cfg["data"]["train"] = (dir / "train.jsonl").string();
  return cfg;
}

// A few thousand lines are plenty for a 600-piece vocabulary, and train fast.
void first_training_lines(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::ofstream out(dir / "train.jsonl");
  std::string line;
  for (int i = 0; i < 3000 && std::getline(in, line); ++i) out << line << "\n";
}

class ModelFolderFormat : public ::testing::Test {
 protected:
  static inline fs::path wordpiece;      // .../final of the WordPiece run
  static inline fs::path sentencepiece;  // .../final of the sentencepiece run
  static inline fs::path work;           // scratch space for this process
  static inline int spm_vocab = kSpmVocab;
  static inline std::string setup_error;

  static void SetUpTestSuite() {
    std::string error;
    auto wordpiece_config = [](const fs::path& dir) { return one_step_config(dir / "out"); };
    wordpiece = shared_run("format-wordpiece", wordpiece_config, error) / "out" / "final";
    if (!error.empty()) setup_error += "WordPiece run failed:\n" + error;
    error.clear();
    sentencepiece =
        shared_run("format-sentencepiece", sentencepiece_config, error, first_training_lines) / "out" / "final";
    if (!error.empty()) setup_error += "sentencepiece run failed:\n" + error;
    work = fresh_dir("st-format");
  }

  void SetUp() override { ASSERT_TRUE(setup_error.empty()) << setup_error; }
};

TEST_F(ModelFolderFormat, HoldsExactlyTheExpectedFiles) {
  const std::set<std::string> common = {"config.json",
                                        "model.safetensors",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "modules.json",
                                        "sentence_bert_config.json",
                                        "config_sentence_transformers.json",
                                        "1_Pooling/config.json",
                                        "2_Dense/config.json",
                                        "2_Dense/model.safetensors",
                                        "embed_train.json"};
  auto with = [&](const char* vocab_file) {
    auto files = common;
    files.insert(vocab_file);
    return files;
  };
  EXPECT_EQ(files_under(wordpiece), with("vocab.txt"));
  EXPECT_EQ(files_under(sentencepiece), with("spiece.model"));
}

TEST_F(ModelFolderFormat, ModulesJsonListsTransformerPoolingDense) {
  for (const auto& dir : {wordpiece, sentencepiece}) {
    const json modules = read_json(dir / "modules.json");
    ASSERT_TRUE(modules.is_array());
    ASSERT_EQ(modules.size(), 3u);
    const char* paths[] = {"", "1_Pooling", "2_Dense"};
    const char* types[] = {"sentence_transformers.models.Transformer", "sentence_transformers.models.Pooling",
                           "sentence_transformers.models.Dense"};
    for (int i = 0; i < 3; ++i) {
      const json& m = modules[size_t(i)];
      EXPECT_EQ(keys_of(m), (std::set<std::string>{"idx", "name", "path", "type"})) << dir;
      EXPECT_EQ(m["idx"], i);
      EXPECT_EQ(m["name"], std::to_string(i));
      EXPECT_EQ(m["path"], paths[i]);
      EXPECT_EQ(m["type"], types[i]);
    }
  }
}

TEST_F(ModelFolderFormat, SentenceBertConfigHasTheTrainingMaxLength) {
  const json wp = read_json(wordpiece / "sentence_bert_config.json");
  EXPECT_EQ(keys_of(wp), (std::set<std::string>{"max_seq_length", "do_lower_case"}));
  EXPECT_EQ(wp["max_seq_length"], 32);  // tokenizer.max_length of the run
  EXPECT_EQ(wp["do_lower_case"], false);
  EXPECT_EQ(read_json(sentencepiece / "sentence_bert_config.json")["max_seq_length"], 24);
}

TEST_F(ModelFolderFormat, ConfigSentenceTransformers) {
  const json c = read_json(wordpiece / "config_sentence_transformers.json");
  EXPECT_EQ(keys_of(c), (std::set<std::string>{"__version__", "model_type", "prompts", "default_prompt_name",
                                               "similarity_fn_name"}));
  ASSERT_TRUE(c["__version__"].is_object());
  EXPECT_EQ(keys_of(c["__version__"]), std::set<std::string>{"sentence_transformers"});
  // The first release that reads similarity_fn_name and Pooling's include_prompt.
  EXPECT_EQ(c["__version__"]["sentence_transformers"], "3.0.0");
  EXPECT_EQ(c["model_type"], "SentenceTransformer");
  EXPECT_EQ(c["prompts"], json::object());
  EXPECT_TRUE(c["default_prompt_name"].is_null());
  EXPECT_EQ(c["similarity_fn_name"], "cosine");  // what training optimized
}

TEST_F(ModelFolderFormat, PoolingConfigIsTheTrainedPoolingWithPoolingsExactKeys) {
  const std::set<std::string> pooling_keys = {"word_embedding_dimension",
                                              "pooling_mode_cls_token",
                                              "pooling_mode_mean_tokens",
                                              "pooling_mode_max_tokens",
                                              "pooling_mode_mean_sqrt_len_tokens",
                                              "pooling_mode_weightedmean_tokens",
                                              "pooling_mode_lasttoken",
                                              "include_prompt"};
  auto check = [&](const fs::path& dir, const std::string& trained) {
    const json p = read_json(dir / "1_Pooling" / "config.json");
    EXPECT_EQ(keys_of(p), pooling_keys) << dir;
    EXPECT_EQ(p["word_embedding_dimension"], 32) << dir;  // hidden_size
    for (const auto& [key, value] : p.items()) {
      if (key == "word_embedding_dimension") continue;
      ASSERT_TRUE(value.is_boolean()) << key;
      const bool expected = key == "include_prompt" || key == "pooling_mode_" + trained + "_token" ||
                            key == "pooling_mode_" + trained + "_tokens";
      EXPECT_EQ(value.get<bool>(), expected) << dir << " " << key;
    }
  };
  check(wordpiece, "mean");
  check(sentencepiece, "cls");
}

TEST_F(ModelFolderFormat, DenseIsTheProjectionWithIdentityActivation) {
  const json d = read_json(wordpiece / "2_Dense" / "config.json");
  EXPECT_EQ(keys_of(d), (std::set<std::string>{"in_features", "out_features", "bias", "activation_function"}));
  EXPECT_EQ(d["in_features"], 32);
  EXPECT_EQ(d["out_features"], 16);
  EXPECT_EQ(d["bias"], true);
  EXPECT_EQ(d["activation_function"], "torch.nn.modules.linear.Identity");

  const auto file = ddp_embed::read_safetensors((wordpiece / "2_Dense" / "model.safetensors").string());
  ASSERT_EQ(file.tensors().size(), 2u);
  const auto* weight = file.find("linear.weight");
  const auto* bias = file.find("linear.bias");
  ASSERT_TRUE(weight && bias);
  EXPECT_EQ(weight->dtype, ddp_embed::StDtype::F32);
  EXPECT_EQ(weight->shape, (std::vector<int64_t>{16, 32}));  // nn.Linear: [out, in]
  EXPECT_EQ(bias->dtype, ddp_embed::StDtype::F32);
  EXPECT_EQ(bias->shape, (std::vector<int64_t>{16}));
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST_F(ModelFolderFormat, ConfigJsonIsABertConfig) {
  // BertConfig's own arguments and the PretrainedConfig keys transformers writes.
  const std::set<std::string> known = {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                       "intermediate_size", "hidden_act", "hidden_dropout_prob",
                                       "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                                       "initializer_range", "layer_norm_eps", "pad_token_id",
                                       "position_embedding_type", "use_cache", "classifier_dropout",
                                       "architectures", "model_type", "torch_dtype", "transformers_version"};
  const json c = read_json(wordpiece / "config.json");
  for (const auto& key : keys_of(c)) EXPECT_TRUE(known.count(key)) << "config.json: unknown key " << key;
  EXPECT_EQ(c["model_type"], "bert");
  EXPECT_EQ(c["architectures"], json::array({"BertModel"}));
  EXPECT_EQ(c["vocab_size"], 30522);
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["num_hidden_layers"], 2);
  EXPECT_EQ(c["num_attention_heads"], 4);
  EXPECT_EQ(c["intermediate_size"], 64);
  EXPECT_EQ(c["max_position_embeddings"], 64);
  EXPECT_EQ(c["type_vocab_size"], 2);
  EXPECT_EQ(c["hidden_act"], "gelu");  // erf GELU, as implemented
  EXPECT_EQ(c["position_embedding_type"], "absolute");
  EXPECT_EQ(c["hidden_dropout_prob"], 0.0);  // the run's model.dropout
  EXPECT_EQ(c["attention_probs_dropout_prob"], 0.0);
  EXPECT_DOUBLE_EQ(c["layer_norm_eps"].get<double>(), 1e-12);
  EXPECT_DOUBLE_EQ(c["initializer_range"].get<double>(), 0.02);
  EXPECT_EQ(c["pad_token_id"], 0);  // [PAD] in vocab.txt

  const json s = read_json(sentencepiece / "config.json");
  EXPECT_EQ(s["vocab_size"], spm_vocab);
  EXPECT_EQ(s["pad_token_id"], 0);  // [PAD] of the trained sentencepiece model
}

TEST_F(ModelFolderFormat, ModelSafetensorsHasBertModelNamesAndShapes) {
  const int64_t H = 32, I = 64, V = 30522, P = 64;
  std::map<std::string, std::vector<int64_t>> expected = {
      {"embeddings.word_embeddings.weight", {V, H}},
      {"embeddings.position_embeddings.weight", {P, H}},
      {"embeddings.token_type_embeddings.weight", {2, H}},
      {"embeddings.LayerNorm.weight", {H}},
      {"embeddings.LayerNorm.bias", {H}}};
  for (int layer = 0; layer < 2; ++layer) {
    const std::string l = "encoder.layer." + std::to_string(layer) + ".";
    for (const char* m : {"attention.self.query", "attention.self.key", "attention.self.value",
                          "attention.output.dense"}) {
      expected[l + m + ".weight"] = {H, H};
      expected[l + m + ".bias"] = {H};
    }
    for (const char* norm : {"attention.output.LayerNorm", "output.LayerNorm"}) {
      expected[l + norm + ".weight"] = {H};
      expected[l + norm + ".bias"] = {H};
    }
    expected[l + "intermediate.dense.weight"] = {I, H};
    expected[l + "intermediate.dense.bias"] = {I};
    expected[l + "output.dense.weight"] = {H, I};
    expected[l + "output.dense.bias"] = {H};
  }
  const auto file = ddp_embed::read_safetensors((wordpiece / "model.safetensors").string());
  std::map<std::string, std::vector<int64_t>> got;
  for (const auto& t : file.tensors()) {
    got[t.name] = t.shape;
    EXPECT_EQ(t.dtype, ddp_embed::StDtype::F32) << t.name;
  }
  // No pooler: sentence-transformers never uses BertModel's pooler output (transformers
  // notes its weights as newly initialized when it loads the folder).
  EXPECT_EQ(got, expected);
  EXPECT_EQ(file.metadata().at("format"), "pt");
}

TEST_F(ModelFolderFormat, WordPieceTokenizerFilesMatchOurTokenizer) {
  // vocab.txt: the training vocabulary, line for line (line number = token id).
  EXPECT_EQ(lines_of(wordpiece / "vocab.txt"), lines_of(kSrc + "/tests/fixtures/golden/vocab.txt"));
  const auto vocab = lines_of(wordpiece / "vocab.txt");
  const auto ours = ddp_embed::load_tokenizer("wordpiece", wordpiece.string());
  const auto ids = ours->special();

  const json c = read_json(wordpiece / "tokenizer_config.json");
  EXPECT_EQ(c["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(c["do_lower_case"], true);  // the run's tokenizer.lower_case (an uncased vocabulary)
  EXPECT_TRUE(c["strip_accents"].is_null());  // BertTokenizer: follow do_lower_case
  EXPECT_EQ(c["tokenize_chinese_chars"], true);
  EXPECT_EQ(c["model_max_length"], 64);  // capped at max_position_embeddings
  EXPECT_EQ(c["clean_up_tokenization_spaces"], true);
  const std::pair<const char*, int32_t> specials[] = {{"unk_token", ids.unk}, {"sep_token", ids.sep},
                                                      {"pad_token", ids.pad}, {"cls_token", ids.cls},
                                                      {"mask_token", ids.mask}};
  const json map = read_json(wordpiece / "special_tokens_map.json");
  EXPECT_EQ(keys_of(map), (std::set<std::string>{"unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}));
  for (const auto& [key, id] : specials) {
    ASSERT_TRUE(c[key].is_string()) << key;
    EXPECT_EQ(c[key], map[key]) << key;
    EXPECT_EQ(c[key].get<std::string>(), vocab.at(size_t(id))) << key << ": not the token our tokenizer uses";
  }
  EXPECT_EQ(c["cls_token"], "[CLS]");
  EXPECT_EQ(c["sep_token"], "[SEP]");
  EXPECT_EQ(c["pad_token"], "[PAD]");
  EXPECT_EQ(c["unk_token"], "[UNK]");
  EXPECT_EQ(c["mask_token"], "[MASK]");
}

TEST_F(ModelFolderFormat, SentencePieceTokenizerFilesNameAnAlbertTokenizerWithOurSpecials) {
  const auto ours = ddp_embed::load_tokenizer("sentencepiece", sentencepiece.string());
  const auto& spm = dynamic_cast<const ddp_embed::SentencePieceTokenizer&>(*ours);
  const auto ids = ours->special();
  EXPECT_EQ(ours->vocab_size(), spm_vocab);

  const json c = read_json(sentencepiece / "tokenizer_config.json");
  // A sentencepiece-based class that reads spiece.model and encodes one text as
  // [CLS] pieces [SEP]; with these settings it adds no normalization of its own.
  EXPECT_EQ(c["tokenizer_class"], "AlbertTokenizer");
  EXPECT_EQ(c["do_lower_case"], false);
  EXPECT_EQ(c["keep_accents"], true);
  EXPECT_EQ(c["remove_space"], true);
  EXPECT_EQ(c["model_max_length"], 64);
  const json map = read_json(sentencepiece / "special_tokens_map.json");
  // ALBERT's bos/eos are its [CLS]/[SEP].
  const std::pair<const char*, int32_t> specials[] = {{"bos_token", ids.cls}, {"eos_token", ids.sep},
                                                      {"unk_token", ids.unk}, {"sep_token", ids.sep},
                                                      {"pad_token", ids.pad}, {"cls_token", ids.cls},
                                                      {"mask_token", ids.mask}};
  EXPECT_EQ(keys_of(map).size(), std::size(specials));
  for (const auto& [key, id] : specials) {
    ASSERT_TRUE(c[key].is_string()) << key;
    EXPECT_EQ(c[key], map[key]) << key;
    EXPECT_EQ(c[key].get<std::string>(), spm.piece(id)) << key << ": not the piece our tokenizer uses";
  }
  // What train_sentencepiece reserves: BERT's names at ids 0..4.
  EXPECT_EQ(c["pad_token"], "[PAD]");
  EXPECT_EQ(c["unk_token"], "[UNK]");
  EXPECT_EQ(c["cls_token"], "[CLS]");
  EXPECT_EQ(c["sep_token"], "[SEP]");
  EXPECT_EQ(c["mask_token"], "[MASK]");
  EXPECT_EQ((std::vector<int32_t>{ids.pad, ids.unk, ids.cls, ids.sep, ids.mask}),
            (std::vector<int32_t>{0, 1, 2, 3, 4}));
}

// Starting from a Hugging Face folder: its vocabulary is the tokenizer, and the written
// do_lower_case is the one training used: the folder's tokenizer_config.json when it has
// one, else tokenizer.lower_case (here false: a cased vocabulary without a config).
TEST_F(ModelFolderFormat, ModelInitFolderWithoutTokenizerConfigFollowsTokenizerLowerCase) {
  const fs::path init = work / "hf-cased";
  fs::create_directories(init);
  const fs::path golden = golden::golden_model_dir("bert-tiny-a");
  fs::copy_file(golden / "config.json", init / "config.json");
  fs::copy_file(golden / "model.safetensors", init / "model.safetensors");
  fs::copy_file(kSrc + "/tests/fixtures/golden/vocab.txt", init / "vocab.txt");
  json cfg = one_step_config(work / "init-out");
  cfg["model"]["init"] = init.string();
  cfg["tokenizer"]["lower_case"] = false;
  auto r = train(work, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json c = read_json(work / "init-out" / "final" / "tokenizer_config.json");
  EXPECT_EQ(c["tokenizer_class"], "BertTokenizer");
  EXPECT_EQ(c["do_lower_case"], false);
  EXPECT_EQ(read_json(work / "init-out" / "final" / "config.json")["max_position_embeddings"], 128);  // the folder's
  EXPECT_EQ(c["model_max_length"], 128);
}

// What encode does with the sentencepiece folder (the WordPiece one is EncodeEval's).
TEST_F(ModelFolderFormat, EncodeReadsTheSentencePieceFolderBack) {
  const fs::path texts = fs::path(kSrc) / "tests/fixtures/golden/texts.txt";
  auto r = run(kBin + "/embed-train encode --model " + sentencepiece.string() + " --input " + texts.string() +
               " --output " + (work / "check.jsonl").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::ifstream in(work / "check.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  EXPECT_EQ(json::parse(line)["embedding"].size(), 16u);
}

// scripts/check-st-load.py on both folders, with the project's Python (.venv: the
// sentence-transformers, transformers and sentencepiece of scripts/python/requirements.lock):
// SentenceTransformer(dir) loads each folder and every sentence's cosine with
// embed-train encode is >= 0.9999. Without that Python the test fails: it is the check
// that our folders work where users load them.
TEST_F(ModelFolderFormat, CheckScriptLoadsTheFoldersInPython) {
  const std::string python = DDP_EMBED_PYTHON;
  const fs::path texts = fs::path(kSrc) / "tests/fixtures/golden/texts.txt";
  for (const auto& dir : {wordpiece, sentencepiece}) {
    const auto r = run(python + " " + kSrc + "/scripts/check-st-load.py " + dir.string() + " " + texts.string() +
                       " --embed-train " + kBin + "/embed-train");
    EXPECT_EQ(r.exit_code, 0) << dir << "\n" << r.output;
    EXPECT_NE(r.output.find("OK: every sentence"), std::string::npos) << r.output;
  }
}

}  // namespace
