// contrastive_loss against the peers' own loss code on the same embeddings, values and
// gradients: sentence-transformers' MultipleNegativesRankingLoss (its class, run by
// scripts/python/loss_reference.py in the project's .venv) for "infonce" — in-batch, with
// hard negatives, and across ranks — and the seeds' pairwise sigmoid loss for
// "pairwise_sigmoid". This is what makes the benchmark's comparison (scripts/bench-vs-st.sh)
// one of equal recipes: temperature 0.05 is MNRL's scale 20.
#include "e2e_support.h"
#include "model/loss.h"
#include "model/weights.h"

using namespace e2e;
using namespace ddp_embed;

namespace {

constexpr int64_t kBatch = 6, kDim = 12, kRanks = 3, kRank = 1;
constexpr double kTemperature = 0.05;

at::Tensor find(const NamedTensors& tensors, const std::string& name) {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  ADD_FAILURE() << "loss_reference.py wrote no tensor " << name;
  return {};
}

struct Ours {
  double loss;
  at::Tensor grad_q, grad_candidates;
};

// Our loss and its gradients on double inputs (the peers' run in double too).
Ours ours(const at::Tensor& q, const at::Tensor& candidates, int64_t offset, const std::string& type) {
  at::Tensor lq = q.clone().requires_grad_(true), lc = candidates.clone().requires_grad_(true);
  at::Tensor loss = contrastive_loss(lq, lc, offset, type, kTemperature);
  loss.backward();
  return {loss.item<double>(), lq.grad(), lc.grad()};
}

void expect_close(const at::Tensor& ours, const at::Tensor& theirs, const std::string& what) {
  ASSERT_TRUE(theirs.defined()) << what;
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  const double diff = (ours - theirs).abs().max().item<double>();
  EXPECT_LT(diff, 1e-10 * (1 + theirs.abs().max().item<double>())) << what << ": max abs difference " << diff;
}

// The inputs, and the peers' losses on them: Python runs once for the whole suite.
struct Case {
  at::Tensor q, p, n, all_p;
  NamedTensors theirs;
  std::string error;  // Python failed: every test fails with its output
};

const Case& the_case() {
  static const Case c = [] {
    Case c;
    // Positives and hard negatives near their queries, with enough noise that at
    // temperature 0.05 the losses are neither saturated nor uniform.
    at::manual_seed(11);
    const auto f64 = at::TensorOptions().dtype(at::kDouble);
    c.q = at::randn({kBatch, kDim}, f64);
    c.p = c.q + 2.0 * at::randn({kBatch, kDim}, f64);
    c.n = c.q + 2.5 * at::randn({kBatch, kDim}, f64);
    c.all_p = at::randn({kRanks * kBatch, kDim}, f64);
    c.all_p.narrow(0, kRank * kBatch, kBatch).copy_(c.p);

    const fs::path dir = fresh_dir("loss-reference");
    const std::string in = (dir / "in.safetensors").string(), out = (dir / "out.safetensors").string();
    save_tensors(in, {{"q", c.q}, {"p", c.p}, {"n", c.n}, {"c", c.all_p},
                      {"rank", at::tensor(double(kRank), f64)}, {"temperature", at::tensor(kTemperature, f64)}});
    const auto r = run(std::string(DDP_EMBED_PYTHON) + " " + kSrc + "/scripts/python/loss_reference.py " + in + " " + out);
    if (r.exit_code != 0) {
      c.error = r.output;
    } else {
      c.theirs = load_tensors(out);
    }
    return c;
  }();
  return c;
}

class PeerLosses : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(c.error.empty()) << "loss_reference.py failed:\n" << c.error; }
  const Case& c = the_case();
  const at::Tensor &q = c.q, &p = c.p, &n = c.n, &all_p = c.all_p;
  const NamedTensors& theirs = c.theirs;
};

TEST_F(PeerLosses, InfoNceIsMultipleNegativesRankingLoss) {
  const Ours o = ours(q, p, 0, "infonce");
  EXPECT_NEAR(o.loss, find(theirs, "mnrl.loss").item<double>(), 1e-12);
  EXPECT_GT(o.loss, 0.1);  // not a saturated case where every loss is ~0
  expect_close(o.grad_q, find(theirs, "mnrl.grad_q"), "dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "mnrl.grad_p"), "dloss/dp");
}

TEST_F(PeerLosses, InfoNceWithHardNegativesIsMnrlOnTriplets) {
  const Ours o = ours(q, at::cat({p, n}), 0, "infonce");
  EXPECT_NEAR(o.loss, find(theirs, "mnrl_hard.loss").item<double>(), 1e-12);
  expect_close(o.grad_q, find(theirs, "mnrl_hard.grad_q"), "dloss/dq");
  expect_close(o.grad_candidates, at::cat({find(theirs, "mnrl_hard.grad_p"), find(theirs, "mnrl_hard.grad_n")}),
               "dloss/d[p; n]");
}

TEST_F(PeerLosses, CrossRankNegativesAreMnrlGatheredAcrossDevices) {
  const Ours o = ours(q, all_p, kRank * kBatch, "infonce");
  EXPECT_NEAR(o.loss, find(theirs, "mnrl_gathered.loss").item<double>(), 1e-12);
  expect_close(o.grad_q, find(theirs, "mnrl_gathered.grad_q"), "dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "mnrl_gathered.grad_c"), "dloss/d(all ranks' p)");
  // More candidates than in-batch alone: a different (larger) loss.
  EXPECT_GT(o.loss, ours(q, p, 0, "infonce").loss);
}

TEST_F(PeerLosses, PairwiseSigmoidIsTheSeedsLoss) {
  const Ours o = ours(q, p, 0, "pairwise_sigmoid");
  EXPECT_NEAR(o.loss, find(theirs, "seeds.loss").item<double>(), 1e-12);
  expect_close(o.grad_q, find(theirs, "seeds.grad_q"), "dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "seeds.grad_p"), "dloss/dp");
}

}  // namespace
