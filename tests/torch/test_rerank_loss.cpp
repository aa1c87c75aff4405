// The reranker's losses (model/rerank_loss.h) held to sentence-transformers' own
// cross_encoder.losses classes on the same logits, values and gradients
// (scripts/python/rerank_loss_reference.py, run once per build folder in the project's
// .venv, in float64: differences are rounding, held to 1e-10 relative), to their formulas
// written out as loops, to the divisor's meaning across ranks, to their errors, and to
// asking the device for nothing that makes the host wait.
#include <ATen/record_function.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host_waits.h"

#include "../core/python_fixtures.h"
#include "compat/cuda_support.h"
#include "model/model_error.h"
#include "model/rerank_loss.h"
#include "model/weights.h"

using namespace ddp_embed;

// A namespace of its own: unity builds join this file with others that have names alike.
namespace rerank_loss_test {
namespace {

const auto kRerankF64 = at::TensorOptions().dtype(at::kDouble);

// ---- the reference cases ----------------------------------------------------------------

struct RerankReference {
  nlohmann::json cases;
  NamedTensors tensors;
  std::string error;  // Python failed: every test that reads it fails with its output
};

const RerankReference& rerank_reference() {
  static const RerankReference r = [] {
    RerankReference r;
    try {
      const auto dir = python_fixtures::made_by_script("rerank_loss_reference.py", "rerank-loss-reference");
      std::ifstream in(dir / "cases.json");
      r.cases = nlohmann::json::parse(in);
      r.tensors = load_tensors((dir / "cases.safetensors").string());
    } catch (const std::exception& e) {
      r.error = e.what();
    }
    return r;
  }();
  return r;
}

at::Tensor rerank_tensor(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  return {};
}

CrossEncoderLossConfig rerank_config(const nlohmann::json& c) {
  CrossEncoderLossConfig config;
  config.type = parse_choice<RerankLoss>(c.at("type").get<std::string>(), "type");
  config.activation = parse_choice<ScoreActivation>(c.at("activation").get<std::string>(), "activation");
  config.pos_weight = c.at("pos_weight").get<double>();
  config.scale = c.at("scale").get<double>();
  config.weighting = parse_choice<LambdaWeighting>(c.at("weighting").get<std::string>(), "weighting");
  config.k = c.at("k").get<int>();
  config.sigma = c.at("sigma").get<double>();
  config.eps = c.at("eps").get<double>();
  config.mu = c.at("mu").get<double>();
  config.reduction_log = parse_choice<LambdaLog>(c.at("reduction_log").get<std::string>(), "reduction_log");
  return config;
}

std::vector<int64_t> rerank_counts(const at::Tensor& valid) {
  const at::Tensor counts = valid.sum(1).to(at::kLong).contiguous();
  return std::vector<int64_t>(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
}

// The divisor that makes rerank_loss the class's mean on one process: its units.
double rerank_units(const RerankGroups& g, const CrossEncoderLossConfig& config) {
  if (config.type == RerankLoss::Lambda)
    return static_cast<double>(std::max<int64_t>(rerank_lambda_units(g, config).item<int64_t>(), 1));
  return static_cast<double>(rerank_loss_units(config.type, rerank_counts(g.valid)));
}

struct RerankOurs {
  at::Tensor loss, grad;
};

RerankOurs rerank_ours(RerankGroups g, const CrossEncoderLossConfig& config) {
  g.logits = g.logits.detach().clone().requires_grad_(true);
  const at::Tensor loss = rerank_loss(g, config, rerank_units(g, config));
  loss.backward();
  return {loss.detach(), g.logits.grad()};
}

TEST(RerankLoss, EqualsSentenceTransformersClassesInValueAndGradient) {
  const RerankReference& ref = rerank_reference();
  ASSERT_TRUE(ref.error.empty()) << ref.error;
  ASSERT_GE(ref.cases.size(), 25u);
  for (const auto& c : ref.cases) {
    const std::string name = c.at("name").get<std::string>();
    SCOPED_TRACE(name);
    const CrossEncoderLossConfig config = rerank_config(c);
    RerankGroups g;
    g.logits = rerank_tensor(ref.tensors, name + ".logits");
    ASSERT_TRUE(g.logits.defined());
    g.valid = rerank_tensor(ref.tensors, name + ".valid") > 0.5;
    g.labels = rerank_tensor(ref.tensors, name + ".labels");  // NaN past each row's last
    EXPECT_NO_THROW(check_rerank_labels(g, config.type));
    const RerankOurs ours = rerank_ours(g, config);
    const at::Tensor want_grad = rerank_tensor(ref.tensors, name + ".grad");
    const double want = rerank_tensor(ref.tensors, name + ".loss").item<double>();
    const double got = ours.loss.item<double>();
    EXPECT_EQ(ours.loss.scalar_type(), at::kDouble);
    EXPECT_NEAR(got, want, 1e-10 * std::fabs(want)) << "loss";
    ASSERT_EQ(ours.grad.sizes(), want_grad.sizes());
    const double grad_diff = (ours.grad - want_grad).abs().max().item<double>();
    EXPECT_LE(grad_diff, 1e-10 * want_grad.abs().max().item<double>()) << "gradient";
    EXPECT_EQ(ours.grad.masked_fill(g.valid, 0).abs().max().item<double>(), 0) << "gradient past a row's last";
    std::printf("%-36s loss %.9f  |loss diff| %.2g  max |grad diff| %.2g\n", name.c_str(), want, std::fabs(got - want),
                grad_diff);
  }
}

// ---- the formulas, written out ------------------------------------------------------------

// A small ragged case: 3 queries with 4, 3 and 2 candidates; labels 0..3 (distinct where
// the lambda test needs an order, with one tie), NaN past each row's last.
RerankGroups rerank_small_case() {
  RerankGroups g;
  g.logits = at::tensor({0.3, -1.2, 0.8, 2.1, 1.5, 0.1, -0.7, 0.0, -0.4, 0.9, 0.0, 0.0}, kRerankF64).view({3, 4});
  g.valid = at::tensor({1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 0, 0}, at::kLong).view({3, 4}).to(at::kBool);
  const double nan = std::nan("");
  g.labels = at::tensor({3.0, 0.0, 1.0, 1.0, 2.0, 0.0, 3.0, nan, 1.0, 0.0, nan, nan}, kRerankF64).view({3, 4});
  return g;
}

double rerank_at(const at::Tensor& t, int64_t i, int64_t j) { return t[i][j].item<double>(); }
bool rerank_valid(const RerankGroups& g, int64_t i, int64_t j) { return g.valid[i][j].item<bool>(); }
double rerank_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// A row's valid scores (activated) and labels.
struct RerankRow {
  std::vector<double> s, y;
};

RerankRow rerank_row(const RerankGroups& g, int64_t i, const std::function<double(double)>& act) {
  RerankRow r;
  for (int64_t j = 0; j < g.logits.size(1); ++j)
    if (rerank_valid(g, i, j)) {
      r.s.push_back(act(rerank_at(g.logits, i, j)));
      r.y.push_back(rerank_at(g.labels, i, j));
    }
  return r;
}

double rerank_loss_value(const RerankGroups& g, const CrossEncoderLossConfig& config, double divisor) {
  return rerank_loss(g, config, divisor).item<double>();
}

TEST(RerankLoss, BinaryCrossEntropyIsPosWeightedBceOverValidPairs) {
  RerankGroups g = rerank_small_case();
  const at::Tensor probabilities =
      at::tensor({1.0, 0.0, 0.25, 1.0, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0, 0.0, 0.0}, kRerankF64).view({3, 4});
  g.labels = at::where(g.valid, probabilities, g.labels);
  CrossEncoderLossConfig config;
  config.type = RerankLoss::BinaryCrossEntropy;
  config.activation = ScoreActivation::Tanh;
  config.pos_weight = 2.5;
  double sum = 0;
  int64_t pairs = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const RerankRow r = rerank_row(g, i, [](double x) { return std::tanh(x); });
    for (size_t j = 0; j < r.s.size(); ++j, ++pairs)
      sum -= 2.5 * r.y[j] * std::log(rerank_sigmoid(r.s[j])) + (1 - r.y[j]) * std::log(1 - rerank_sigmoid(r.s[j]));
  }
  EXPECT_EQ(pairs, 9);
  EXPECT_EQ(rerank_loss_units(config.type, {4, 3, 2}), 9);
  EXPECT_NEAR(rerank_loss_value(g, config, 9), sum / 9, 1e-12);
}

// CrossEntropy and MNRL: -log softmax over a row's valid candidates at column 0, of the
// activated scores (× scale for mnrl, sigmoid by default).
TEST(RerankLoss, CrossEntropyAndMnrlAreSoftmaxOverEachRowsCandidates) {
  const RerankGroups g = rerank_small_case();
  for (const RerankLoss type : {RerankLoss::CrossEntropy, RerankLoss::Mnrl}) {
    CrossEncoderLossConfig config;
    config.type = type;
    config.scale = 7;
    const bool mnrl = type == RerankLoss::Mnrl;
    EXPECT_EQ(rerank_activation(config), mnrl ? ScoreActivation::Sigmoid : ScoreActivation::Identity);
    double sum = 0;
    for (int64_t i = 0; i < 3; ++i) {
      const RerankRow r = rerank_row(g, i, [&](double x) { return mnrl ? 7 * rerank_sigmoid(x) : x; });
      double total = 0;
      for (const double s : r.s) total += std::exp(s);
      sum -= r.s[0] - std::log(total);
    }
    EXPECT_EQ(rerank_loss_units(type, {4, 3, 2}), 3);
    EXPECT_NEAR(rerank_loss_value(g, config, 3), sum / 3, 1e-12) << choice_name(type);
  }
}

TEST(RerankLoss, ListNetIsCrossEntropyAgainstSoftmaxOfLabels) {
  const RerankGroups g = rerank_small_case();
  CrossEncoderLossConfig config;
  config.type = RerankLoss::ListNet;
  double sum = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const RerankRow r = rerank_row(g, i, [](double x) { return x; });
    double zs = 0, zy = 0;
    for (size_t j = 0; j < r.s.size(); ++j) zs += std::exp(r.s[j]), zy += std::exp(r.y[j]);
    for (size_t j = 0; j < r.s.size(); ++j) sum -= std::exp(r.y[j]) / zy * (r.s[j] - std::log(zs));
  }
  EXPECT_NEAR(rerank_loss_value(g, config, 3), sum / 3, 1e-12);
}

TEST(RerankLoss, MarginMseIsMeanSquaredMarginErrorOverValidNegatives) {
  const RerankGroups g = rerank_small_case();
  CrossEncoderLossConfig config;
  config.type = RerankLoss::MarginMse;
  config.activation = ScoreActivation::Sigmoid;
  double sum = 0;
  for (int64_t i = 0; i < 3; ++i) {
    const RerankRow r = rerank_row(g, i, rerank_sigmoid);
    for (size_t j = 1; j < r.s.size(); ++j) sum += std::pow((r.s[0] - r.s[j]) - (r.y[0] - r.y[j]), 2);
  }
  EXPECT_EQ(rerank_loss_units(config.type, {4, 3, 2}), 6);
  EXPECT_NEAR(rerank_loss_value(g, config, 6), sum / 6, 1e-12);
}

// LambdaLoss on one row, from its definition: positions by descending score, and each
// counted pair's weighted -log σ term. Adds to `sum` and `pairs`.
void rerank_lambda_row(const RerankRow& r, const CrossEncoderLossConfig& c, double& sum, int64_t& pairs) {
  const int64_t m = static_cast<int64_t>(r.s.size());
  std::vector<int64_t> order(m);
  for (int64_t j = 0; j < m; ++j) order[j] = j;
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r.s[a] > r.s[b]; });
  std::vector<double> ideal = r.y;
  std::sort(ideal.rbegin(), ideal.rend());
  const auto discount = [](int64_t p) { return std::log2(2.0 + p); };  // position p counted from 0
  double max_dcg = 0;
  for (int64_t p = 0; p < m && (c.k == 0 || p < c.k); ++p) max_dcg += (std::pow(2, ideal[p]) - 1) / discount(p);
  max_dcg = std::max(max_dcg, c.eps);
  const auto gain = [&](int64_t p) { return (std::pow(2, r.y[order[p]]) - 1) / max_dcg; };
  for (int64_t p = 0; p < m; ++p)
    for (int64_t q = 0; q < m; ++q) {
      const bool ordered = c.weighting == LambdaWeighting::NdcgLoss1 || r.y[order[p]] > r.y[order[q]];
      if (!ordered || (c.k > 0 && p >= c.k && q >= c.k)) continue;
      const double gap = std::fabs(gain(p) - gain(q));
      const double rank = std::fabs(1 / discount(p) - 1 / discount(q)) * gap;
      const int64_t d = std::abs(p - q);
      const double ndcg2 = d == 0 ? 0 : std::fabs(1 / std::log2(1.0 + d) - 1 / std::log2(2.0 + d)) * gap;
      double w = 1;
      if (c.weighting == LambdaWeighting::NdcgLoss1) w = gain(p) / discount(p);
      if (c.weighting == LambdaWeighting::NdcgLoss2) w = ndcg2;
      if (c.weighting == LambdaWeighting::LambdaRank) w = rank;
      if (c.weighting == LambdaWeighting::NdcgLoss2pp) w = c.mu * ndcg2 + rank;
      const double term = -w * std::log(rerank_sigmoid(c.sigma * (r.s[order[p]] - r.s[order[q]])));
      sum += c.reduction_log == LambdaLog::Binary ? term / std::log(2.0) : term;
      ++pairs;
    }
}

TEST(RerankLoss, LambdaIsWeightedPairwiseLogisticOverOrderedPairs) {
  const RerankGroups g = rerank_small_case();
  for (const LambdaWeighting w : {LambdaWeighting::None, LambdaWeighting::NdcgLoss1, LambdaWeighting::NdcgLoss2,
                                  LambdaWeighting::LambdaRank, LambdaWeighting::NdcgLoss2pp})
    for (const int k : {0, 1, 2})
      for (const LambdaLog log : {LambdaLog::Binary, LambdaLog::Natural}) {
        CrossEncoderLossConfig config;
        config.type = RerankLoss::Lambda;
        config.weighting = w;
        config.k = k;
        config.reduction_log = log;
        config.sigma = 0.8;
        config.mu = 4;
        SCOPED_TRACE(choice_name(w) + " k=" + std::to_string(k) + " " + choice_name(log));
        double sum = 0;
        int64_t pairs = 0;
        for (int64_t i = 0; i < 3; ++i)
          rerank_lambda_row(rerank_row(g, i, [](double x) { return x; }), config, sum, pairs);
        ASSERT_GT(pairs, 0);
        EXPECT_EQ(rerank_lambda_units(g, config).item<int64_t>(), pairs);
        EXPECT_NEAR(rerank_loss_value(g, config, static_cast<double>(pairs)), sum / pairs, 1e-12 * (1 + sum / pairs));
      }
}

// ---- across ranks ----------------------------------------------------------------------------

RerankGroups rerank_rows(const RerankGroups& g, int64_t start, int64_t n) {
  return {g.logits.narrow(0, start, n), g.valid.narrow(0, start, n),
          g.labels.defined() ? g.labels.narrow(0, start, n) : at::Tensor()};
}

// Two ranks each holding half the queries, each dividing its sum by (both ranks' units) / 2,
// averaged as data parallelism averages: the loss and gradient one process computes on all.
TEST(RerankLoss, HalvesDividedByHalfTheTotalAverageToTheWhole) {
  at::manual_seed(3);
  RerankGroups g;
  g.logits = at::randn({6, 4}, kRerankF64);
  g.valid = at::tensor({1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1}, at::kLong)
                .view({6, 4})
                .to(at::kBool);
  g.labels = at::randint(0, 4, {6, 4}, kRerankF64);
  for (const RerankLoss type : {RerankLoss::BinaryCrossEntropy, RerankLoss::CrossEntropy, RerankLoss::Mnrl,
                                RerankLoss::Lambda, RerankLoss::ListNet, RerankLoss::MarginMse}) {
    SCOPED_TRACE(choice_name(type));
    CrossEncoderLossConfig config;
    config.type = type;
    RerankGroups case_ = g;
    if (type == RerankLoss::BinaryCrossEntropy) case_.labels = g.labels / 3;
    const RerankOurs whole = rerank_ours(case_, config);
    const RerankGroups halves[2] = {rerank_rows(case_, 0, 3), rerank_rows(case_, 3, 3)};
    const double total = rerank_units(halves[0], config) + rerank_units(halves[1], config);
    EXPECT_EQ(total, rerank_units(case_, config));
    at::Tensor logits = case_.logits.detach().clone().requires_grad_(true);
    at::Tensor mean = at::zeros({}, kRerankF64);
    for (int r = 0; r < 2; ++r) {
      RerankGroups part = halves[r];
      part.logits = logits.narrow(0, 3 * r, 3);
      mean = mean + rerank_loss(part, config, total / 2) / 2;
    }
    mean.backward();
    EXPECT_NEAR(mean.item<double>(), whole.loss.item<double>(), 1e-14 * (1 + whole.loss.item<double>()));
    EXPECT_LE((logits.grad() - whole.grad).abs().max().item<double>(), 1e-14);
  }
}

// ---- precision ----------------------------------------------------------------------------

TEST(RerankLoss, ComputesInFloat32ForFloat32AndHalfLogits) {
  RerankGroups g = rerank_small_case();
  CrossEncoderLossConfig config;
  config.type = RerankLoss::Lambda;
  const double want = rerank_loss_value(g, config, 4);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    RerankGroups low = g;
    low.logits = g.logits.to(dtype);
    const at::Tensor loss = rerank_loss(low, config, 4);
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
    // bf16 rounds the logits by up to 2^-8 relative: the loss moves by about as much.
    EXPECT_NEAR(loss.item<double>(), want, (dtype == at::kFloat ? 1e-6 : 2e-2) * want);
  }
}

// ---- bad input ------------------------------------------------------------------------------

void rerank_expect_error(const std::function<void()>& f, const std::string& names) {
  try {
    f();
    ADD_FAILURE() << "no ModelError; wanted one naming \"" << names << "\"";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find(names), std::string::npos) << e.what();
  }
}

TEST(RerankLoss, RefusesLabelsTheLossDoesNotTakeNamingWhere) {
  const RerankGroups g = rerank_small_case();
  RerankGroups soft = g;
  soft.labels = g.labels / 3;  // grades 0..3 as probabilities
  soft.labels[1][2] = 1.5;
  rerank_expect_error([&] { check_rerank_labels(soft, RerankLoss::BinaryCrossEntropy); },
                      "query row 1, candidate 2 has label 1.5");
  check_rerank_labels(soft, RerankLoss::ListNet);  // any finite score is a listnet label
  RerankGroups negative = g;
  negative.labels = g.labels.clone();
  negative.labels[2][1] = -1;
  rerank_expect_error([&] { check_rerank_labels(negative, RerankLoss::Lambda); }, "query row 2, candidate 1");
  check_rerank_labels(negative, RerankLoss::MarginMse);
  RerankGroups nan = g;
  nan.labels = g.labels.clone();
  nan.labels[0][3] = std::nan("");
  for (const RerankLoss type : {RerankLoss::MarginMse, RerankLoss::ListNet, RerankLoss::Lambda})
    rerank_expect_error([&] { check_rerank_labels(nan, type); }, "query row 0, candidate 3 has label nan");
  check_rerank_labels(nan, RerankLoss::Mnrl);  // reads no labels
  RerankGroups unlabeled = g;
  unlabeled.labels = at::Tensor();
  rerank_expect_error([&] { check_rerank_labels(unlabeled, RerankLoss::Lambda); }, "needs labels [3, 4]");
  check_rerank_labels(unlabeled, RerankLoss::CrossEntropy);
}

TEST(RerankLoss, RefusesRowsWithoutANegativeWhereTheLossRanks) {
  RerankGroups g = rerank_small_case();
  g.valid = g.valid.clone();
  g.valid[2][1] = false;
  for (const RerankLoss type : {RerankLoss::CrossEntropy, RerankLoss::Mnrl, RerankLoss::Lambda, RerankLoss::ListNet,
                                RerankLoss::MarginMse})
    rerank_expect_error([&] { check_rerank_labels(g, type); }, "query row 2 has no candidate besides its positive");
  RerankGroups bce = g;
  bce.labels = at::where(g.valid, at::ones_like(g.labels), g.labels);
  check_rerank_labels(bce, RerankLoss::BinaryCrossEntropy);
  g.valid[1][0] = false;
  rerank_expect_error([&] { check_rerank_labels(g, RerankLoss::BinaryCrossEntropy); },
                      "query row 1, candidate 0 is not valid");
}

TEST(RerankLoss, RefusesShapesDtypesAndDivisorsThatDoNotFit) {
  const RerankGroups g = rerank_small_case();
  CrossEncoderLossConfig lambda;
  lambda.type = RerankLoss::Lambda;
  CrossEncoderLossConfig mnrl;
  mnrl.type = RerankLoss::Mnrl;
  rerank_expect_error([&] { rerank_loss(g, lambda, 0); }, "divisor");
  rerank_expect_error([&] { rerank_loss(g, lambda, std::nan("")); }, "divisor");
  rerank_expect_error([&] { rerank_loss({g.logits.view({-1}), g.valid, g.labels}, lambda, 1); }, "logits [n, G]");
  rerank_expect_error([&] { rerank_loss({g.logits.to(at::kLong), g.valid, g.labels}, lambda, 1); }, "floating logits");
  rerank_expect_error([&] { rerank_loss({g.logits, g.valid.to(at::kLong), g.labels}, lambda, 1); }, "valid bool");
  rerank_expect_error([&] { rerank_loss({g.logits, g.valid.narrow(1, 0, 3), g.labels}, lambda, 1); }, "valid bool");
  rerank_expect_error([&] { rerank_loss({g.logits, g.valid, g.labels.narrow(0, 0, 2)}, lambda, 1); }, "labels");
  rerank_expect_error([&] { rerank_loss({g.logits, g.valid, {}}, lambda, 1); }, "labels [3, 4]");
  EXPECT_NO_THROW(rerank_loss({g.logits, g.valid, {}}, mnrl, 1));
  rerank_expect_error([&] { rerank_loss({g.logits.narrow(1, 0, 1), g.valid.narrow(1, 0, 1), {}}, mnrl, 1); },
                      "at least 2 columns");
  rerank_expect_error([&] { rerank_loss_units(RerankLoss::Lambda, {4, 3}); }, "rerank_lambda_units");
  CrossEncoderLossConfig top2 = lambda;
  top2.k = 2;
  rerank_expect_error([&] { rerank_lambda_units({{}, g.valid, g.labels}, top2); }, "needs the logits");
  EXPECT_EQ(rerank_lambda_units({{}, g.valid, g.labels}, lambda).item<int64_t>(),
            rerank_lambda_units(g, lambda).item<int64_t>());
}

// ---- what rerank_loss asks of the device ---------------------------------------------------

using host_waits::HostWaits;

// Every loss and option, forward and backward, without an op that makes the host wait;
// and lambda's units too (the caller's divisor on the device).
TEST(RerankLoss, AsksTheDeviceForNothingThatMakesTheHostWait) {
  const RerankGroups g = rerank_small_case();
  std::vector<CrossEncoderLossConfig> configs;
  for (const RerankLoss type : {RerankLoss::BinaryCrossEntropy, RerankLoss::CrossEntropy, RerankLoss::Mnrl,
                                RerankLoss::ListNet, RerankLoss::MarginMse}) {
    CrossEncoderLossConfig c;
    c.type = type;
    c.pos_weight = 2;
    configs.push_back(c);
  }
  for (const LambdaWeighting w : {LambdaWeighting::None, LambdaWeighting::NdcgLoss1, LambdaWeighting::NdcgLoss2,
                                  LambdaWeighting::LambdaRank, LambdaWeighting::NdcgLoss2pp})
    for (const int k : {0, 2}) {
      CrossEncoderLossConfig c;
      c.type = RerankLoss::Lambda;
      c.weighting = w;
      c.k = k;
      configs.push_back(c);
    }
  for (const auto& config : configs) {
    SCOPED_TRACE(choice_name(config.type) + " " + choice_name(config.weighting) + " k=" + std::to_string(config.k));
    RerankGroups in = g;
    if (config.type == RerankLoss::BinaryCrossEntropy) in.labels = g.labels / 3;
    in.logits = g.logits.clone().requires_grad_(true);
    at::Tensor loss;
    {
      const HostWaits waits({"aten::index"});  // a boolean index too
      loss = rerank_loss(in, config, 3);
      loss.backward();
      if (config.type == RerankLoss::Lambda) (void)rerank_lambda_units(in, config);
      EXPECT_TRUE(HostWaits::found().empty()) << HostWaits::said();
    }
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_TRUE(at::isfinite(in.logits.grad()).all().item<bool>());
  }
  // With teeth: reading a value back is seen.
  const HostWaits waits({"aten::index"});  // a boolean index too
  (void)g.logits.sum().item<double>();
  EXPECT_FALSE(HostWaits::found().empty());
}

// On a GPU: every loss as on the CPU, and still nothing that makes the host wait (the
// callback sees the CUDA ops as it sees the CPU's). fp32 on both: sums of at most G² = 16
// terms, each through an exp or a log, differ by a few ulp (u = 6e-8): 1e-5 relative is
// far above that and far below any formula's difference.
TEST(RerankLoss, OnAGpuEqualsTheCpuWithoutHostWaits) {
  if (compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const RerankGroups g = rerank_small_case();
  for (const RerankLoss type : {RerankLoss::BinaryCrossEntropy, RerankLoss::CrossEntropy, RerankLoss::Mnrl,
                                RerankLoss::Lambda, RerankLoss::ListNet, RerankLoss::MarginMse})
    for (const int k : {0, 2}) {
      CrossEncoderLossConfig config;
      config.type = type;
      config.k = k;
      SCOPED_TRACE(choice_name(type) + " k=" + std::to_string(k));
      RerankGroups cpu = g;
      cpu.logits = g.logits.to(at::kFloat);
      if (type == RerankLoss::BinaryCrossEntropy) cpu.labels = g.labels / 3;
      RerankGroups cuda{cpu.logits.to(at::kCUDA).requires_grad_(true), cpu.valid.to(at::kCUDA),
                        cpu.labels.to(at::kCUDA)};
      const double want = rerank_loss(cpu, config, 3).item<double>();
      at::Tensor loss;
      {
        const HostWaits waits({"aten::index"});  // a boolean index too
        loss = rerank_loss(cuda, config, 3);
        loss.backward();
        if (type == RerankLoss::Lambda) (void)rerank_lambda_units(cuda, config);
        EXPECT_TRUE(HostWaits::found().empty()) << HostWaits::said();
      }
      EXPECT_NEAR(loss.item<double>(), want, 1e-5 * std::fabs(want));
      EXPECT_TRUE(at::isfinite(cuda.logits.grad()).all().item<bool>());
    }
}

}  // namespace
}  // namespace rerank_loss_test
