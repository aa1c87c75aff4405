// The recipes (same-text masks, Matryoshka, distillation) through the real binaries:
//   - a small JSONL full of duplicates: 2 workers with cross-rank negatives train what 1
//     worker trains on the same global batch, and both say how many candidates the mask
//     left out — the number counted here from the file;
//   - Matryoshka + distillation + masks with GradCache and ZeRO-2 on 2 workers train the
//     plain 1-worker model; evaluation reports every size, and each equals what
//     sentence-transformers computes from the written folder with truncate_dim;
//   - with every rank's queries gathered too (loss.directions, all four) and hardness
//     weighting, ranks with different numbers of hard negatives train what 1 worker
//     trains; MarginMSE and the symmetric directions join the GradCache + ZeRO recipe;
//   - bad input (a size beyond the embedding, a pair without teacher scores, MarginMSE
//     without them) stops the run with a message that names the key or FILE:LINE.
// The loss formulas themselves are checked against the peers in test_loss_reference.cpp.
#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>

#include "e2e_support.h"

using namespace e2e;

namespace {

// Query, positive, hard negative: the positives repeat ("paris" in three spellings,
// "puppy" twice) and most negatives are other pairs' positives.
struct Triple {
  const char *query, *pos, *neg;
};
const Triple kPairs[] = {
    {"a large city in france", "paris", "lyon"},
    {"the capital of france", "Paris ", "berlin"},
    {"a city on the seine", "PARIS", "rome"},
    {"a german city", "berlin", "paris"},
    {"a small dog", "puppy", "kitten"},
    {"a young dog", "puppy", "calf"},
    {"a young cat", "kitten", "puppy"},
    {"frozen water", "ice", "steam"},
    {"water as a gas", "steam", "ice"},
    {"a hot drink", "tea", "coffee"},
    {"a bitter drink", "coffee", "tea"},
    {"the color of the sky", "blue", "green"},
    {"the color of grass", "green", "red"},
    {"the color of blood", "red", "blue"},
    {"a tool to write with", "pen", "pencil"},
    {"a tool to draw with", "pencil", "pen"},
};
constexpr int64_t kNumPairs = 16;

// `scored`: with a teacher's scores (the positive above the negative, by varied margins).
fs::path write_pairs(const fs::path& dir, bool scored) {
  const fs::path file = dir / "pairs.jsonl";
  std::ofstream out(file);
  for (int64_t i = 0; i < kNumPairs; ++i) {
    json line = {{"query", kPairs[i].query}, {"pos", kPairs[i].pos}, {"neg", kPairs[i].neg}};
    if (scored) {
      line["pos_scores"] = {0.9 - 0.02 * double(i)};
      line["neg_scores"] = {0.1 + 0.03 * double(i)};
    }
    out << line.dump() << "\n";
  }
  return file;
}

// The text as the mask compares it: lower case, spaces collapsed and trimmed.
std::string normalized(const std::string& text) {
  std::string out;
  for (char ch : text) {
    if (std::isspace(static_cast<unsigned char>(ch))) {
      if (!out.empty() && out.back() != ' ') out += ' ';
    } else {
      out += char(std::tolower(static_cast<unsigned char>(ch)));
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// The candidates of the whole file (every positive and negative) that have a query's
// positive's text, that positive itself aside, summed over the queries: what one step
// over the whole file masks.
int64_t expected_masked() {
  std::vector<std::string> candidates;
  for (const auto& t : kPairs) candidates.push_back(normalized(t.pos));
  for (const auto& t : kPairs) candidates.push_back(normalized(t.neg));
  int64_t masked = 0;
  for (int64_t i = 0; i < kNumPairs; ++i)
    masked += std::count(candidates.begin(), candidates.end(), candidates[size_t(i)]) - 1;
  return masked;
}

// One global batch = the whole file, one hard negative each, cross-rank negatives.
json duplicates_config(const fs::path& dir, const fs::path& data, const std::string& type) {
  json c = tiny_config(dir / "out");
  c["data"]["train"] = data.string();
  c["data"]["negatives_per_query"] = 1;
  c["loss"]["type"] = type;
  c["loss"]["cross_rank_negatives"] = true;
  c["train"]["batch_size"] = kNumPairs;
  c["train"]["max_steps"] = 4;
  return c;
}

// The two runs of `cfg` (one of them's config: the other differs in who computes what).
void expect_runs_agree(const fs::path& one, const fs::path& two, const json& cfg) {
  expect_same_series(series(one / "out", "loss"), series(two / "out", "loss"), step_bound(cfg), "loss");
  expect_same_series(series(one / "out", "grad_norm"), series(two / "out", "grad_norm"), step_bound(cfg), "grad_norm");
  expect_same_model(one / "out", two / "out", cfg);
}

}  // namespace

TEST(LossRecipes, SameTextMaskTwoWorkersWithDuplicatesAcrossRanksTrainWhatOneWorkerTrains) {
  ASSERT_EQ(expected_masked(), 24);  // paris 4 times, puppy 3, the others twice: 9 + 4 + 11
  for (const char* type : {"pairwise_sigmoid", "infonce"}) {
    SCOPED_TRACE(type);
    const fs::path one = fresh_dir(std::string("mask1-") + type), two = fresh_dir(std::string("mask2-") + type);
    const fs::path data = write_pairs(one, false);
    RunResult r1 = train(one, duplicates_config(one, data, type), 1);
    ASSERT_EQ(r1.exit_code, 0) << r1.output;
    RunResult r2 = train(two, duplicates_config(two, data, type), 2);
    ASSERT_EQ(r2.exit_code, 0) << r2.output;
    expect_runs_agree(one, two, duplicates_config(one, data, type));
    // Every step is the whole file: the same count each line, in both runs, and in the log.
    for (const fs::path& run_dir : {one, two}) {
      const std::vector<double> masked = series(run_dir / "out", "masked_negatives");
      ASSERT_EQ(masked.size(), 4u);
      for (double m : masked) EXPECT_EQ(m, double(expected_masked())) << run_dir;
    }
    EXPECT_NE(r2.output.find("masked 24 |"), std::string::npos) << r2.output;
  }
}

// Pairs with fewer hard negatives than data.negatives_per_query give their micro-batch
// fewer candidate rows: with the file order, rank 0's half has 2 negatives a pair, rank 1's
// 1 or none, and the cross-rank gather joins blocks of different sizes (each rank counts
// every rank's rows from the batch plan).
TEST(LossRecipes, SameTextMaskRanksWithDifferentNumbersOfHardNegativesTrainWhatOneWorkerTrains) {
  const fs::path one = fresh_dir("ragged1"), two = fresh_dir("ragged2");
  const fs::path data = one / "ragged.jsonl";
  {
    std::ofstream out(data);
    for (int64_t i = 0; i < kNumPairs; ++i) {
      json negatives = json::array();
      const int64_t count = i < kNumPairs / 2 ? 2 : i % 2;
      for (int64_t k = 0; k < count; ++k) negatives.push_back(kPairs[(i + 3 + 5 * k) % kNumPairs].pos);
      out << json{{"query", kPairs[i].query}, {"pos", kPairs[i].pos}, {"neg", negatives}}.dump() << "\n";
    }
  }
  for (const char* type : {"pairwise_sigmoid", "infonce"}) {
    SCOPED_TRACE(type);
    json c1 = duplicates_config(one, data, type), c2 = duplicates_config(two, data, type);
    for (json* c : {&c1, &c2}) {
      (*c)["data"]["negatives_per_query"] = 2;
      (*c)["data"]["shuffle"] = false;
      if (std::string(type) != "infonce") continue;
      // Every direction (each rank's queries gathered, doc_to_doc needing each
      // candidate's query across ranks of unequal rows) and hardness on own hard negatives.
      (*c)["loss"]["directions"] = {"query_to_doc", "query_to_query", "doc_to_query", "doc_to_doc"};
      (*c)["loss"]["hardness_mode"] = "all_negatives";
      (*c)["loss"]["hardness_strength"] = 5;
    }
    RunResult r1 = train(one, c1, 1);
    ASSERT_EQ(r1.exit_code, 0) << r1.output;
    RunResult r2 = train(two, c2, 2);
    ASSERT_EQ(r2.exit_code, 0) << r2.output;
    expect_runs_agree(one, two, c1);
    fs::remove_all(one / "out");
    fs::remove_all(two / "out");
  }
}

// ---- everything at once ------------------------------------------------------------------

namespace {

const std::vector<int64_t> kDims = {16, 8, 4};  // tiny_config's projection is 16

fs::path eval_pairs(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/eval.jsonl");
  const fs::path file = dir / "eval.jsonl";
  std::ofstream out(file);
  std::string line;
  for (int i = 0; i < 200 && std::getline(in, line); ++i) out << line << "\n";
  return file;
}

json recipe_config(const fs::path& dir, const fs::path& data, const fs::path& eval) {
  json c = duplicates_config(dir, data, "infonce");
  c["data"]["eval"] = eval.string();
  c["loss"]["matryoshka_dims"] = kDims;
  c["loss"]["matryoshka_weights"] = {1.0, 0.5, 0.25};
  c["loss"]["distill"] = {{"weight", 0.5}, {"temperature", 0.5}};
  c["loss"]["margin_mse"] = {{"weight", 0.3}};
  c["loss"]["directions"] = {"query_to_doc", "doc_to_query"};
  c["loss"]["partition_mode"] = "per_direction";
  c["loss"]["hardness_mode"] = "hard_negatives";
  c["loss"]["hardness_strength"] = 5;
  return c;
}

json last_eval(const fs::path& out) {
  json last;
  for (const json& l : metric_lines(out))
    if (l.contains("eval/recall@1")) last = l;
  return last;
}

}  // namespace

// Matryoshka sizes, distillation and the mask, trained on 2 workers with GradCache and
// ZeRO-2, against the plain step of 1 worker: the same losses, gradients and weights.
TEST(LossRecipes, MatryoshkaDistillationAndMasksOnTwoWorkersWithGradCacheAndZeroTrainThePlainModel) {
  const fs::path one = fresh_dir("recipe1"), two = fresh_dir("recipe2");
  const fs::path data = write_pairs(one, true), eval = eval_pairs(one);
  RunResult r1 = train(one, recipe_config(one, data, eval), 1);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  json c2 = recipe_config(two, data, eval);
  c2["train"]["gradcache_chunk"] = 3;
  c2["dist"]["zero_stage"] = 2;
  RunResult r2 = train(two, c2, 2);
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  EXPECT_NE(r2.output.find("GradCache chunks of 3 sequences"), std::string::npos) << r2.output;
  EXPECT_NE(r2.output.find("(ZeRO-2: 1/2 of the whole)"), std::string::npos) << r2.output;
  expect_runs_agree(one, two, recipe_config(one, data, eval));

  // Evaluation: the whole embedding under the plain keys, each smaller size under
  // d<size>/, the same at one and two workers.
  const json e1 = last_eval(one / "out"), e2 = last_eval(two / "out");
  for (const std::string prefix : {"eval/", "eval/d8/", "eval/d4/"})
    for (const char* metric : {"recall@1", "recall@10", "mrr@10", "ndcg@10"}) {
      ASSERT_TRUE(e1.contains(prefix + metric)) << prefix + metric << " missing from " << e1.dump();
      EXPECT_NEAR(e1[prefix + metric].get<double>(), e2[prefix + metric].get<double>(), 1e-9) << prefix + metric;
    }
  EXPECT_FALSE(e1.contains("eval/d16/recall@1")) << "the whole embedding is reported once";
  EXPECT_TRUE(fs::exists(one / "out" / "metrics.svg"));
}

// Each size's metrics are those of the written folder loaded by sentence-transformers
// with truncate_dim (the README's way to use a smaller size).
TEST(LossRecipes, EachSizesEvaluationIsSentenceTransformersWithTruncateDim) {
  std::string error;
  const fs::path dir = shared_run(
      "matryoshka-eval",
      [](const fs::path& d) {
        json c = recipe_config(d, d / "pairs.jsonl", d / "eval.jsonl");
        c["loss"]["distill"]["weight"] = 0;
        c["loss"]["margin_mse"]["weight"] = 0;  // both read teacher scores, which these pairs lack
        c["train"]["max_steps"] = 8;
        return c;
      },
      error, [](const fs::path& d) {
        write_pairs(d, false);
        eval_pairs(d);
      });
  ASSERT_TRUE(error.empty()) << error;
  const json ours = last_eval(dir / "out");
  for (int64_t d : {int64_t{8}, int64_t{4}}) {
    const RunResult r = run(std::string(DDP_EMBED_PYTHON) + " " + kSrc + "/scripts/python/truncated_eval.py " +
                            (dir / "out" / "final").string() + " " + (dir / "eval.jsonl").string() + " " +
                            std::to_string(d));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const json theirs = json::parse(r.output.substr(r.output.rfind('{')));
    for (const char* metric : {"recall@1", "recall@5", "recall@10", "mrr@10", "ndcg@10"}) {
      const std::string key = "eval/d" + std::to_string(d) + "/" + metric;
      ASSERT_TRUE(ours.contains(key)) << key;
      // 200 queries: one query's rank flipped by rounding moves recall by 0.005.
      EXPECT_NEAR(ours[key].get<double>(), theirs[metric].get<double>(), 0.0051) << key;
      std::printf("%s ours %.4f sentence-transformers %.4f\n", key.c_str(), ours[key].get<double>(),
                  theirs[metric].get<double>());
    }
  }
}

// ---- bad input -------------------------------------------------------------------------------

namespace {

struct BadInput {
  const char* name;
  std::function<void(const fs::path& dir, json& cfg)> setup;
  std::vector<std::string> says;
};

}  // namespace

TEST(LossRecipes, BadInputStopsTheRunWithAMessageThatNamesIt) {
  const std::vector<BadInput> cases = {
      {"MatryoshkaSizeBeyondTheEmbedding",
       [](const fs::path&, json& c) { c["loss"]["matryoshka_dims"] = {32, 8}; },
       {"loss.matryoshka_dims", "32", "embedding size 16"}},
      {"PairWithoutTeacherScores",
       [](const fs::path& d, json& c) {
         std::ofstream(d / "scored.jsonl") << R"({"query": "a", "pos": "b", "neg": "c", "pos_scores": [1], "neg_scores": [0]})"
                                           << "\n\n"
                                           << R"({"query": "d", "pos": "e", "neg": "f"})" << "\n";
         c["data"]["train"] = (d / "scored.jsonl").string();
         c["data"]["negatives_per_query"] = 1;
         c["loss"]["distill"]["weight"] = 0.5;
       },
       {"scored.jsonl:3: loss.distill needs teacher scores", "pos_scores"}},
      {"DistillationWithoutHardNegatives", [](const fs::path&, json& c) { c["loss"]["distill"]["weight"] = 0.5; },
       {"loss.distill", "a softmax over one candidate", "data.negatives_per_query > 0"}},
      {"MarginMseWithoutTeacherScores",
       [](const fs::path& d, json& c) {
         std::ofstream(d / "unscored.jsonl") << R"({"query": "a", "pos": "b", "neg": "c"})" << "\n";
         c["data"]["train"] = (d / "unscored.jsonl").string();
         c["data"]["negatives_per_query"] = 1;
         c["loss"]["type"] = "margin_mse";
       },
       {"unscored.jsonl:1: loss.type \"margin_mse\" needs teacher scores", "neg_scores"}},
      {"DistillationAloneWithoutWeight", [](const fs::path&, json& c) { c["loss"]["type"] = "none"; },
       {"loss.type", "loss.distill.weight"}},
  };
  for (const BadInput& bad : cases) {
    SCOPED_TRACE(bad.name);
    const fs::path dir = fresh_dir(std::string("bad-recipe-") + bad.name);
    json cfg = tiny_config(dir / "out");
    bad.setup(dir, cfg);
    const RunResult r = run(kThreads + kBin + "/embed-train --config " + write_config(dir, cfg).string());
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_LT(r.exit_code, 128) << "died by a signal:\n" << r.output;
    for (const std::string& needle : bad.says)
      EXPECT_NE(r.output.find(needle), std::string::npos) << "the message does not say \"" << needle << "\":\n"
                                                          << r.output;
    EXPECT_LT(std::count(r.output.begin(), r.output.end(), '\n'), 40) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out" / "final")) << "a failed run wrote a model";
  }
}
