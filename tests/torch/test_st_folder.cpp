// sentence-transformers folders (modules.json) as encode, eval, tokenize and model.init
// read them, built file by file around the golden tiny BERT (tests/fixtures/golden,
// bert-tiny-a: hidden 32, 2 layers, 128 positions) as sentence-transformers writes them:
//  - the Transformer in the folder itself (path "") or in "0_Transformer/";
//  - mean and cls pooling give Hugging Face's pooled outputs (expected.jsonl);
//  - Normalize gives unit vectors in the same direction; a Dense layer is loaded and
//    projects the pooled embedding as computed here by hand;
//  - sentence_bert_config.json's max_seq_length truncates and do_lower_case lower-cases
//    the text first (the golden ids of tokens.jsonl);
//  - what embed-train does not implement is refused, naming the file and the key;
//  - model.init from such a folder: the pooling, the Dense layer (model.projection_dim's
//    rules) and Normalize carry over to the folder training writes.
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "../core/golden_fixture.h"
#include "e2e_support.h"
#include "model/model_folder.h"

using namespace e2e;

namespace {

const fs::path kGolden = fs::path(kSrc) / "tests/fixtures/golden";
constexpr int64_t kHidden = 32;  // bert-tiny-a

// ---- building folders -----------------------------------------------------------------

void write_json_file(const fs::path& path, const json& j) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << j.dump(2);
}

// A deterministic Dense layer [out, in] + [out] (no bias when `bias` is empty), far from
// PyTorch's default init (whose weights lie within ±1/sqrt(in) = ±0.18): a loaded layer is
// told apart from a new one.
struct DenseWeights {
  int64_t out = 0, in = 0;
  std::vector<float> weight, bias;
};

DenseWeights dense_weights(int64_t out, int64_t in, bool bias = true) {
  DenseWeights d{out, in, {}, {}};
  for (int64_t o = 0; o < out; ++o)
    for (int64_t i = 0; i < in; ++i) d.weight.push_back(0.6f * float(std::sin(1.0 + double(o * in + i))));
  for (int64_t o = 0; bias && o < out; ++o) d.bias.push_back(0.3f * float(std::cos(double(o))));
  return d;
}

void write_dense(const fs::path& dir, const DenseWeights& d, const json& config_changes = json::object()) {
  json config = {{"in_features", d.in},
                 {"out_features", d.out},
                 {"bias", !d.bias.empty()},
                 {"activation_function", "torch.nn.modules.linear.Identity"}};
  config.update(config_changes);
  write_json_file(dir / "config.json", config);
  std::vector<ddp_embed::StTensorToWrite> tensors = {
      {"linear.weight", ddp_embed::StDtype::F32, {d.out, d.in}, d.weight.data(), d.weight.size() * 4}};
  if (!d.bias.empty())
    tensors.push_back({"linear.bias", ddp_embed::StDtype::F32, {d.out}, d.bias.data(), d.bias.size() * 4});
  ddp_embed::write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

// 1_Pooling/config.json as sentence-transformers 2.x-5.x write it: one boolean per mode.
json legacy_pooling_config(const std::string& mode) {
  json config = {{"word_embedding_dimension", kHidden}};
  for (const char* m : {"cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens"})
    config[std::string("pooling_mode_") + m] = m == mode;
  config["pooling_mode_lasttoken"] = mode == "lasttoken";
  return config;
}

struct StSpec {
  std::string transformer_path;       // "" or a subfolder such as "0_Transformer"
  std::string pooling = "mean_tokens";  // the legacy key's mode: cls_token, mean_tokens, max_tokens, ...
  std::optional<DenseWeights> dense;   // written to 2_Dense
  std::optional<DenseWeights> dense2;  // written to 3_Dense, after it
  bool normalize = false;
  json sentence_bert = {{"max_seq_length", 64}, {"do_lower_case", false}};
  json tokenizer_config = {{"tokenizer_class", "BertTokenizer"}, {"do_lower_case", true}, {"model_max_length", 512}};
};

json module_entry(int idx, const std::string& path, const std::string& type) {
  return {{"idx", idx}, {"name", std::to_string(idx)}, {"path", path},
          {"type", "sentence_transformers.models." + type}};
}

// The golden BERT (config.json, model.safetensors, vocab.txt) with the files of `spec`.
fs::path make_st_folder(const fs::path& dir, const StSpec& spec = {}) {
  const fs::path transformer = spec.transformer_path.empty() ? dir : dir / spec.transformer_path;
  fs::create_directories(transformer);
  const fs::path golden = golden::golden_model_dir("bert-tiny-a");
  fs::copy_file(golden / "config.json", transformer / "config.json", fs::copy_options::overwrite_existing);
  fs::copy_file(golden / "model.safetensors", transformer / "model.safetensors", fs::copy_options::overwrite_existing);
  fs::copy_file(kGolden / "vocab.txt", transformer / "vocab.txt", fs::copy_options::overwrite_existing);
  write_json_file(transformer / "tokenizer_config.json", spec.tokenizer_config);
  write_json_file(transformer / "sentence_bert_config.json", spec.sentence_bert);

  json modules = json::array({module_entry(0, spec.transformer_path, "Transformer"),
                              module_entry(1, "1_Pooling", "Pooling")});
  write_json_file(dir / "1_Pooling" / "config.json", legacy_pooling_config(spec.pooling));
  if (spec.dense) {
    modules.push_back(module_entry(2, "2_Dense", "Dense"));
    write_dense(dir / "2_Dense", *spec.dense);
  }
  if (spec.dense2) {
    modules.push_back(module_entry(3, "3_Dense", "Dense"));
    write_dense(dir / "3_Dense", *spec.dense2);
  }
  if (spec.normalize) {
    const int idx = int(modules.size());
    // No files, as in real folders.
    modules.push_back(module_entry(idx, std::to_string(idx) + "_Normalize", "Normalize"));
  }
  write_json_file(dir / "modules.json", modules);
  return dir;
}

// ---- golden values and embeddings -------------------------------------------------------

struct GoldenText {
  std::string text;
  std::vector<int32_t> ids;
  std::vector<double> cls, mean;
};

std::vector<GoldenText> golden_texts() {
  std::vector<GoldenText> out;
  std::ifstream in(kGolden / "bert-tiny-a" / "expected.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    out.push_back({j["text"], j["input_ids"].get<std::vector<int32_t>>(), j["cls"].get<std::vector<double>>(),
                   j["mean"].get<std::vector<double>>()});
  }
  EXPECT_EQ(out.size(), 19u);
  return out;
}

using Rows = std::vector<std::vector<double>>;

Rows read_embeddings(const fs::path& jsonl) {
  Rows rows;
  std::ifstream in(jsonl);
  for (std::string line; std::getline(in, line);)
    rows.push_back(json::parse(line)["embedding"].get<std::vector<double>>());
  return rows;
}

// `embed-train encode` of the golden texts (in expected.jsonl's order).
Rows encode(const fs::path& model, const fs::path& work, const std::string& extra = "") {
  const fs::path out = work / "embeddings.jsonl";
  fs::remove(out);
  const RunResult r = run(kThreads + kBin + "/embed-train encode --model " + model.string() + " --input " +
                          (kGolden / "texts.txt").string() + " --output " + out.string() + extra);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return read_embeddings(out);
}

std::vector<std::vector<int32_t>> tokenize(const fs::path& model, const fs::path& input, const fs::path& work) {
  const fs::path out = work / "ids.jsonl";
  fs::remove(out);
  const RunResult r = run(kBin + "/embed-train tokenize --model " + model.string() + " --input " + input.string() +
                          " --output " + out.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::vector<int32_t>> ids;
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    EXPECT_EQ(j.size(), 1u) << line;
    ids.push_back(j["ids"].get<std::vector<int32_t>>());
  }
  return ids;
}

double vector_norm(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s);
}

std::vector<double> unit(const std::vector<double>& v) {
  std::vector<double> u = v;
  const double n = std::max(vector_norm(v), 1e-12);
  for (double& x : u) x /= n;
  return u;
}

// W v + b (W v without a bias), in double.
std::vector<double> project(const DenseWeights& d, const std::vector<double>& v) {
  std::vector<double> out(size_t(d.out));
  for (int64_t o = 0; o < d.out; ++o) {
    double s = d.bias.empty() ? 0.0 : d.bias[size_t(o)];
    for (int64_t i = 0; i < d.in; ++i) s += double(d.weight[size_t(o * d.in + i)]) * v[size_t(i)];
    out[size_t(o)] = s;
  }
  return out;
}

void expect_rows_near(const Rows& got, const std::vector<std::vector<double>>& want, double tol,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t r = 0; r < got.size(); ++r) {
    ASSERT_EQ(got[r].size(), want[r].size()) << what << " row " << r;
    for (size_t k = 0; k < got[r].size(); ++k) EXPECT_NEAR(got[r][k], want[r][k], tol) << what << " row " << r;
  }
}

template <class F>
std::vector<std::vector<double>> each_golden(F f) {
  std::vector<std::vector<double>> out;
  for (const GoldenText& g : golden_texts()) out.push_back(f(g));
  return out;
}

// The message of the std::exception `f` throws ("" when it throws none).
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, needle) \
  EXPECT_NE(std::string(text).find(needle), std::string::npos) << "\"" << (needle) << "\" not in: " << (text)

// ---- encode ----------------------------------------------------------------------------------

TEST(StFolder, TransformerInTheFolderItselfWithMeanPoolingGivesHuggingFacesMean) {
  const fs::path work = fresh_dir("st-root-mean");
  const fs::path model = make_st_folder(work / "model");
  expect_rows_near(encode(model, work), each_golden([](const GoldenText& g) { return g.mean; }), 1e-4, "mean");
}

TEST(StFolder, TransformerInASubfolderWithClsPoolingGivesHuggingFacesCls) {
  const fs::path work = fresh_dir("st-sub-cls");
  StSpec spec;
  spec.transformer_path = "0_Transformer";
  spec.pooling = "cls_token";
  const fs::path model = make_st_folder(work / "model", spec);
  ASSERT_FALSE(fs::exists(model / "config.json"));  // only in 0_Transformer/
  expect_rows_near(encode(model, work), each_golden([](const GoldenText& g) { return g.cls; }), 1e-4, "cls");
}

TEST(StFolder, NormalizeGivesUnitVectorsInThePooledDirection) {
  const fs::path work = fresh_dir("st-normalize");
  StSpec spec;
  spec.normalize = true;
  const fs::path model = make_st_folder(work / "model", spec);
  const Rows rows = encode(model, work);
  for (const auto& row : rows) EXPECT_NEAR(vector_norm(row), 1.0, 1e-5);
  expect_rows_near(rows, each_golden([](const GoldenText& g) { return unit(g.mean); }), 1e-5, "unit mean");
  // --normalize on a folder that already normalizes changes nothing.
  expect_rows_near(encode(model, work, " --normalize"), rows, 1e-7, "normalized twice");
}

TEST(StFolder, DenseIsLoadedAndProjectsThePooledEmbedding) {
  const fs::path work = fresh_dir("st-dense");
  const DenseWeights d = dense_weights(8, kHidden);
  StSpec spec;
  spec.dense = d;
  const fs::path model = make_st_folder(work / "model", spec);
  expect_rows_near(encode(model, work), each_golden([&](const GoldenText& g) { return project(d, g.mean); }), 1e-4,
                   "W mean + b");

  // In a subfolder layout, with cls pooling and Normalize after the Dense layer.
  spec.transformer_path = "0_Transformer";
  spec.pooling = "cls_token";
  spec.normalize = true;
  const fs::path normalized = make_st_folder(work / "normalized", spec);
  expect_rows_near(encode(normalized, work), each_golden([&](const GoldenText& g) { return unit(project(d, g.cls)); }),
                   1e-5, "unit(W cls + b)");
}

// EmbeddingGemma's form: two Dense layers without biases (768 -> 3072 -> 768 there), then
// Normalize, as sentence-transformers 6 writes them (base.modules.dense.Dense with
// module_input_name): each applied in turn, and written back as read.
TEST(StFolder, ADenseChainWithoutBiasesProjectsInOrderAndIsWrittenBackAsRead) {
  const fs::path work = fresh_dir("st-dense-chain");
  StSpec spec;
  spec.dense = dense_weights(16, kHidden, false);
  spec.dense2 = dense_weights(8, 16, false);
  spec.normalize = true;
  const fs::path model = make_st_folder(work / "model", spec);
  json modules = json::parse(read_file(model / "modules.json"));
  for (int k : {2, 3}) {
    modules[k]["type"] = "sentence_transformers.base.modules.dense.Dense";
    json c = json::parse(read_file(model / modules[k]["path"].get<std::string>() / "config.json"));
    c["module_input_name"] = "sentence_embedding";
    write_json_file(model / modules[k]["path"].get<std::string>() / "config.json", c);
  }
  write_json_file(model / "modules.json", modules);
  const auto layout = ddp_embed::read_model_folder_layout(model.string());
  ASSERT_EQ(layout.dense.size(), 2u);
  EXPECT_FALSE(layout.dense[0].bias);
  EXPECT_EQ(layout.dense[1].in_features, 16);
  const auto expected = each_golden([&](const GoldenText& g) { return unit(project(*spec.dense2, project(*spec.dense, g.mean))); });
  expect_rows_near(encode(model, work), expected, 1e-5, "unit(W2 W1 mean)");

  // Saved by embed-train: 2_Dense and 3_Dense, no biases, Normalize after them, the same embeddings.
  auto loaded = ddp_embed::load_model_folder(model.string());
  ddp_embed::ModelFolderOptions options;
  options.normalize = true;
  const fs::path saved = work / "saved";
  ddp_embed::save_model_folder(saved.string(), loaded.model, *loaded.tokenizer, options, json::object());
  const json written = json::parse(read_file(saved / "modules.json"));
  ASSERT_EQ(written.size(), 5u);
  EXPECT_EQ(written[3]["path"], "3_Dense");
  EXPECT_EQ(written[4]["path"], "4_Normalize");
  EXPECT_EQ(json::parse(read_file(saved / "3_Dense" / "config.json"))["bias"], false);
  expect_rows_near(encode(saved, work), expected, 1e-5, "saved unit(W2 W1 mean)");
}

// What the library reads of a folder, without running anything.
TEST(StFolder, LayoutAndLoadedModelSayWhatTheModulesAre) {
  const fs::path work = fresh_dir("st-layout");
  StSpec spec;
  spec.transformer_path = "0_Transformer";
  spec.dense = dense_weights(8, kHidden);
  spec.normalize = true;
  spec.sentence_bert = {{"max_seq_length", 40}, {"do_lower_case", true}};
  const fs::path model = make_st_folder(work / "model", spec);

  const auto layout = ddp_embed::read_model_folder_layout(model.string());
  EXPECT_TRUE(layout.sentence_transformers);
  EXPECT_EQ(fs::path(layout.transformer_dir), model / "0_Transformer");
  EXPECT_EQ(layout.encoder.bert.hidden_size, kHidden);
  EXPECT_EQ(layout.encoder.bert.max_position, 128);
  ASSERT_TRUE(layout.pooling.has_value());
  EXPECT_EQ(*layout.pooling, ddp_embed::Pooling::Mean);
  ASSERT_EQ(layout.dense.size(), 1u);
  EXPECT_EQ(fs::path(layout.dense[0].dir), model / "2_Dense");
  EXPECT_EQ(layout.dense[0].in_features, kHidden);
  EXPECT_EQ(layout.dense[0].out_features, 8);
  EXPECT_TRUE(layout.dense[0].bias);
  EXPECT_TRUE(layout.normalize);
  EXPECT_EQ(layout.max_seq_length.value_or(-1), 40);
  EXPECT_TRUE(layout.lower_case_text);

  const auto loaded = ddp_embed::load_model_folder(model.string());
  EXPECT_EQ(loaded.max_length, 40);
  EXPECT_TRUE(loaded.normalize);
  EXPECT_EQ(loaded.model->embedding_dim(), 8);
  EXPECT_EQ(loaded.model->pooling(), ddp_embed::Pooling::Mean);
  // The Dense weights, exactly.
  const auto w = loaded.model->dense[0]->weight.contiguous();
  const float* p = w.data_ptr<float>();
  for (size_t i = 0; i < spec.dense->weight.size(); ++i) ASSERT_EQ(p[i], spec.dense->weight[i]) << i;
  // --pooling overrides the Pooling module.
  EXPECT_EQ(ddp_embed::load_model_folder(model.string(), ddp_embed::Pooling::Cls).model->pooling(),
            ddp_embed::Pooling::Cls);

  // A plain Hugging Face folder: cls, no projection, no normalization; its tokenizer's limit.
  const fs::path hf = work / "hf";
  fs::create_directories(hf);
  for (const char* f : {"config.json", "model.safetensors", "vocab.txt"})
    fs::copy_file(model / "0_Transformer" / f, hf / f);
  write_json_file(hf / "tokenizer_config.json", {{"do_lower_case", true}, {"model_max_length", 100}});
  const auto plain = ddp_embed::read_model_folder_layout(hf.string());
  EXPECT_FALSE(plain.sentence_transformers);
  EXPECT_FALSE(plain.pooling.has_value());
  EXPECT_TRUE(plain.dense.empty());
  EXPECT_FALSE(plain.normalize);
  EXPECT_EQ(ddp_embed::folder_max_length(plain), 100);
  const auto plain_loaded = ddp_embed::load_model_folder(hf.string());
  EXPECT_EQ(plain_loaded.model->pooling(), ddp_embed::Pooling::Cls);
  EXPECT_EQ(plain_loaded.model->embedding_dim(), kHidden);
  EXPECT_FALSE(plain_loaded.normalize);
}

// sentence-transformers 6.x writes other type strings, "pooling_mode" as a name,
// "embedding_dimension", and max_seq_length into tokenizer_config.json's model_max_length.
TEST(StFolder, ReadsTheSpellingsOfSentenceTransformers6) {
  const fs::path work = fresh_dir("st-v6");
  StSpec spec;
  spec.tokenizer_config["model_max_length"] = 20;
  spec.sentence_bert = {{"transformer_task", "feature-extraction"}, {"module_output_name", "token_embeddings"}};
  spec.normalize = true;
  const fs::path model = make_st_folder(work / "model", spec);
  write_json_file(model / "modules.json",
                  json::array({{{"idx", 0}, {"name", "0"}, {"path", ""},
                                {"type", "sentence_transformers.base.modules.transformer.Transformer"}},
                               {{"idx", 1}, {"name", "1"}, {"path", "1_Pooling"},
                                {"type", "sentence_transformers.sentence_transformer.modules.pooling.Pooling"}},
                               {{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"},
                                {"type", "sentence_transformers.base.modules.normalize.Normalize"}}}));
  write_json_file(model / "1_Pooling" / "config.json",
                  {{"embedding_dimension", kHidden}, {"pooling_mode", "cls"}, {"include_prompt", true}});
  write_json_file(model / "2_Normalize" / "config.json",
                  {{"module_input_name", "sentence_embedding"}, {"module_output_name", "sentence_embedding"}});

  const auto layout = ddp_embed::read_model_folder_layout(model.string());
  ASSERT_TRUE(layout.pooling.has_value());
  EXPECT_EQ(*layout.pooling, ddp_embed::Pooling::Cls);
  EXPECT_TRUE(layout.normalize);
  EXPECT_FALSE(layout.max_seq_length.has_value());
  EXPECT_EQ(ddp_embed::folder_max_length(layout), 20);
  // Long texts are cut at 20 tokens, so compare the short ones with Hugging Face's cls.
  const Rows rows = encode(model, work);
  const auto golden = golden_texts();
  ASSERT_EQ(rows.size(), golden.size());
  int compared = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (golden[r].ids.size() > 20) continue;
    const auto want = unit(golden[r].cls);
    for (size_t k = 0; k < want.size(); ++k) EXPECT_NEAR(rows[r][k], want[k], 1e-5) << "row " << r;
    ++compared;
  }
  EXPECT_GE(compared, 10);
}

// ---- what is refused ----------------------------------------------------------------------------

TEST(StFolder, RefusesModulesItDoesNotImplementNamingTheFileAndTheKey) {
  const fs::path work = fresh_dir("st-refused");
  StSpec spec;
  spec.dense = dense_weights(8, kHidden);
  auto read = [](const fs::path& dir) { return error_of([&] { ddp_embed::read_model_folder_layout(dir.string()); }); };
  auto modules_with = [](json modules, size_t at, const json& entry) {
    modules.insert(modules.begin() + std::ptrdiff_t(at), entry);
    return modules;
  };

  {  // A module type outside the four.
    const fs::path m = make_st_folder(work / "layernorm", spec);
    const json modules = json::parse(read_file(m / "modules.json"));
    write_json_file(m / "modules.json", modules_with(modules, 2, module_entry(2, "2_LayerNorm", "LayerNorm")));
    const std::string e = read(m);
    EXPECT_CONTAINS(e, (m / "modules.json").string());
    EXPECT_CONTAINS(e, "sentence_transformers.models.LayerNorm");
  }
  {  // Normalize before the Dense layer would compute something else.
    StSpec s = spec;
    s.normalize = true;
    const fs::path m = make_st_folder(work / "order", s);
    json modules = json::parse(read_file(m / "modules.json"));
    std::swap(modules[2], modules[3]);
    write_json_file(m / "modules.json", modules);
    const std::string e = read(m);
    EXPECT_CONTAINS(e, (m / "modules.json").string());
    EXPECT_CONTAINS(e, "Transformer, Pooling, Normalize, Dense");
  }
  {  // A module path leading out of the folder.
    const fs::path m = make_st_folder(work / "escape", spec);
    json modules = json::parse(read_file(m / "modules.json"));
    modules[2]["path"] = "../2_Dense";
    write_json_file(m / "modules.json", modules);
    EXPECT_CONTAINS(read(m), "\"../2_Dense\" leads outside the model folder");
  }
  for (const char* mode : {"max_tokens", "mean_sqrt_len_tokens", "weightedmean_tokens"}) {
    StSpec s = spec;
    s.pooling = mode;
    const fs::path m = make_st_folder(work / (std::string("pool-") + mode), s);
    EXPECT_EQ(read(m), (m / "1_Pooling" / "config.json").string() + ": pooling mode " + mode +
                           " is not implemented (embed-train has cls, mean and lasttoken)");
  }
  {  // Two modes at once are concatenated by sentence-transformers.
    const fs::path m = make_st_folder(work / "pool-two", spec);
    json pooling = legacy_pooling_config("cls_token");
    pooling["pooling_mode_mean_tokens"] = true;
    write_json_file(m / "1_Pooling" / "config.json", pooling);
    EXPECT_CONTAINS(read(m), "pooling modes cls_token + mean_tokens together");
  }
  {  // 6.x's spelling of an unimplemented mode.
    const fs::path m = make_st_folder(work / "pool-v6", spec);
    write_json_file(m / "1_Pooling" / "config.json", {{"embedding_dimension", kHidden}, {"pooling_mode", "max"}});
    EXPECT_CONTAINS(read(m), "1_Pooling/config.json: pooling mode max is not implemented");
  }
  const std::string dense_config = "2_Dense/config.json";
  {  // No activation_function: sentence-transformers' Dense applies Tanh.
    const fs::path m = make_st_folder(work / "tanh", spec);
    json c = json::parse(read_file(m / dense_config));
    c.erase("activation_function");
    write_json_file(m / dense_config, c);
    const std::string e = read(m);
    EXPECT_CONTAINS(e, (m / dense_config).string() + ": activation_function absent");
    EXPECT_CONTAINS(e, "Tanh");
  }
  {
    const fs::path m = make_st_folder(work / "relu", spec);
    write_dense(m / "2_Dense", *spec.dense, {{"activation_function", "torch.nn.modules.activation.ReLU"}});
    EXPECT_CONTAINS(read(m), (m / dense_config).string() +
                                 ": activation_function torch.nn.modules.activation.ReLU is not implemented");
  }
  {  // in_features must be the hidden size.
    const fs::path m = make_st_folder(work / "in-features", spec);
    write_dense(m / "2_Dense", dense_weights(8, 64));
    EXPECT_EQ(read(m), (m / dense_config).string() +
                           ": in_features 64 does not match the encoder's hidden_size 32 (the Dense layer takes the "
                           "pooled embedding)");
  }
  {  // A second layer must take what the first gives.
    StSpec s = spec;
    s.dense2 = dense_weights(4, 6);
    const fs::path m = make_st_folder(work / "chain-in-features", s);
    EXPECT_EQ(read(m), (m / "3_Dense" / "config.json").string() +
                           ": in_features 6 does not match the out_features 8 of the Dense layer before");
  }
  {  // sentence-transformers 6's Dense on another feature than the sentence embedding.
    const fs::path m = make_st_folder(work / "input-name", spec);
    write_dense(m / "2_Dense", *spec.dense, {{"module_input_name", "token_embeddings"}});
    EXPECT_CONTAINS(read(m), (m / dense_config).string() + ": module_input_name \"token_embeddings\" is not implemented");
  }
  {  // bias false in the config, a bias in the file: damage, not a quiet drop.
    const fs::path m = make_st_folder(work / "no-bias", spec);
    write_dense(m / "2_Dense", *spec.dense, {{"bias", false}});
    const std::string e = error_of([&] { ddp_embed::load_model_folder(m.string()); });
    EXPECT_CONTAINS(e, (m / "2_Dense" / "model.safetensors").string());
    EXPECT_CONTAINS(e, "linear.bias");
  }
  {  // The config promises [8, 32]; the file holds [8, 16].
    const fs::path m = make_st_folder(work / "weight-shape", spec);
    const DenseWeights small = dense_weights(8, 16);
    write_dense(m / "2_Dense", small, {{"in_features", kHidden}});
    EXPECT_EQ(read(m), "");  // the shapes are the weights' business
    const std::string e = error_of([&] { ddp_embed::load_model_folder(m.string()); });
    EXPECT_CONTAINS(e, (m / "2_Dense" / "model.safetensors").string());
    EXPECT_CONTAINS(e, "linear.weight");
    EXPECT_CONTAINS(e, (m / dense_config).string() + ": in_features 32, out_features 8");
  }
  {  // Pickled weights only.
    const fs::path m = make_st_folder(work / "pickled", spec);
    fs::remove(m / "model.safetensors");
    std::ofstream(m / "pytorch_model.bin") << "not read";
    const std::string e = read(m);
    EXPECT_CONTAINS(e, (m / "pytorch_model.bin").string() + ": embed-train reads safetensors only");
    EXPECT_CONTAINS(e, "SentenceTransformer('" + m.string() + "').save('" + m.string() + "', safe_serialization=True)");
  }
  {  // Neither kind of folder.
    fs::create_directories(work / "readme-only");
    std::ofstream(work / "readme-only" / "README.md") << "# a model card\n";
    const std::string e = read(work / "readme-only");
    EXPECT_CONTAINS(e, (work / "readme-only").string() + ": not a model folder");
    EXPECT_CONTAINS(e, "modules.json");
    EXPECT_CONTAINS(e, "config.json");
  }
}

// ---- tokenize -----------------------------------------------------------------------------------

TEST(StFolder, TokenizeWritesTheIdsEncodeFeedsTheModel) {
  const fs::path work = fresh_dir("st-tokenize");
  const fs::path model = make_st_folder(work / "model");
  const auto golden = golden_texts();
  const auto ids = tokenize(model, kGolden / "texts.txt", work);
  ASSERT_EQ(ids.size(), golden.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(ids[i], golden[i].ids) << golden[i].text;

  // max_seq_length 6: the first 5 ids, then [SEP] (102).
  StSpec spec;
  spec.sentence_bert["max_seq_length"] = 6;
  const fs::path short_model = make_st_folder(work / "short", spec);
  const auto cut = tokenize(short_model, kGolden / "texts.txt", work);
  ASSERT_EQ(cut.size(), golden.size());
  for (size_t i = 0; i < cut.size(); ++i) {
    std::vector<int32_t> want = golden[i].ids;
    if (want.size() > 6) {
      want.resize(5);
      want.push_back(102);
    }
    EXPECT_EQ(cut[i], want) << golden[i].text;
  }
}

// sentence_bert_config.json's do_lower_case: the text is lower-cased before a cased
// tokenizer sees it. On ASCII texts that gives the uncased tokenizer's ids (with accents,
// an uncased BERT tokenizer also strips them; a lower-cased text keeps them).
TEST(StFolder, DoLowerCaseLowerCasesTheTextBeforeTheTokenizer) {
  const fs::path work = fresh_dir("st-lower");
  std::map<bool, std::vector<std::vector<int32_t>>> want;  // tokens.jsonl's ids by do_lower_case
  std::ofstream input(work / "ascii.jsonl");
  std::ifstream in(kGolden / "bert-tiny-a" / "tokens.jsonl");
  for (std::string line; std::getline(in, line);) {
    const json j = json::parse(line);
    const std::string text = j["text"];
    if (std::any_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) >= 0x80; })) continue;
    want[j["do_lower_case"].get<bool>()].push_back(j["input_ids"].get<std::vector<int32_t>>());
    if (j["do_lower_case"].get<bool>()) input << json{{"text", text}}.dump() << "\n";
  }
  input.close();
  ASSERT_GE(want[true].size(), 10u);
  ASSERT_NE(want[true], want[false]);  // the texts have capitals that matter

  StSpec cased;
  cased.tokenizer_config["do_lower_case"] = false;
  EXPECT_EQ(tokenize(make_st_folder(work / "cased", cased), work / "ascii.jsonl", work), want[false]);
  StSpec lowered = cased;
  lowered.sentence_bert["do_lower_case"] = true;
  EXPECT_EQ(tokenize(make_st_folder(work / "lowered", lowered), work / "ascii.jsonl", work), want[true]);
}

// ---- model.init ---------------------------------------------------------------------------------

// tiny_config starting from `init` for two steps, model.pooling left to "auto".
json init_config(const fs::path& out, const fs::path& init, int projection_dim) {
  json cfg = tiny_config(out);
  cfg["model"].erase("pooling");
  cfg["model"]["init"] = init.string();
  cfg["model"]["projection_dim"] = projection_dim;
  cfg["train"]["max_steps"] = 2;
  return cfg;
}

std::vector<float> tensor_of(const fs::path& file, const std::string& name) { return weights(file).at(name); }

TEST(StFolder, ModelInitKeepsPoolingDenseNormalizeAndLowerCasing) {
  const fs::path work = fresh_dir("st-init");
  StSpec spec;
  spec.transformer_path = "0_Transformer";
  spec.dense = dense_weights(8, kHidden);
  spec.normalize = true;
  spec.sentence_bert["do_lower_case"] = true;
  const fs::path init = make_st_folder(work / "init", spec);
  const json cfg = init_config(work / "out", init, 8);
  const RunResult r = train(work, cfg, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path final_dir = work / "out" / "final";

  const json modules = json::parse(read_file(final_dir / "modules.json"));
  ASSERT_EQ(modules.size(), 4u) << modules.dump();
  EXPECT_EQ(modules[2]["path"], "2_Dense");
  EXPECT_EQ(modules[3], (json{{"idx", 3}, {"name", "3"}, {"path", "3_Normalize"},
                              {"type", "sentence_transformers.models.Normalize"}}));
  const json pooling = json::parse(read_file(final_dir / "1_Pooling" / "config.json"));
  EXPECT_EQ(pooling["pooling_mode_mean_tokens"], true);  // the init folder's, through "auto"
  EXPECT_EQ(pooling["pooling_mode_cls_token"], false);
  const json sbert = json::parse(read_file(final_dir / "sentence_bert_config.json"));
  EXPECT_EQ(sbert["do_lower_case"], true);
  const json info = json::parse(read_file(final_dir / "embed_train.json"));
  EXPECT_EQ(info["normalize"], true);
  EXPECT_EQ(info["pooling"], "mean");
  EXPECT_EQ(info["projection_dim"], 8);
  EXPECT_EQ(info["tokenizer"]["lower_case_text"], true);

  // The Dense layer was loaded, then trained: two Adam steps of lr 1e-3 move each weight by
  // at most about 2e-3, while a new layer would differ from it by ~0.5.
  const auto before = tensor_of(init / "2_Dense" / "model.safetensors", "linear.weight");
  const auto after = tensor_of(final_dir / "2_Dense" / "model.safetensors", "linear.weight");
  ASSERT_EQ(before.size(), after.size());
  double largest = 0;
  for (size_t i = 0; i < before.size(); ++i) largest = std::max(largest, double(std::fabs(after[i] - before[i])));
  EXPECT_GT(largest, 0.0) << "the Dense layer was not trained";
  EXPECT_LE(largest, 3e-3) << "the Dense layer was not loaded";

  // The written folder reads back with Normalize: unit vectors.
  const auto layout = ddp_embed::read_model_folder_layout(final_dir.string());
  EXPECT_TRUE(layout.normalize);
  EXPECT_TRUE(layout.lower_case_text);
  for (const auto& row : encode(final_dir, work)) {
    EXPECT_EQ(row.size(), 8u);
    EXPECT_NEAR(vector_norm(row), 1.0, 1e-5);
  }
}

TEST(StFolder, NormalizeWithoutDenseBecomesModuleTwoAndAutoPoolingFollowsTheFolder) {
  const fs::path work = fresh_dir("st-init-cls");
  StSpec spec;
  spec.pooling = "cls_token";
  spec.normalize = true;
  const fs::path init = make_st_folder(work / "init", spec);
  const RunResult r = train(work, init_config(work / "out", init, 0), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path final_dir = work / "out" / "final";
  const json modules = json::parse(read_file(final_dir / "modules.json"));
  ASSERT_EQ(modules.size(), 3u) << modules.dump();
  EXPECT_EQ(modules[2], (json{{"idx", 2}, {"name", "2"}, {"path", "2_Normalize"},
                              {"type", "sentence_transformers.models.Normalize"}}));
  EXPECT_FALSE(fs::exists(final_dir / "2_Dense"));
  EXPECT_EQ(json::parse(read_file(final_dir / "1_Pooling" / "config.json"))["pooling_mode_cls_token"], true);
  EXPECT_EQ(json::parse(read_file(final_dir / "sentence_bert_config.json"))["do_lower_case"], false);
}

TEST(StFolder, AutoPoolingOfAPlainHuggingFaceFolderIsCls) {
  const fs::path work = fresh_dir("st-init-hf");
  const fs::path hf = work / "hf";
  fs::create_directories(hf);
  const fs::path golden = golden::golden_model_dir("bert-tiny-a");
  fs::copy_file(golden / "config.json", hf / "config.json");
  fs::copy_file(golden / "model.safetensors", hf / "model.safetensors");
  fs::copy_file(kGolden / "vocab.txt", hf / "vocab.txt");
  const RunResult r = train(work, init_config(work / "out", hf, 16), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path final_dir = work / "out" / "final";
  EXPECT_EQ(json::parse(read_file(final_dir / "1_Pooling" / "config.json"))["pooling_mode_cls_token"], true);
  EXPECT_EQ(json::parse(read_file(final_dir / "modules.json")).size(), 3u);  // no Normalize
  EXPECT_EQ(json::parse(read_file(final_dir / "embed_train.json"))["normalize"], false);
}

TEST(StFolder, ProjectionDimDecidesTheDenseLayer) {
  const fs::path work = fresh_dir("st-init-projection");
  StSpec with_dense;
  with_dense.dense = dense_weights(8, kHidden);
  const fs::path init = make_st_folder(work / "with-dense", with_dense);
  const std::string dense_config = (init / "2_Dense" / "config.json").string();

  // 0 would drop the folder's Dense layer.
  fs::create_directories(work / "zero");
  RunResult r = train(work / "zero", init_config(work / "zero" / "out", init, 0), 1);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output, dense_config);
  EXPECT_CONTAINS(r.output, "set model.projection_dim=8 to keep it");
  EXPECT_FALSE(fs::exists(work / "zero" / "out" / "final"));

  // Another size would replace it.
  fs::create_directories(work / "other");
  r = train(work / "other", init_config(work / "other" / "out", init, 16), 1);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_CONTAINS(r.output,
                  dense_config + ": model.init's Dense layer has out_features 8 but model.projection_dim is 16");
  EXPECT_FALSE(fs::exists(work / "other" / "out" / "final"));

  // No Dense in the folder: a new projection of the configured size.
  const fs::path without = make_st_folder(work / "without-dense");
  fs::create_directories(work / "new");
  r = train(work / "new", init_config(work / "new" / "out", without, 16), 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json dense = json::parse(read_file(work / "new" / "out" / "final" / "2_Dense" / "config.json"));
  EXPECT_EQ(dense["in_features"], kHidden);
  EXPECT_EQ(dense["out_features"], 16);
}

}  // namespace
