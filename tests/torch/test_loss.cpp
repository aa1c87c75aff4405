// pair_loss's contrastive terms, through loss_support::loss_against (loss_support.h),
// against the formulas evaluated directly in double precision with loops (values and
// hand-derived gradients), extreme similarities, offsets and extra negatives, dtypes; its
// refusals; and, counted by an observer of ATen's ops, that it asks the device for
// nothing that would make the host wait (no unique, no value read back, no copy to it).
#include "model/loss.h"

#include <ATen/record_function.h>
#include <gtest/gtest.h>
#include <torch/types.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "host_waits.h"
#include "loss_support.h"
#include "model/model_error.h"

using namespace ddp_embed;
using loss_support::loss_against;

namespace {

using Matrix = std::vector<std::vector<double>>;

Matrix to_matrix(const at::Tensor& t) {
  const at::Tensor d = t.detach().to(at::kDouble).contiguous();
  Matrix m(d.size(0), std::vector<double>(d.size(1)));
  for (int64_t i = 0; i < d.size(0); ++i)
    for (int64_t j = 0; j < d.size(1); ++j) m[i][j] = d[i][j].item<double>();
  return m;
}

double norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::max(std::sqrt(s), 1e-12);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

double log1p_exp(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
double sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

// The loss and its gradients, written out: L from the cosine matrix, dL/ds by hand, then
// the chain rule through s_ij = q_i·c_j / (|q_i| |c_j| T).
struct Reference {
  double loss = 0;
  Matrix grad_q, grad_c;
};

Reference reference(const Matrix& q, const Matrix& c, int64_t offset, const std::string& type, double t) {
  const size_t b = q.size(), m = c.size();
  Matrix cosine(b, std::vector<double>(m)), s(b, std::vector<double>(m)), g(b, std::vector<double>(m, 0.0));
  for (size_t i = 0; i < b; ++i)
    for (size_t j = 0; j < m; ++j) {
      cosine[i][j] = dot(q[i], c[j]) / (norm(q[i]) * norm(c[j]));
      s[i][j] = cosine[i][j] / t;
    }
  Reference r;
  if (type == "pairwise_sigmoid") {
    const double n = static_cast<double>(b * (m - 1));
    for (size_t i = 0; i < b; ++i) {
      const size_t p = offset + i;
      for (size_t j = 0; j < m; ++j) {
        if (j == p) continue;
        const double d = s[i][p] - s[i][j];  // -log sigmoid(d) = log(1 + e^-d)
        r.loss += log1p_exp(-d) / n;
        const double w = sigmoid(-d) / n;  // d/ds_ij of log(1 + e^(s_ij - s_ip))
        g[i][j] += w;
        g[i][p] -= w;
      }
    }
  } else {
    for (size_t i = 0; i < b; ++i) {
      const size_t p = offset + i;
      double mx = s[i][0];
      for (size_t j = 1; j < m; ++j) mx = std::max(mx, s[i][j]);
      double z = 0;
      for (size_t j = 0; j < m; ++j) z += std::exp(s[i][j] - mx);
      r.loss += (mx + std::log(z) - s[i][p]) / b;
      for (size_t j = 0; j < m; ++j) g[i][j] = (std::exp(s[i][j] - mx) / z - (j == p ? 1.0 : 0.0)) / b;
    }
  }
  const size_t d = q[0].size();
  r.grad_q.assign(b, std::vector<double>(d, 0.0));
  r.grad_c.assign(m, std::vector<double>(d, 0.0));
  for (size_t i = 0; i < b; ++i)
    for (size_t j = 0; j < m; ++j) {
      const double nq = norm(q[i]), nc = norm(c[j]);
      for (size_t k = 0; k < d; ++k) {
        // d cos / d q_ik = c_jk/(|q||c|) - cos * q_ik/|q|²
        r.grad_q[i][k] += g[i][j] / t * (c[j][k] / (nq * nc) - cosine[i][j] * q[i][k] / (nq * nq));
        r.grad_c[j][k] += g[i][j] / t * (q[i][k] / (nq * nc) - cosine[i][j] * c[j][k] / (nc * nc));
      }
    }
  return r;
}

void expect_close(const Matrix& got, const Matrix& want, double rel, const char* what) {
  double scale = 0;
  for (const auto& row : want)
    for (double v : row) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t k = 0; k < want[i].size(); ++k)
      // (+1e-9: a gradient that is 0 in exact arithmetic comes out as rounding noise)
      EXPECT_NEAR(got[i][k], want[i][k], rel * std::max(std::abs(want[i][k]), 1e-3 * scale) + 1e-9)
          << what << "[" << i << "][" << k << "]";
}

// loss.type's spelling as the loss takes it.
LossType loss_type(const std::string& name) { return parse_choice<LossType>(name, "loss.type"); }

// Runs pair_loss on q and c (as given dtype) and compares with the reference.
void check_against_reference(const at::Tensor& q0, const at::Tensor& c0, int64_t offset, const std::string& type,
                             double t, double rel) {
  const at::Tensor q = q0.detach().clone().requires_grad_(true);
  const at::Tensor c = c0.detach().clone().requires_grad_(true);
  const at::Tensor loss = loss_against(q, c, offset, loss_type(type), t);
  loss.backward();
  const Reference r = reference(to_matrix(q0), to_matrix(c0), offset, type, t);
  EXPECT_NEAR(loss.item<double>(), r.loss, rel * std::abs(r.loss)) << type;
  expect_close(to_matrix(q.grad()), r.grad_q, rel, "grad q");
  expect_close(to_matrix(c.grad()), r.grad_c, rel, "grad candidates");
}

at::Tensor randn(std::vector<int64_t> shape, at::ScalarType dtype = at::kDouble) {
  return at::randn(shape, at::TensorOptions().dtype(dtype));
}

}  // namespace

TEST(ContrastiveLoss, InBatchNegativesMatchTheFormula) {
  at::manual_seed(1);
  for (const std::string type : {"pairwise_sigmoid", "infonce"}) {
    check_against_reference(randn({6, 16}), randn({6, 16}), 0, type, 0.05, 1e-6);
    check_against_reference(randn({3, 5}), randn({3, 5}), 0, type, 1.0, 1e-6);
  }
}

TEST(ContrastiveLoss, OffsetAndExtraNegativesMatchTheFormula) {
  at::manual_seed(2);
  for (const std::string type : {"pairwise_sigmoid", "infonce"}) {
    // Cross-rank style: rank 2 of 3 with B = 4 → positives are rows 8..11 of 12.
    check_against_reference(randn({4, 8}), randn({12, 8}), 8, type, 0.05, 1e-6);
    // Hard negatives appended after the positives.
    check_against_reference(randn({4, 8}), randn({4 + 7, 8}), 0, type, 0.1, 1e-6);
    // Both: rank 1's block [positives, negatives] in a gathered matrix.
    check_against_reference(randn({3, 8}), randn({2 * 5, 8}), 5, type, 0.05, 1e-6);
  }
}

TEST(ContrastiveLoss, PairwiseSigmoidIsTheReferenceRecipe) {
  // The seeds' recipe (scripts/python/peer_train.py, seeds_pairwise_sigmoid_loss): diff =
  // diag(sim) - sim, diag masked, -log sigmoid summed over B*B - B terms.
  at::manual_seed(3);
  const at::Tensor q = randn({5, 8}), p = randn({5, 8});
  const at::Tensor sim = at::cosine_similarity(q.unsqueeze(1), p.unsqueeze(0), -1) / 0.05;
  const at::Tensor diff = (sim.diag().unsqueeze(1) - sim).masked_fill(at::eye(5, at::kBool), 1e9);
  const double recipe = (-at::log(at::sigmoid(diff))).sum().item<double>() / (5 * 5 - 5);
  EXPECT_NEAR(loss_against(q, p, 0, LossType::PairwiseSigmoid, 0.05).item<double>(), recipe, 1e-9 * recipe);
}

TEST(ContrastiveLoss, InfoNceIsLogSoftmaxCrossEntropy) {
  at::manual_seed(4);
  const at::Tensor q = randn({4, 6}), c = randn({9, 6});
  const Matrix qm = to_matrix(q), cm = to_matrix(c);
  double want = 0;
  for (int i = 0; i < 4; ++i) {
    double z = 0;
    for (int j = 0; j < 9; ++j) z += std::exp(dot(qm[i], cm[j]) / (norm(qm[i]) * norm(cm[j])) / 0.2);
    const double pos = dot(qm[i], cm[3 + i]) / (norm(qm[i]) * norm(cm[3 + i])) / 0.2;
    want += (std::log(z) - pos) / 4;
  }
  EXPECT_NEAR(loss_against(q, c, 3, LossType::Infonce, 0.2).item<double>(), want, 1e-9 * want);
}

TEST(ContrastiveLoss, Float32MatchesDoubleReference) {
  at::manual_seed(5);
  for (const std::string type : {"pairwise_sigmoid", "infonce"})
    check_against_reference(randn({8, 32}, at::kFloat), randn({8, 32}, at::kFloat), 0, type, 0.05, 2e-4);
}

TEST(ContrastiveLoss, HugeSimilaritiesStayFinite) {
  // Temperature 1e-4: similarities of ±1e4. Rows: a positive identical to its query, a
  // negative identical to it, a negative opposite to it, and a positive opposite to it.
  at::manual_seed(6);
  const at::Tensor base = randn({3, 8});
  const at::Tensor q = base.clone();
  at::Tensor c = at::cat({base[0].unsqueeze(0), -base[1].unsqueeze(0), base[2].unsqueeze(0),
                          base[0].unsqueeze(0), -base[2].unsqueeze(0), base[1].unsqueeze(0)});
  for (const std::string type : {"pairwise_sigmoid", "infonce"}) {
    const at::Tensor qg = q.clone().requires_grad_(true), cg = c.clone().requires_grad_(true);
    const at::Tensor loss = loss_against(qg, cg, 0, loss_type(type), 1e-4);
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item<double>())) << type;
    EXPECT_TRUE(qg.grad().isfinite().all().item<bool>()) << type;
    EXPECT_TRUE(cg.grad().isfinite().all().item<bool>()) << type;
    // Query 1's positive is opposite (d = -2e4 against the identical negative 5).
    EXPECT_GT(loss.item<double>(), 1e3) << type;
    check_against_reference(q, c, 0, type, 1e-4, 1e-6);
  }
  // Half-precision inputs with extreme similarities: computed in fp32, still finite.
  const at::Tensor qh = q.to(at::kHalf).requires_grad_(true);
  const at::Tensor loss = loss_against(qh, c.to(at::kHalf), 0, LossType::PairwiseSigmoid, 1e-4);
  loss.backward();
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_TRUE(qh.grad().to(at::kFloat).isfinite().all().item<bool>());
}

TEST(ContrastiveLoss, ZeroVectorGivesFiniteLossAndGradients) {
  at::manual_seed(7);
  at::Tensor q = randn({3, 4});
  q[1].zero_();
  at::Tensor c = randn({3, 4});
  c[2].zero_();
  for (const std::string type : {"pairwise_sigmoid", "infonce"}) {
    const at::Tensor qg = q.clone().requires_grad_(true), cg = c.clone().requires_grad_(true);
    const at::Tensor loss = loss_against(qg, cg, 0, loss_type(type), 0.05);
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_TRUE(qg.grad().isfinite().all().item<bool>());
    EXPECT_TRUE(cg.grad().isfinite().all().item<bool>());
  }
}

TEST(ContrastiveLoss, ComputesInFloat32ForHalfInputs) {
  at::manual_seed(8);
  const at::Tensor q = randn({4, 16}).to(at::kBFloat16), c = randn({4, 16}).to(at::kBFloat16);
  const at::Tensor loss = loss_against(q, c, 0, LossType::PairwiseSigmoid, 0.05);
  EXPECT_EQ(loss.scalar_type(), at::kFloat);
  EXPECT_EQ(loss.dim(), 0);
  const double want =
      loss_against(q.to(at::kDouble), c.to(at::kDouble), 0, LossType::PairwiseSigmoid, 0.05).item<double>();
  EXPECT_NEAR(loss.item<double>(), want, 1e-5 * want);
}

TEST(ContrastiveLoss, RejectsBadArguments) {
  const at::Tensor q = randn({4, 8}), c = randn({4, 8});
  LossConfig infonce;
  infonce.type = LossType::Infonce;
  // Rank `rank` of an exchange that hands back this rank's own rows only: positives
  // before the first candidate, or after the last.
  const auto alone_as = [](int64_t rank) {
    return CandidateExchange{[](const at::Tensor& local, const std::vector<int64_t>&) { return local; }, {}, rank};
  };
  LossConfig none;
  none.type = LossType::None;  // no contrastive term, and no other: lib/config refuses it
  EXPECT_THROW(pair_loss(q, c, {}, {}, none), std::logic_error);
  EXPECT_THROW(pair_loss(q, c, {}, {}, infonce, alone_as(1)), ModelError);
  EXPECT_THROW(pair_loss(q, c, {}, {}, infonce, alone_as(-1)), ModelError);
  LossConfig cold = infonce;
  cold.temperature = 0.0;
  EXPECT_THROW(pair_loss(q, c, {}, {}, cold), ModelError);
  EXPECT_THROW(pair_loss(q, randn({4, 7}), {}, {}, infonce), ModelError);
  EXPECT_THROW(pair_loss(q[0], c[0], {}, {}, infonce), ModelError);
  EXPECT_THROW(pair_loss(q.slice(0, 0, 1), c.slice(0, 0, 1), {}, {}, LossConfig{}), ModelError);  // pairwise_sigmoid
  EXPECT_TRUE(find_choice<LossType>("infonce"));
  EXPECT_FALSE(find_choice<LossType>("softmax"));
}

// ---- what pair_loss asks of the device -------------------------------------------------------

namespace {

using host_waits::HostWaits;

}  // namespace

// The same-text mask, the pairwise_sigmoid divisor across ranks, the directions, hardness
// and the guide: once a micro-batch each, every one without making the host wait (on a
// GPU each such op is a sync that stalls the step's queue of kernels).
TEST(PairLoss, AsksTheDeviceForNothingThatMakesTheHostWait) {
  at::manual_seed(9);
  constexpr int64_t n = 4, k = 4;
  const at::Tensor q = randn({n, 8}), pos = randn({n, 8}), neg = randn({k, 8});
  CandidateLabels labels;
  labels.hashes = at::tensor(std::vector<int64_t>{1, 2, 1, 3, 4, 2, 5, 6});  // duplicates: masks to count
  labels.owners = at::tensor(std::vector<int64_t>{0, 1, 2, 3, 0, 0, 2, 3});
  // Two ranks, the other holding copies of this rank's rows (the numbers do not matter here).
  const auto twice = [](const at::Tensor& local, const std::vector<int64_t>&) { return at::cat({local, local}); };
  const CandidateExchange two_ranks{twice, twice, 1};
  LossConfig sigmoid;
  LossConfig every_direction;
  every_direction.type = LossType::Infonce;
  every_direction.directions = {LossDirection::QueryToDoc, LossDirection::QueryToQuery, LossDirection::DocToQuery,
                                LossDirection::DocToDoc};
  every_direction.hardness_mode = HardnessMode::AllNegatives;
  every_direction.hardness_strength = 5;
  every_direction.matryoshka_dims = {8, 4};
  for (const bool guide : {false, true})
    for (const LossConfig* base : {&sigmoid, &every_direction})
      for (const bool gathered : {false, true}) {
        LossConfig loss = *base;
        CandidateLabels l = labels;
        if (guide) {
          loss.guide.model = "guide";
          l.guide_queries = randn({n, 6});
          l.guide_candidates = randn({n + k, 6});
        }
        SCOPED_TRACE(std::string(loss.type == LossType::Infonce ? "infonce" : "pairwise_sigmoid") +
                     (guide ? ", guided" : "") + (gathered ? ", two ranks" : ""));
        PairLoss out;
        {
          const HostWaits waits;
          out = pair_loss(q, pos, neg, l, loss, gathered ? two_ranks : CandidateExchange{});
          EXPECT_TRUE(HostWaits::found().empty()) << HostWaits::said();
        }
        EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
        EXPECT_GT(out.masked.item<int64_t>(), 0);
      }
  // With teeth: what the same-text count ran before, unique and the ranks' starts copied
  // over, is seen.
  const HostWaits waits;
  at::_unique2(labels.hashes, true, true, true);
  at::tensor(std::vector<int64_t>{0, n + k}).to(labels.hashes.device());
  const auto& found = HostWaits::found();
  EXPECT_EQ(std::count(found.begin(), found.end(), "aten::_unique2"), 1) << HostWaits::said();
  EXPECT_EQ(std::count(found.begin(), found.end(), "aten::to"), 1) << HostWaits::said();
}
