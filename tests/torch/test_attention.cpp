// Attention on packed tokens (model/attention.h): every path against a reference of its own
// (at::scaled_dot_product_attention on each batch padded here, with a boolean mask), forward
// and the gradients of q, k and v, on the lengths that break such code (a text of one token,
// texts at the maximum, all equal, one long among short ones), bidirectional and causal with
// grouped query heads; dropout's backward against finite differences of its own forward; the
// encoders' outputs unchanged by what sits in the padding, on each path.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compat/cuda_support.h"
#include "model/bert.h"
#include "model/qwen3.h"

#include "one_thread.h"

using namespace ddp_embed;

namespace {

struct Problem {
  std::vector<int64_t> lengths;
  int64_t q_heads, kv_heads, dims;
  bool causal;
};

struct AttentionInputs {
  at::Tensor q, k, v;  // packed [N, heads, D], requiring grad
  at::Tensor weights;  // the loss: sum(out * weights)
};

AttentionInputs random_inputs(const Problem& p, int64_t q_rows, int64_t tokens) {
  AttentionInputs in;
  in.q = at::randn({q_rows, p.q_heads, p.dims}).requires_grad_(true);
  in.k = at::randn({tokens, p.kv_heads, p.dims}).requires_grad_(true);
  in.v = at::randn({tokens, p.kv_heads, p.dims}).requires_grad_(true);
  in.weights = at::randn({q_rows, p.q_heads, p.dims});
  return in;
}

// The reference: each batch padded here to its longest, SDPA with a boolean mask, grouped
// heads repeated. one_query: q holds one row a sequence, its last token's (which sees the
// whole sequence, causal or not).
at::Tensor reference(const AttentionInputs& in, const Problem& p, bool one_query) {
  const int64_t batch = static_cast<int64_t>(p.lengths.size());
  int64_t longest = 0;
  for (int64_t l : p.lengths) longest = std::max(longest, l);
  const int64_t group = p.q_heads / p.kv_heads;
  const auto padded = [&](const at::Tensor& t) {  // [N, h, D] → [B, h, L, D], zeros at padding
    std::vector<at::Tensor> rows;
    int64_t start = 0;
    for (int64_t l : p.lengths) {
      rows.push_back(at::constant_pad_nd(t.narrow(0, start, l), {0, 0, 0, 0, 0, longest - l}));
      start += l;
    }
    return at::stack(rows).transpose(1, 2);
  };
  const at::Tensor k = padded(in.k).repeat_interleave(group, 1), v = padded(in.v).repeat_interleave(group, 1);
  const at::Tensor positions = at::arange(longest);
  const at::Tensor real = positions.unsqueeze(0) < at::tensor(p.lengths).unsqueeze(1);  // [B, L]
  if (one_query) {
    const at::Tensor q = in.q.unsqueeze(2);  // [B, h, 1, D]
    const at::Tensor mask = real.view({batch, 1, 1, longest});
    return at::scaled_dot_product_attention(q, k, v, mask).squeeze(2);
  }
  at::Tensor mask = real.view({batch, 1, 1, longest});
  if (p.causal) mask = mask & (positions.unsqueeze(0) <= positions.unsqueeze(1)).view({1, 1, longest, longest});
  // A query row at padding (no real key before it cannot happen: key 0 is real) is dropped below.
  const at::Tensor out = at::scaled_dot_product_attention(padded(in.q), k, v, mask).transpose(1, 2);  // [B, L, h, D]
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(out[b].narrow(0, 0, p.lengths[size_t(b)]));
  return at::cat(rows);
}

struct Result {
  at::Tensor out, dq, dk, dv;
};

template <class F>
Result run(const AttentionInputs& in, F&& attend) {
  for (const at::Tensor& t : {in.q, in.k, in.v}) t.mutable_grad() = at::Tensor();
  Result r;
  r.out = attend();
  (r.out * in.weights).sum().backward();
  r.dq = in.q.grad().clone();
  r.dk = in.k.grad().clone();
  r.dv = in.v.grad().clone();
  return r;
}

double worst(const Result& a, const Result& b) {
  double w = 0;
  for (const auto& [x, y] : {std::pair{a.out, b.out}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}})
    w = std::max(w, (x - y).abs().max().item<double>());
  return w;
}

// For reduced precision: |a - b| relative to b's largest value where that is over 1 (a
// rounding step grows with the value: dk and dv of grouped heads sum several heads' terms),
// absolute below.
double worst_scaled(const Result& a, const Result& b) {
  double w = 0;
  for (const auto& [x, y] : {std::pair{a.out, b.out}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}})
    w = std::max(w, (x - y).abs().max().item<double>() / std::max(1.0, y.abs().max().item<double>()));
  return w;
}

std::vector<int64_t> skewed(int64_t count, int64_t longest, std::mt19937& rng) {
  std::vector<int64_t> out;
  std::uniform_int_distribution<int64_t> short_text(1, 12);
  for (int64_t i = 0; i < count; ++i) out.push_back(i % 20 == 7 ? longest - int64_t(i % 3) : short_text(rng));
  return out;
}

std::vector<std::vector<int64_t>> length_sets() {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> any(1, 40);
  std::vector<int64_t> random;
  for (int i = 0; i < 13; ++i) random.push_back(any(rng));
  random[3] = 1;
  random[8] = 40;
  return {
      {1},                         // one text of one token
      {1, 1, 1, 1},                // every text one token
      {40, 40, 40},                // all at the maximum: no padding
      {17, 17, 17, 17, 17},        // all equal
      random,                      // random, with 1 and the maximum among them
      skewed(40, 64, rng),         // one in twenty near the maximum, the rest short
  };
}

}  // namespace

TEST(Attention, EveryPathMatchesPaddedSdpaForwardAndGradients) {
  at::manual_seed(3);
  for (const bool causal : {false, true}) {
    for (const auto& lengths : length_sets()) {
      // BERT-like (bidirectional, 4 heads of 16) and Qwen3-like (causal, 4 query heads
      // over 2 key/value heads).
      const Problem p{lengths, 4, causal ? 2 : 4, 16, causal};
      int64_t tokens = 0;
      for (int64_t l : lengths) tokens += l;
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()) + 3, at::kCPU);
      const AttentionInputs in = random_inputs(p, tokens, tokens);
      const Result want = run(in, [&] { return reference(in, p, false); });
      for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded, AttentionMode::Auto}) {
        for (const bool recompute : {false, true}) {
          AttentionCall call;
          call.causal = causal;
          call.mode = mode;
          call.recompute_padded = recompute;
          const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
          EXPECT_LT(worst(got, want), 1e-5) << choice_name(mode) << (causal ? " causal" : " bidirectional")
                                            << ", " << lengths.size() << " texts, recompute " << recompute;
        }
      }
    }
  }
}

// The grouped path (auto's with attention dropout) on the same sets, and on lengths that
// make it cut the batch into runs (short texts together, the long ones together, one alone)
// and hold texts without tokens; every query a sequence, and one.
TEST(Attention, GroupedMatchesPaddedSdpaForwardAndGradients) {
  at::manual_seed(6);
  std::vector<std::vector<int64_t>> sets = length_sets();
  sets.push_back({2, 120, 3, 40, 4, 118, 5});
  sets.push_back({0, 7, 3, 0, 90, 88});
  for (const bool causal : {false, true}) {
    for (const auto& lengths : sets) {
      const Problem p{lengths, 4, causal ? 2 : 4, 16, causal};
      int64_t tokens = 0;
      for (int64_t l : lengths) tokens += l;
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()) + 2, at::kCPU);
      const AttentionInputs in = random_inputs(p, tokens, tokens);
      AttentionCall call;
      call.causal = causal;
      const Result want = run(in, [&] { return reference(in, p, false); });
      const Result got = run(in, [&] { return cpu_attention_grouped(in.q, in.k, in.v, layout, call); });
      EXPECT_LT(worst(got, want), 1e-5) << (causal ? "causal" : "bidirectional") << ", " << lengths.size() << " texts";
      if (std::count(lengths.begin(), lengths.end(), int64_t{0}) > 0) continue;  // the reference: NaN there
      const AttentionInputs one = random_inputs(p, layout.batch, tokens);
      call.one_query_per_sequence = true;
      const Result want_one = run(one, [&] { return reference(one, p, true); });
      const Result got_one = run(one, [&] { return cpu_attention_grouped(one.q, one.k, one.v, layout, call); });
      EXPECT_LT(worst(got_one, want_one), 1e-5) << "one query a sequence, " << lengths.size() << " texts";
    }
    // One query a text costs a call little per key, so only a text far longer than the others
    // makes a run of its own (the short ones together, the long one alone).
    const std::vector<int64_t> lengths = {2, 6000, 3, 1};
    const Problem p{lengths, 4, causal ? 2 : 4, 16, causal};
    const TokenLayout layout(lengths, 6000, at::kCPU);
    const AttentionInputs one = random_inputs(p, layout.batch, layout.tokens);
    AttentionCall call;
    call.causal = causal;
    call.one_query_per_sequence = true;
    const Result want = run(one, [&] { return reference(one, p, true); });
    const Result got = run(one, [&] { return cpu_attention_grouped(one.q, one.k, one.v, layout, call); });
    EXPECT_LT(worst(got, want), 1e-5) << "one query a text, one text of 6000 tokens";
  }
}

TEST(Attention, OneQueryPerSequenceSeesItsWholeSequenceOnEveryPath) {
  at::manual_seed(4);
  for (const bool causal : {false, true}) {
    for (const auto& lengths : length_sets()) {
      const Problem p{lengths, 4, 2, 8, causal};
      int64_t tokens = 0;
      for (int64_t l : lengths) tokens += l;
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()), at::kCPU);
      const AttentionInputs in = random_inputs(p, static_cast<int64_t>(lengths.size()), tokens);
      const Result want = run(in, [&] { return reference(in, p, true); });
      for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
        AttentionCall call;
        call.causal = causal;
        call.one_query_per_sequence = true;
        call.mode = mode;
        const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        EXPECT_LT(worst(got, want), 1e-5) << choice_name(mode) << (causal ? " causal" : " bidirectional");
      }
    }
  }
}

// Dropout on the probabilities, packed and grouped (auto with dropout, on lengths it cuts
// into two runs): the same seed gives the same mask, the mask changes the output, and
// backward is the gradient of the forward that ran (finite differences, the generator reset
// before each forward).
class AttentionDropout : public ::testing::TestWithParam<AttentionMode> {};

TEST_P(AttentionDropout, BackwardIsTheGradientOfItsForward) {
  const bool packed = GetParam() == AttentionMode::Packed;
  const Problem p{packed ? std::vector<int64_t>{5, 9, 1, 14} : std::vector<int64_t>{2, 120, 3, 118}, 4, 2, 8, true};
  const int64_t tokens = packed ? 29 : 243;
  const TokenLayout layout(p.lengths, packed ? 14 : 120, at::kCPU);
  at::manual_seed(5);
  const AttentionInputs in = random_inputs(p, tokens, tokens);
  AttentionCall call;
  call.causal = true;
  call.dropout_p = 0.3;
  call.mode = GetParam();
  const auto before = attention_path_counts();
  const auto loss = [&] {
    at::manual_seed(99);
    return (attention(in.q, in.k, in.v, layout, call) * in.weights).sum();
  };
  loss();
  const auto path = packed ? AttentionPath::CpuPacked : AttentionPath::CpuGrouped;
  EXPECT_EQ(attention_path_counts()[size_t(path)] - before[size_t(path)], 1) << attention_path_name(path);
  {
    at::NoGradGuard no_grad;
    EXPECT_EQ(loss().item<float>(), loss().item<float>()) << "the same seed, the same mask";
    AttentionCall plain = call;
    plain.dropout_p = 0;
    EXPECT_GT((attention(in.q, in.k, in.v, layout, plain) * in.weights).sum().sub(loss()).abs().item<float>(), 1e-3)
        << "dropout changed nothing";
  }
  loss().backward();
  const double eps = 1e-2;
  std::mt19937 rng(1);
  for (const at::Tensor& t : {in.q, in.k, in.v}) {
    const at::Tensor grad = t.grad().clone();
    at::NoGradGuard no_grad;
    for (int i = 0; i < 12; ++i) {
      const int64_t at = std::uniform_int_distribution<int64_t>(0, t.numel() - 1)(rng);
      float* x = t.data_ptr<float>() + at;
      const float keep = *x;
      *x = keep + float(eps);
      const double up = loss().item<double>();
      *x = keep - float(eps);
      const double down = loss().item<double>();
      *x = keep;
      const double numeric = (up - down) / (2 * eps), analytic = grad.view(-1)[at].item<double>();
      EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-3 * std::abs(numeric)) << "element " << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackedAndGrouped, AttentionDropout,
                         ::testing::Values(AttentionMode::Packed, AttentionMode::Auto),
                         [](const auto& info) { return info.param == AttentionMode::Packed ? "Packed" : "Grouped"; });

TEST(Attention, AutoTakesAPathOnRealTokensWhereverThereIsPaddingAndPaddedForADenseBatch) {
  const TokenLayout dense(std::vector<int64_t>(32, 64), 64, at::kCPU);
  const TokenLayout skewed_batch({4, 6, 8, 5, 7, 120, 9, 6}, 120, at::kCPU);
  EXPECT_FALSE(cpu_packed_pays(dense));
  EXPECT_TRUE(cpu_packed_pays(skewed_batch));
  EXPECT_TRUE(cpu_packed_pays(TokenLayout({60, 64, 64, 64}, 64, at::kCPU))) << "padding, however little";
  const auto before = attention_path_counts();
  const at::Tensor x = at::randn({dense.tokens, 2, 8});
  attention(x, x, x, dense, AttentionCall{});
  const auto after = attention_path_counts();
  EXPECT_EQ(after[size_t(AttentionPath::CpuPadded)] - before[size_t(AttentionPath::CpuPadded)], 1)
      << "the profile counts each path taken";
  // With padding: each text alone without dropout, texts of about one length together with it.
  const at::Tensor y = at::randn({skewed_batch.tokens, 2, 8});
  AttentionCall training;
  training.dropout_p = 0.1;
  for (const auto& [call, path] : {std::pair{AttentionCall{}, AttentionPath::CpuPacked}, {training, AttentionPath::CpuGrouped}}) {
    const auto was = attention_path_counts();
    attention(y, y, y, skewed_batch, call);
    EXPECT_EQ(attention_path_counts()[size_t(path)] - was[size_t(path)], 1) << attention_path_name(path);
  }
}

// Each path's first call logs it; the line is made that once, not on each layer's call,
// from one thread or from several at once.
TEST(Attention, EachPathsLogLineIsMadeOnceHoweverManyCallsTakeIt) {
  const TokenLayout skewed_batch({4, 6, 8, 5, 7, 12, 9, 6}, 12, at::kCPU);
  const at::Tensor y = at::randn({skewed_batch.tokens, 2, 8});
  AttentionCall packed, padded, grouped;
  packed.mode = AttentionMode::Packed;
  padded.mode = AttentionMode::Padded;
  grouped.dropout_p = 0.1;  // auto with dropout and padding: grouped
  for (const auto& [call, path] : {std::pair{packed, AttentionPath::CpuPacked}, {padded, AttentionPath::CpuPadded}}) {
    const auto calls = attention_path_counts();
    for (int i = 0; i < 50; ++i) attention(y, y, y, skewed_batch, call);
    EXPECT_EQ(attention_path_counts()[size_t(path)] - calls[size_t(path)], 50) << attention_path_name(path);
    EXPECT_EQ(attention_log_lines_built()[size_t(path)], 1) << attention_path_name(path);
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      at::NoGradGuard no_grad;
      for (int i = 0; i < 10; ++i) attention(y, y, y, skewed_batch, grouped);
    });
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(attention_log_lines_built()[size_t(AttentionPath::CpuGrouped)], 1);
}

// Inputs attention cannot take are a ModelError (model/model_error.h) that says which.
TEST(Attention, InputsOfTheWrongShapeAreAModelErrorNamingThem) {
  const TokenLayout layout({3, 2}, 3, at::kCPU);
  const at::Tensor x = at::randn({layout.tokens, 2, 8});
  try {
    attention(x, x, x.narrow(0, 0, 4), layout, AttentionCall{});
    ADD_FAILURE() << "k and v of different shapes were taken";
  } catch (const ModelError& e) {
    EXPECT_NE(std::string(e.what()).find("attention: k [5, 2, 8] and v [4, 2, 8] differ"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(attention(x.narrow(0, 0, 4), x, x, layout, AttentionCall{}), ModelError);
  EXPECT_THROW(TokenLayout(at::tensor({int64_t{0}, int64_t{1}}).view({1, 2})), ModelError) << "left padding";
}

// What sits in the padding (other token ids, any length of it) changes no real token's
// output, on either path, for BERT (bidirectional) and Qwen3 (causal, grouped heads).
TEST(Attention, PaddingContentChangesNothingInEitherEncoder) {
  const OneIntraOpThread one_thread;  // bit for bit (one_thread.h)
  at::manual_seed(6);
  BertConfig bert;
  bert.vocab_size = 60;
  bert.hidden_size = 32;
  bert.num_layers = 2;
  bert.num_heads = 4;
  bert.intermediate_size = 48;
  Qwen3Config qwen3;
  qwen3.vocab_size = 60;
  qwen3.hidden_size = 32;
  qwen3.intermediate_size = 48;
  qwen3.num_layers = 2;
  qwen3.num_heads = 4;
  qwen3.num_kv_heads = 2;
  qwen3.head_dim = 8;
  std::vector<std::shared_ptr<TextEncoderImpl>> encoders{std::make_shared<BertModelImpl>(bert),
                                                         std::make_shared<Qwen3ModelImpl>(qwen3)};
  const std::vector<int64_t> lengths{3, 11, 1, 7};
  const int64_t batch = 4, length = 11;
  at::Tensor mask = at::zeros({batch, length}, at::kLong);
  for (int64_t b = 0; b < batch; ++b) mask[b].narrow(0, 0, lengths[size_t(b)]).fill_(1);
  const at::Tensor ids = at::randint(5, 60, {batch, length});
  const at::Tensor other_ids = at::where(mask.eq(1), ids, at::randint(5, 60, {batch, length}));
  // The same texts padded further.
  const at::Tensor wider_ids = at::constant_pad_nd(other_ids, {0, 6}, 7);
  const at::Tensor wider_mask = at::constant_pad_nd(mask, {0, 6}, 0);
  at::NoGradGuard no_grad;
  for (auto& encoder : encoders) {
    encoder->eval();
    for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
      encoder->set_attention_mode(mode);
      const at::Tensor real = mask.unsqueeze(-1);
      const at::Tensor a = encoder->forward(ids, mask) * real;
      const at::Tensor b = encoder->forward(other_ids, mask) * real;
      const at::Tensor c = encoder->forward(wider_ids, wider_mask).narrow(1, 0, length) * real;
      EXPECT_TRUE(at::equal(a, b)) << choice_name(mode);
      EXPECT_LT((a - c).abs().max().item<double>(), 1e-6) << choice_name(mode);
      for (const Pooling pooling : {Pooling::Cls, Pooling::Mean, Pooling::LastToken}) {
        const at::Tensor pooled = encoder->forward_pooled(other_ids, mask, pooling);
        EXPECT_LT((pooled - pool(a, mask, pooling)).abs().max().item<double>(), 1e-5)
            << choice_name(mode) << " pooling " << choice_name(pooling);
      }
    }
  }
}

// On a GPU (scripts/gpu-check.sh's cuda-tests; skipped elsewhere): CUDA's varlen kernels
// against the padded path on the same GPU, forward and gradients — flash attention for bf16
// and fp16, the memory-efficient kernel for fp32 — and the path each dtype takes.
TEST(Attention, OnAGpuVarlenKernelsMatchPadded) {
  if (!compat::kHasCuda || !compat::nvidia_driver_present() || compat::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  const bool ampere = compat::cuda_capability(0) >= 80;
  struct Case {
    at::ScalarType type;
    AttentionPath path;
    double tolerance;
  };
  std::vector<Case> cases{{at::kFloat, AttentionPath::CudaEfficient, 2e-4}, {at::kHalf, AttentionPath::CudaFlash, 2e-2}};
  if (ampere) cases.push_back({at::kBFloat16, AttentionPath::CudaFlash, 6e-2});
  if (!ampere) cases[1].path = AttentionPath::CudaEfficient;
  at::manual_seed(7);
  for (const Case& c : cases) {
    for (const bool causal : {false, true}) {
      for (const bool one_query : {false, true}) {
        const auto lengths = length_sets()[4];
        const Problem p{lengths, 8, causal ? 2 : 8, 64, causal};
        int64_t tokens = 0;
        for (int64_t l : lengths) tokens += l;
        const TokenLayout layout(lengths, 48, gpu);
        AttentionInputs cpu = random_inputs(p, one_query ? static_cast<int64_t>(lengths.size()) : tokens, tokens);
        const auto to_gpu = [&](const at::Tensor& t) { return t.detach().to(gpu, c.type).requires_grad_(true); };
        const AttentionInputs in{to_gpu(cpu.q), to_gpu(cpu.k), to_gpu(cpu.v), cpu.weights.to(gpu, c.type)};
        AttentionCall call;
        call.causal = causal;
        call.one_query_per_sequence = one_query;
        call.mode = AttentionMode::Padded;
        const Result want = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        call.mode = AttentionMode::Auto;
        const auto before = attention_path_counts();
        const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        EXPECT_EQ(attention_path_counts()[size_t(c.path)] - before[size_t(c.path)], 1)
            << c10::toString(c.type) << " took another path than " << attention_path_name(c.path);
        const auto as_float = [](const Result& r) {
          return Result{r.out.to(at::kFloat), r.dq.to(at::kFloat), r.dk.to(at::kFloat), r.dv.to(at::kFloat)};
        };
        EXPECT_LT(worst_scaled(as_float(got), as_float(want)), c.tolerance)
            << c10::toString(c.type) << (causal ? " causal" : " bidirectional") << (one_query ? ", one query" : "");
      }
    }
  }
}
