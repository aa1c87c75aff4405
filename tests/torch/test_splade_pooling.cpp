// SPLADE pooling a chunk of tokens at a time (model/splade_pooling.h) against the plain
// computation autograd differentiates: the whole batch's logits at once, the activation,
// each text's max (torch.max over its rows) or sum. Values and the gradients of the hidden
// states and of every head parameter agree for max and sum, both activations, and chunks
// of 1 token, of sizes that cut texts, and larger than the batch; an empty text pools to
// zeros. The head is a BERT-like transform (dense, GELU, LayerNorm, decoder with a bias).
#include "model/splade_pooling.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "../core/tolerance.h"
#include "compat/cuda_support.h"
#include "one_thread.h"

using namespace ddp_embed;

// Named, not anonymous: the unity build puts this file beside others with helpers of these names.
namespace splade_pooling_test {

constexpr int64_t kHidden = 8, kVocab = 40;

struct TinyHead : torch::nn::Module {
  TinyHead()
      : dense(register_module("dense", torch::nn::Linear(kHidden, kHidden))),
        norm(register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden})))),
        decoder(register_module("decoder", torch::nn::Linear(kHidden, kVocab))) {}
  at::Tensor forward(const at::Tensor& h) { return decoder(norm(at::gelu(dense(h)))); }
  VocabularyHead vocabulary() {
    return {[this](const at::Tensor& h) { return norm(at::gelu(dense(h))); },
            {dense->weight, dense->bias, norm->weight, norm->bias},
            decoder->weight,
            decoder->bias};
  }
  torch::nn::Linear dense;
  torch::nn::LayerNorm norm;
  torch::nn::Linear decoder;
};

// The plain pooled vectors: every logit at once, then each text's rows reduced.
at::Tensor plain_pool(TinyHead& head, const at::Tensor& hidden, const std::vector<int64_t>& offsets,
                      SpladeReduce reduce, SpladeActivation act) {
  const at::Tensor values = splade_activation(head.forward(hidden), act);
  std::vector<at::Tensor> pooled;
  for (size_t b = 0; b + 1 < offsets.size(); ++b) {
    const at::Tensor rows = values.narrow(0, offsets[b], offsets[b + 1] - offsets[b]);
    if (rows.size(0) == 0) pooled.push_back(at::zeros({kVocab}, values.options()));
    else pooled.push_back(reduce == SpladeReduce::Max ? std::get<0>(rows.max(0)) : rows.sum(0));
  }
  return at::stack(pooled);
}

struct Grads {
  at::Tensor pooled, hidden;
  std::vector<at::Tensor> params;
};

// pooled, and the gradients of sum(pooled * weights) with respect to hidden and the head's parameters.
template <class Pool>
Grads run(TinyHead& head, const at::Tensor& hidden_in, const at::Tensor& weights, Pool pool) {
  head.zero_grad();
  const at::Tensor hidden = hidden_in.detach().clone().requires_grad_(true);
  const at::Tensor pooled = pool(hidden);
  (pooled * weights).sum().backward();
  Grads g{pooled.detach(), hidden.grad().clone(), {}};
  for (const auto& p : head.parameters()) g.params.push_back(p.grad().clone());
  return g;
}

// fp32 values of order 1: a logit is a sum of 8 products, a parameter's gradient a sum over
// 13 tokens (added in another order when chunked), each a few roundings of 6e-8 apart.
void expect_close(const at::Tensor& ours, const at::Tensor& plain, const std::string& what) {
  ASSERT_EQ(ours.sizes(), plain.sizes()) << what;
  const double worst = (ours - plain).abs().max().item<double>();
  const double bound = 1e-5 * (1.0 + plain.abs().max().item<double>());
  tolerance::record(what, worst, bound);
  EXPECT_LE(worst, bound) << what;
}

TEST(SpladePooling, ChunkedEqualsTheWholeBatchInValuesAndGradients) {
  OneIntraOpThread one_thread;
  torch::manual_seed(11);
  TinyHead head;
  const std::vector<int64_t> offsets{0, 4, 5, 11, 11, 13};  // 4, 1, 6, 0 and 2 tokens
  const at::Tensor offsets_t = at::tensor(offsets, at::kLong);
  const at::Tensor hidden = at::randn({13, kHidden});
  const at::Tensor weights = at::randn({5, kVocab});
  for (const SpladeReduce reduce : {SpladeReduce::Max, SpladeReduce::Sum}) {
    for (const SpladeActivation act : {SpladeActivation::Relu, SpladeActivation::Log1pRelu}) {
      const Grads plain = run(head, hidden, weights, [&](const at::Tensor& h) { return plain_pool(head, h, offsets, reduce, act); });
      // Some logits positive, some not, and every text's vector has entries of both kinds.
      ASSERT_GT((plain.pooled > 0).sum().item<int64_t>(), 20);
      ASSERT_GT((plain.pooled.narrow(0, 0, 3) == 0).sum().item<int64_t>(), 3);
      for (const int64_t chunk : {1, 3, 5, 13, 100}) {
        const std::string what = std::string(reduce == SpladeReduce::Max ? "max" : "sum") +
                                 (act == SpladeActivation::Relu ? " relu" : " log1p_relu") + " chunk " +
                                 std::to_string(chunk);
        const Grads ours = run(head, hidden, weights, [&](const at::Tensor& h) {
          return splade_pool(head.vocabulary(), h, offsets_t, reduce, act, chunk);
        });
        expect_close(ours.pooled, plain.pooled, what + ": pooled");
        EXPECT_TRUE(ours.pooled[3].eq(0).all().item<bool>()) << what << ": the empty text";
        expect_close(ours.hidden, plain.hidden, what + ": hidden's gradient");
        ASSERT_EQ(ours.params.size(), plain.params.size());
        for (size_t i = 0; i < ours.params.size(); ++i)
          expect_close(ours.params[i], plain.params[i], what + ": parameter " + std::to_string(i) + "'s gradient");
      }
    }
  }
}

// What needs no gradient gets none and changes nothing else: a frozen transform weight, a
// decoder without a bias, in fp64 (max's sparse products keep fp64).
TEST(SpladePooling, FrozenParametersAndNoBiasLeaveTheOtherGradientsAsPlain) {
  OneIntraOpThread one_thread;
  torch::manual_seed(13);
  TinyHead head;
  head.to(at::kDouble);
  head.dense->weight.requires_grad_(false);
  const std::vector<int64_t> offsets{0, 4, 5, 11, 11, 13};
  const at::Tensor offsets_t = at::tensor(offsets, at::kLong);
  const at::Tensor hidden = at::randn({13, kHidden}, at::kDouble);
  const at::Tensor weights = at::randn({5, kVocab}, at::kDouble);
  for (const SpladeReduce reduce : {SpladeReduce::Max, SpladeReduce::Sum}) {
    const std::string what = reduce == SpladeReduce::Max ? "max, frozen, no bias" : "sum, frozen, no bias";
    const auto pooled_grads = [&](bool chunked) {
      const at::Tensor h = hidden.clone().requires_grad_(true);
      at::Tensor pooled;
      if (chunked) {
        VocabularyHead v = head.vocabulary();
        v.bias = at::Tensor();
        pooled = splade_pool(v, h, offsets_t, reduce, SpladeActivation::Log1pRelu, 3);
      } else {
        const at::Tensor values = splade_activation(
            at::linear(head.norm(at::gelu(head.dense(h))), head.decoder->weight), SpladeActivation::Log1pRelu);
        std::vector<at::Tensor> rows;
        for (size_t b = 0; b + 1 < offsets.size(); ++b) {
          const at::Tensor r = values.narrow(0, offsets[b], offsets[b + 1] - offsets[b]);
          rows.push_back(r.size(0) == 0 ? at::zeros({kVocab}, values.options())
                                        : reduce == SpladeReduce::Max ? std::get<0>(r.max(0)) : r.sum(0));
        }
        pooled = at::stack(rows);
      }
      return torch::autograd::grad({(pooled * weights).sum()}, {h, head.decoder->weight, head.norm->weight});
    };
    const auto ours = pooled_grads(true), plain = pooled_grads(false);
    for (size_t i = 0; i < ours.size(); ++i) expect_close(ours[i], plain[i], what + ": gradient " + std::to_string(i));
    EXPECT_EQ(ours[0].scalar_type(), at::kDouble) << what;
  }
}

// On a GPU (scripts/gpu-check.sh's cuda-tests): max's sparse backward (CUDA's sparse
// products) and sum's recomputation give the CPU's values and gradients. Skipped without one.
TEST(SpladePooling, OnAGpuEqualsTheCpuInValuesAndGradients) {
  if (compat::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const c10::Device gpu(c10::kCUDA, 0);
  compat::prepare_device(gpu);
  torch::manual_seed(12);
  TinyHead cpu_head, gpu_head;
  gpu_head.to(gpu);
  {
    at::NoGradGuard no_grad;  // the same weights on both
    const auto from = cpu_head.parameters();
    const auto to = gpu_head.parameters();
    for (size_t i = 0; i < from.size(); ++i) to[i].copy_(from[i]);
  }
  const std::vector<int64_t> offsets{0, 4, 5, 11, 11, 13};
  const at::Tensor offsets_t = at::tensor(offsets, at::kLong);
  const at::Tensor hidden = at::randn({13, kHidden});
  const at::Tensor weights = at::randn({5, kVocab});
  for (const SpladeReduce reduce : {SpladeReduce::Max, SpladeReduce::Sum}) {
    const std::string what = reduce == SpladeReduce::Max ? "max" : "sum";
    const Grads cpu = run(cpu_head, hidden, weights, [&](const at::Tensor& h) {
      return splade_pool(cpu_head.vocabulary(), h, offsets_t, reduce, SpladeActivation::Relu, 3);
    });
    const Grads on_gpu = run(gpu_head, hidden.to(gpu), weights.to(gpu), [&](const at::Tensor& h) {
      return splade_pool(gpu_head.vocabulary(), h, offsets_t, reduce, SpladeActivation::Relu, 3);
    });
    expect_close(on_gpu.pooled.cpu(), cpu.pooled, what + " on the GPU: pooled");
    expect_close(on_gpu.hidden.cpu(), cpu.hidden, what + " on the GPU: hidden's gradient");
    for (size_t i = 0; i < cpu.params.size(); ++i)
      expect_close(on_gpu.params[i].cpu(), cpu.params[i], what + " on the GPU: parameter " + std::to_string(i));
  }
}

TEST(SpladePooling, BadShapesAreRefusedNamingWhat) {
  TinyHead head;
  const auto call = [&](const at::Tensor& hidden, const at::Tensor& offsets, int64_t chunk) {
    return splade_pool(head.vocabulary(), hidden, offsets, SpladeReduce::Max, SpladeActivation::Relu, chunk);
  };
  const at::Tensor hidden = at::randn({5, kHidden});
  const auto refused = [&](const at::Tensor& h, const at::Tensor& offsets, int64_t chunk, const std::string& says) {
    try {
      call(h, offsets, chunk);
      ADD_FAILURE() << says << ": accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    }
  };
  refused(hidden.unsqueeze(0), at::tensor({0, 5}, at::kLong), 4, "hidden must be [tokens, hidden]");
  refused(hidden, at::tensor({0, 4}, at::kLong), 4, "offsets must rise from 0 to the 5 rows");
  refused(hidden, at::tensor({0, 3, 2, 5}, at::kLong), 4, "offsets must rise from 0 to the 5 rows");
  refused(hidden, at::tensor({0, 5}, at::kInt), 4, "offsets must be int64");
  refused(hidden, at::tensor({0, 5}, at::kLong), 0, "chunk_tokens must be at least 1");
  EXPECT_EQ(call(hidden, at::tensor({0, 2, 5}, at::kLong), 2).sizes(), (std::vector<int64_t>{2, kVocab}));
}

}  // namespace splade_pooling_test
