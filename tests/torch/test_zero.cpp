// ZeRO-1 (parallel/zero.h, dist.zero_stage 1): sharded AdamW moments train the model of
// plain data parallelism, hold 1/N of the state per rank, and write checkpoints that
// resume at another stage and world size.
#include "parallel/zero.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <regex>

#include "e2e_support.h"

using namespace e2e;

TEST(ZeroShards, CoverTheBufferInOrderWithoutOverlap) {
  for (int64_t n : {0, 1, 7, 8, 9, 1000003})
    for (int world : {1, 2, 3, 4, 7}) {
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        const ddp_embed::ShardRange s = ddp_embed::shard_range(n, r, world);
        EXPECT_EQ(s.begin, next) << n << " " << r << "/" << world;
        EXPECT_GE(s.size, 0);
        EXPECT_LE(s.size, (n + world - 1) / world);
        next = s.begin + s.size;
      }
      EXPECT_EQ(next, n) << n << " over " << world;
    }
}

namespace {

// 2 workers, 2 accumulation steps, clipping that bites (max_grad_norm below the norms of
// the tiny model), 10 steps.
json zero_config(const fs::path& dir, int stage) {
  json c = tiny_config(dir / "out");
  c["train"]["max_steps"] = 10;
  c["train"]["grad_accum_steps"] = 2;
  c["train"]["max_grad_norm"] = 0.5;
  c["dist"]["zero_stage"] = stage;
  return c;
}

double logged_state_mb(const std::string& output) {
  std::smatch m;
  static const std::regex line(R"(optimizer state: ([0-9.]+) MB on this rank)");
  return std::regex_search(output, m, line) ? std::stod(m[1]) : -1;
}

}  // namespace

// Each rank's fused AdamW over its shard is the same element-wise arithmetic on the same
// values as over the whole buffer, and every rank then holds every shard: the weights
// are bit for bit those of stage 0.
TEST(ZeroOne, TwoWorkersTrainThePlainModelBitForBit) {
  const fs::path plain = fresh_dir("zero0"), sharded = fresh_dir("zero1");
  RunResult r0 = train(plain, zero_config(plain, 0), 2);
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  RunResult r1 = train(sharded, zero_config(sharded, 1), 2);
  ASSERT_EQ(r1.exit_code, 0) << r1.output;
  EXPECT_NE(r1.output.find("ZeRO-1: 1/2 of"), std::string::npos) << r1.output;
  // Clipping was in effect, or this would not test the norm under sharding.
  const std::vector<double> norms = series(plain / "out", "grad_norm");
  ASSERT_FALSE(norms.empty());
  EXPECT_GT(*std::max_element(norms.begin(), norms.end()), 0.5);
  expect_same_series(series(plain / "out", "loss"), series(sharded / "out", "loss"), 0, "loss");
  expect_same_series(norms, series(sharded / "out", "grad_norm"), 0, "grad_norm");
  for (const char* f : {"final/model.safetensors", "final/2_Dense/model.safetensors"}) {
    const std::string a = read_file(plain / "out" / f), b = read_file(sharded / "out" / f);
    EXPECT_FALSE(a.empty());
    EXPECT_TRUE(a == b) << f << " differs under ZeRO-1";
  }
  // Half the state a rank (rank 0 holds the first, rounded-up half).
  const double full = logged_state_mb(r0.output), half = logged_state_mb(r1.output);
  ASSERT_GT(full, 0) << r0.output;
  EXPECT_NEAR(half, full / 2, 0.11) << r1.output;
}

// A checkpoint written at stage 1 on 2 workers holds the whole moments: resumed at stage 0
// on 1 worker, and at stage 1 on 4 workers, the run ends where the uninterrupted one does
// (to rounding: other world sizes add the gradients in another order). A checkpoint with
// only rank 0's shard of the moments would be off by about lr in half the parameters.
TEST(ZeroOne, ACheckpointResumesAtAnotherStageAndWorldSize) {
  const fs::path whole = fresh_dir("zero-whole");
  json c = zero_config(whole, 1);
  c["output"]["save_every"] = 5;
  c["output"]["keep_last"] = 3;
  RunResult r = train(whole, c, 2);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path step5 = whole / "out" / "checkpoints" / "step-5";
  ASSERT_TRUE(fs::exists(step5));

  struct Resume {
    const char* name;
    int stage, workers, accum;
  };
  for (const Resume& to : {Resume{"zero-to-stage0-1worker", 0, 1, 4}, Resume{"zero-to-stage1-4workers", 1, 4, 1}}) {
    const fs::path dir = fresh_dir(to.name);
    json cr = zero_config(dir, to.stage);
    cr["train"]["grad_accum_steps"] = to.accum;  // the same micro-batches of 4 pairs
    cr["output"]["save_every"] = 5;
    cr["output"]["resume"] = "auto";
    fs::create_directories(dir / "out" / "checkpoints");
    fs::copy(step5, dir / "out" / "checkpoints" / "step-5", fs::copy_options::recursive);
    r = train(dir, cr, to.workers);
    ASSERT_EQ(r.exit_code, 0) << to.name << "\n" << r.output;
    EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    std::vector<double> a = series(whole / "out", "loss"), b = series(dir / "out", "loss");
    ASSERT_EQ(b.size(), 5u) << to.name;
    a.erase(a.begin(), a.begin() + 5);
    expect_same_series(a, b, 1e-5, std::string(to.name) + " loss");
    expect_same_model(whole / "out", dir / "out", 1e-5);
  }
}
