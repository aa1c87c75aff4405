// IndexPermutation: a bijection of [0, n) for every n, fixed by its seed.
#include "data/index_permutation.h"

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

namespace ddp_embed {
namespace {

TEST(IndexPermutation, IsABijectionForEverySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 63ull, 64ull, 65ull, 1000ull, 4097ull, 65536ull, 100003ull}) {
    const IndexPermutation p(n, 42);
    std::vector<char> seen(n, 0);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t v = p(i);
      ASSERT_LT(v, n) << "n " << n << " i " << i;
      ASSERT_FALSE(seen[v]) << "n " << n << ": " << v << " twice";
      seen[v] = 1;
    }
  }
}

TEST(IndexPermutation, TheSeedFixesTheOrder) {
  const IndexPermutation a(1000, 1), b(1000, 1), c(1000, 2);
  int same_as_other_seed = 0, fixed_points = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(a(i), b(i));
    same_as_other_seed += a(i) == c(i);
    fixed_points += a(i) == i;
  }
  EXPECT_LT(same_as_other_seed, 10);  // ~1 expected by chance
  EXPECT_LT(fixed_points, 10);
  // The order is part of the data contract (a resumed run, another machine): pinned.
  const IndexPermutation pinned(1000, 42);
  const std::vector<uint64_t> first = {38, 460, 729, 632, 631, 484, 308, 383};
  for (size_t i = 0; i < first.size(); ++i) EXPECT_EQ(pinned(i), first[i]);
  const IndexPermutation large(100000000ull, 7);
  EXPECT_EQ(large(0), 10749780u);
  EXPECT_EQ(large(3), 77597414u);
}

// Consecutive positions land far apart: a batch of 64 draws from the whole range.
TEST(IndexPermutation, ConsecutivePositionsSpreadOverTheRange) {
  const uint64_t n = 1000000;
  const IndexPermutation p(n, 3);
  int low_half = 0;
  for (uint64_t i = 0; i < 1000; ++i) low_half += p(i) < n / 2;
  EXPECT_GT(low_half, 430);
  EXPECT_LT(low_half, 570);
}

}  // namespace
}  // namespace ddp_embed
