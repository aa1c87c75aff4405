// How far apart two results computed in other orders may be, and why.
//
// The exactness tests hold two computations to each other: N workers against one, a
// sharded or cached step against the plain one, a resumed run against an uninterrupted
// one, our encoder against transformers' on the same weights. Where both do the same
// operations on the same values in the same order they are compared bit for bit, and the
// test says why the order is the same on every CPU. Where the orders differ, the results
// differ by rounding, and by how much depends on the CPU: LibTorch picks its kernels by
// the CPU's vector extensions (ATen's AVX-512, AVX2 or plain loops; MKL's and oneDNN's
// GEMMs), and each blocks its sums its own way. A bound fitted to one machine's run is
// then no bound: the next CPU rounds past it. So each bound here is derived from what it
// bounds, and the tests name the one they use:
//
//  - step_rounding(n): what a whole step's loss or gradient norm may move by when its
//    sums of at most n terms are added in other orders. The worst case of one such sum,
//    (n-1)·u·Σ|x| for each order (Higham, Accuracy and Stability of Numerical Algorithms,
//    §4.2), is reached by no real sum and says nothing of a step of millions of them:
//    n = 1024 gives 1.2e-4 a sum. Rounding errors of a long
//    computation behave as independent and of either sign (Higham & Mary, "A new approach
//    to probabilistic rounding error analysis", SIAM J. Sci. Comput. 2019): a sum of n
//    terms is then within λ·√n·u·Σ|x| of the exact one with probability at least
//    1 - 2n·exp(-λ²/2); λ = 8 makes a miss 2.5e-14·n, about one sum in 10^10 for the
//    sums of a thousand terms here. Two orders: 2λ√n·u.
//  - a softmax's sensitivity: the losses rank scores s/τ (cosines over the temperature),
//    so a rounding δ of a cosine moves a score by δ/τ, and the loss and its gradient by
//    as much relative to their size; e2e::step_bound multiplies step_rounding by 1/τ.
//  - Adam's amplification (adam_update_bound): AdamW moves a parameter by lr·m̂/(√v̂+ε),
//    about lr·sign(g) in the first steps whatever |g| is. A parameter whose true gradient
//    is ~0 (an attention key bias: softmax ignores a shift of a row; the embedding row of
//    a token that one text uses in passing) has rounding noise for its gradient, whose
//    sign differs between summation orders: the two runs move it by up to lr each, in
//    opposite directions. Such a parameter barely changes the loss (that is why its
//    gradient is ~0), so it moves the loss and the other parameters by nothing
//    measurable; the weights' comparison allows a few of them (e2e::expect_same_model).
//    For a parameter whose gradient is well above its rounding, the update's relative
//    difference is the gradient's, so the weight differs by about lr·step_rounding a step.
//
// Why a training run's loss and gradient norm stay within one step's bound over its few
// steps (a dozen at most in these tests) instead of drifting: the first step's update is
// lr·sign(g) for every parameter the loss uses, the same in both runs; later updates
// differ by lr times the gradients' relative rounding (about 1e-9 at lr 1e-3, against
// weights of 0.05), and the parameters Adam moves by a whole lr are the ones the loss does
// not see. So each step's values differ by that step's own rounding, and no more.
//
// scripts/dev/cpu-paths.sh runs the exactness tests under LibTorch's plain, AVX2 and
// AVX-512 kernels (ATEN_CPU_CAPABILITY, MKL_ENABLE_INSTRUCTIONS, ONEDNN_MAX_CPU_ISA) and
// tables how much of each bound every comparison used: with DDP_EMBED_TOLERANCE_LOG=FILE,
// record() appends "test<TAB>what<TAB>observed<TAB>bound" to FILE.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

namespace tolerance {

// fp32's unit roundoff: one correctly rounded operation is off by at most u of its result.
constexpr double kFp32Unit = 0x1p-24;

// The λ of the probabilistic bound: one sum of a thousand terms in about 10^10 exceeds it (see above).
constexpr double kLambda = 8.0;

// A step's loss or gradient norm whose longest sums have n terms, computed in two orders,
// relative to its value (see above). n = 1024 (a tiny model's 16 pairs of 32 tokens,
// summed into a weight's gradient): 3.1e-5.
inline double step_rounding(int64_t n) { return 2.0 * kLambda * std::sqrt(double(n)) * kFp32Unit; }

// The most one AdamW step can move a parameter, in units of lr, in a run of `steps`
// steps with β1 = 0.9, β2 = 0.999 (ours): |m̂/√v̂| ≤ (1-β1)/(1-β1^t) · sqrt(Σ_k β1^{2k}/β2^k)
// · sqrt((1-β2^t)/(1-β2)) by Cauchy–Schwarz over the t gradients so far; 1 at t = 1, 1.09
// at t = 10, 7.3 as t grows without end.
inline double adam_update_bound(int steps) {
  const double b1 = 0.9, b2 = 0.999;
  double worst = 0;
  for (int t = 1; t <= steps; ++t) {
    double s = 0;
    for (int k = 0; k < t; ++k) s += std::pow(b1 * b1 / b2, k);
    worst = std::max(worst, (1 - b1) / (1 - std::pow(b1, t)) * std::sqrt(s) * std::sqrt((1 - std::pow(b2, t)) / (1 - b2)));
  }
  return worst;
}

// Appends one comparison to $DDP_EMBED_TOLERANCE_LOG (when set): the running test's name,
// what was compared, the difference seen and the bound it was held to. One write() of one
// line to a file opened O_APPEND, so tests side by side do not interleave.
inline void record(const std::string& what, double observed, double bound) {
  const char* path = std::getenv("DDP_EMBED_TOLERANCE_LOG");
  if (!path || !*path) return;
  const ::testing::TestInfo* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = test ? std::string(test->test_suite_name()) + "." + test->name() : "?";
  char numbers[64];
  std::snprintf(numbers, sizeof numbers, "\t%.6g\t%.6g\n", observed, bound);
  const std::string line = name + "\t" + what + numbers;  // `what` is one line: the tests' own labels
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t written = ::write(fd, line.data(), line.size());
  ::close(fd);
}

}  // namespace tolerance
