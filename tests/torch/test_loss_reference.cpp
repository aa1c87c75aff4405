// Our losses against the peers' own loss code on the same embeddings, values and
// gradients (scripts/python/loss_reference.py, run once in the project's .venv):
//   - sentence-transformers' MultipleNegativesRankingLoss (its class) for "infonce" — in
//     batch, with hard negatives, and across ranks — and the seeds' pairwise sigmoid loss
//     for "pairwise_sigmoid". This is what makes the benchmark's comparison
//     (scripts/bench-vs-st.sh) one of equal recipes: temperature 0.05 is MNRL's scale 20;
//   - sentence-transformers' MatryoshkaLoss around MNRL for loss.matryoshka_*, with hard
//     negatives and across ranks;
//   - FlagEmbedding's kl_div distillation (its formula, transcribed function by function)
//     for loss.distill, with and without the contrastive term, with ragged groups;
//   - sentence-transformers' GISTEmbedLoss (its class, on given embeddings and guide
//     embeddings) for loss.guide: query-to-document only (contrast_anchors and
//     contrast_positives off) with both margin strategies, margin 0 and above, with and
//     without hard negatives, and across ranks; and its default (anchors and positives
//     contrasted) as query_to_doc + query_to_query + doc_to_doc on pairs, at our margin
//     and with every one of its defaults (the config the docs give a port);
//   - the same-text mask written from its definition, on a global batch of three ranks
//     with duplicates within and across ranks: the ranks' losses, each computed as the
//     trainer would with the other ranks' candidates gathered, average to the loss one
//     process would compute on the whole batch; and everything at once on one rank.
//   - sentence-transformers 6's MultipleNegativesRankingLoss with loss.directions,
//     partition_mode and hardness_* (each direction set with and without two hard
//     negatives a query, each hardness mode, and across two ranks with its
//     gather_across_devices), and its MarginMSELoss (one and two hard negatives, and
//     under MatryoshkaLoss) for loss.type margin_mse.
// In double precision the differences are rounding: they are printed ("max |diff|").
#include <fstream>
#include <iterator>

#include "e2e_support.h"
#include "loss_support.h"
#include "model/loss.h"
#include "model/weights.h"
#include "util/hash.h"

using namespace e2e;
using namespace ddp_embed;

namespace {

constexpr int64_t kBatch = 6, kDim = 12, kRanks = 3, kRank = 1, kGuideDim = 8;
constexpr double kGuideMargin = 0.3;
constexpr double kTemperature = 0.05, kTeacherTemperature = 2.0, kDistillWeight = 0.3;
const std::vector<int64_t> kReferenceDims = {12, 6, 3};
const std::vector<double> kWeights = {1.0, 0.5, 0.25};
const auto kF64 = at::TensorOptions().dtype(at::kDouble);

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

// pair_loss against the candidates as one matrix (loss_support.h), and its gradients, on
// double inputs (the peers' run in double too).
Ours ours(const at::Tensor& q, const at::Tensor& candidates, int64_t offset, const std::string& type) {
  at::Tensor lq = q.clone().requires_grad_(true), lc = candidates.clone().requires_grad_(true);
  at::Tensor loss = loss_support::loss_against(lq, lc, offset, parse_choice<LossType>(type, "loss.type"), kTemperature);
  loss.backward();
  return {loss.item<double>(), lq.grad(), lc.grad()};
}

struct OursPair {
  double loss;
  at::Tensor grad_q, grad_p, grad_n;
};

// pair_loss (the trainer's loss) and its gradients at q, p and n.
OursPair ours_pair(const at::Tensor& q, const at::Tensor& p, const at::Tensor& n, const CandidateLabels& labels,
                   const LossConfig& s) {
  at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true),
             ln = n.defined() ? n.clone().requires_grad_(true) : at::Tensor();
  const at::Tensor loss = pair_loss(lq, lp, ln, labels, s).loss;
  loss.backward();
  return {loss.item<double>(), lq.grad(), lp.grad(), ln.defined() ? ln.grad() : at::Tensor()};
}

void expect_close(const at::Tensor& ours, const at::Tensor& theirs, const std::string& what) {
  ASSERT_TRUE(theirs.defined()) << what;
  ASSERT_EQ(ours.sizes(), theirs.sizes()) << what;
  const double diff = (ours - theirs).abs().max().item<double>();
  EXPECT_LT(diff, 1e-10 * (1 + theirs.abs().max().item<double>())) << what << ": max abs difference " << diff;
  std::printf("max |diff| %-40s %.3g\n", what.c_str(), diff);
}

void expect_loss(double ours, const NamedTensors& theirs, const std::string& name) {
  const double want = find(theirs, name + ".loss").item<double>();
  EXPECT_NEAR(ours, want, 1e-12 * (1 + std::fabs(want))) << name;
  std::printf("max |diff| %-40s %.3g (loss %.6f)\n", (name + ".loss").c_str(), std::fabs(ours - want), want);
}

LossConfig settings(const std::string& type) {
  LossConfig s;
  s.type = parse_choice<LossType>(type, "loss.type");
  s.temperature = kTemperature;
  return s;
}

// ---- the inputs ---------------------------------------------------------------------------

// The global batch with duplicates: kRanks ranks of kBatch pairs, each with one hard
// negative; rank r's candidates are its block [p_r; n_r] of dc, rows r * 2B .. .
struct Duplicates {
  at::Tensor dq, dc, dhash, dpos;
};

Duplicates duplicates() {
  const int64_t block = 2 * kBatch;
  Duplicates d;
  d.dq = at::randn({kRanks * kBatch, kDim}, kF64);
  // Each rank's positives and negatives near its queries.
  d.dc = d.dq.reshape({kRanks, 1, kBatch, kDim}).expand({kRanks, 2, kBatch, kDim}).reshape({-1, kDim}) +
         2.0 * at::randn({kRanks * block, kDim}, kF64);
  d.dhash = at::arange(100, 100 + kRanks * block, at::kLong);
  // The same text has the same embedding, as it would in training without dropout.
  auto same = [&](int64_t row, int64_t like) {
    d.dhash[row] = d.dhash[like].item<int64_t>();
    d.dc[row].copy_(d.dc[like]);
  };
  auto pos = [&](int64_t r, int64_t i) { return r * block + i; };
  auto neg = [&](int64_t r, int64_t i) { return r * block + kBatch + i; };
  same(pos(0, 3), pos(0, 0));  // a positive repeated within a rank
  same(neg(0, 1), pos(0, 4));  // a hard negative that is another pair's positive
  same(pos(2, 5), pos(1, 2));  // a positive repeated on another rank
  same(neg(2, 0), pos(0, 0));  // another rank's hard negative with the text of two positives
  same(neg(1, 4), pos(1, 4));  // a hard negative with its own query's positive's text
  std::vector<int64_t> rows;
  for (int64_t r = 0; r < kRanks; ++r)
    for (int64_t i = 0; i < kBatch; ++i) rows.push_back(pos(r, i));
  d.dpos = at::tensor(rows, at::kLong);
  return d;
}

// The inputs, and the peers' losses on them: Python runs once for the whole suite.
struct ReferenceCase {
  at::Tensor q, p, n, all_p, ch, teacher, rc, rgroups, rteacher, hash1;
  at::Tensor n2, gq, gp, gn1, gn2, mteacher1, mteacher2;  // directions, hardness, MarginMSE
  at::Tensor guide_q, guide_p, guide_n, guide_all_p;  // the guide's embeddings of q, p, n and of every rank's positives
  Duplicates dup;
  NamedTensors theirs;
  std::string error;  // Python failed: every test fails with its output
};

const ReferenceCase& the_case() {
  static const ReferenceCase c = [] {
    ReferenceCase c;
    // Positives and hard negatives near their queries, with enough noise that at
    // temperature 0.05 the losses are neither saturated nor uniform.
    at::manual_seed(11);
    c.q = at::randn({kBatch, kDim}, kF64);
    c.p = c.q + 2.0 * at::randn({kBatch, kDim}, kF64);
    c.n = c.q + 2.5 * at::randn({kBatch, kDim}, kF64);
    c.all_p = at::randn({kRanks * kBatch, kDim}, kF64);
    c.all_p.narrow(0, kRank * kBatch, kBatch).copy_(c.p);
    // Every rank's [positives; hard negatives], this rank's block being [p; n].
    c.ch = at::randn({kRanks * 2 * kBatch, kDim}, kF64);
    c.ch.narrow(0, kRank * 2 * kBatch, 2 * kBatch).copy_(at::cat({c.p, c.n}));
    // A teacher's scores of each query's positive and negative: some agree with the
    // student's cosines, some do not.
    c.teacher = 3.0 * at::randn({kBatch, 2}, kF64);
    // Ragged groups: queries with 2, 0, 3, 1, 1, 0 hard negatives (7 rows after p).
    c.rc = at::cat({c.p, c.q.repeat({2, 1}).narrow(0, 0, 7) + 2.0 * at::randn({7, kDim}, kF64)});
    const std::vector<int64_t> counts = {2, 0, 3, 1, 1, 0};
    c.rgroups = at::full({kBatch, 4}, int64_t{-1}, at::kLong);
    c.rteacher = at::full({kBatch, 4}, std::nan(""), kF64);
    for (int64_t i = 0, next = kBatch; i < kBatch; ++i) {
      c.rgroups[i][0] = i;
      c.rteacher[i][0] = 2.0 + 0.5 * double(i);
      for (int64_t j = 1; j <= counts[size_t(i)]; ++j, ++next) {
        c.rgroups[i][j] = next;
        c.rteacher[i][j] = double(j) - 1.5 * double(i % 2);
      }
    }
    // One rank's text hashes with duplicates: positive 2 repeats positive 0's text,
    // negative 4 is positive 1's text, negative 5 its own positive's.
    c.hash1 = at::arange(0, 2 * kBatch, at::kLong);
    c.hash1[2] = 0;
    c.hash1[kBatch + 4] = 1;
    c.hash1[kBatch + 5] = 5;
    c.dup = duplicates();
    // A second hard negative a query; two ranks' global batch; a teacher's scores of
    // [p, n] and of [p, n, n2].
    c.n2 = c.q + 2.5 * at::randn({kBatch, kDim}, kF64);
    c.gq = at::randn({2 * kBatch, kDim}, kF64);
    c.gp = c.gq + 2.0 * at::randn({2 * kBatch, kDim}, kF64);
    c.gn1 = c.gq + 2.5 * at::randn({2 * kBatch, kDim}, kF64);
    c.gn2 = c.gq + 2.5 * at::randn({2 * kBatch, kDim}, kF64);
    c.mteacher1 = 0.5 * at::randn({kBatch, 2}, kF64);
    c.mteacher2 = 0.5 * at::randn({kBatch, 3}, kF64);
    // The guide's view, of another size: positives far enough from their queries that
    // some other candidates are rated closer (masked), most not.
    c.guide_q = at::randn({kBatch, kGuideDim}, kF64);
    c.guide_p = c.guide_q + 1.5 * at::randn({kBatch, kGuideDim}, kF64);
    c.guide_n = c.guide_q + 1.5 * at::randn({kBatch, kGuideDim}, kF64);
    c.guide_all_p = at::randn({kRanks * kBatch, kGuideDim}, kF64);
    c.guide_all_p.narrow(0, kRank * kBatch, kBatch).copy_(c.guide_p);

    const fs::path dir = fresh_dir("loss-reference");
    const std::string in = (dir / "in.safetensors").string(), out = (dir / "out.safetensors").string();
    save_tensors(in, {{"q", c.q}, {"p", c.p}, {"n", c.n}, {"c", c.all_p}, {"ch", c.ch},
                      {"rank", at::tensor(double(kRank), kF64)}, {"ranks", at::tensor(double(kRanks), kF64)},
                      {"temperature", at::tensor(kTemperature, kF64)},
                      {"dims", at::tensor(kReferenceDims, at::kLong)}, {"weights", at::tensor(kWeights, kF64)},
                      {"teacher", c.teacher}, {"teacher_temperature", at::tensor(kTeacherTemperature, kF64)},
                      {"distill_weight", at::tensor(kDistillWeight, kF64)},
                      {"rc", c.rc}, {"rgroups", c.rgroups}, {"rteacher", c.rteacher},
                      {"dq", c.dup.dq}, {"dc", c.dup.dc}, {"dhash", c.dup.dhash}, {"dpos", c.dup.dpos},
                      {"hash1", c.hash1}, {"xq", c.q.clone()}, {"xp", c.p.clone()}, {"xn1", c.n.clone()},
                      {"xn2", c.n2}, {"gq", c.gq}, {"gp", c.gp}, {"gn1", c.gn1}, {"gn2", c.gn2},
                      {"xranks", at::tensor(2.0, kF64)}, {"mteacher1", c.mteacher1}, {"mteacher2", c.mteacher2},
                      {"guide_q", c.guide_q}, {"guide_p", c.guide_p}, {"guide_n", c.guide_n}, {"guide_c", c.guide_all_p},
                      {"guide_margin", at::tensor(kGuideMargin, kF64)}});
    // ctest runs each test in its own process: the peers' numbers are computed once for
    // these inputs and this script, and the other processes read them (a rename publishes
    // them whole).
    const auto bytes = [](const std::string& path) {
      std::ifstream f(path, std::ios::binary);
      return std::string(std::istreambuf_iterator<char>(f), {});
    };
    const std::string script = kSrc + "/scripts/python/loss_reference.py";
    const fs::path cache = fs::path(kBin) / "test-runs" / "loss-reference-cache" /
                           (hash_hex(fnv1a64(bytes(script), fnv1a64(bytes(in)))) + ".safetensors");
    if (!fs::exists(cache)) {
      const auto r = run(std::string(DDP_EMBED_PYTHON) + " " + script + " " + in + " " + out);
      if (r.exit_code != 0) {
        c.error = r.output;
        return c;
      }
      fs::create_directories(cache.parent_path());
      fs::rename(out, cache);
    }
    c.theirs = load_tensors(cache.string());
    return c;
  }();
  return c;
}

class PeerLosses : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(c.error.empty()) << "loss_reference.py failed:\n" << c.error; }
  const ReferenceCase& c = the_case();
  const at::Tensor &q = c.q, &p = c.p, &n = c.n, &all_p = c.all_p;
  const NamedTensors& theirs = c.theirs;
};

}  // namespace

// ---- sentence-transformers' MNRL and the seeds' loss ---------------------------------------

TEST_F(PeerLosses, InfoNceIsMultipleNegativesRankingLoss) {
  const Ours o = ours(q, p, 0, "infonce");
  expect_loss(o.loss, theirs, "mnrl");
  EXPECT_GT(o.loss, 0.1);  // not a saturated case where every loss is ~0
  expect_close(o.grad_q, find(theirs, "mnrl.grad_q"), "mnrl dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "mnrl.grad_p"), "mnrl dloss/dp");
}

TEST_F(PeerLosses, InfoNceWithHardNegativesIsMnrlOnTriplets) {
  const Ours o = ours(q, at::cat({p, n}), 0, "infonce");
  expect_loss(o.loss, theirs, "mnrl_hard");
  expect_close(o.grad_q, find(theirs, "mnrl_hard.grad_q"), "mnrl_hard dloss/dq");
  expect_close(o.grad_candidates, at::cat({find(theirs, "mnrl_hard.grad_p"), find(theirs, "mnrl_hard.grad_n")}),
               "mnrl_hard dloss/d[p; n]");
}

TEST_F(PeerLosses, CrossRankNegativesAreMnrlGatheredAcrossDevices) {
  const Ours o = ours(q, all_p, kRank * kBatch, "infonce");
  expect_loss(o.loss, theirs, "mnrl_gathered");
  expect_close(o.grad_q, find(theirs, "mnrl_gathered.grad_q"), "mnrl_gathered dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "mnrl_gathered.grad_c"), "mnrl_gathered dloss/d(all p)");
  // More candidates than in-batch alone: a different (larger) loss.
  EXPECT_GT(o.loss, ours(q, p, 0, "infonce").loss);
}

TEST_F(PeerLosses, PairwiseSigmoidIsTheSeedsLoss) {
  const Ours o = ours(q, p, 0, "pairwise_sigmoid");
  expect_loss(o.loss, theirs, "seeds");
  expect_close(o.grad_q, find(theirs, "seeds.grad_q"), "seeds dloss/dq");
  expect_close(o.grad_candidates, find(theirs, "seeds.grad_p"), "seeds dloss/dp");
}

// ---- Matryoshka: sentence-transformers' MatryoshkaLoss(MNRL) -----------------------------

TEST_F(PeerLosses, MatryoshkaIsSentenceTransformersMatryoshkaLoss) {
  LossConfig s = settings("infonce");
  s.matryoshka_dims = kReferenceDims;
  s.matryoshka_weights = kWeights;
  const OursPair o = ours_pair(q, p, {}, {}, s);
  expect_loss(o.loss, theirs, "matryoshka");
  expect_close(o.grad_q, find(theirs, "matryoshka.grad_q"), "matryoshka dloss/dq");
  expect_close(o.grad_p, find(theirs, "matryoshka.grad_p"), "matryoshka dloss/dp");
  // The smaller sizes count: the whole embedding alone gives another loss.
  EXPECT_GT(std::fabs(o.loss - ours_pair(q, p, {}, {}, settings("infonce")).loss), 0.01);

  const OursPair h = ours_pair(q, p, n, {}, s);
  expect_loss(h.loss, theirs, "matryoshka_hard");
  expect_close(h.grad_q, find(theirs, "matryoshka_hard.grad_q"), "matryoshka_hard dloss/dq");
  expect_close(h.grad_p, find(theirs, "matryoshka_hard.grad_p"), "matryoshka_hard dloss/dp");
  expect_close(h.grad_n, find(theirs, "matryoshka_hard.grad_n"), "matryoshka_hard dloss/dn");
}

TEST_F(PeerLosses, MatryoshkaAcrossRanksIsMatryoshkaLossOnTheGatheredCandidates) {
  LossConfig s = settings("infonce");
  s.matryoshka_dims = kReferenceDims;
  s.matryoshka_weights = kWeights;
  // Rank kRank of kRanks: the other ranks' blocks of ch, this rank's own [p; n] between.
  const int64_t block = 2 * kBatch;
  at::Tensor ch = c.ch.clone().requires_grad_(true);
  at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true), ln = n.clone().requires_grad_(true);
  CandidateExchange exchange{[&](const at::Tensor& local, const std::vector<int64_t>&) {
                               return at::cat({ch.narrow(0, 0, kRank * block), local,
                                               ch.narrow(0, (kRank + 1) * block, (kRanks - kRank - 1) * block)});
                             },
                             {}, kRank};
  const at::Tensor loss = pair_loss(lq, lp, ln, {}, s, exchange).loss;
  loss.backward();
  expect_loss(loss.item<double>(), theirs, "matryoshka_gathered");
  expect_close(lq.grad(), find(theirs, "matryoshka_gathered.grad_q"), "matryoshka_gathered dloss/dq");
  // This rank's rows reach the loss through p and n, the others' through ch.
  at::Tensor grad_ch = ch.grad().clone();
  grad_ch.narrow(0, kRank * block, block).copy_(at::cat({lp.grad(), ln.grad()}));
  expect_close(grad_ch, find(theirs, "matryoshka_gathered.grad_ch"), "matryoshka_gathered dloss/d(all candidates)");
}

// ---- guided negatives: sentence-transformers' GISTEmbedLoss -------------------------------

namespace {

LossConfig guided(GuideMargin strategy, double margin) {
  LossConfig s = settings("infonce");
  s.guide.model = "guide";  // the loss reads the strategy and margin only
  s.guide.margin_strategy = strategy;
  s.guide.margin = margin;
  return s;
}

}  // namespace

TEST_F(PeerLosses, GuidedNegativesAreGistEmbedLoss) {
  int64_t masked_somewhere = 0;
  for (const GuideMargin strategy : {GuideMargin::Absolute, GuideMargin::Relative})
    for (const double margin : {0.0, kGuideMargin})
      for (const bool hard : {false, true}) {
        const std::string name = "gist_" + choice_name(strategy) + (margin > 0 ? "_m" : "_m0") + (hard ? "_hard" : "");
        SCOPED_TRACE(name);
        CandidateLabels labels;
        labels.guide_queries = c.guide_q;
        labels.guide_candidates = hard ? at::cat({c.guide_p, c.guide_n}) : c.guide_p;
        at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true),
                   ln = hard ? n.clone().requires_grad_(true) : at::Tensor();
        const PairLoss l = pair_loss(lq, lp, ln, labels, guided(strategy, margin));
        l.loss.backward();
        expect_loss(l.loss.item<double>(), theirs, name);
        expect_close(lq.grad(), find(theirs, name + ".grad_q"), name + " dloss/dq");
        expect_close(lp.grad(), find(theirs, name + ".grad_p"), name + " dloss/dp");
        if (hard) expect_close(ln.grad(), find(theirs, name + ".grad_n"), name + " dloss/dn");
        EXPECT_EQ(l.masked.item<int64_t>(), 0);  // no text hashes: all the guide's
        masked_somewhere += l.guided.item<int64_t>();
        // The guide's mask is the function's, counted as the loss counts it.
        const at::Tensor own = at::arange(kBatch, at::kLong);
        EXPECT_EQ(l.guided.item<int64_t>(),
                  false_negative_mask(c.guide_q, labels.guide_candidates, {}, strategy, margin, own).sum().item<int64_t>());
      }
  // The cases mask pairs (else they would not tell the guide from plain MNRL).
  EXPECT_GT(masked_somewhere, 4);
  EXPECT_GT(std::fabs(find(theirs, "gist_absolute_m_hard.loss").item<double>() -
                      find(theirs, "mnrl_hard.loss").item<double>()), 0.01);
}

TEST_F(PeerLosses, GuidedCrossRankNegativesAreGistGatheredAcrossDevices) {
  // Rank kRank of kRanks: the other ranks' positives from all_p, their guide embeddings
  // from guide_all_p (the exchange tells them apart by their width).
  at::Tensor all = all_p.clone().requires_grad_(true);
  at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true);
  CandidateExchange exchange{[&](const at::Tensor& local, const std::vector<int64_t>&) {
                               const at::Tensor& global = local.size(1) == kGuideDim ? c.guide_all_p : all;
                               return at::cat({global.narrow(0, 0, kRank * kBatch), local,
                                               global.narrow(0, (kRank + 1) * kBatch, (kRanks - kRank - 1) * kBatch)});
                             },
                             {}, kRank};
  CandidateLabels labels;
  labels.guide_queries = c.guide_q;
  labels.guide_candidates = c.guide_p;
  const PairLoss l = pair_loss(lq, lp, {}, labels, guided(GuideMargin::Absolute, kGuideMargin), exchange);
  l.loss.backward();
  expect_loss(l.loss.item<double>(), theirs, "gist_gathered");
  expect_close(lq.grad(), find(theirs, "gist_gathered.grad_q"), "gist_gathered dloss/dq");
  at::Tensor grad_all = all.grad().clone();
  grad_all.narrow(0, kRank * kBatch, kBatch).copy_(lp.grad());
  expect_close(grad_all, find(theirs, "gist_gathered.grad_c"), "gist_gathered dloss/d(all p)");
  EXPECT_GT(l.guided.item<int64_t>(), 0);
}

// GISTEmbedLoss's default contrasts anchors with anchors and positives with positives too:
// on pairs, our query_to_doc + query_to_query + doc_to_doc in one softmax, the guide's mask
// in each block.
TEST_F(PeerLosses, GuidedAllDirectionsAreGistEmbedLossContrastingAnchorsAndPositives) {
  for (const GuideMargin strategy : {GuideMargin::Absolute, GuideMargin::Relative}) {
    const std::string name = "gist_" + choice_name(strategy) + "_contrast";
    SCOPED_TRACE(name);
    LossConfig s = guided(strategy, kGuideMargin);
    s.directions = {LossDirection::QueryToDoc, LossDirection::QueryToQuery, LossDirection::DocToDoc};
    CandidateLabels labels;
    labels.guide_queries = c.guide_q;
    labels.guide_candidates = c.guide_p;
    at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true);
    const PairLoss l = pair_loss(lq, lp, {}, labels, s);
    l.loss.backward();
    expect_loss(l.loss.item<double>(), theirs, name);
    expect_close(lq.grad(), find(theirs, name + ".grad_q"), name + " dloss/dq");
    expect_close(lp.grad(), find(theirs, name + ".grad_p"), name + " dloss/dp");
  }
  // With teeth: the other blocks change the loss.
  EXPECT_GT(std::fabs(find(theirs, "gist_absolute_contrast.loss").item<double>() -
                      find(theirs, "gist_absolute_m.loss").item<double>()), 1e-3);
}

// A port's line: GISTEmbedLoss(model, guide) as it comes (temperature 0.01, absolute
// margin 0, anchors and positives contrasted) is the config docs/recipes.md and
// docs/config.md give for it — loss.type infonce, loss.temperature 0.01, loss.guide with
// its defaults, loss.directions query_to_doc, query_to_query, doc_to_doc.
TEST_F(PeerLosses, GistEmbedLossAsItComesIsTheDocumentedConfig) {
  LossConfig s = settings("infonce");
  s.temperature = 0.01;
  s.guide.model = "guide";
  s.directions = {LossDirection::QueryToDoc, LossDirection::QueryToQuery, LossDirection::DocToDoc};
  CandidateLabels labels;
  labels.guide_queries = c.guide_q;
  labels.guide_candidates = c.guide_p;
  at::Tensor lq = q.clone().requires_grad_(true), lp = p.clone().requires_grad_(true);
  const PairLoss l = pair_loss(lq, lp, {}, labels, s);
  l.loss.backward();
  expect_loss(l.loss.item<double>(), theirs, "gist_default");
  expect_close(lq.grad(), find(theirs, "gist_default.grad_q"), "gist_default dloss/dq");
  expect_close(lp.grad(), find(theirs, "gist_default.grad_p"), "gist_default dloss/dp");
  EXPECT_GT(l.guided.item<int64_t>(), 0);  // the guide masks some pair: its margin 0 is at work
}

// ---- distillation: FlagEmbedding's kl_div --------------------------------------------------

TEST_F(PeerLosses, InfoNcePlusDistillationIsFlagEmbeddingsKlDivRecipe) {
  // Query i's group: its positive (row i) and its hard negative (row B + i), as
  // FlagEmbedding groups [p_i, n_i].
  CandidateLabels labels;
  labels.groups = at::stack({at::arange(kBatch, at::kLong), at::arange(kBatch, 2 * kBatch, at::kLong)}, 1);
  labels.teacher_scores = c.teacher;
  LossConfig s = settings("infonce");
  s.distill.weight = 1;  // FlagEmbedding adds kl_div and the cross-entropy unweighted
  const OursPair o = ours_pair(q, p, n, labels, s);
  expect_loss(o.loss, theirs, "flag");
  expect_close(o.grad_q, find(theirs, "flag.grad_q"), "flag dloss/dq");
  expect_close(o.grad_p, find(theirs, "flag.grad_p"), "flag dloss/dp");
  expect_close(o.grad_n, find(theirs, "flag.grad_n"), "flag dloss/dn");

  // Distillation alone (loss.type none), weighted, with a teacher temperature.
  s.type = LossType::None;
  s.distill.weight = kDistillWeight;
  s.distill.temperature = kTeacherTemperature;
  const OursPair kd = ours_pair(q, p, n, labels, s);
  expect_loss(kd.loss, theirs, "flag_kd");
  expect_close(kd.grad_q, find(theirs, "flag_kd.grad_q"), "flag_kd dloss/dq");
  expect_close(kd.grad_p, find(theirs, "flag_kd.grad_p"), "flag_kd dloss/dp");
  expect_close(kd.grad_n, find(theirs, "flag_kd.grad_n"), "flag_kd dloss/dn");
}

TEST_F(PeerLosses, DistillationOverRaggedGroupsIsTheFormulaQueryByQuery) {
  LossConfig s = settings("none");
  s.distill.weight = kDistillWeight;
  s.distill.temperature = kTeacherTemperature;
  CandidateLabels labels;
  labels.groups = c.rgroups;
  labels.teacher_scores = c.rteacher;
  const OursPair o = ours_pair(q, c.rc.narrow(0, 0, kBatch), c.rc.narrow(0, kBatch, 7), labels, s);
  expect_loss(o.loss, theirs, "ragged_kd");
  expect_close(o.grad_q, find(theirs, "ragged_kd.grad_q"), "ragged_kd dloss/dq");
  expect_close(at::cat({o.grad_p, o.grad_n}), find(theirs, "ragged_kd.grad_c"), "ragged_kd dloss/d[p; n]");
}

// ---- the same-text mask ------------------------------------------------------------------

namespace {

struct GlobalStep {
  double loss = 0;  // the mean of the ranks' losses
  int64_t masked = 0;
  at::Tensor grad_dq, grad_dc;  // the sum over ranks of d(loss_r / W)
};

// Each rank's pair_loss as the trainer computes it, the other ranks' candidates and text
// hashes "gathered" from the global tensors (so their gradients land there too, as the
// all-gather's backward sends them), averaged over the ranks as data parallelism does.
GlobalStep ranks_of(const Duplicates& d, const LossConfig& s, bool with_hashes) {
  const int64_t block = 2 * kBatch;
  at::Tensor dq = d.dq.clone().requires_grad_(true), dc = d.dc.clone().requires_grad_(true);
  GlobalStep g;
  for (int64_t r = 0; r < kRanks; ++r) {
    CandidateExchange exchange{[&](const at::Tensor& local, const std::vector<int64_t>&) {
                                 return at::cat({dc.narrow(0, 0, r * block), local,
                                                 dc.narrow(0, (r + 1) * block, (kRanks - r - 1) * block)});
                               },
                               [&](const at::Tensor& ids, const std::vector<int64_t>&) {
                                 EXPECT_TRUE(ids.equal(d.dhash.narrow(0, r * block, block)));
                                 return d.dhash;
                               },
                               r};
    CandidateLabels labels;
    if (with_hashes) labels.hashes = d.dhash.narrow(0, r * block, block);
    const PairLoss l = pair_loss(dq.narrow(0, r * kBatch, kBatch), dc.narrow(0, r * block, kBatch),
                                 dc.narrow(0, r * block + kBatch, kBatch), labels, s, exchange);
    (l.loss / double(kRanks)).backward();
    g.loss += l.loss.item<double>() / double(kRanks);
    g.masked += l.masked.item<int64_t>();
  }
  g.grad_dq = dq.grad();
  g.grad_dc = dc.grad();
  return g;
}

}  // namespace

TEST_F(PeerLosses, MaskedDuplicatesAcrossRanksGiveTheWholeBatchsMaskedLoss) {
  for (const char* type : {"infonce", "pairwise_sigmoid"}) {
    SCOPED_TRACE(type);
    const std::string name = std::string("masked_") + (std::string(type) == "infonce" ? "infonce" : "sigmoid");
    const GlobalStep g = ranks_of(c.dup, settings(type), true);
    expect_loss(g.loss, theirs, name);
    expect_close(g.grad_dq, find(theirs, name + ".grad_dq"), name + " dloss/d(queries)");
    expect_close(g.grad_dc, find(theirs, name + ".grad_dc"), name + " dloss/d(candidates)");
    // Counted by hand from duplicates(): queries (0,0) and (0,3) mask the 2 others of
    // {pos(0,0), pos(0,3), neg(2,0)}; (0,4) masks neg(0,1); (1,2) and (2,5) mask each
    // other's positive; (1,4) masks its own negative.
    EXPECT_EQ(g.masked, 2 * 2 + 1 + 2 + 1);
    // The masks matter: without them the loss is another, by far more than the
    // tolerance above (8 of the 630 pairs of pairwise_sigmoid's mean: 0.5% of it).
    EXPECT_GT(std::fabs(ranks_of(c.dup, settings(type), false).loss - g.loss), 1e-3 * g.loss) << type;
  }
}

TEST_F(PeerLosses, MatryoshkaMasksAndDistillationTogetherAreTheirSum) {
  CandidateLabels labels;
  labels.hashes = c.hash1;
  labels.groups = at::stack({at::arange(kBatch, at::kLong), at::arange(kBatch, 2 * kBatch, at::kLong)}, 1);
  labels.teacher_scores = c.teacher;
  LossConfig s = settings("infonce");
  s.matryoshka_dims = kReferenceDims;
  s.matryoshka_weights = kWeights;
  s.distill.weight = kDistillWeight;
  s.distill.temperature = kTeacherTemperature;
  const OursPair o = ours_pair(q, p, n, labels, s);
  expect_loss(o.loss, theirs, "recipe");
  expect_close(o.grad_q, find(theirs, "recipe.grad_q"), "recipe dloss/dq");
  expect_close(o.grad_p, find(theirs, "recipe.grad_p"), "recipe dloss/dp");
  expect_close(o.grad_n, find(theirs, "recipe.grad_n"), "recipe dloss/dn");
}

// ---- sentence-transformers 6's MNRL: directions, partitions, hardness; MarginMSE -----------

namespace {

LossConfig mnrl6(std::vector<LossDirection> directions, PartitionMode partition,
                 HardnessMode hardness = HardnessMode::None) {
  LossConfig s = settings("infonce");
  s.directions = std::move(directions);
  s.partition_mode = partition;
  s.hardness_mode = hardness;
  s.hardness_strength = hardness == HardnessMode::None ? 0.0 : 5.0;  // loss_reference.py's HARDNESS_STRENGTH
  return s;
}

using D = LossDirection;
const std::vector<std::pair<std::string, LossConfig>>& direction_sets() {
  static const std::vector<std::pair<std::string, LossConfig>> sets = {
      {"q2d", mnrl6({D::QueryToDoc}, PartitionMode::Joint)},
      {"sym_per", mnrl6({D::QueryToDoc, D::DocToQuery}, PartitionMode::PerDirection)},
      {"sym_joint", mnrl6({D::QueryToDoc, D::DocToQuery}, PartitionMode::Joint)},
      {"gte", mnrl6({D::QueryToDoc, D::QueryToQuery, D::DocToQuery, D::DocToDoc}, PartitionMode::Joint)},
  };
  return sets;
}

// Our layout of two hard negatives a query: query-major, [q0's n1, q0's n2, q1's n1, ...]
// (sentence-transformers' columns hold every query's n1, then every query's n2).
at::Tensor query_major(const at::Tensor& n1, const at::Tensor& n2) {
  return at::stack({n1, n2}, 1).reshape({-1, n1.size(1)});
}

void expect_pair_grads(const OursPair& o, const NamedTensors& theirs, const std::string& name, bool two_negatives) {
  expect_loss(o.loss, theirs, name);
  expect_close(o.grad_q, find(theirs, name + ".grad_q"), name + " dloss/dq");
  expect_close(o.grad_p, find(theirs, name + ".grad_p"), name + " dloss/dp");
  if (!o.grad_n.defined()) return;
  if (!two_negatives) return expect_close(o.grad_n, find(theirs, name + ".grad_n1"), name + " dloss/dn1");
  const at::Tensor g = o.grad_n.view({kBatch, 2, kDim});
  expect_close(g.select(1, 0), find(theirs, name + ".grad_n1"), name + " dloss/dn1");
  expect_close(g.select(1, 1), find(theirs, name + ".grad_n2"), name + " dloss/dn2");
}

}  // namespace

TEST_F(PeerLosses, DirectionsAndPartitionsAreMnrl6sWithAndWithoutHardNegatives) {
  double previous = 0;
  for (const auto& [name, s] : direction_sets()) {
    SCOPED_TRACE(name);
    const OursPair o = ours_pair(q, p, {}, {}, s);
    expect_pair_grads(o, theirs, "dir_" + name, false);
    expect_pair_grads(ours_pair(q, p, query_major(n, c.n2), {}, s), theirs, "dir_" + name + "_hard", true);
    EXPECT_GT(std::fabs(o.loss - previous), 0.01);  // each set is another loss
    previous = o.loss;
  }
}

TEST_F(PeerLosses, HardnessModesAreMnrl6sPenalties) {
  const OursPair plain = ours_pair(q, p, query_major(n, c.n2), {}, mnrl6({D::QueryToDoc}, PartitionMode::Joint));
  for (const HardnessMode mode : {HardnessMode::InBatchNegatives, HardnessMode::HardNegatives, HardnessMode::AllNegatives}) {
    const std::string name = "hardness_" + choice_name(mode);
    SCOPED_TRACE(name);
    const OursPair o = ours_pair(q, p, query_major(n, c.n2), {}, mnrl6({D::QueryToDoc}, PartitionMode::Joint, mode));
    expect_pair_grads(o, theirs, name, true);
    EXPECT_GT(o.loss, plain.loss + 0.01);  // a penalty on some negative's logit raises the loss
  }
}

// Two ranks, each computing pair_loss on its rows of the global gq, gp, gn1, gn2 with the
// other rank's queries, candidates and candidate owners "gathered" from them, averaged as
// data parallelism averages: the gradients land on the global tensors as all-gather's
// backward sends them.
TEST_F(PeerLosses, DirectionsAcrossRanksAreMnrl6GatheredAcrossDevices) {
  const std::vector<std::pair<std::string, LossConfig>> cases = {
      {"gte_hard", mnrl6({D::QueryToDoc, D::QueryToQuery, D::DocToQuery, D::DocToDoc}, PartitionMode::Joint)},
      {"sym_per_all_negatives",
       mnrl6({D::QueryToDoc, D::DocToQuery}, PartitionMode::PerDirection, HardnessMode::AllNegatives)},
      {"q2d_in_batch_negatives", mnrl6({D::QueryToDoc}, PartitionMode::Joint, HardnessMode::InBatchNegatives)},
  };
  constexpr int64_t kWorld = 2;
  for (const auto& [name, s] : cases) {
    SCOPED_TRACE(name);
    at::Tensor gq = c.gq.clone().requires_grad_(true), gp = c.gp.clone().requires_grad_(true),
               gn1 = c.gn1.clone().requires_grad_(true), gn2 = c.gn2.clone().requires_grad_(true);
    const auto block = [&](const at::Tensor& g, int64_t r) { return g.narrow(0, r * kBatch, kBatch); };
    const auto candidates = [&](int64_t r) {
      return at::cat({block(gp, r), query_major(block(gn1, r), block(gn2, r))});
    };
    double loss = 0;
    for (int64_t r = 0; r < kWorld; ++r) {
      const at::Tensor lq = block(gq, r);
      CandidateExchange exchange{[&](const at::Tensor& local, const std::vector<int64_t>&) {
                                   std::vector<at::Tensor> parts;
                                   const bool queries = local.data_ptr() == lq.data_ptr();
                                   for (int64_t other = 0; other < kWorld; ++other)
                                     parts.push_back(other == r ? local : queries ? block(gq, other) : candidates(other));
                                   return at::cat(parts);
                                 },
                                 [&](const at::Tensor& ids, const std::vector<int64_t>&) {
                                   std::vector<at::Tensor> parts;  // each rank's owners: its queries' numbers
                                   for (int64_t other = 0; other < kWorld; ++other)
                                     parts.push_back(ids + (other - r) * kBatch);
                                   return at::cat(parts);
                                 },
                                 r};
      const PairLoss l = pair_loss(lq, block(gp, r), query_major(block(gn1, r), block(gn2, r)), {}, s, exchange);
      (l.loss / double(kWorld)).backward();
      loss += l.loss.item<double>() / double(kWorld);
    }
    const std::string ref = "xrank_" + name;
    expect_loss(loss, theirs, ref);
    expect_close(gq.grad(), find(theirs, ref + ".grad_gq"), ref + " dloss/d(queries)");
    expect_close(gp.grad(), find(theirs, ref + ".grad_gp"), ref + " dloss/d(positives)");
    expect_close(gn1.grad(), find(theirs, ref + ".grad_gn1"), ref + " dloss/d(first negatives)");
    expect_close(gn2.grad(), find(theirs, ref + ".grad_gn2"), ref + " dloss/d(second negatives)");
  }
}

TEST_F(PeerLosses, MarginMseIsSentenceTransformersMarginMseLoss) {
  const at::Tensor rows = at::arange(kBatch, at::kLong);
  CandidateLabels one;  // [p_i, n_i]: rows i and B + i
  one.groups = at::stack({rows, rows + kBatch}, 1);
  one.teacher_scores = c.mteacher1;
  LossConfig s = settings("margin_mse");
  expect_pair_grads(ours_pair(q, p, n, one, s), theirs, "margin1", false);

  CandidateLabels two;  // [p_i, n1_i, n2_i]: rows i, B + 2i, B + 2i + 1
  two.groups = at::stack({rows, rows * 2 + kBatch, rows * 2 + kBatch + 1}, 1);
  two.teacher_scores = c.mteacher2;
  expect_pair_grads(ours_pair(q, p, query_major(n, c.n2), two, s), theirs, "margin2", true);
  s.matryoshka_dims = kReferenceDims;
  s.matryoshka_weights = kWeights;
  expect_pair_grads(ours_pair(q, p, query_major(n, c.n2), two, s), theirs, "margin2_matryoshka", true);

  // Beside infonce (loss.margin_mse.weight): the sum of the two terms.
  LossConfig beside = settings("infonce");
  beside.margin_mse.weight = 0.5;
  const OursPair sum = ours_pair(q, p, n, one, beside);
  EXPECT_NEAR(sum.loss, find(theirs, "mnrl_hard.loss").item<double>() + 0.5 * find(theirs, "margin1.loss").item<double>(),
              1e-12);

  // A ragged group (query 0 without its second negative): the mean over the 2B - 1
  // margins that exist, i.e. the 2B margins' sum less query 0's second, over 2B - 1.
  CandidateLabels ragged = two;
  ragged.groups = two.groups.clone();
  ragged.groups[0][2] = -1;
  const at::Tensor cc = at::cat({p, query_major(n, c.n2)});
  const double all = margin_mse_loss(q, cc, two.groups, c.mteacher2).item<double>() * double(2 * kBatch);
  const at::Tensor second = at::tensor({int64_t{0}, kBatch + 1}, at::kLong).view({1, 2});
  const at::Tensor teacher = at::stack({c.mteacher2[0][0], c.mteacher2[0][2]}).view({1, 2});
  const double dropped = margin_mse_loss(q.narrow(0, 0, 1), cc, second, teacher).item<double>();
  EXPECT_NEAR(ours_pair(q, p, query_major(n, c.n2), ragged, settings("margin_mse")).loss,
              (all - dropped) / double(2 * kBatch - 1), 1e-12);
}
