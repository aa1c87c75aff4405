// Mixed precision on the CPU: the loss scaler's rule on synthetic gradients (overflow →
// skip and halve, growth after N finite steps, state round trip through a checkpoint),
// the update that unscales and clips, and bf16 autocast.
#include "train/precision.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "config/config.h"
#include "model/embedder.h"
#include "model/loss.h"
#include "train/checkpoint.h"

namespace fs = std::filesystem;
using namespace ddp_embed;

namespace {

// Two parameter tensors under one FlatAdamW, with gradients set by hand.
struct TinyProblem {
  std::vector<at::Tensor> params = {at::tensor({1.0f, -2.0f, 3.0f}).requires_grad_(),
                                    at::tensor({0.5f, 0.25f}).requires_grad_()};
  FlatAdamW optimizer{{FlatAdamW::Group{params, 0.01}}};

  void set_grads(const std::vector<float>& a, const std::vector<float>& b) {
    at::NoGradGuard no_grad;
    params[0].mutable_grad().copy_(at::tensor(a));
    params[1].mutable_grad().copy_(at::tensor(b));
  }
  std::vector<at::Tensor> values() const { return {params[0].detach().clone(), params[1].detach().clone()}; }
};

const float kInf = std::numeric_limits<float>::infinity();

bool same(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!at::equal(a[i], b[i])) return false;
  return true;
}

}  // namespace

TEST(Precision, DisabledLossScalerChangesNothing) {
  LossScaler off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.scale(), 1.0);
  const at::Tensor loss = at::tensor(0.75f);
  EXPECT_TRUE(off.scale_loss(loss).is_same(loss)) << "fp32 and bf16 must not even multiply by 1";
  off.update(false);
  EXPECT_EQ(off.scale(), 1.0);
}

TEST(Precision, OverflowSkipsTheStepAndHalvesTheLossScale) {
  TinyProblem t;
  LossScaler scaler(65536, 2000);
  const auto before = t.values();
  for (float bad : {kInf, std::nanf("")}) {
    t.set_grads({1, bad, 1}, {1, 1});
    const double scale = scaler.scale();
    const UpdateOutcome out = update_parameters(t.optimizer, scaler, 1.0, 1e-3);
    EXPECT_FALSE(out.applied);
    EXPECT_FALSE(std::isfinite(out.grad_norm));
    EXPECT_EQ(out.loss_scale, scale);
    EXPECT_EQ(scaler.scale(), scale / 2);
    EXPECT_EQ(scaler.state().good_steps, 0);
  }
  EXPECT_TRUE(same(t.values(), before)) << "a skipped step changed the parameters";
  EXPECT_EQ(t.optimizer.steps_taken(), 0) << "a skipped step advanced AdamW's step count";
}

TEST(Precision, LossScaleGrowsAfterGrowthIntervalFiniteStepsInARow) {
  TinyProblem t;
  LossScaler scaler(8, 3);
  const auto step = [&](float g) {
    t.set_grads({g, g, g}, {g, g});
    return update_parameters(t.optimizer, scaler, 0, 1e-3).applied;
  };
  EXPECT_TRUE(step(1));
  EXPECT_TRUE(step(1));
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_FALSE(step(kInf));  // an overflow resets the count
  EXPECT_EQ(scaler.scale(), 4);
  EXPECT_TRUE(step(1));
  EXPECT_TRUE(step(1));
  EXPECT_EQ(scaler.scale(), 4);
  EXPECT_TRUE(step(1));  // the third finite step in a row
  EXPECT_EQ(scaler.scale(), 8);
  EXPECT_EQ(scaler.state().good_steps, 0);
  EXPECT_EQ(t.optimizer.steps_taken(), 5);
}

// Gradients that carry the scale S give exactly the update of the true gradients: the
// reported norm is the true one and clipping acts on the true norm.
TEST(Precision, ScaledGradientsGiveTheUnscaledUpdate) {
  for (double max_norm : {0.0, 100.0, 0.5}) {  // no clipping, not reached, clipping
    TinyProblem plain, scaled;
    LossScaler off, scaler(1024, 2000);
    plain.set_grads({0.3f, -1.5f, 2.0f}, {0.01f, -0.2f});
    scaled.set_grads({0.3f * 1024, -1.5f * 1024, 2.0f * 1024}, {0.01f * 1024, -0.2f * 1024});
    const UpdateOutcome a = update_parameters(plain.optimizer, off, max_norm, 1e-2);
    const UpdateOutcome b = update_parameters(scaled.optimizer, scaler, max_norm, 1e-2);
    ASSERT_TRUE(a.applied && b.applied);
    EXPECT_NEAR(a.grad_norm, std::sqrt(0.09 + 2.25 + 4.0 + 0.0001 + 0.04), 1e-6);
    EXPECT_EQ(a.grad_norm, b.grad_norm);
    EXPECT_TRUE(same(plain.values(), scaled.values())) << "max_norm " << max_norm;
  }
}

TEST(Precision, LossScalerStateSurvivesACheckpoint) {
  at::manual_seed(1);
  BertConfig c;
  c.vocab_size = 50;
  c.hidden_size = 16;
  c.num_layers = 1;
  c.num_heads = 2;
  c.intermediate_size = 32;
  c.max_position = 16;
  SentenceEmbedder model(c, 8, Pooling::Cls);
  FlatAdamW optimizer({FlatAdamW::Group{model->parameters(), 0.0}});

  LossScaler scaler(65536, 5);
  for (bool finite : {false, true, true, false, true, true, true}) scaler.update(finite);
  TrainPosition pos;
  pos.step = 7;
  pos.loss_scale = scaler.state().scale;
  pos.loss_scale_good_steps = scaler.state().good_steps;

  const fs::path dir = fs::temp_directory_path() / ("precision_test_" + std::to_string(::getpid()));
  const std::string saved = save_checkpoint(dir.string(), model, optimizer.state(), optimizer.steps_taken(), pos, nlohmann::json::object(), 1);
  const TrainPosition loaded = load_checkpoint(saved, model, optimizer);
  fs::remove_all(dir);

  LossScaler resumed(65536, 5);
  resumed.load_state({loaded.loss_scale, loaded.loss_scale_good_steps});
  EXPECT_EQ(resumed.scale(), 16384);
  EXPECT_EQ(resumed.state().good_steps, 3);
  // ... and both continue alike: two more finite steps reach the growth interval.
  for (auto* s : {&scaler, &resumed}) {
    s->update(true);
    s->update(true);
  }
  EXPECT_EQ(resumed.scale(), 32768);
  EXPECT_EQ(resumed.scale(), scaler.scale());
  EXPECT_THROW(resumed.load_state({0.0, 0}), std::invalid_argument);
}

TEST(Precision, NamesRoundTrip) {
  for (const char* name : {"fp32", "bf16", "fp16"})
    EXPECT_EQ(choice_name(parse_choice<Precision>(name, "precision")), name);
  EXPECT_THROW(parse_choice<Precision>("fp8", "precision"), ConfigError);
}

// bf16 on the CPU: matrix products run in bf16 inside the scope, fp32 after it, and the
// loss stays fp32 even inside.
TEST(Precision, Bf16AutocastOnTheCpu) {
  at::manual_seed(2);
  const at::Tensor x = at::randn({4, 8}), w = at::randn({3, 8});
  const at::Tensor want = at::linear(x, w);
  {
    AutocastScope scope(Precision::Bf16, c10::Device(c10::kCPU));
    const at::Tensor y = at::linear(x, w);
    EXPECT_EQ(y.scalar_type(), at::kBFloat16);
    // bf16 keeps 8 significant bits: within a few parts in a hundred of the fp32 product.
    EXPECT_LT((y.to(at::kFloat) - want).abs().max().item<double>(), 0.03 * want.abs().max().item<double>());
    const at::Tensor loss = pair_loss(y, y, {}, {}, LossConfig{}).loss;  // pairwise_sigmoid
    EXPECT_EQ(loss.scalar_type(), at::kFloat);
  }
  EXPECT_EQ(at::linear(x, w).scalar_type(), at::kFloat);
  {
    AutocastScope fp32(Precision::Fp32, c10::Device(c10::kCPU));
    EXPECT_EQ(at::linear(x, w).scalar_type(), at::kFloat);
  }
}

// fp16 autocast on a GPU (skipped without one): half-precision products, fp32 loss.
TEST(Precision, Fp16AutocastOnCuda) {
  if (compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const c10::Device cuda(c10::kCUDA, 0);
  at::manual_seed(2);
  const at::Tensor x = at::randn({4, 8}).to(cuda), w = at::randn({3, 8}).to(cuda);
  AutocastScope scope(Precision::Fp16, cuda);
  const at::Tensor y = at::linear(x, w);
  EXPECT_EQ(y.scalar_type(), at::kHalf);
  LossConfig infonce;
  infonce.type = LossType::Infonce;
  EXPECT_EQ(pair_loss(y, y, {}, {}, infonce).loss.scalar_type(), at::kFloat);
}
