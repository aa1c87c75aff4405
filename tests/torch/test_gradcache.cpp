// GradCache (train/gradcache.h) against an independent truth: the loss and every
// parameter gradient of the plain step on the same weights, the whole micro-batch in one
// autograd graph — also with Matryoshka sizes, same-text masks and distillation.
//   - Without dropout the truth is model->forward, the trainer's plain step.
//   - With dropout the plain step draws other masks (one draw per part and layer, not per
//     chunk), so the truth is the micro-batch embedded chunk by chunk, as GradCache's
//     first pass does (the same generator draws, the same masks), all in one graph: one
//     loss, one backward, no cached gradients, no replay.
// Then real runs: 2 workers with GradCache train the plain step's model, with cross-rank
// and hard negatives and with accumulation.
#include "train/gradcache.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>

#include "e2e_support.h"
#include "model/embedder.h"

using namespace ddp_embed;

namespace {

const c10::Device kCpu(c10::kCPU);

// n sequences of up to `length` tokens, of varied real lengths (so chunks are trimmed).
EncoderInput sequences(int64_t n, int64_t length, int64_t shortest) {
  at::Tensor ids = at::randint(1, 200, {n, length}, at::kLong);
  at::Tensor mask = at::ones({n, length}, at::kLong);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t real = shortest + (i * 7) % (length - shortest + 1);
    mask[i].slice(0, real).zero_();
    ids[i].slice(0, real).zero_();
  }
  return {ids, mask};
}

PairBatch pair_batch(int64_t n, bool hard_negatives) {
  at::manual_seed(1234);
  PairBatch b;
  b.query = sequences(n, 16, 3);
  b.pos = sequences(n, 12, 2);
  if (hard_negatives) b.neg = sequences(n, 14, 4);
  return b;
}

// The labels of a batch with duplicates (n >= 6): pair 3's positive has pair 0's text,
// and with hard negatives pair 1's negative has pair 5's positive's text; with hard
// negatives each query's group is its positive and its negative, scored by a teacher.
void add_labels(PairBatch& b, int64_t n) {
  const int64_t rows = b.neg.defined() ? 2 * n : n;
  b.labels.hashes = at::arange(1000, 1000 + rows, at::kLong);
  b.labels.hashes[3] = 1000;
  if (b.neg.defined()) {
    b.labels.hashes[n + 1] = 1005;
    b.labels.groups = at::stack({at::arange(n, at::kLong), at::arange(n, 2 * n, at::kLong)}, 1);
    b.labels.teacher_scores = at::randn({n, 2}) * 3;
  }
}

// The recipe cases: Matryoshka sizes, the duplicates masked and, with hard negatives,
// distillation, on top of `type`.
LossConfig loss_config_of(const std::string& type, bool recipe, bool hard_negatives, bool directions = false) {
  LossConfig s;
  s.type = parse_choice<LossType>(type, "loss.type");
  s.temperature = 0.05;
  if (directions) {
    s.directions = {LossDirection::QueryToDoc, LossDirection::QueryToQuery, LossDirection::DocToQuery,
                    LossDirection::DocToDoc};
    s.hardness_mode = HardnessMode::AllNegatives;
    s.hardness_strength = 5;
    s.margin_mse.weight = 0.4;
  }
  if (!recipe) return s;
  s.matryoshka_dims = {16, 8, 4};
  s.matryoshka_weights = {1, 0.5, 0.25};
  if (hard_negatives) s.distill.weight = 0.7;
  return s;
}

SentenceEmbedder make_model(double dropout, Pooling pooling) {
  BertConfig c;
  c.vocab_size = 200;
  c.hidden_size = 32;
  c.num_layers = 2;
  c.num_heads = 4;
  c.intermediate_size = 64;
  c.max_position = 32;
  c.hidden_dropout = c.attention_dropout = dropout;
  at::manual_seed(7);
  SentenceEmbedder model(c, 16, pooling);
  model->train();
  return model;
}

struct Step {
  double loss = 0;
  std::map<std::string, at::Tensor> grads;
  double next_random = 0;  // the first random number drawn after the step
};

Step result(SentenceEmbedder& model, const at::Tensor& loss) {
  Step s;
  s.loss = loss.item<double>();
  for (const auto& p : model->named_parameters()) s.grads[p.key()] = p.value().grad().clone();
  s.next_random = at::rand({1}).item<double>();
  return s;
}

Step gradcache_step(SentenceEmbedder& model, const PairBatch& b, int64_t chunk, const LossConfig& loss) {
  model->zero_grad();
  at::manual_seed(99);
  const at::Tensor l = gradcache_forward_backward(model, b, {chunk, Precision::Fp32, kCpu}, loss, {},
                                                  [](const at::Tensor& x) { return x; }, LossScaler(), nullptr);
  return result(model, l);
}

Step plain_step(SentenceEmbedder& model, const PairBatch& b, const LossConfig& loss) {
  model->zero_grad();
  at::manual_seed(99);
  const at::Tensor l = model->forward(b.query, b.pos, b.neg, loss, {}, b.labels).loss;
  l.backward();
  return result(model, l);
}

// The micro-batch embedded `chunk` rows at a time, each chunk cut to its longest
// sequence, in one graph.
Step chunked_graph_step(SentenceEmbedder& model, const PairBatch& b, int64_t chunk, const LossConfig& loss) {
  model->zero_grad();
  at::manual_seed(99);
  std::vector<at::Tensor> parts;
  for (const EncoderInput* part : {&b.query, &b.pos, &b.neg}) {
    if (!part->defined()) continue;
    std::vector<at::Tensor> pieces;
    for (int64_t start = 0; start < part->ids.size(0); start += chunk) {
      const int64_t count = std::min(chunk, part->ids.size(0) - start);
      const at::Tensor mask = part->mask.narrow(0, start, count);
      const int64_t longest = mask.sum(1).max().item<int64_t>();
      pieces.push_back(model->embed({part->ids.narrow(0, start, count).narrow(1, 0, longest), mask.narrow(1, 0, longest)}));
    }
    parts.push_back(at::cat(pieces));
  }
  const at::Tensor l = SentenceEmbedderImpl::loss_of_embeddings(parts[0], parts[1],
                                                                parts.size() > 2 ? parts[2] : at::Tensor(), loss, {},
                                                                b.labels).loss;
  l.backward();
  return result(model, l);
}

// How far one step's loss and gradients on `b` may move when their sums are added in
// another order (GradCache embeds in chunks and replays; the plain step embeds the
// micro-batch at once): e2e::step_bound's rule for a step of b's tokens.
double step_bound_of(const PairBatch& b, const LossConfig& loss) {
  int64_t tokens = 0;
  for (const EncoderInput* part : {&b.query, &b.pos, &b.neg})
    if (part->defined()) tokens += part->mask.sum().item<int64_t>();
  return tolerance::step_rounding(tokens) / std::min(1.0, loss.temperature);
}

// The loss within `rel` of the truth's, every gradient within `rel` of its largest value.
// The attention key biases have a true gradient of exactly zero (softmax ignores a shift
// of a row's scores): theirs is the rounding of sums whose terms are of the size of the
// model's gradients, so it is held to `rel` of the model's largest gradient.
void expect_same_step(const Step& truth, const Step& got, double rel) {
  tolerance::record("loss", std::fabs(got.loss - truth.loss) / std::fabs(truth.loss), rel);
  EXPECT_NEAR(got.loss, truth.loss, rel * std::fabs(truth.loss));
  ASSERT_EQ(truth.grads.size(), got.grads.size());
  double largest = 0;
  for (const auto& [name, g] : truth.grads) largest = std::max(largest, g.abs().max().item<double>());
  ASSERT_GT(largest, 0);
  for (const auto& [name, g] : truth.grads) {
    const at::Tensor& h = got.grads.at(name);
    const bool key_bias = name.size() > 8 && name.compare(name.size() - 8, 8, "key.bias") == 0;
    const double scale = key_bias ? largest : g.abs().max().item<double>();
    const double diff = (g - h).abs().max().item<double>();
    tolerance::record("gradient " + name, scale > 0 ? diff / scale : (diff > 0 ? 1e300 : 0), rel);
    EXPECT_LE(diff, rel * scale) << name;
  }
}

}  // namespace

struct GradCacheCase {
  const char* loss;
  Pooling pooling;
  bool hard_negatives;
  int64_t chunk;
  bool recipe = false;  // Matryoshka, masks, distillation (loss_config_of)
  bool directions = false;  // all four loss.directions, hardness, MarginMSE
};

class GradCache : public ::testing::TestWithParam<GradCacheCase> {};

TEST_P(GradCache, WithoutDropoutItIsThePlainStep) {
  const GradCacheCase c = GetParam();
  SentenceEmbedder model = make_model(0.0, c.pooling);
  PairBatch b = pair_batch(10, c.hard_negatives);
  if (c.recipe) add_labels(b, 10);
  const LossConfig loss = loss_config_of(c.loss, c.recipe, c.hard_negatives, c.directions);
  const Step plain = plain_step(model, b, loss);
  const Step cached = gradcache_step(model, b, c.chunk, loss);
  expect_same_step(plain, cached, step_bound_of(b, loss));
  EXPECT_GT(plain.loss, 0);
}

TEST_P(GradCache, WithDropoutItIsTheWholeGraphOfTheSameMasks) {
  const GradCacheCase c = GetParam();
  SentenceEmbedder model = make_model(0.1, c.pooling);
  PairBatch b = pair_batch(10, c.hard_negatives);
  if (c.recipe) add_labels(b, 10);
  const LossConfig loss = loss_config_of(c.loss, c.recipe, c.hard_negatives, c.directions);
  const Step truth = chunked_graph_step(model, b, c.chunk, loss);
  const Step cached = gradcache_step(model, b, c.chunk, loss);
  const double bound = step_bound_of(b, loss);
  expect_same_step(truth, cached, bound);
  // The replays put the generator back: the run draws on as after the first pass.
  EXPECT_EQ(truth.next_random, cached.next_random);
  // The masks matter (else this case would prove nothing about their replay): the plain
  // step, whose masks differ, gives another loss, by more than the bound above.
  const Step plain = plain_step(model, b, loss);
  EXPECT_GT(std::fabs(plain.loss - truth.loss), bound * std::fabs(truth.loss));
}

INSTANTIATE_TEST_SUITE_P(
    LossesPoolingsNegatives, GradCache,
    ::testing::Values(GradCacheCase{"pairwise_sigmoid", Pooling::Cls, false, 4},
                      GradCacheCase{"infonce", Pooling::Mean, false, 3},
                      GradCacheCase{"infonce", Pooling::Cls, true, 4},
                      GradCacheCase{"pairwise_sigmoid", Pooling::Mean, true, 1},
                      GradCacheCase{"infonce", Pooling::Mean, true, 64},  // one chunk holds the micro-batch
                      GradCacheCase{"infonce", Pooling::Mean, true, 3, true},
                      GradCacheCase{"pairwise_sigmoid", Pooling::Cls, false, 4, true},
                      GradCacheCase{"none", Pooling::Cls, true, 4, true},  // distillation alone
                      GradCacheCase{"infonce", Pooling::Mean, true, 3, true, true}),  // + directions, hardness, MarginMSE
    [](const auto& info) {
      const GradCacheCase& c = info.param;
      return std::string(c.loss) + "_" + (c.pooling == Pooling::Cls ? "cls" : "mean") +
             (c.hard_negatives ? "_hardneg" : "") + "_chunk" + std::to_string(c.chunk) +
             (c.recipe ? "_matryoshka_masks" + std::string(c.hard_negatives ? "_distill" : "") : "") +
             (c.directions ? "_directions_hardness_marginmse" : "");
    });

// loss.guide: the guide's embeddings ride in the labels (train/guide.h puts them there
// before either step), so GradCache's loss pass masks what the plain forward masks.
TEST(GradCache, WithAGuideItIsThePlainStep) {
  SentenceEmbedder model = make_model(0.0, Pooling::Mean);
  PairBatch b = pair_batch(10, true);
  add_labels(b, 10);
  at::manual_seed(5);
  b.labels.guide_queries = at::randn({10, 8});
  b.labels.guide_candidates = b.labels.guide_queries.repeat({2, 1}) + 1.5 * at::randn({20, 8});
  LossConfig loss = loss_config_of("infonce", true, true);
  loss.guide.model = "guide";
  loss.guide.margin = 0.1;
  const Step plain = plain_step(model, b, loss);
  at::Tensor masked = at::zeros({}, at::kLong), guided = at::zeros({}, at::kLong);
  model->zero_grad();
  at::manual_seed(99);
  const at::Tensor l = gradcache_forward_backward(model, b, {3, Precision::Fp32, kCpu}, loss, {},
                                                  [](const at::Tensor& x) { return x; }, LossScaler(), nullptr,
                                                  &masked, &guided);
  expect_same_step(plain, result(model, l), step_bound_of(b, loss));
  EXPECT_EQ(masked.item<int64_t>(), 3);  // add_labels' duplicates: queries 0 and 3 each other's, 5 a negative
  EXPECT_GT(guided.item<int64_t>(), 0);  // and the guide's, besides
  // The guide's mask changes the loss.
  loss.guide.model.reset();
  b.labels.guide_queries = b.labels.guide_candidates = at::Tensor();
  EXPECT_GT(std::fabs(plain_step(model, b, loss).loss - plain.loss), 1e-4);
}

// ---- real runs ---------------------------------------------------------------------------

namespace {

using namespace e2e;

// The demo pairs with a hard negative each (the next line's positive).
fs::path pairs_with_negatives(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> rows;
  std::string line;
  while (rows.size() < 2000 && std::getline(in, line)) rows.push_back(json::parse(line));
  const fs::path out = dir / "pairs-neg.jsonl";
  std::ofstream o(out);
  for (size_t i = 0; i < rows.size(); ++i) {
    json r = rows[i];
    r["neg"] = json::array({rows[(i + 1) % rows.size()]["pos"]});
    o << r.dump() << "\n";
  }
  return out;
}

// batch 64 on 2 workers, cross-rank and hard negatives, infonce; `chunk` 0 = plain.
json gradcache_config(const fs::path& dir, const fs::path& data, int64_t chunk, int accum) {
  json c = tiny_config(dir / "out");
  c["data"]["train"] = data.string();
  c["data"]["negatives_per_query"] = 1;
  c["loss"]["type"] = "infonce";
  c["loss"]["cross_rank_negatives"] = true;
  c["train"]["batch_size"] = 64;
  c["train"]["grad_accum_steps"] = accum;
  c["train"]["gradcache_chunk"] = chunk;
  return c;
}

void expect_runs_agree(int accum) {
  const fs::path plain = fresh_dir("gradcache-plain-" + std::to_string(accum)),
                 cached = fresh_dir("gradcache-on-" + std::to_string(accum));
  const fs::path data = pairs_with_negatives(plain);
  RunResult r = train(plain, gradcache_config(plain, data, 0, accum), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = train(cached, gradcache_config(cached, data, 8, accum), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("GradCache chunks of 8 sequences"), std::string::npos) << r.output;
  const json c = gradcache_config(plain, data, 0, accum);
  expect_same_series(series(plain / "out", "loss"), series(cached / "out", "loss"), step_bound(c), "loss");
  expect_same_series(series(plain / "out", "grad_norm"), series(cached / "out", "grad_norm"), step_bound(c), "grad_norm");
  EXPECT_EQ(series(cached / "out", "loss").size(), 5u);
  expect_same_model(plain / "out", cached / "out", c);
}

}  // namespace

// 32 pairs per rank in chunks of 8 (4 chunks a part, 12 a step), every rank's candidates
// gathered: the loss, grad_norm and weights of the plain 2-worker run.
TEST(GradCache, TwoWorkersTrainThePlainStepsModel) { expect_runs_agree(1); }

// The same with 2 accumulation micro-steps: GradCache's no_sync nests inside the
// accumulation's, and only the last chunk of the last micro-step all-reduces.
TEST(GradCache, WithAccumulationTooTheyTrainThePlainStepsModel) { expect_runs_agree(2); }
