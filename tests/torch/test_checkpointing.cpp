// Activation checkpointing (model/activation_checkpoint.h): with dropout on and a fixed
// seed, the loss and every parameter gradient are bit for bit those of the plain model
// on the CPU (the same operations on the same values), in fp32 and under bf16 autocast,
// and the random numbers drawn after the step are unchanged. The CUDA cases run where a
// GPU is visible (a CUDA LibTorch), with fp16 too.
#include "model/activation_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "compat/torch_compat.h"
#include "model/dropout.h"
#include "model/embedder.h"
#include "model/loss.h"
#include "train/precision.h"

#include "one_thread.h"

using namespace ddp_embed;

namespace {

EncoderInput batch(int64_t n, int64_t length, int64_t vocab, int64_t shortest, const c10::Device& device) {
  at::Tensor ids = at::randint(1, vocab, {n, length}, at::kLong);
  at::Tensor mask = at::ones({n, length}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t real = shortest + (i * 5) % (length - shortest + 1);
    mask[i].slice(0, real).zero_();
    ids[i].slice(0, real).zero_();
  }
  return {ids.to(device), mask.to(device)};
}

struct Step {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
  double next_random = 0;  // the first random number drawn after the step
};

// One training step's forward and backward from `seed`, as the trainer runs it.
//
// In fp32 on the CPU that is model->forward: one encoder call for the queries, one for
// the positives. Under autocast, though, the plain forward casts each weight once for
// both calls (autocast's cache) and so adds the two calls' weight gradients in half
// precision, while the recomputation casts per call and adds them in fp32: the gradients
// would differ at bf16 rounding (the checkpointed ones being the more exact). One encoder
// call for both (`one_call`, what forward does on a GPU) compares like with like.
// checkpointing: nullopt leaves the model's layers as they are set.
Step train_step(SentenceEmbedder& model, std::optional<bool> checkpointing, Precision precision, uint64_t seed, bool one_call,
                const c10::Device& device) {
  at::manual_seed(1234);
  const EncoderInput q = batch(6, 14, 200, 3, device), p = batch(6, 14, 200, 2, device);
  model->zero_grad();
  if (checkpointing) model->bert->set_activation_checkpointing(*checkpointing);
  at::manual_seed(seed);
  at::Tensor loss;
  {
    AutocastScope autocast(precision, device);
    if (!one_call) {
      loss = model->forward(q, p, {}, LossConfig{}).loss;  // pairwise_sigmoid at 0.05
    } else {
      const at::Tensor e = model->embed({at::cat({q.ids, p.ids}), at::cat({q.mask, p.mask})});
      loss = pair_loss(e.narrow(0, 0, 6), e.narrow(0, 6, 6), {}, {}, LossConfig{}).loss;
    }
  }
  loss.backward();
  Step s;
  s.loss = loss.item<double>();
  for (const auto& param : model->named_parameters()) s.grads[param.key()] = param.value().grad().clone().cpu();
  s.next_random = at::rand({1}, at::TensorOptions().device(device)).item<double>();
  return s;
}

SentenceEmbedder make_model(int64_t layers, Pooling pooling, const c10::Device& device,
                            double attention_dropout = 0.1) {
  BertConfig c;
  c.vocab_size = 200;
  c.hidden_size = 32;
  c.num_layers = layers;
  c.num_heads = 4;
  c.intermediate_size = 64;
  c.max_position = 32;
  c.hidden_dropout = 0.1;
  c.attention_dropout = attention_dropout;
  at::manual_seed(7);
  SentenceEmbedder model(c, 16, pooling);
  model->to(device);
  model->train();
  return model;
}

// The largest |a - b| over every gradient, relative to that gradient's largest value.
double worst_relative_difference(const Step& a, const Step& b) {
  double worst = 0;
  for (const auto& [name, g] : a.grads) {
    const at::Tensor& h = b.grads.at(name);
    const double scale = std::max(g.abs().max().item<double>(), 1e-30);
    worst = std::max(worst, (g - h).abs().max().item<double>() / scale);
  }
  return worst;
}

const c10::Device kCpu(c10::kCPU);
const c10::Device kCuda(c10::kCUDA, 0);

}  // namespace

class ActivationCheckpointing : public ::testing::TestWithParam<std::tuple<int, Pooling, Precision, bool>> {};

TEST_P(ActivationCheckpointing, SameLossGradientsAndRandomness) {
  const auto [layers, pooling, precision, on_cuda] = GetParam();
  if (on_cuda && compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const c10::Device device = on_cuda ? kCuda : kCpu;
  const OneIntraOpThread one_thread;  // the CPU's comparison is bit for bit (one_thread.h)
  SentenceEmbedder model = make_model(layers, pooling, device);
  const bool one_call = on_cuda || precision != Precision::Fp32;
  const Step plain = train_step(model, false, precision, 99, one_call, device);
  const Step checkpointed = train_step(model, true, precision, 99, one_call, device);

  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  if (!on_cuda) {
    EXPECT_EQ(plain.loss, checkpointed.loss);
    for (const auto& [name, g] : plain.grads) {
      const at::Tensor& h = checkpointed.grads.at(name);
      EXPECT_TRUE(at::equal(g, h)) << name << ": differs by " << (g - h).abs().max().item<double>();
    }
  } else {
    // CUDA adds with atomics in no fixed order (the embedding gradients; mean pooling's
    // index_add in the forward too): not bit for bit, the loss within a few roundings.
    EXPECT_NEAR(plain.loss, checkpointed.loss, std::abs(plain.loss) * (precision == Precision::Fp32 ? 1e-6 : 1e-3));
    EXPECT_LT(worst_relative_difference(plain, checkpointed), precision == Precision::Fp32 ? 1e-5 : 1e-2);
  }
  EXPECT_EQ(plain.next_random, checkpointed.next_random) << "checkpointing moved the random generator";

  // The comparison has teeth: dropout is on (another seed, other masks, other numbers).
  const Step other_seed = train_step(model, true, precision, 100, one_call, device);
  EXPECT_NE(other_seed.loss, plain.loss);
  EXPECT_GT(worst_relative_difference(plain, other_seed), 0.5);
}

std::string case_name(const ::testing::TestParamInfo<ActivationCheckpointing::ParamType>& info) {
  return std::to_string(std::get<0>(info.param)) + "layers_" + choice_name(std::get<1>(info.param)) + "_" +
         choice_name(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Cpu, ActivationCheckpointing,
                         ::testing::Combine(::testing::Values(1, 2), ::testing::Values(Pooling::Cls, Pooling::Mean),
                                            ::testing::Values(Precision::Fp32, Precision::Bf16),
                                            ::testing::Values(false)),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Cuda, ActivationCheckpointing,
                         ::testing::Combine(::testing::Values(2), ::testing::Values(Pooling::Cls, Pooling::Mean),
                                            ::testing::Values(Precision::Fp32, Precision::Bf16, Precision::Fp16),
                                            ::testing::Values(true)),
                         case_name);

// The bf16 cases above compare like with like; here bf16 is shown to change the numbers
// (so recomputing in backward outside of autocast would have been caught).
TEST(ActivationCheckpointing, Bf16GradientsDifferFromFp32) {
  SentenceEmbedder model = make_model(2, Pooling::Mean, kCpu);
  const Step fp32 = train_step(model, true, Precision::Fp32, 99, true, kCpu);
  const Step bf16 = train_step(model, true, Precision::Bf16, 99, true, kCpu);
  EXPECT_GT(worst_relative_difference(fp32, bf16), 1e-3);
  EXPECT_LT(std::abs(fp32.loss - bf16.loss), 0.05 * fp32.loss) << fp32.loss << " " << bf16.loss;
}

// Without autograd (evaluation, encoding) nothing is checkpointed: the plain forward.
TEST(ActivationCheckpointing, InferenceIsThePlainForward) {
  const OneIntraOpThread one_thread;  // bit for bit (one_thread.h)
  SentenceEmbedder model = make_model(2, Pooling::Cls, kCpu);
  at::manual_seed(3);
  const EncoderInput x = batch(4, 10, 200, 2, kCpu);
  const at::Tensor plain = model->encode_batch(x);
  model->bert->set_activation_checkpointing(true);
  const at::Tensor with = model->encode_batch(x);
  EXPECT_TRUE(at::equal(plain, with));
  EXPECT_FALSE(with.requires_grad());
}

// The CPU's attention with its probabilities recomputed in backward (what the encoders use
// on the CPU with dropout) against the same operations composed and recorded by autograd:
// the same output and gradients for q, k and v (to rounding: backward is written by hand),
// with the same dropout mask and padding in the bias; without dropout, SDPA's output.
TEST(ActivationCheckpointing, RecomputedAttentionIsTheComposedAttentionsOutputAndGradients) {
  at::manual_seed(5);
  const at::Tensor q0 = at::randn({3, 4, 9, 8}), k0 = at::randn({3, 4, 9, 8}), v0 = at::randn({3, 4, 9, 8});
  at::Tensor bias = at::zeros({3, 1, 1, 9});
  bias[1].narrow(-1, 6, 3).fill_(std::numeric_limits<float>::lowest());  // a padded sequence
  const at::Tensor upstream = at::randn({3, 4, 9, 8});
  const auto composed = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const DropoutMask& mask) {
    at::Tensor probs = at::softmax(at::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0) + bias, -1);
    if (mask.dropped.defined()) probs = probs.masked_fill(mask.dropped, 0.0) * mask.scale;
    return at::matmul(probs, v);
  };
  struct Result {
    at::Tensor out, gq, gk, gv;
  };
  auto run = [&](bool recompute, const DropoutMask& mask) {
    at::Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(), v = v0.clone().requires_grad_();
    at::Tensor out = recompute ? attention_recomputed(q, k, v, bias, mask) : composed(q, k, v, mask);
    out.backward(upstream);
    return Result{out.detach(), q.grad(), k.grad(), v.grad()};
  };
  const auto close = [](const at::Tensor& a, const at::Tensor& b) { return at::allclose(a, b, 1e-5, 1e-6); };
  at::manual_seed(11);
  const DropoutMask mask = cpu_dropout_mask({3, 4, 9, 9}, 0.1);
  for (const DropoutMask& m : {mask, DropoutMask{}}) {
    SCOPED_TRACE(m.dropped.defined() ? "dropout 0.1" : "no dropout");
    const Result plain = run(false, m), recomputed = run(true, m);
    EXPECT_TRUE(close(plain.out, recomputed.out));
    EXPECT_TRUE(close(plain.gq, recomputed.gq));
    EXPECT_TRUE(close(plain.gk, recomputed.gk));
    EXPECT_TRUE(close(plain.gv, recomputed.gv));
    if (!m.dropped.defined()) {
      EXPECT_TRUE(close(recomputed.out, compat::scaled_dot_product_attention(q0, k0, v0, bias, 0.0)));
    }
  }
  // With teeth: another mask, other numbers.
  const Result first = run(true, mask), other = run(true, cpu_dropout_mask({3, 4, 9, 9}, 0.1));
  EXPECT_FALSE(close(other.out, first.out));
  EXPECT_FALSE(close(other.gv, first.gv));
}

// The whole model on the padded path without attention dropout: a training step with the
// probabilities stored (SDPA) and one with them recomputed give the same loss and
// gradients, to rounding, and draw the same random numbers.
TEST(ActivationCheckpointing, RecomputedAttentionModelStepIsTheStepWithStoredProbabilities) {
  SentenceEmbedder model = make_model(2, Pooling::Mean, kCpu, /*attention_dropout=*/0.0);
  auto set_recompute = [&](bool on) {
    int layers = 0;
    for (const auto& m : model->bert->modules(/*include_self=*/false))
      if (auto* layer = dynamic_cast<BertLayerImpl*>(m.get())) {
        layer->recompute_attention = on;
        layer->attention_mode = AttentionMode::Padded;
        ++layers;
      }
    ASSERT_EQ(layers, 2);
  };
  set_recompute(false);
  const Step stored = train_step(model, std::nullopt, Precision::Fp32, 99, false, kCpu);
  set_recompute(true);
  const Step recomputed = train_step(model, std::nullopt, Precision::Fp32, 99, false, kCpu);
  EXPECT_NEAR(stored.loss, recomputed.loss, 1e-6 * std::abs(stored.loss));
  // Each gradient within 1e-5 of its largest value (the key biases' gradients are 0 up to
  // rounding: softmax does not see a constant added to a row's scores).
  bool any_difference = false;
  for (const auto& [name, g] : stored.grads) {
    const at::Tensor& h = recomputed.grads.at(name);
    EXPECT_LE((g - h).abs().max().item<double>(), 1e-8 + 1e-5 * g.abs().max().item<double>()) << name;
    any_difference = any_difference || !at::equal(g, h);
  }
  EXPECT_TRUE(any_difference) << "the two paths ran the same code";
  EXPECT_EQ(stored.next_random, recomputed.next_random);
}
