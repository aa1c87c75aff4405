// Attention with a window and a bias (model/attention.h: AttentionCall's window_left,
// window_right and bias): every CPU path against a reference of its own — each batch padded
// here, one plain at::scaled_dot_product_attention with an explicit float mask made element
// by element on the host from the header's rule (query i sees key j iff i - left <= j <= i +
// right, inside its text), plus the bias's top-left block — forward and the gradients of q,
// k, v and the bias, on uneven lengths, bidirectional bands, causal windows and one query a
// sequence; with dropout, backward against finite differences of its own forward, the
// bias's included; a window side below -1 and a bias of the wrong shape or dtype are
// ModelErrors.
#include "model/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compat/cuda_support.h"

using namespace ddp_embed;

// A namespace of its own: the unity build compiles this file with test_attention.cpp, whose
// helpers have the same names.
namespace attention_window_test {
namespace {

struct Window {
  int64_t left, right;
};

struct Inputs {
  at::Tensor q, k, v;  // packed, requiring grad: q [N or B, q_heads, D], k and v [N, kv_heads, D]
  at::Tensor bias;     // [q_heads, L, L] requiring grad, or undefined
  at::Tensor weights;  // the loss: sum(out * weights)
};

struct Result {
  at::Tensor out, dq, dk, dv, dbias;  // dbias: 0 without a bias
};

template <class F>
Result run(const Inputs& in, F&& attend) {
  for (const at::Tensor& t : {in.q, in.k, in.v, in.bias})
    if (t.defined()) t.mutable_grad() = at::Tensor();
  Result r;
  r.out = attend();
  (r.out * in.weights).sum().backward();
  r.dq = in.q.grad().clone();
  r.dk = in.k.grad().clone();
  r.dv = in.v.grad().clone();
  r.dbias = in.bias.defined() ? in.bias.grad().clone() : at::zeros({1});
  return r;
}

double worst(const Result& a, const Result& b) {
  double w = 0;
  for (const auto& [x, y] : {std::pair{a.out, b.out}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}, {a.dbias, b.dbias}})
    w = std::max(w, (x - y).abs().max().item<double>());
  return w;
}

int64_t total(const std::vector<int64_t>& lengths) {
  int64_t n = 0;
  for (int64_t l : lengths) n += l;
  return n;
}

// The reference: padded to the longest here, grouped heads repeated, one SDPA call with a
// float mask of 0 where the query at position i may see key j of its text and float's
// lowest where not (a padded query row of nothing but that is uniform, finite, and dropped),
// plus the bias's row i (its top-left block; lowest plus a bias of about 1 stays finite).
// One query a sequence stands at its text's last position when causal, its first otherwise.
at::Tensor reference(const Inputs& in, const std::vector<int64_t>& lengths, bool causal, Window w, bool one_query) {
  const int64_t batch = static_cast<int64_t>(lengths.size());
  const int64_t longest = *std::max_element(lengths.begin(), lengths.end());
  const int64_t q_heads = in.q.size(1), group = q_heads / in.k.size(1);
  const auto padded = [&](const at::Tensor& t) {  // [N, h, D] → [B, h, L, D], zeros at padding
    std::vector<at::Tensor> rows;
    int64_t start = 0;
    for (int64_t l : lengths) {
      rows.push_back(at::constant_pad_nd(t.narrow(0, start, l), {0, 0, 0, 0, 0, longest - l}));
      start += l;
    }
    return at::stack(rows).transpose(1, 2);
  };
  const at::Tensor k = padded(in.k).repeat_interleave(group, 1), v = padded(in.v).repeat_interleave(group, 1);
  const int64_t right = causal ? 0 : w.right, queries = one_query ? 1 : longest;
  at::Tensor mask = at::zeros({batch, 1, queries, longest});
  auto m = mask.accessor<float, 4>();
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t l = lengths[size_t(b)];
    for (int64_t r = 0; r < queries; ++r) {
      const int64_t i = one_query ? (causal ? std::max<int64_t>(l - 1, 0) : 0) : r;
      for (int64_t j = 0; j < longest; ++j) {
        const bool seen = j < l && (w.left < 0 || j >= i - w.left) && (right < 0 || j <= i + right);
        if (!seen) m[b][0][r][j] = std::numeric_limits<float>::lowest();
      }
    }
  }
  if (in.bias.defined()) {
    const at::Tensor block = in.bias.narrow(1, 0, longest).narrow(2, 0, longest);  // [h, L, L]
    if (one_query) {
      std::vector<at::Tensor> rows;  // [h, 1, L] each
      for (int64_t l : lengths) rows.push_back(block.narrow(1, causal ? std::max<int64_t>(l - 1, 0) : 0, 1));
      mask = mask + at::stack(rows);
    } else {
      mask = mask + block.unsqueeze(0);
    }
  }
  if (one_query) return at::scaled_dot_product_attention(in.q.unsqueeze(2), k, v, mask).squeeze(2);
  const at::Tensor out = at::scaled_dot_product_attention(padded(in.q), k, v, mask).transpose(1, 2);  // [B, L, h, D]
  std::vector<at::Tensor> rows;
  for (int64_t b = 0; b < batch; ++b) rows.push_back(out[b].narrow(0, 0, lengths[size_t(b)]));
  return at::cat(rows);
}

Inputs random_inputs(int64_t q_rows, int64_t tokens, int64_t q_heads, int64_t kv_heads, int64_t dims) {
  Inputs in;
  in.q = at::randn({q_rows, q_heads, dims}).requires_grad_(true);
  in.k = at::randn({tokens, kv_heads, dims}).requires_grad_(true);
  in.v = at::randn({tokens, kv_heads, dims}).requires_grad_(true);
  in.weights = at::randn({q_rows, q_heads, dims});
  return in;
}

// Uneven lengths: one token, texts shorter and longer than every window below, one far
// longer (the grouped path cuts it off into a run of its own), the same length twice.
std::vector<std::vector<int64_t>> length_sets() {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int64_t> any(1, 30);
  std::vector<int64_t> random;
  for (int i = 0; i < 11; ++i) random.push_back(any(rng));
  random[2] = 1;
  return {{1}, {9, 9, 9}, random, {2, 70, 3, 25, 4, 68, 5}};
}

struct WindowCase {
  bool causal;
  Window window;
  const char* what;
};

// Bidirectional bands (even, uneven, the query alone, one side only) and causal windows.
const std::vector<WindowCase>& window_cases() {
  static const std::vector<WindowCase> cases{
      {false, {2, 2}, "band (2, 2)"},          {false, {5, 1}, "band (5, 1)"},
      {false, {0, 0}, "band (0, 0)"},          {false, {-1, 3}, "right only (-1, 3)"},
      {false, {4, -1}, "left only (4, -1)"},   {true, {3, -1}, "causal, left 3"},
      {true, {0, -1}, "causal, left 0"},       {true, {6, 2}, "causal, left 6 (right 2 ignored)"},
  };
  return cases;
}

std::string describe(const WindowCase& c, const std::vector<int64_t>& lengths, const char* path) {
  return std::string(path) + ", " + c.what + ", " + std::to_string(lengths.size()) + " texts";
}

}  // namespace

TEST(AttentionWindow, EveryCpuPathMatchesPaddedSdpaWithTheBandAsAFloatMask) {
  at::manual_seed(21);
  for (const WindowCase& c : window_cases()) {
    for (const auto& lengths : length_sets()) {
      const int64_t tokens = total(lengths);
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()) + 2, at::kCPU);
      // Qwen3-like grouped heads when causal, BERT-like heads otherwise.
      const Inputs in = random_inputs(tokens, tokens, 4, c.causal ? 2 : 4, 16);
      const Result want = run(in, [&] { return reference(in, lengths, c.causal, c.window, false); });
      AttentionCall call;
      call.causal = c.causal;
      call.window_left = c.window.left;
      call.window_right = c.window.right;
      for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded, AttentionMode::Auto}) {
        for (const bool recompute : {false, true}) {
          call.mode = mode;
          call.recompute_padded = recompute;
          const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
          EXPECT_LT(worst(got, want), 1e-5)
              << describe(c, lengths, choice_name(mode).c_str()) << ", recompute " << recompute;
        }
      }
      call.mode = AttentionMode::Auto;
      const Result grouped = run(in, [&] { return cpu_attention_grouped(in.q, in.k, in.v, layout, call); });
      EXPECT_LT(worst(grouped, want), 1e-5) << describe(c, lengths, "grouped");
    }
  }
}

// One query a sequence: the last token's window when causal (Qwen3's pooled token), the
// first token's otherwise (BERT's), on the packed, padded and grouped paths.
TEST(AttentionWindow, OneQueryPerSequenceSeesTheWindowAroundItsPosition) {
  at::manual_seed(22);
  for (const WindowCase& c : window_cases()) {
    for (const auto& lengths : length_sets()) {
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()), at::kCPU);
      const Inputs in = random_inputs(layout.batch, layout.tokens, 4, 2, 8);
      const Result want = run(in, [&] { return reference(in, lengths, c.causal, c.window, true); });
      AttentionCall call;
      call.causal = c.causal;
      call.window_left = c.window.left;
      call.window_right = c.window.right;
      call.one_query_per_sequence = true;
      for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
        call.mode = mode;
        const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        EXPECT_LT(worst(got, want), 1e-5) << describe(c, lengths, choice_name(mode).c_str());
      }
      const Result grouped = run(in, [&] { return cpu_attention_grouped(in.q, in.k, in.v, layout, call); });
      EXPECT_LT(worst(grouped, want), 1e-5) << describe(c, lengths, "grouped");
    }
  }
}

// The reference above could agree with a window that is ignored only if the window hid
// nothing: on these texts it hides most keys, and the output moves.
TEST(AttentionWindow, AWindowNarrowerThanTheTextChangesItsOutput) {
  at::manual_seed(23);
  const TokenLayout layout({20, 12}, 20, at::kCPU);
  const at::Tensor x = at::randn({layout.tokens, 2, 8});
  AttentionCall whole, band;
  band.window_left = band.window_right = 1;
  for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
    whole.mode = band.mode = mode;
    EXPECT_GT((attention(x, x, x, layout, whole) - attention(x, x, x, layout, band)).abs().max().item<double>(), 1e-2)
        << choice_name(mode);
  }
}

// Long texts under a narrow window (ModernBERT's local layers, Gemma 3's sliding ones): the
// CPU reads each block of queries' band of keys, not the whole text (model/attention.h),
// and gives the whole call's values and gradients — bidirectional, causal and one query a
// sequence, texts that are and are not whole blocks; auto takes that path even for a batch
// without padding (where it would otherwise take one padded call over every key).
TEST(AttentionWindow, LongTextsUnderANarrowWindowReadOnlyTheirBandAndMatchTheWholeCall) {
  at::manual_seed(24);
  const std::vector<int64_t> lengths{300, 257, 40, 1};
  const TokenLayout layout(lengths, 300, at::kCPU);
  for (const WindowCase& c : {WindowCase{false, {16, 16}, "band (16, 16)"}, WindowCase{false, {40, 3}, "band (40, 3)"},
                              WindowCase{true, {31, -1}, "causal, left 31"}}) {
    for (const bool one_query : {false, true}) {
      const Inputs in = random_inputs(one_query ? layout.batch : layout.tokens, layout.tokens, 4, 2, 16);
      const Result want = run(in, [&] { return reference(in, lengths, c.causal, c.window, one_query); });
      AttentionCall call;
      call.causal = c.causal;
      call.window_left = c.window.left;
      call.window_right = c.window.right;
      call.one_query_per_sequence = one_query;
      for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Auto}) {
        call.mode = mode;
        const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        EXPECT_LT(worst(got, want), 1e-5) << describe(c, lengths, choice_name(mode).c_str()) << ", one query "
                                          << one_query;
      }
    }
  }
  // A batch without padding: auto's rule alone would take the padded path.
  const TokenLayout dense({256, 256}, 256, at::kCPU);
  const at::Tensor x = at::randn({dense.tokens, 2, 8});
  AttentionCall call;
  call.window_left = call.window_right = 8;
  const auto before = attention_path_counts();
  attention(x, x, x, dense, call);
  const auto after = attention_path_counts();
  EXPECT_EQ(after[size_t(AttentionPath::CpuPacked)] - before[size_t(AttentionPath::CpuPacked)], 1);
  EXPECT_EQ(after[size_t(AttentionPath::CpuPadded)] - before[size_t(AttentionPath::CpuPadded)], 0);
}

TEST(AttentionWindow, AWindowSideBelowMinusOneIsAModelErrorNamingIt) {
  const TokenLayout layout({3, 2}, 3, at::kCPU);
  const at::Tensor x = at::randn({layout.tokens, 2, 8});
  for (const Window w : {Window{-2, 3}, Window{3, -5}}) {
    AttentionCall call;
    call.window_left = w.left;
    call.window_right = w.right;
    try {
      attention(x, x, x, layout, call);
      ADD_FAILURE() << "window (" << w.left << ", " << w.right << ") was taken";
    } catch (const ModelError& e) {
      const std::string want = "attention: window (" + std::to_string(w.left) + ", " + std::to_string(w.right) + ")";
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// A learned bias [heads, L, L] (MPNet's relative positions), alone and with causal masks
// and windows, wider than the batch (each text takes its top-left block): every CPU path,
// every query a sequence and one, forward and the gradients of q, k, v and the bias.
TEST(AttentionBias, EveryCpuPathMatchesPaddedSdpaWithTheBiasAddedForwardAndGradients) {
  at::manual_seed(24);
  const std::vector<WindowCase> cases{{false, {-1, -1}, "bidirectional"},
                                      {true, {-1, -1}, "causal"},
                                      {false, {2, 2}, "band (2, 2)"},
                                      {true, {3, -1}, "causal, left 3"}};
  for (const WindowCase& c : cases) {
    for (const auto& lengths : length_sets()) {
      const TokenLayout layout(lengths, *std::max_element(lengths.begin(), lengths.end()) + 2, at::kCPU);
      AttentionCall call;
      call.causal = c.causal;
      call.window_left = c.window.left;
      call.window_right = c.window.right;
      for (const bool one_query : {false, true}) {
        Inputs in = random_inputs(one_query ? layout.batch : layout.tokens, layout.tokens, 4, c.causal ? 2 : 4, 16);
        in.bias = at::randn({4, layout.length + 3, layout.length + 3}).requires_grad_(true);
        call.bias = in.bias;
        call.one_query_per_sequence = one_query;
        const Result want = run(in, [&] { return reference(in, lengths, c.causal, c.window, one_query); });
        const std::string what = std::string(c.what) + (one_query ? ", one query" : "");
        for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded, AttentionMode::Auto}) {
          for (const bool recompute : {false, true}) {
            call.mode = mode;
            call.recompute_padded = recompute;
            const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
            EXPECT_LT(worst(got, want), 1e-5)
                << describe({c.causal, c.window, what.c_str()}, lengths, choice_name(mode).c_str()) << ", recompute "
                << recompute;
          }
        }
        const Result grouped = run(in, [&] { return cpu_attention_grouped(in.q, in.k, in.v, layout, call); });
        EXPECT_LT(worst(grouped, want), 1e-5) << describe({c.causal, c.window, what.c_str()}, lengths, "grouped");
      }
    }
  }
}

// A bias that matters: the output moves with it, and it receives a gradient, on the packed
// and the padded path.
TEST(AttentionBias, TheBiasChangesTheOutputAndReceivesAGradient) {
  at::manual_seed(25);
  const TokenLayout layout({7, 3}, 7, at::kCPU);
  const at::Tensor x = at::randn({layout.tokens, 2, 8});
  const at::Tensor bias = at::randn({2, 7, 7}).mul_(3).requires_grad_(true);
  for (const AttentionMode mode : {AttentionMode::Packed, AttentionMode::Padded}) {
    AttentionCall plain, biased;
    plain.mode = biased.mode = mode;
    biased.bias = bias;
    bias.mutable_grad() = at::Tensor();
    const at::Tensor out = attention(x, x, x, layout, biased);
    EXPECT_GT((out - attention(x, x, x, layout, plain)).abs().max().item<double>(), 1e-2) << choice_name(mode);
    out.pow(2).sum().backward();
    EXPECT_GT(bias.grad().abs().max().item<double>(), 1e-3) << choice_name(mode);
  }
}

TEST(AttentionBias, ABiasOfTheWrongShapeOrDtypeIsAModelErrorNamingIt) {
  const TokenLayout layout({3, 2}, 3, at::kCPU);
  const at::Tensor x = at::randn({layout.tokens, 2, 8});
  const std::vector<std::pair<at::Tensor, std::string>> cases{
      {at::zeros({3, 3, 3}), "attention: bias [3, 3, 3] must be [q_heads 2, L, L] with L at least the padded length 3"},
      {at::zeros({2, 3, 4}), "attention: bias [2, 3, 4] must be [q_heads 2, L, L]"},
      {at::zeros({2, 2, 2}), "attention: bias [2, 2, 2] must be [q_heads 2, L, L] with L at least the padded length 3"},
      {at::zeros({2, 3}), "attention: bias [2, 3] must be"},
      {at::zeros({2, 3, 3}, at::kLong), "attention: bias is Long, not a floating-point dtype"},
  };
  for (const auto& [bias, want] : cases) {
    AttentionCall call;
    call.bias = bias;
    try {
      attention(x, x, x, layout, call);
      ADD_FAILURE() << "bias " << bias.sizes() << " " << bias.scalar_type() << " was taken";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  }
}

// Dropout with a bias and a window, on the packed, padded and grouped paths (auto with
// dropout, on lengths it cuts into two runs): backward is the gradient of the forward that
// ran, the bias's included (finite differences, the generator reset before each forward).
class AttentionBiasDropout : public ::testing::TestWithParam<AttentionMode> {};

TEST_P(AttentionBiasDropout, BackwardIsTheGradientOfItsForwardForTheBiasToo) {
  const bool grouped = GetParam() == AttentionMode::Auto;
  const std::vector<int64_t> lengths = grouped ? std::vector<int64_t>{2, 120, 3, 118} : std::vector<int64_t>{5, 9, 1, 14};
  const TokenLayout layout(lengths, grouped ? 120 : 14, at::kCPU);
  at::manual_seed(26);
  Inputs in = random_inputs(layout.tokens, layout.tokens, 4, 4, 8);
  in.bias = at::randn({4, layout.length, layout.length}).requires_grad_(true);
  AttentionCall call;
  call.window_left = 3;
  call.window_right = 2;
  call.bias = in.bias;
  call.dropout_p = 0.3;
  call.mode = GetParam();
  const auto loss = [&] {
    at::manual_seed(99);
    return (attention(in.q, in.k, in.v, layout, call) * in.weights).sum();
  };
  const auto before = attention_path_counts();
  loss().backward();
  const auto path = grouped ? AttentionPath::CpuGrouped
                            : GetParam() == AttentionMode::Packed ? AttentionPath::CpuPacked : AttentionPath::CpuPadded;
  EXPECT_EQ(attention_path_counts()[size_t(path)] - before[size_t(path)], 1) << attention_path_name(path);
  const double eps = 1e-2;
  std::mt19937 rng(2);
  for (const at::Tensor& t : {in.q, in.k, in.bias}) {
    const at::Tensor grad = t.grad().clone();
    at::NoGradGuard no_grad;
    for (int i = 0; i < 12; ++i) {
      // Of the bias, an element every text reads: the top-left 5 × 5 block of a head.
      const int64_t at = t.dim() == 3 ? std::uniform_int_distribution<int64_t>(0, 3)(rng) * t.size(1) * t.size(2) +
                                            std::uniform_int_distribution<int64_t>(0, 4)(rng) * t.size(2) +
                                            std::uniform_int_distribution<int64_t>(0, 4)(rng)
                                      : std::uniform_int_distribution<int64_t>(0, t.numel() - 1)(rng);
      float* x = t.data_ptr<float>() + at;
      const float keep = *x;
      *x = keep + float(eps);
      const double up = loss().item<double>();
      *x = keep - float(eps);
      const double down = loss().item<double>();
      *x = keep;
      const double numeric = (up - down) / (2 * eps), analytic = grad.view(-1)[at].item<double>();
      EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-3 * std::abs(numeric)) << (t.dim() == 3 ? "bias" : "q or k")
                                                                      << " element " << at;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PackedPaddedAndGrouped, AttentionBiasDropout,
                         ::testing::Values(AttentionMode::Packed, AttentionMode::Padded, AttentionMode::Auto),
                         [](const auto& info) {
                           return info.param == AttentionMode::Packed   ? std::string("Packed")
                                  : info.param == AttentionMode::Padded ? std::string("Padded")
                                                                        : std::string("Grouped");
                         });

// On a GPU (skipped elsewhere; in suite Attention for scripts/gpu-check.sh's cuda-tests
// filter, Attention.OnAGpu*): flash attention takes the window as its own window sizes
// (fp16, and bf16 on Ampere or newer) and matches the padded path with the window in its
// mask, forward and gradients, every query a sequence and the last one of a causal text;
// where no kernel takes the call (fp32 with a window; any bias; the first token's window of
// one query a sequence) the padded path runs, and a bias matches the CPU's reference.
TEST(Attention, OnAGpuFlashTakesTheWindowElseThePaddedPathRuns) {
  if (!compat::kHasCuda || !compat::nvidia_driver_present() || compat::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device";
  const at::Device gpu(at::kCUDA, 0);
  const bool ampere = compat::cuda_capability(0) >= 80;
  const auto as_float = [](const Result& r) {
    return Result{r.out.to(at::kFloat), r.dq.to(at::kFloat), r.dk.to(at::kFloat), r.dv.to(at::kFloat),
                  r.dbias.to(at::kFloat)};
  };
  // |a - b| relative to b's largest value where that is over 1 (as test_attention.cpp's).
  const auto worst_scaled = [](const Result& a, const Result& b) {
    double w = 0;
    for (const auto& [x, y] : {std::pair{a.out, b.out}, {a.dq, b.dq}, {a.dk, b.dk}, {a.dv, b.dv}, {a.dbias, b.dbias}})
      w = std::max(w, (x - y).abs().max().item<double>() / std::max(1.0, y.abs().max().item<double>()));
    return w;
  };
  const std::vector<int64_t> lengths = length_sets()[2];
  const TokenLayout layout(lengths, 32, gpu);
  at::manual_seed(27);
  struct Case {
    at::ScalarType type;
    double tolerance;
  };
  std::vector<Case> types{{at::kFloat, 2e-4}, {at::kHalf, 2e-2}};
  if (ampere) types.push_back({at::kBFloat16, 6e-2});
  for (const Case& c : types) {
    for (const WindowCase& w : window_cases()) {
      for (const bool one_query : {false, true}) {
        const Inputs cpu = random_inputs(one_query ? layout.batch : layout.tokens, layout.tokens, 8, 2, 64);
        const auto to_gpu = [&](const at::Tensor& t) { return t.detach().to(gpu, c.type).requires_grad_(true); };
        const Inputs in{to_gpu(cpu.q), to_gpu(cpu.k), to_gpu(cpu.v), at::Tensor(), cpu.weights.to(gpu, c.type)};
        AttentionCall call;
        call.causal = w.causal;
        call.window_left = w.window.left;
        call.window_right = w.window.right;
        call.one_query_per_sequence = one_query;
        call.mode = AttentionMode::Padded;
        const Result want = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        call.mode = AttentionMode::Auto;
        const bool flash = ampere && c.type != at::kFloat && !(one_query && !w.causal);
        const AttentionPath path = flash ? AttentionPath::CudaFlash : AttentionPath::CudaPadded;
        const auto before = attention_path_counts();
        const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
        EXPECT_EQ(attention_path_counts()[size_t(path)] - before[size_t(path)], 1)
            << c10::toString(c.type) << ", " << w.what << ": not " << attention_path_name(path);
        EXPECT_LT(worst_scaled(as_float(got), as_float(want)), c.tolerance)
            << c10::toString(c.type) << ", " << w.what << (one_query ? ", one query" : "");
      }
    }
  }
  // A bias, fp32: the padded path, against the CPU's reference.
  for (const bool causal : {false, true}) {
    Inputs cpu = random_inputs(layout.tokens, layout.tokens, 4, 2, 16);
    cpu.bias = at::randn({4, 32, 32}).requires_grad_(true);
    const Result want = run(cpu, [&] { return reference(cpu, lengths, causal, Window{2, 2}, false); });
    const auto to_gpu = [&](const at::Tensor& t) { return t.detach().to(gpu).requires_grad_(true); };
    Inputs in{to_gpu(cpu.q), to_gpu(cpu.k), to_gpu(cpu.v), to_gpu(cpu.bias), cpu.weights.to(gpu)};
    AttentionCall call;
    call.causal = causal;
    call.window_left = call.window_right = 2;
    call.bias = in.bias;
    const auto before = attention_path_counts();
    const Result got = run(in, [&] { return attention(in.q, in.k, in.v, layout, call); });
    const size_t padded = size_t(AttentionPath::CudaPadded);
    EXPECT_EQ(attention_path_counts()[padded] - before[padded], 1) << "a bias on CUDA: the padded path";
    const Result back{got.out.cpu(), got.dq.cpu(), got.dk.cpu(), got.dv.cpu(), got.dbias.cpu()};
    EXPECT_LT(worst_scaled(back, want), 2e-4) << (causal ? "causal" : "bidirectional") << " with a bias";
  }
}

}  // namespace attention_window_test
