// The sampling contract (data/sampler.h; docs/README.md, "A training run"): micro-batches
// depend only on world × accum, every epoch covers the dataset once, and epochs differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "data/sampler.h"

using ddp_embed::BatchPlan;

TEST(Sampler, EpochIsAPermutation) {
  BatchPlan plan(103, 10, 1, 1, true, true, 7);
  EXPECT_EQ(plan.steps_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t s = 0; s < plan.steps_per_epoch(); ++s)
    for (auto i : plan.global_batch(0, s)) EXPECT_TRUE(seen.insert(i).second) << i;
  EXPECT_EQ(seen.size(), 100u);  // the 3-sample tail is dropped
  EXPECT_NE(plan.global_batch(0, 0), plan.global_batch(1, 0));
}

TEST(Sampler, MicroBatchesDependOnlyOnWorldTimesAccum) {
  // 2 ranks x 2 accumulation steps and 4 ranks x 1 see the same micro-batches at the same
  // flat index a*W + r; 1 rank x 4 too.
  BatchPlan w2a2(500, 16, 2, 2, true, true, 3), w4a1(500, 16, 4, 1, true, true, 3),
      w1a4(500, 16, 1, 4, true, true, 3);
  for (int64_t step = 0; step < 5; ++step)
    for (int k = 0; k < 4; ++k) {
      auto ref = w1a4.micro_batch(2, step, k, 0);
      EXPECT_EQ(w4a1.micro_batch(2, step, 0, k), ref);
      EXPECT_EQ(w2a2.micro_batch(2, step, k / 2, k % 2), ref);
    }
}

TEST(Sampler, MicroBatchesTileTheGlobalBatch) {
  BatchPlan plan(64, 12, 3, 2, true, true, 11);
  auto global = plan.global_batch(0, 1);
  std::vector<int64_t> joined;
  for (int a = 0; a < 2; ++a)
    for (int r = 0; r < 3; ++r) {
      auto m = plan.micro_batch(0, 1, a, r);
      joined.insert(joined.end(), m.begin(), m.end());
    }
  EXPECT_EQ(joined, global);
}

TEST(Sampler, TailWrapsWithoutDropLast) {
  BatchPlan plan(10, 4, 1, 1, false, false, 0);
  EXPECT_EQ(plan.steps_per_epoch(), 3);
  EXPECT_EQ(plan.global_batch(0, 2), (std::vector<int64_t>{8, 9, 0, 1}));
}

TEST(Sampler, SameSeedSameOrder) {
  BatchPlan a(1000, 50, 2, 1, true, true, 42), b(1000, 50, 2, 1, true, true, 42),
      c(1000, 50, 2, 1, true, true, 43);
  EXPECT_EQ(a.global_batch(3, 4), b.global_batch(3, 4));
  EXPECT_NE(a.global_batch(3, 4), c.global_batch(3, 4));
}

TEST(Sampler, BadSizesNameTheKeys) {
  try {
    BatchPlan(100, 10, 3, 1, true, true, 0);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.batch_size (10)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE (3)"), std::string::npos);
  }
  EXPECT_THROW(BatchPlan(5, 10, 1, 1, true, true, 0), std::invalid_argument);
}
