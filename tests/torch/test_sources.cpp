// Several training sources end to end (data.train as a list of sources, data.mixing,
// data.dedupe_batches): the real binaries on two sources cut from the WordNet test pairs.
//
// The truths: N workers train the model one worker trains on the same global batches; a
// run interrupted at one world size and resumed at another ends where the uninterrupted
// run ends; the pairs each step actually trained on (the test-only sample log) come from
// the source metrics.jsonl names; the counts per source are the apportionment's, worked
// out by hand.
#include <set>
#include <sstream>

#include "e2e_support.h"
#include "data/batch_plan.h"
#include "train/batches.h"

using namespace e2e;

namespace {

// The two sources' pairs: [0, 48) and [48, 80). Small, so that an epoch is 5 steps and
// the runs compared cross epochs and passes in a few steps: over many steps, Adam turns
// the rounding differences of another summation order into visible weight differences
// (e2e_support.h, expect_same_model).
constexpr int64_t kDefs = 48, kMore = 32;

// defs.jsonl: the first 48 test pairs; more.jsonl: the next 32, each with two hard
// negatives (the positives of the two lines after it).
void write_sources(const fs::path& dir) {
  std::ifstream in(kBin + "/test-data/train.jsonl");
  std::vector<json> lines;
  std::string line;
  while (int64_t(lines.size()) < kDefs + kMore + 2 && std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(int64_t(lines.size()), kDefs + kMore + 2) << "build/test-data/train.jsonl is too short";
  std::ofstream defs(dir / "defs.jsonl"), more(dir / "more.jsonl");
  for (int64_t i = 0; i < kDefs; ++i) defs << lines[size_t(i)].dump() << "\n";
  for (int64_t i = kDefs; i < kDefs + kMore; ++i) {
    json l = lines[size_t(i)];
    l["neg"] = {lines[size_t(i + 1)]["pos"], lines[size_t(i + 2)]["pos"]};
    more << l.dump() << "\n";
  }
}

// tiny_config on the two sources: "more" with one hard negative per query, two epochs.
json two_sources_config(const fs::path& dir, const fs::path& out) {
  json c = tiny_config(out);
  c["data"]["train"] = json::array({{{"name", "defs"}, {"path", (dir / "defs.jsonl").string()}},
                                    {{"name", "more"}, {"path", (dir / "more.jsonl").string()}, {"negatives_per_query", 1}}});
  c["train"]["max_steps"] = -1;
  c["train"]["epochs"] = 2;
  return c;
}

// The training lines of metrics.jsonl by step; a step logged twice (a resumed run
// appends the steps since its checkpoint again) takes the later line, as readers do.
std::map<int64_t, json> training_lines(const fs::path& out) {
  std::map<int64_t, json> by_step;
  for (const json& l : metric_lines(out))
    if (l.contains("loss")) by_step[l["step"].get<int64_t>()] = l;
  return by_step;
}

// Every training line names its step's source and counts the steps per source so far;
// the source is the one the step's pairs came from; the last counts are `final_counts`.
void expect_sources_logged(const fs::path& out, const std::map<int64_t, std::vector<int64_t>>& pairs,
                           int64_t steps, const json& final_counts) {
  const auto lines = training_lines(out);
  ASSERT_EQ(int64_t(lines.size()), steps);
  json previous = {{"defs", 0}, {"more", 0}};
  for (const auto& [step, l] : lines) {
    ASSERT_TRUE(l.contains("source") && l.contains("steps_per_source")) << l.dump();
    const std::string source = l["source"];
    ASSERT_TRUE(source == "defs" || source == "more") << l.dump();
    json expected = previous;
    expected[source] = previous[source].get<int64_t>() + 1;
    EXPECT_EQ(l["steps_per_source"], expected) << "step " << step;
    previous = l["steps_per_source"];
    // The pairs the step trained on are all from that source.
    ASSERT_TRUE(pairs.count(step)) << "no pairs logged for step " << step;
    ASSERT_EQ(pairs.at(step).size(), 16u) << "step " << step;
    for (int64_t i : pairs.at(step))
      EXPECT_EQ(i < kDefs ? "defs" : "more", source) << "step " << step << ": pair " << i;
  }
  EXPECT_EQ(previous, final_counts);
}

// The training lines of two runs of `cfg` agree: the same sources and counts, exactly; the
// same loss and gradient norm, to the rounding of their steps (e2e::step_bound).
void expect_same_training_lines(const fs::path& a, const fs::path& b, const json& cfg) {
  const double bound = step_bound(cfg);
  const auto la = training_lines(a), lb = training_lines(b);
  ASSERT_EQ(la.size(), lb.size());
  for (const auto& [step, l] : la) {
    const json& m = lb.at(step);
    EXPECT_EQ(l["source"], m["source"]) << "step " << step;
    EXPECT_EQ(l["steps_per_source"], m["steps_per_source"]) << "step " << step;
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_NEAR(l[key].get<double>(), m[key].get<double>(), bound * std::fabs(m[key].get<double>())) << key << " at step " << step;
  }
}

}  // namespace

// Two workers against one worker with two accumulation steps on the same two sources:
// the same global batches, so the same losses and model; metrics.jsonl and the log
// name each step's source, and that is where its pairs came from.
TEST(Sources, TwoWorkersEqualOneWorkerAndEveryStepNamesItsSource) {
  const fs::path d = fresh_dir("sources-w12");
  write_sources(d);
  const fs::path one = d / "one", two = d / "two";
  fs::create_directories(one);
  fs::create_directories(two);
  json c1 = two_sources_config(d, one / "out");
  c1["train"]["grad_accum_steps"] = 2;
  auto r1 = train(one, c1, 1, "DDP_EMBED_TEST_SAMPLE_LOG=" + (one / "samples").string());
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  auto r2 = train(two, two_sources_config(d, two / "out"), 2, "DDP_EMBED_TEST_SAMPLE_LOG=" + (two / "samples").string());
  ASSERT_EQ(r2.exit_code, 0) << r2.output;

  expect_same_training_lines(one / "out", two / "out", c1);
  expect_same_model(one / "out", two / "out", c1);
  // proportional: an epoch takes 48/16 = 3 batches of defs and 32/16 = 2 of more.
  EXPECT_NE(r2.output.find("batch plan: data.mixing proportional, 5 steps an epoch of 16 pairs, each from one "
                           "source: \"defs\" 3 (60.0%), \"more\" 2 (40.0%)"),
            std::string::npos) << r2.output;
  const json final_counts = {{"defs", 6}, {"more", 4}};
  expect_sources_logged(one / "out", trained_pairs(one / "samples", 1), 10, final_counts);
  expect_sources_logged(two / "out", trained_pairs(two / "samples", 2), 10, final_counts);
  const std::string first = training_lines(two / "out").at(1)["source"];
  EXPECT_NE(r2.output.find("step 1/10 [" + first + "] loss"), std::string::npos) << r2.output;
  // The figure of the run reads the new keys without a complaint.
  EXPECT_TRUE(fs::exists(two / "out" / "metrics.svg"));
  EXPECT_EQ(r2.output.find("no figure of the run"), std::string::npos) << r2.output;
}

// weighted (1 : 3) with dedupe_batches: a run killed after 7 steps at one world size and
// resumed at the other from its step-5 checkpoint ends where the uninterrupted run ends,
// with the same sources and counts at every step (derived from the plan, not stored).
TEST(Sources, ResumedAtAnotherWorldSizeEndsWhereTheUninterruptedRunEnds) {
  const fs::path d = fresh_dir("sources-resume");
  write_sources(d);
  auto config = [&](const fs::path& out, int accum) {
    json c = two_sources_config(d, out);
    c["data"]["mixing"] = "weighted";
    c["data"]["train"][1]["weight"] = 3;
    c["data"]["dedupe_batches"] = true;
    c["train"]["grad_accum_steps"] = accum;
    c["output"]["save_every"] = 5;
    c["output"]["resume"] = "auto";
    return c;
  };
  const fs::path clean = d / "clean";
  fs::create_directories(clean);
  auto r = train(clean, config(clean / "out", 1), 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"defs\" 1 (20.0%), \"more\" 4 (80.0%); each source read in passes of its own; "
                          "data.dedupe_batches on"),
            std::string::npos) << r.output;
  // 5 steps an epoch shared 1 : 3: 1.25 and 3.75, the step left over to the larger
  // remainder: 1 and 4 (two passes over more an epoch); two epochs.
  const json final_counts = {{"defs", 2}, {"more", 8}};
  EXPECT_EQ(training_lines(clean / "out").at(10)["steps_per_source"], final_counts);

  // 2 workers -> 1 worker with 2 accumulation steps, and 1 -> 2.
  for (const auto& [first_world, second_world] : {std::pair{2, 1}, std::pair{1, 2}}) {
    const fs::path run_dir = d / ("from" + std::to_string(first_world));
    fs::create_directories(run_dir);
    const fs::path cfg = write_config(run_dir, config(run_dir / "out", 2 / first_world));
    r = run(launch_command(cfg, first_world, "DDP_EMBED_TEST_DIE_AT_STEP=0:7"));
    ASSERT_EQ(r.exit_code, 137) << r.output;
    write_config(run_dir, config(run_dir / "out", 2 / second_world));
    r = run(launch_command(cfg, second_world));
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("resumed from " + (run_dir / "out" / "checkpoints" / "step-5").string()),
              std::string::npos) << r.output;
    expect_same_training_lines(run_dir / "out", clean / "out", config(clean / "out", 1));
    expect_same_model(run_dir / "out", clean / "out", config(clean / "out", 1));
  }
}

// A source smaller than one global batch: with data.drop_last an error that names it
// and the keys to change; without, it wraps around and the log says so.
TEST(Sources, ASourceSmallerThanAGlobalBatchIsAnErrorOrWraps) {
  const fs::path d = fresh_dir("sources-small");
  write_sources(d);
  {
    std::ifstream in(d / "more.jsonl");
    std::ofstream tiny(d / "tiny.jsonl");
    std::string line;
    for (int i = 0; i < 10 && std::getline(in, line); ++i) tiny << line << "\n";
  }
  json c = two_sources_config(d, d / "out");
  c["data"]["train"][1]["path"] = (d / "tiny.jsonl").string();
  c["data"]["train"][1]["name"] = "tiny";
  c["train"]["max_steps"] = 3;
  auto r = train(d, c, 1);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("data.train[1] (source \"tiny\") has 10 pairs, fewer than one global batch "
                          "(train.batch_size = 16): lower train.batch_size, set data.drop_last=false"),
            std::string::npos) << r.output;

  c["data"]["drop_last"] = false;
  r = train(d, c, 1);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("source \"tiny\" has 10 pairs, fewer than one global batch (16): its batches wrap around"),
            std::string::npos) << r.output;
}

// The loader gives each source's batches that source's hard negatives per query, and
// says whose batch it is.
TEST(Sources, EachSourceBatchesWithItsOwnNegatives) {
  using namespace ddp_embed;
  const fs::path d = fresh_dir("sources-loader");
  write_sources(d);
  const auto tokenizer = load_tokenizer("wordpiece", kSrc + "/tests/fixtures/golden/vocab.txt");
  const PairDataset data = load_sources({SourceInput{"defs", {(d / "defs.jsonl").string()}, "", ""},
                                         SourceInput{"more", {(d / "more.jsonl").string()}, "", ""}},
                                        *tokenizer, 32, false);
  PlanSettings settings;
  settings.global_batch = 16;
  settings.accum_steps = 2;
  settings.seed = 7;
  const BatchPlan plan(plan_sources(data.sources, {1, 1}), settings);
  const int64_t steps = plan.steps_per_epoch() + 3;  // into the second epoch
  BatchLoader loader(data, plan, /*rank=*/0, /*accum_steps=*/2, /*negatives_per_source=*/{0, 2}, 7, 0, 0, steps);
  std::set<std::string> seen;
  for (int64_t t = 0; t < steps; ++t) {
    const StepBatches b = loader.next();
    ASSERT_EQ(b.source, plan.source_of(b.epoch, b.step_in_epoch));
    ASSERT_EQ(b.source_name, b.source == 0 ? "defs" : "more");
    seen.insert(b.source_name);
    for (const PairBatch& m : b.micro) {
      if (b.source == 0) {
        EXPECT_FALSE(m.neg.defined()) << "defs has no negatives_per_query";
      } else {
        ASSERT_TRUE(m.neg.defined());
        EXPECT_EQ(m.neg.ids.size(0), 2 * 8) << "more: 2 negatives for each of 8 queries";
      }
    }
  }
  EXPECT_EQ(seen, (std::set<std::string>{"defs", "more"}));
}
