// BERT against Hugging Face transformers (golden outputs of the tiny models), parameter
// names, initialization, weight files, gradients and the sentence embedder.
#include "../core/golden_fixture.h"
#include "../core/tolerance.h"
#include "model/bert.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/embedder.h"
#include "config/config.h"
#include "model/loss.h"
#include "model/weights.h"

#include "loss_support.h"
#include "one_thread.h"
#include "../core/temp_dir.h"

namespace fs = std::filesystem;
using namespace ddp_embed;

namespace {

const std::string kGolden = std::string(DDP_EMBED_SOURCE_DIR) + "/tests/fixtures/golden/";

struct GoldenText {
  std::vector<int64_t> ids;
  std::vector<float> cls, mean;
};

std::vector<GoldenText> read_expected(const std::string& model) {
  std::ifstream in(kGolden + model + "/expected.jsonl");
  EXPECT_TRUE(in) << "missing fixture " << kGolden + model;
  std::vector<GoldenText> out;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back({j.at("input_ids").get<std::vector<int64_t>>(), j.at("cls").get<std::vector<float>>(),
                   j.at("mean").get<std::vector<float>>()});
  }
  return out;
}

BertModel load_golden(const std::string& model, LoadReport* report = nullptr) {
  const std::string dir = golden::golden_model_dir(model);
  const BertConfig config = bert_config_from_hf_json(dir + "/config.json");
  BertModel bert(config);
  const LoadReport r = load_module(*bert, dir + "/model.safetensors");
  if (report) *report = r;
  bert->eval();
  return bert;
}

// Pads `texts` (right, with 0) to `length` (at least the longest).
EncoderInput pad(const std::vector<GoldenText>& texts, int64_t length = 0) {
  for (const auto& t : texts) length = std::max<int64_t>(length, t.ids.size());
  at::Tensor ids = at::zeros({static_cast<int64_t>(texts.size()), length}, at::kLong);
  at::Tensor mask = at::zeros_like(ids);
  for (size_t i = 0; i < texts.size(); ++i)
    for (size_t k = 0; k < texts[i].ids.size(); ++k) {
      ids[i][k] = texts[i].ids[k];
      mask[i][k] = 1;
    }
  return {ids, mask};
}

double max_abs_diff(const at::Tensor& got, const std::vector<std::vector<float>>& want) {
  std::vector<float> flat;
  for (const auto& row : want) flat.insert(flat.end(), row.begin(), row.end());
  const at::Tensor w = at::tensor(flat).view({static_cast<int64_t>(want.size()), -1});
  EXPECT_EQ(got.sizes(), w.sizes());
  return (got.detach() - w).abs().max().item<double>();
}

BertConfig small_config() {
  BertConfig c;
  c.vocab_size = 300;
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 128;
  c.max_position = 40;
  return c;
}

using ddp_embed::testing::TempDir;

}  // namespace

// ---- parity with transformers ---------------------------------------------------------

class Bert : public ::testing::TestWithParam<std::string> {};

TEST_P(Bert, OnePaddedBatchMatchesTransformers) {
  const auto texts = read_expected(GetParam());
  ASSERT_FALSE(texts.empty());
  BertModel bert = load_golden(GetParam());
  at::NoGradGuard no_grad;
  const EncoderInput batch = pad(texts);
  const at::Tensor hidden = bert(batch.ids, batch.mask);
  std::vector<std::vector<float>> cls, mean;
  for (const auto& t : texts) {
    cls.push_back(t.cls);
    mean.push_back(t.mean);
  }
  const double cls_diff = max_abs_diff(pool(hidden, batch.mask, Pooling::Cls), cls);
  const double mean_diff = max_abs_diff(pool(hidden, batch.mask, Pooling::Mean), mean);
  std::cout << GetParam() << ": max abs diff cls " << cls_diff << " mean " << mean_diff << "\n";
  RecordProperty("cls_max_abs_diff", std::to_string(cls_diff));
  RecordProperty("mean_max_abs_diff", std::to_string(mean_diff));
  EXPECT_LT(cls_diff, 1e-4);
  EXPECT_LT(mean_diff, 1e-4);
}

TEST_P(Bert, EachTextAloneAndOverPaddedMatches) {
  const auto texts = read_expected(GetParam());
  BertModel bert = load_golden(GetParam());
  at::NoGradGuard no_grad;
  double worst = 0;
  for (const auto& t : texts) {
    for (int64_t extra : {0, 9}) {  // no padding at all, and 9 padding positions
      const EncoderInput one = pad({t}, static_cast<int64_t>(t.ids.size()) + extra);
      const at::Tensor hidden = bert(one.ids, one.mask);
      worst = std::max({worst, max_abs_diff(pool(hidden, one.mask, Pooling::Cls), {t.cls}),
                        max_abs_diff(pool(hidden, one.mask, Pooling::Mean), {t.mean})});
    }
  }
  std::cout << GetParam() << ": texts one at a time, max abs diff " << worst << "\n";
  EXPECT_LT(worst, 1e-4);
}

TEST_P(Bert, ParameterNamesAndShapesAreTheCheckpointsOwn) {
  LoadReport report;
  BertModel bert = load_golden(GetParam(), &report);
  const auto file = read_safetensors(golden::golden_model_dir(GetParam()) + "/model.safetensors");
  std::set<std::string> file_names;
  for (const auto& t : file.tensors())
    if (t.name.rfind("pooler.", 0) != 0) file_names.insert(t.name);
  std::set<std::string> ours;
  for (const auto& p : bert->named_parameters()) {
    ours.insert(p.key());
    const auto* t = file.find(p.key());
    ASSERT_NE(t, nullptr) << p.key();
    EXPECT_EQ(at::IntArrayRef(t->shape), p.value().sizes()) << p.key();
  }
  EXPECT_EQ(ours, file_names);
  EXPECT_EQ(bert->named_buffers().size(), 0u);
  // The pooler is not ours: loading says it was left unused.
  EXPECT_EQ(report.unused, (std::vector<std::string>{"pooler.dense.bias", "pooler.dense.weight"}));
  EXPECT_EQ(report.loaded.size(), ours.size());
}

INSTANTIATE_TEST_SUITE_P(Golden, Bert, ::testing::Values("bert-tiny-a", "bert-tiny-b"));

TEST_P(Bert, ForwardClsIsTheFirstPositionOfForward) {
  const auto texts = read_expected(GetParam());
  BertModel bert = load_golden(GetParam());
  at::NoGradGuard no_grad;
  const EncoderInput batch = pad(texts);
  std::vector<std::vector<float>> cls;
  for (const auto& t : texts) cls.push_back(t.cls);
  const at::Tensor fast = bert->forward_cls(batch.ids, batch.mask);
  EXPECT_LT(max_abs_diff(fast, cls), 1e-4);
  EXPECT_LT((fast - bert(batch.ids, batch.mask).select(1, 0)).abs().max().item<double>(), 1e-5);
}

// ---- config ------------------------------------------------------------------------------

TEST(Bert, ReadsHuggingFaceConfigAndWritesItBack) {
  const BertConfig c = bert_config_from_hf_json(kGolden + "bert-tiny-b/model/config.json");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.intermediate_size, 128);
  EXPECT_EQ(c.max_position, 64);
  EXPECT_EQ(c.vocab_size, 30522);
  EXPECT_EQ(c.hidden_dropout, 0.0);
  const nlohmann::json j = bert_config_to_hf_json(c);
  EXPECT_EQ(j.at("num_hidden_layers"), 3);
  EXPECT_EQ(j.at("hidden_act"), "gelu");
  const BertConfig back = bert_config_from_hf_json(j, "round trip");
  EXPECT_EQ(back.hidden_size, c.hidden_size);
  EXPECT_EQ(back.layer_norm_eps, c.layer_norm_eps);
  EXPECT_EQ(back.max_position, c.max_position);
}

TEST(Bert, ConfigRefusesWhatIsNotImplemented) {
  nlohmann::json j = bert_config_to_hf_json(small_config());
  j["hidden_act"] = "gelu_new";
  EXPECT_THROW(bert_config_from_hf_json(j, "x"), ModelError);
  j = bert_config_to_hf_json(small_config());
  j["num_attention_heads"] = 5;
  EXPECT_THROW(bert_config_from_hf_json(j, "x"), ModelError);
  j = bert_config_to_hf_json(small_config());
  j["hidden_size"] = "64";
  try {
    bert_config_from_hf_json(j, "cfg.json");
    ADD_FAILURE();
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: hidden_size"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_choice<Pooling>("max", "pooling"), ConfigError);
}

// ---- initialization ---------------------------------------------------------------------

TEST(Bert, InitStatisticsPaddingRowAndLayerNorm) {
  BertConfig c = small_config();
  c.vocab_size = 2000;
  at::manual_seed(0);
  BertModel bert(c);
  for (const auto& p : bert->named_parameters()) {
    const std::string& name = p.key();
    const at::Tensor& t = p.value();
    if (name.find("LayerNorm.weight") != std::string::npos) {
      EXPECT_TRUE(t.eq(1).all().item<bool>()) << name;
    } else if (name.find("bias") != std::string::npos) {
      EXPECT_TRUE(t.eq(0).all().item<bool>()) << name;
    } else {
      at::Tensor v = t;
      if (name == "embeddings.word_embeddings.weight") {
        EXPECT_TRUE(t[c.pad_token_id].eq(0).all().item<bool>()) << "padding row";
        v = t.slice(0, 1);
      }
      EXPECT_NEAR(v.std().item<double>(), 0.02, 0.02 * (v.numel() > 1000 ? 0.05 : 0.3)) << name;
      EXPECT_NEAR(v.mean().item<double>(), 0.0, 0.004) << name;
    }
  }
}

TEST(Bert, InitSameSeedSameWeightsOtherSeedOtherWeights) {
  at::manual_seed(42);
  SentenceEmbedder a(small_config(), 16, Pooling::Cls);
  at::manual_seed(42);
  SentenceEmbedder b(small_config(), 16, Pooling::Cls);
  at::manual_seed(43);
  SentenceEmbedder other(small_config(), 16, Pooling::Cls);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), po = other->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) {
    EXPECT_TRUE(at::equal(p.value(), pb[p.key()])) << p.key();
    if (p.value().std().item<double>() > 0) {
      EXPECT_FALSE(at::equal(p.value(), po[p.key()])) << p.key();
    }
  }
}

TEST(Bert, SameInitialWeightsAsThePythonReference) {
  // Numbers printed by a plain PyTorch reference of the same model (PyTorch 1.13; BERT's
  // modules and initialization in transformers' order, the pooler drawn and unused,
  // CLS -> Linear(hidden, 16)): torch.manual_seed(42), the model for this config;
  // parameter sum and element [1].
  at::manual_seed(42);
  SentenceEmbedder model(small_config(), 16, Pooling::Cls);
  const auto params = model->named_parameters();
  const struct {
    const char* name;
    double sum, second;
  } expected[] = {
      {"bert.embeddings.position_embeddings.weight", 2.7323402582e-01, 3.12324986e-02},
      {"bert.embeddings.word_embeddings.weight", 1.5688572951e+00, 0.0},
      {"bert.encoder.layer.0.output.dense.weight", -1.3919670392e+00, -5.36129922e-02},
      {"bert.encoder.layer.1.attention.self.value.weight", 1.3068863976e+00, -1.94481127e-02},
      {"projection.weight", -2.1192984581e+00, -2.74589509e-02},
      {"projection.bias", -6.1548516154e-02, 5.18136024e-02},
  };
  // How close: the reference printed its numbers on an AVX2/AVX-512 machine. ATen's plain
  // path (a CPU without AVX2, or ATEN_CPU_CAPABILITY=default) draws the same numbers but
  // turns them into normals with scalar code, whose log, square root and cosine round
  // otherwise: a value std·r·cos θ (r = √(−2 ln u₁) ≤ 5.8) is off by at most about 11 ulps
  // of std·r in each transform, so the two are within 2·11·5.8 < 128 ulps of std (0.02,
  // the init's). The sum of n values: errors of either sign, within λ√n times that
  // (tolerance::kLambda). Another draw order, or another distribution, moves an element by
  // about std and a sum by std·√n, thousands of times more. (The projection's uniform
  // values are a scale and a shift of the draws: the same on every path.)
  const double per_value = 128 * tolerance::kFp32Unit * 0.02;
  for (const auto& e : expected) {
    const at::Tensor& t = params[e.name];
    const double sum_bound = tolerance::kLambda * std::sqrt(double(t.numel())) * per_value;
    tolerance::record(std::string(e.name) + " sum", std::fabs(t.to(at::kDouble).sum().item<double>() - e.sum), sum_bound);
    EXPECT_NEAR(t.to(at::kDouble).sum().item<double>(), e.sum, sum_bound) << e.name;
    EXPECT_NEAR(t.flatten()[1].item<double>(), e.second, per_value) << e.name;
  }
}

TEST(Bert, DropoutKeepsTheExpectationAndFollowsTheSeed) {
  const at::Tensor x = at::ones({1 << 20});
  at::manual_seed(9);
  const at::Tensor y = fast_dropout(x, 0.1, true);
  const double dropped = y.eq(0).to(at::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.1, 0.002);  // 1M Bernoulli(0.1): std 3e-4
  EXPECT_NEAR(y.to(at::kDouble).mean().item<double>(), 1.0, 0.003);
  EXPECT_NEAR(y.max().item<double>(), 1.0 / (1 - 3277.0 / 32768), 1e-6);  // p quantized to 1/32768
  at::manual_seed(9);
  EXPECT_TRUE(at::equal(fast_dropout(x, 0.1, true), y));
  EXPECT_FALSE(at::equal(fast_dropout(x, 0.1, true), y));
  EXPECT_TRUE(at::equal(fast_dropout(x, 0.1, false), x));
  EXPECT_TRUE(at::equal(fast_dropout(x, 0.0, true), x));
  // Odd sizes and other shapes; gradient is the mask.
  const at::Tensor z = at::randn({3, 5, 7}).requires_grad_(true);
  const at::Tensor out = fast_dropout(z, 0.5, true);
  out.sum().backward();
  EXPECT_TRUE(at::equal(z.grad().ne(0), out.ne(0)));
}

TEST(Bert, DropoutIsOnInTrainingOffInEvaluation) {
  const OneIntraOpThread one_thread;  // bit for bit (one_thread.h)
  BertConfig c = small_config();
  c.hidden_dropout = c.attention_dropout = 0.2;
  at::manual_seed(10);
  BertModel bert(c);
  const at::Tensor ids = at::randint(1, 300, {2, 9}, at::kLong), mask = at::ones({2, 9}, at::kLong);
  bert->train();
  at::manual_seed(11);
  const at::Tensor a = bert(ids, mask);
  at::manual_seed(11);
  EXPECT_TRUE(at::equal(bert(ids, mask), a)) << "same seed, same dropout masks";
  EXPECT_FALSE(at::equal(bert(ids, mask), a));
  bert->eval();
  EXPECT_TRUE(at::equal(bert(ids, mask), bert(ids, mask)));
}

// ---- weight files ------------------------------------------------------------------------

TEST(Bert, WeightsSaveLoadRoundTripIsBitIdentical) {
  TempDir dir;
  at::manual_seed(1);
  SentenceEmbedder a(small_config(), 16, Pooling::Mean);
  at::manual_seed(2);
  SentenceEmbedder b(small_config(), 16, Pooling::Mean);
  save_module(*a->bert, dir / "model.safetensors");
  save_module(*a->dense[0], dir / "dense.safetensors", "linear.");

  const auto file = read_safetensors(dir / "model.safetensors");
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.tensors().size(), a->bert->named_parameters().size());
  const auto dense = read_safetensors(dir / "dense.safetensors");
  ASSERT_EQ(dense.tensors().size(), 2u);
  EXPECT_EQ(dense.tensors()[0].name, "linear.bias");
  EXPECT_EQ(dense.tensors()[1].name, "linear.weight");

  const LoadReport r = load_module(*b->bert, dir / "model.safetensors");
  EXPECT_TRUE(r.unused.empty());
  load_module(*b->dense[0], dir / "dense.safetensors", LoadOptions{{"linear."}});
  const auto pb = b->named_parameters();
  for (const auto& p : a->named_parameters()) EXPECT_TRUE(at::equal(p.value(), pb[p.key()])) << p.key();
}

TEST(Bert, WeightsAcceptHalfPrecisionAndBertPrefix) {
  TempDir dir;
  at::manual_seed(3);
  BertModel a(small_config());
  NamedTensors half;
  for (const auto& p : a->named_parameters())
    half.emplace_back("bert." + p.key(), p.value().to(half.size() % 2 ? at::kHalf : at::kBFloat16));
  half.emplace_back("cls.predictions.bias", at::zeros({300}));
  save_tensors(dir / "half.safetensors", half);
  BertModel b(small_config());
  const LoadReport r = load_module(*b, dir / "half.safetensors");
  EXPECT_EQ(r.unused, std::vector<std::string>{"cls.predictions.bias"});
  for (const auto& [name, t] : half) {
    if (name.rfind("bert.", 0) != 0) continue;
    EXPECT_TRUE(at::equal(b->named_parameters()[name.substr(5)], t.to(at::kFloat))) << name;
  }
}

TEST(Bert, MissingOrMisshapenWeightsAreNamed) {
  TempDir dir;
  BertModel a(small_config());
  NamedTensors partial;
  for (const auto& p : a->named_parameters())
    if (p.key() != "encoder.layer.1.output.dense.weight") partial.emplace_back(p.key(), p.value());
  partial.emplace_back("encoder.layer.1.output.dense.weights", at::zeros({2}));
  save_tensors(dir / "partial.safetensors", partial);
  try {
    load_module(*a, dir / "partial.safetensors");
    ADD_FAILURE();
  } catch (const WeightsError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("missing tensor encoder.layer.1.output.dense.weight [64, 128]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("matched nothing: encoder.layer.1.output.dense.weights"), std::string::npos) << msg;
  }

  NamedTensors wrong;
  for (const auto& p : a->named_parameters())
    wrong.emplace_back(p.key(), p.key() == "embeddings.LayerNorm.bias" ? at::zeros({63}) : p.value());
  save_tensors(dir / "wrong.safetensors", wrong);
  const at::Tensor before = a->embeddings->word_embeddings->weight.clone();
  try {
    load_module(*a, dir / "wrong.safetensors");
    ADD_FAILURE();
  } catch (const WeightsError& e) {
    EXPECT_NE(std::string(e.what()).find("\"embeddings.LayerNorm.bias\" has shape [63]"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(at::equal(before, a->embeddings->word_embeddings->weight)) << "a failed load changed the model";
}

// ---- training path -----------------------------------------------------------------------

namespace {
EncoderInput random_batch(int64_t n, int64_t length, int64_t vocab) {
  at::Tensor ids = at::randint(1, vocab, {n, length}, at::kLong);
  at::Tensor mask = at::ones({n, length}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {  // varied lengths, at least 3 real tokens
    const int64_t real = 3 + (i * 7) % (length - 2);
    mask[i].slice(0, real).zero_();
    ids[i].slice(0, real).zero_();
  }
  return {ids, mask};
}
}  // namespace

TEST(Bert, EmbedderGradientReachesEveryParameter) {
  for (Pooling pooling : {Pooling::Cls, Pooling::Mean}) {
    at::manual_seed(4);
    SentenceEmbedder model(small_config(), 16, pooling);
    model->train();
    const auto q = random_batch(6, 12, 300), p = random_batch(6, 12, 300), n = random_batch(4, 10, 300);
    const at::Tensor loss = model->forward(q, p, n, LossConfig{}).loss;  // pairwise_sigmoid at 0.05
    loss.backward();
    for (const auto& param : model->named_parameters()) {
      ASSERT_TRUE(param.value().grad().defined()) << param.key();
      // token type 1 and the padding row of the words are never used: only their rows
      // stay zero, the tensors as a whole get gradient.
      EXPECT_GT(param.value().grad().abs().sum().item<double>(), 0) << param.key();
    }
    const auto& word = model->bert->embeddings->word_embeddings->weight.grad();
    EXPECT_TRUE(word[0].eq(0).all().item<bool>()) << "padding row must get no gradient";
  }
}

TEST(Bert, EmbedderClsShortcutGivesTheSameLossAndGradients) {
  // embed() with [CLS] pooling skips the last layer's other positions: same numbers as
  // pooling the full last hidden state.
  at::manual_seed(12);
  SentenceEmbedder model(small_config(), 16, Pooling::Cls);
  model->eval();
  const auto q = random_batch(4, 10, 300), p = random_batch(4, 11, 300);
  const at::Tensor fast = model->forward(q, p, {}, LossConfig{}).loss;
  fast.backward();
  std::map<std::string, at::Tensor> fast_grads;
  for (const auto& param : model->named_parameters()) {
    fast_grads[param.key()] = param.value().grad().clone();
    param.value().mutable_grad().zero_();
  }
  const auto full_embed = [&](const EncoderInput& in) {
    return model->dense[0](pool(model->bert(in.ids, in.mask), in.mask, Pooling::Cls));
  };
  const at::Tensor full = pair_loss(full_embed(q), full_embed(p), {}, {}, LossConfig{}).loss;
  full.backward();
  EXPECT_NEAR(fast.item<double>(), full.item<double>(), 1e-6);
  for (const auto& param : model->named_parameters()) {
    const at::Tensor& g = param.value().grad();
    EXPECT_LT((g - fast_grads[param.key()]).abs().max().item<double>(), 1e-6 * (1 + g.abs().max().item<double>()))
        << param.key();
  }
}

TEST(Bert, EmbedderForwardIsTheLossOfItsEmbeddings) {
  at::manual_seed(5);
  SentenceEmbedder model(small_config(), 16, Pooling::Mean);
  model->eval();  // no dropout: the same numbers however the batch is split
  const auto q = random_batch(5, 12, 300), p = random_batch(5, 12, 300), n = random_batch(3, 12, 300);
  LossConfig settings;
  settings.type = LossType::Infonce;
  settings.temperature = 0.1;
  at::NoGradGuard no_grad;
  const at::Tensor eq = model->embed(q), ep = model->embed(p), en = model->embed(n);

  // In-batch, with positives of the same and of a different padded length.
  const double want = loss_support::loss_against(eq, ep, 0, LossType::Infonce, 0.1).item<double>();
  EXPECT_NEAR(model->forward(q, p, {}, settings).loss.item<double>(), want, 1e-5);
  const EncoderInput p_longer{at::cat({p.ids, at::zeros({5, 3}, at::kLong)}, 1),
                              at::cat({p.mask, at::zeros({5, 3}, at::kLong)}, 1)};
  EXPECT_NEAR(model->forward(q, p_longer, {}, settings).loss.item<double>(), want, 1e-5);

  // Hard negatives join the candidates.
  const double with_neg = loss_support::loss_against(eq, at::cat({ep, en}), 0, LossType::Infonce, 0.1).item<double>();
  EXPECT_NEAR(model->forward(q, p, n, settings).loss.item<double>(), with_neg, 1e-5);

  // Cross-rank: as rank 1 of 2, with rank 0's candidates in front.
  const at::Tensor rank0 = at::randn({8, 16});
  CandidateExchange exchange{[&](const at::Tensor& local, const std::vector<int64_t>&) { return at::cat({rank0, local}); }, {}, 1};
  const double gathered =
      loss_support::loss_against(eq, at::cat({rank0, ep, en}), 8, LossType::Infonce, 0.1).item<double>();
  EXPECT_NEAR(model->forward(q, p, n, settings, exchange).loss.item<double>(), gathered, 1e-5);
}

TEST(Bert, EmbedderEncodeBatchIsEvalModeWithoutGradient) {
  const OneIntraOpThread one_thread;  // bit for bit (one_thread.h)
  at::manual_seed(6);
  BertConfig c = small_config();
  c.hidden_dropout = c.attention_dropout = 0.5;
  SentenceEmbedder model(c, 0, Pooling::Cls);
  model->train();
  const auto x = random_batch(3, 8, 300);
  const at::Tensor a = model->encode_batch(x), b = model->encode_batch(x);
  EXPECT_TRUE(model->is_training());
  EXPECT_FALSE(a.requires_grad());
  EXPECT_TRUE(at::equal(a, b)) << "dropout was on";
  EXPECT_EQ(a.sizes(), (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(model->embedding_dim(), 64);
}

// The feed-forward block's second half keeping only its input for backward: the output and
// the gradients of the input, the weight and the bias are autograd's composition's.
TEST(Bert, GeluThenLinearIsLinearOfGeluWithItsGradients) {
  at::manual_seed(3);
  const at::Tensor pre0 = at::randn({7, 16}), weight0 = at::randn({5, 16}), bias0 = at::randn({5});
  const at::Tensor upstream = at::randn({7, 5});
  const auto run = [&](bool lean) {
    at::Tensor pre = pre0.clone().requires_grad_(), weight = weight0.clone().requires_grad_(),
               bias = bias0.clone().requires_grad_();
    at::Tensor out = lean ? gelu_then_linear(pre, weight, bias) : at::linear(at::gelu(pre), weight, bias);
    out.backward(upstream);
    return std::vector<at::Tensor>{out.detach(), pre.grad(), weight.grad(), bias.grad()};
  };
  const auto plain = run(false), lean = run(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(at::allclose(plain[i], lean[i], 1e-5, 1e-6)) << i;
}
