// The batch plan (data/batch_plan.h): every step's source and global batch follow from the
// seed alone, the same for any world size and rank; each mode's step counts and shares
// are exact; a single source draws exactly the batches of the plan before sources
// existed; data.dedupe_batches leaves no repeated query or positive in a global batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "config/config.h"
#include "data/batch_plan.h"
#include "data/index_permutation.h"
#include "data/sampler.h"

using namespace ddp_embed;

namespace {

// ---- the plan of one data set, written out plainly: epoch e is the permutation drawn from
// seed + e (data/index_permutation.h), cut into global batches, the last wrapping around —
// the truth a single source (and mixed) must reproduce bit for bit -----------------------------
struct PlainPlan {
  int64_t size, global_batch, micro_batch, steps_per_epoch;
  int world;
  bool shuffle;
  uint64_t seed;
  PlainPlan(int64_t n, int64_t B, int world_size, int accum, bool shuffle_, bool drop_last, uint64_t seed_)
      : size(n), global_batch(B), micro_batch(B / (int64_t(world_size) * accum)),
        steps_per_epoch(drop_last ? n / B : (n + B - 1) / B), world(world_size), shuffle(shuffle_), seed(seed_) {}
  std::vector<int64_t> permutation(int64_t epoch) const {
    std::vector<int64_t> perm(static_cast<size_t>(size));
    std::iota(perm.begin(), perm.end(), int64_t{0});
    if (shuffle) {
      const IndexPermutation drawn(uint64_t(size), seed + uint64_t(epoch));
      for (int64_t i = 0; i < size; ++i) perm[size_t(i)] = int64_t(drawn(uint64_t(i)));
    }
    return perm;
  }
  std::vector<int64_t> global(int64_t epoch, int64_t step) const {
    const auto perm = permutation(epoch);
    std::vector<int64_t> out(global_batch);
    for (int64_t k = 0; k < global_batch; ++k) out[k] = perm[(step * global_batch + k) % size];
    return out;
  }
  std::vector<int64_t> micro(int64_t epoch, int64_t step, int accum, int rank) const {
    const auto perm = permutation(epoch);
    const int64_t first = step * global_batch + (int64_t(accum) * world + rank) * micro_batch;
    std::vector<int64_t> out(micro_batch);
    for (int64_t k = 0; k < micro_batch; ++k) out[k] = perm[(first + k) % size];
    return out;
  }
};

// ---- making plans ------------------------------------------------------------------------------

std::vector<PlanSource> sources_of(const std::vector<int64_t>& sizes, const std::vector<double>& weights = {}) {
  std::vector<PlanSource> out;
  int64_t begin = 0;
  for (size_t s = 0; s < sizes.size(); ++s) {
    out.push_back({"s" + std::to_string(s), begin, sizes[s], s < weights.size() ? weights[s] : 1.0});
    begin += sizes[s];
  }
  return out;
}

PlanSettings settings(int64_t B, Mixing mixing, int world = 1, int accum = 1, bool shuffle = true,
                      bool drop_last = true, uint64_t seed = 42) {
  PlanSettings s;
  s.global_batch = B;
  s.world_size = world;
  s.accum_steps = accum;
  s.shuffle = shuffle;
  s.drop_last = drop_last;
  s.seed = seed;
  s.mixing = mixing;
  return s;
}

std::unique_ptr<BatchPlan> one_source(int64_t n, int64_t B, int world, int accum, bool shuffle, bool drop_last,
                                      uint64_t seed) {
  return std::make_unique<BatchPlan>(sources_of({n}),
                                     settings(B, Mixing::Proportional, world, accum, shuffle, drop_last, seed));
}

const std::vector<Mixing> kAllModes = {Mixing::Proportional, Mixing::Weighted, Mixing::RoundRobin, Mixing::Mixed};

std::string name_of(Mixing m) { return choice_name(m); }

// The global batch rebuilt from the micro-batches of every rank and accumulation step.
std::vector<int64_t> joined_micro_batches(const BatchPlan& plan, int64_t epoch, int64_t step, int world, int accum) {
  std::vector<int64_t> out;
  for (int a = 0; a < accum; ++a)
    for (int r = 0; r < world; ++r) {
      const auto m = plan.micro_batch(epoch, step, a, r);
      EXPECT_EQ(int64_t(m.size()), plan.micro_batch_size());
      out.insert(out.end(), m.begin(), m.end());
    }
  return out;
}

// Per source, how many steps of `epoch` it has.
std::vector<int64_t> counted_steps(const BatchPlan& plan, int64_t epoch) {
  std::vector<int64_t> n(plan.sources().size(), 0);
  for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) ++n[size_t(plan.source_of(epoch, t))];
  return n;
}

}  // namespace

// ---- one source: the plain plan, bit for bit ---------------------------------------------------

TEST(BatchPlan, OneSourceProportionalIsThePlainPlanBitForBit) {
  struct Case { int64_t n, B; int world, accum; bool shuffle, drop_last; uint64_t seed; };
  for (const Case& c : {Case{103, 10, 1, 1, true, true, 7}, Case{500, 16, 2, 2, true, true, 3},
                        Case{64, 12, 3, 2, true, false, 11}, Case{10, 4, 1, 1, false, false, 0},
                        Case{7, 12, 2, 3, true, false, 5}, Case{1000, 50, 2, 1, true, true, 42}}) {
    const PlainPlan plain(c.n, c.B, c.world, c.accum, c.shuffle, c.drop_last, c.seed);
    for (Mixing mixing : {Mixing::Proportional, Mixing::Mixed}) {
      const BatchPlan plan(sources_of({c.n}), settings(c.B, mixing, c.world, c.accum, c.shuffle, c.drop_last, c.seed));
      ASSERT_EQ(plan.steps_per_epoch(), plain.steps_per_epoch) << c.n << " " << name_of(mixing);
      ASSERT_EQ(plan.micro_batch_size(), plain.micro_batch);
      for (int64_t e = 0; e < 3; ++e)
        for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
          ASSERT_EQ(plan.global_batch(e, t), plain.global(e, t)) << "n " << c.n << " epoch " << e << " step " << t;
          for (int a = 0; a < c.accum; ++a)
            for (int r = 0; r < c.world; ++r) ASSERT_EQ(plan.micro_batch(e, t, a, r), plain.micro(e, t, a, r));
        }
    }
  }
}

// mixed: several sources drawn as one data set, exactly the plain plan over all their pairs.
TEST(BatchPlan, MixedIsThePlainPlanOverAllPairs) {
  const PlainPlan plain(130, 16, 2, 1, true, true, 9);
  const BatchPlan plan(sources_of({50, 80}), settings(16, Mixing::Mixed, 2, 1, true, true, 9));
  ASSERT_EQ(plan.steps_per_epoch(), 8);
  EXPECT_FALSE(plan.batches_have_sources());
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t t = 0; t < 8; ++t) {
      EXPECT_EQ(plan.global_batch(e, t), plain.global(e, t));
      EXPECT_EQ(plan.source_of(e, t), -1);
    }
  EXPECT_TRUE(plan.steps_per_source(1, 3).empty());
}

// The contract kept from the plan before sources: an epoch is a permutation, epochs differ,
// the tail wraps without drop_last, the same seed draws the same order.
TEST(BatchPlan, OneSourceEpochIsAPermutationAndTheTailWraps) {
  auto plan = one_source(103, 10, 1, 1, true, true, 7);
  EXPECT_EQ(plan->steps_per_epoch(), 10);
  std::set<int64_t> seen;
  for (int64_t s = 0; s < plan->steps_per_epoch(); ++s)
    for (auto i : plan->global_batch(0, s)) EXPECT_TRUE(seen.insert(i).second) << i;
  EXPECT_EQ(seen.size(), 100u);  // the 3-pair tail is dropped
  EXPECT_NE(plan->global_batch(0, 0), plan->global_batch(1, 0));

  auto in_order = one_source(10, 4, 1, 1, false, false, 0);
  EXPECT_EQ(in_order->steps_per_epoch(), 3);
  EXPECT_EQ(in_order->global_batch(0, 2), (std::vector<int64_t>{8, 9, 0, 1}));

  auto a = one_source(1000, 50, 2, 1, true, true, 42), b = one_source(1000, 50, 2, 1, true, true, 42),
       c = one_source(1000, 50, 2, 1, true, true, 43);
  EXPECT_EQ(a->global_batch(3, 4), b->global_batch(3, 4));
  EXPECT_NE(a->global_batch(3, 4), c->global_batch(3, 4));
}

TEST(BatchPlan, BadSizesNameTheKeys) {
  try {
    one_source(100, 10, 3, 1, true, true, 0);
    FAIL() << "expected an error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("train.batch_size (10)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("WORLD_SIZE (3)"), std::string::npos);
  }
  EXPECT_THROW(one_source(5, 10, 1, 1, true, true, 0), std::invalid_argument);
  EXPECT_THROW(parse_choice<Mixing>("interleaved", "data.mixing"), ConfigError);
  for (Mixing m : kAllModes) EXPECT_EQ(parse_choice<Mixing>(choice_name(m), "data.mixing"), m);
}

// ---- every mode: the same plan at every world size ------------------------------------------

// The global batches and their sources do not depend on world size or accumulation, and
// every (world, accum) cuts them into micro-batches that tile them in rank order.
TEST(BatchPlan, SameGlobalBatchesAtEveryWorldSizeAndRank) {
  const std::vector<int64_t> sizes = {100, 37, 64};
  const std::vector<double> weights = {1, 3, 0.5};
  const std::vector<std::pair<int, int>> layouts = {{1, 1}, {2, 1}, {1, 4}, {4, 2}, {2, 4}};
  for (Mixing mixing : kAllModes)
    for (bool drop_last : {true, false}) {
      const BatchPlan reference(sources_of(sizes, weights), settings(16, mixing, 1, 1, true, drop_last));
      for (auto [world, accum] : layouts) {
        const BatchPlan plan(sources_of(sizes, weights), settings(16, mixing, world, accum, true, drop_last));
        ASSERT_EQ(plan.steps_per_epoch(), reference.steps_per_epoch());
        for (int64_t e = 0; e < 3; ++e)
          for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
            const auto global = plan.global_batch(e, t);
            ASSERT_EQ(global, reference.global_batch(e, t)) << name_of(mixing) << " world " << world << " accum "
                                                            << accum << " epoch " << e << " step " << t;
            ASSERT_EQ(plan.source_of(e, t), reference.source_of(e, t));
            ASSERT_EQ(joined_micro_batches(plan, e, t, world, accum), global);
          }
      }
    }
}

TEST(BatchPlan, EachGlobalBatchComesFromOneSource) {
  const std::vector<int64_t> sizes = {100, 37, 64};
  for (Mixing mixing : {Mixing::Proportional, Mixing::Weighted, Mixing::RoundRobin})
    for (bool drop_last : {true, false}) {
      const BatchPlan plan(sources_of(sizes, {2, 1, 1}), settings(16, mixing, 2, 1, true, drop_last));
      for (int64_t e = 0; e < 4; ++e)
        for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
          const int s = plan.source_of(e, t);
          ASSERT_GE(s, 0);
          const PlanSource& src = plan.sources()[size_t(s)];
          for (int64_t i : plan.global_batch(e, t))
            ASSERT_TRUE(i >= src.begin && i < src.begin + src.size) << name_of(mixing) << ": pair " << i
                                                                     << " in a batch of source " << src.name;
        }
    }
  // mixed does mix: some global batch holds pairs of both sources.
  const BatchPlan mixed(sources_of({100, 100}), settings(16, Mixing::Mixed));
  bool mixes = false;
  for (int64_t t = 0; t < mixed.steps_per_epoch(); ++t) {
    const auto g = mixed.global_batch(0, t);
    mixes |= std::any_of(g.begin(), g.end(), [](int64_t i) { return i < 100; }) &&
             std::any_of(g.begin(), g.end(), [](int64_t i) { return i >= 100; });
  }
  EXPECT_TRUE(mixes);
}

// ---- step counts and shares -----------------------------------------------------------------

TEST(BatchPlan, StepCountsPerModeAreExact) {
  // Sizes 100, 37, 64 at B = 16: ⌊⌋ = 6 + 2 + 4 = 12 steps; ⌈⌉ = 7 + 3 + 4 = 14.
  const std::vector<int64_t> sizes = {100, 37, 64};
  struct Case { Mixing mixing; bool drop_last; std::vector<double> weights; int64_t steps; std::vector<int64_t> shares; };
  for (const Case& c : {Case{Mixing::Proportional, true, {}, 12, {6, 2, 4}},
                        Case{Mixing::Proportional, false, {}, 14, {7, 3, 4}},
                        // 12 × {1, 2, 1} / 4 = 3, 6, 3 exactly.
                        Case{Mixing::Weighted, true, {1, 2, 1}, 12, {3, 6, 3}},
                        // 14 × {0.5, 0.3, 0.2} = 7, 4.2, 2.8: floors 7, 4, 2, the one left to 0.8.
                        Case{Mixing::Weighted, false, {0.5, 0.3, 0.2}, 14, {7, 4, 3}},
                        // 12 × {3, 1, 0.001} / 4.001 = 8.998, 2.9993, 0.003: floors 8, 2, 0; the two left
                        // to the largest fractions (0.998, 0.9993): 9, 3, 0.
                        Case{Mixing::Weighted, true, {3, 1, 0.001}, 12, {9, 3, 0}},
                        // 14 / 3 = 4.67 each: the two left over to the first two sources.
                        Case{Mixing::RoundRobin, false, {}, 14, {5, 5, 4}},
                        Case{Mixing::RoundRobin, true, {5, 1, 1}, 12, {4, 4, 4}},  // weights ignored
                        Case{Mixing::Mixed, true, {}, 201 / 16, {}},
                        Case{Mixing::Mixed, false, {}, (201 + 15) / 16, {}}}) {
    const BatchPlan plan(sources_of(sizes, c.weights), settings(16, c.mixing, 1, 1, true, c.drop_last));
    EXPECT_EQ(plan.steps_per_epoch(), c.steps) << name_of(c.mixing);
    EXPECT_EQ(plan.steps_per_epoch_by_source(), c.shares) << name_of(c.mixing);
    if (c.shares.empty()) continue;
    for (int64_t e = 0; e < 3; ++e) EXPECT_EQ(counted_steps(plan, e), c.shares) << name_of(c.mixing) << " epoch " << e;
  }
}

// Equal weights 3 ways over 10 steps: 3.33 each, the one left to the first source.
TEST(BatchPlan, WeightedTiesGoToTheEarlierSource) {
  const BatchPlan plan(sources_of({64, 64, 32}, {2, 2, 2}), settings(16, Mixing::Weighted));
  EXPECT_EQ(plan.steps_per_epoch(), 10);
  EXPECT_EQ(plan.steps_per_epoch_by_source(), (std::vector<int64_t>{4, 3, 3}));
}

TEST(BatchPlan, RoundRobinTakesTurnsInTheSourcesOrder) {
  const BatchPlan plan(sources_of({100, 37, 64}), settings(16, Mixing::RoundRobin, 1, 1, true, false));
  for (int64_t e = 0; e < 3; ++e)
    for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) EXPECT_EQ(plan.source_of(e, t), int(t % 3)) << t;
}

// The order of an epoch's sources is drawn from the seed and the epoch: it changes from
// epoch to epoch; without shuffle it is fixed and spreads each source evenly.
TEST(BatchPlan, SourceOrderIsDrawnPerEpochOrSpreadEvenly) {
  const BatchPlan plan(sources_of({160, 160}), settings(16, Mixing::Proportional));
  auto order = [](const BatchPlan& p, int64_t e) {
    std::vector<int> o;
    for (int64_t t = 0; t < p.steps_per_epoch(); ++t) o.push_back(p.source_of(e, t));
    return o;
  };
  EXPECT_NE(order(plan, 0), order(plan, 1));
  // 8 and 4 batches without shuffle: source 1's j-th at (j + ½)/4 of the epoch.
  const BatchPlan fixed(sources_of({128, 64}), settings(16, Mixing::Proportional, 1, 1, /*shuffle=*/false));
  EXPECT_EQ(order(fixed, 0), (std::vector<int>{0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0}));
  EXPECT_EQ(order(fixed, 3), order(fixed, 0));
  // ... and each source's pairs in file order.
  EXPECT_EQ(fixed.global_batch(0, 1), [] { std::vector<int64_t> v(16); std::iota(v.begin(), v.end(), 128); return v; }());
}

// ---- coverage: proportional takes every pair once an epoch; the streams read passes ----------

TEST(BatchPlan, ProportionalCoversEverySourceOncePerEpoch) {
  const std::vector<int64_t> sizes = {100, 37, 64};
  for (bool drop_last : {true, false}) {
    const BatchPlan plan(sources_of(sizes), settings(16, Mixing::Proportional, 1, 1, true, drop_last));
    for (int64_t e = 0; e < 3; ++e) {
      std::map<int64_t, int> times;
      for (int64_t t = 0; t < plan.steps_per_epoch(); ++t)
        for (int64_t i : plan.global_batch(e, t)) ++times[i];
      for (size_t s = 0; s < sizes.size(); ++s) {
        const PlanSource& src = plan.sources()[s];
        const int64_t k = plan.steps_per_epoch_by_source()[s];
        int64_t placed = 0, twice = 0;
        for (int64_t i = src.begin; i < src.begin + src.size; ++i) {
          placed += times[i] > 0;
          twice += times[i] > 1;
          ASSERT_LE(times[i], 2);
        }
        if (drop_last) {  // k·B distinct pairs, the rest (< B) dropped
          EXPECT_EQ(placed, k * 16) << src.name;
          EXPECT_EQ(twice, 0) << src.name;
        } else {  // every pair, and the last batch's wrap-around a second time
          EXPECT_EQ(placed, src.size) << src.name;
          EXPECT_EQ(twice, k * 16 - src.size) << src.name;
        }
      }
    }
  }
}

// weighted and round_robin read each source in passes, wherever an epoch ends: a
// source's pairs, in step order over the epochs, are pass after pass of it, each a new
// permutation (without drop_last, every pair; with it, all but a tail).
TEST(BatchPlan, StreamsReadEachSourceInPasses) {
  const std::vector<int64_t> sizes = {40, 24};
  for (Mixing mixing : {Mixing::Weighted, Mixing::RoundRobin})
    for (bool drop_last : {true, false}) {
      const BatchPlan plan(sources_of(sizes, {5, 1}), settings(8, mixing, 1, 1, true, drop_last));
      std::vector<std::vector<int64_t>> stream(sizes.size());
      for (int64_t e = 0; e < 6; ++e)
        for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
          const auto g = plan.global_batch(e, t);
          auto& s = stream[size_t(plan.source_of(e, t))];
          s.insert(s.end(), g.begin(), g.end());
        }
      for (size_t s = 0; s < sizes.size(); ++s) {
        const int64_t n = sizes[s], begin = plan.sources()[s].begin;
        const int64_t per_pass = (drop_last ? n / 8 : (n + 7) / 8) * 8;
        ASSERT_GE(int64_t(stream[s].size()), 2 * per_pass) << name_of(mixing) << " source " << s;
        std::vector<int64_t> previous;
        for (size_t pass = 0; (pass + 1) * size_t(per_pass) <= stream[s].size(); ++pass) {
          const std::vector<int64_t> p(stream[s].begin() + pass * per_pass, stream[s].begin() + (pass + 1) * per_pass);
          const std::set<int64_t> distinct(p.begin(), p.end());
          EXPECT_EQ(int64_t(distinct.size()), std::min(n, per_pass)) << name_of(mixing) << " pass " << pass;
          EXPECT_GE(*distinct.begin(), begin);
          EXPECT_LT(*distinct.rbegin(), begin + n);
          EXPECT_NE(p, previous) << "pass " << pass << " repeats the previous one";
          previous = p;
        }
      }
    }
}

// ---- steps per source, sources too small ---------------------------------------------------

TEST(BatchPlan, StepsPerSourceCountTheStepsBefore) {
  for (Mixing mixing : {Mixing::Proportional, Mixing::Weighted, Mixing::RoundRobin}) {
    const BatchPlan plan(sources_of({100, 37, 64}, {1, 2, 3}), settings(16, mixing));
    std::vector<int64_t> counts(3, 0);
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
        ASSERT_EQ(plan.steps_per_source(e, t), counts) << name_of(mixing) << " epoch " << e << " step " << t;
        ++counts[size_t(plan.source_of(e, t))];
      }
    EXPECT_EQ(plan.steps_per_source(3, 0), counts);
  }
}

TEST(BatchPlan, ASourceSmallerThanAGlobalBatchIsAnErrorOrWraps) {
  for (Mixing mixing : {Mixing::Proportional, Mixing::Weighted, Mixing::RoundRobin}) {
    try {
      BatchPlan(sources_of({100, 12}), settings(16, mixing));
      FAIL() << "expected an error";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      for (const char* part : {"data.train[1]", "\"s1\"", "12 pairs", "train.batch_size = 16", "data.drop_last=false"})
        EXPECT_NE(what.find(part), std::string::npos) << part << " not in: " << what;
    }
    const BatchPlan plan(sources_of({100, 12}), settings(16, mixing, 2, 1, true, /*drop_last=*/false));
    const auto lines = plan.describe();
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_NE(lines[1].find("source \"s1\" has 12 pairs, fewer than one global batch (16): its batches wrap"),
              std::string::npos) << lines[1];
    bool seen = false;
    for (int64_t t = 0; t < plan.steps_per_epoch(); ++t) {
      if (plan.source_of(0, t) != 1) continue;
      seen = true;
      const auto g = plan.global_batch(0, t);
      ASSERT_EQ(g.size(), 16u);
      const std::set<int64_t> distinct(g.begin(), g.end());
      EXPECT_EQ(distinct.size(), 12u) << "a batch of the small source holds all its pairs, 4 of them twice";
      EXPECT_EQ(*distinct.begin(), 100);
      EXPECT_EQ(*distinct.rbegin(), 111);
    }
    EXPECT_TRUE(seen) << name_of(mixing);
  }
}

// ---- data.dedupe_batches -------------------------------------------------------------------

namespace {

// A data set with many repeats: 600 pairs whose queries come from 45 texts and whose 1-3
// positives come from 70 texts, some of them other pairs' queries (a repeat across the
// two). A pair's own keys are distinct. Hashes are just text numbers here.
PairKeys crafted_keys(int64_t pairs, uint64_t seed) {
  PairKeys keys;
  SplitMix64 rng(seed);
  for (int64_t i = 0; i < pairs; ++i) {
    std::set<uint64_t> own{rng.below(45)};
    const uint64_t positives = 1 + rng.below(3);
    while (own.size() < 1 + positives) own.insert(rng.below(4) == 0 ? rng.below(45) : 1000 + rng.below(70));
    keys.hashes.insert(keys.hashes.end(), own.begin(), own.end());
    keys.offsets.push_back(int64_t(keys.hashes.size()));
  }
  return keys;
}

// The number of repeated keys within the global batch (0: no text twice).
int64_t repeated_texts(const BatchPlan& plan, const PairKeys& keys, int64_t epoch, int64_t step) {
  std::set<uint64_t> seen;
  int64_t repeats = 0;
  for (int64_t i : plan.global_batch(epoch, step))
    for (int64_t h = keys.offsets[size_t(i)]; h < keys.offsets[size_t(i) + 1]; ++h)
      repeats += !seen.insert(keys.hashes[size_t(h)]).second;
  return repeats;
}

}  // namespace

TEST(BatchPlan, DedupeLeavesNoRepeatedQueryOrPositiveInAGlobalBatch) {
  const PairKeys keys = crafted_keys(600, 5);
  const std::vector<int64_t> sizes = {350, 250};
  for (Mixing mixing : kAllModes)
    for (bool drop_last : {true, false}) {
      const BatchPlan plain(sources_of(sizes, {1, 2}), settings(16, mixing, 1, 1, true, drop_last));
      const BatchPlan deduped(sources_of(sizes, {1, 2}), settings(16, mixing, 2, 2, true, drop_last), keys);
      int64_t repeats_without = 0;
      for (int64_t e = 0; e < 3; ++e)
        for (int64_t t = 0; t < deduped.steps_per_epoch(); ++t) {
          repeats_without += repeated_texts(plain, keys, e, t);
          ASSERT_EQ(repeated_texts(deduped, keys, e, t), 0) << name_of(mixing) << " epoch " << e << " step " << t;
          ASSERT_EQ(deduped.source_of(e, t), plain.source_of(e, t));
        }
      EXPECT_GT(repeats_without, 100) << "the crafted data must repeat texts, or this test proves nothing";
      EXPECT_EQ(deduped.steps_per_epoch(), plain.steps_per_epoch());
    }
}

// Proportional with dedupe still places each pair at most once an epoch (with drop_last);
// the pairs it leaves out are the ones the report counts.
TEST(BatchPlan, DedupeAccountsForEveryPair) {
  const PairKeys keys = crafted_keys(600, 5);
  const BatchPlan plan(sources_of({350, 250}), settings(16, Mixing::Proportional), keys);
  int64_t left_out = 0;
  for (int64_t e = 0; e < 2; ++e) {
    std::map<int64_t, int> times;
    for (int64_t t = 0; t < plan.steps_per_epoch(); ++t)
      for (int64_t i : plan.global_batch(e, t)) ++times[i];
    for (int s = 0; s < 2; ++s) {
      const PlanSource& src = plan.sources()[size_t(s)];
      int64_t placed = 0, again = 0;
      for (int64_t i = src.begin; i < src.begin + src.size; ++i) {
        placed += times.count(i) > 0;
        again += times.count(i) && times[i] > 1 ? times[i] - 1 : 0;
      }
      const int64_t k = plan.steps_per_epoch_by_source()[size_t(s)];
      const DedupeReport r = plan.dedupe_report(s, e);
      EXPECT_EQ(r.repeats, 0);
      // k·B places: pairs placed once, plus places refilled by pairs placed earlier this
      // epoch (one for each pair left out); the tail drop_last drops anyway is not counted.
      EXPECT_EQ(placed + again, k * 16) << src.name;
      EXPECT_EQ(src.size - placed, (src.size - k * 16) + r.left_out) << src.name;
      EXPECT_EQ(again, r.left_out) << src.name;
      left_out += r.left_out;
    }
  }
  EXPECT_GT(left_out, 0) << "the crafted data must leave pairs out, or the accounting is not tested";
}

// Without repeated texts dedupe changes nothing; with too few distinct texts for a batch
// it still fills every batch, and says how many places had to repeat one.
TEST(BatchPlan, DedupeWithoutRepeatsChangesNothingAndTooFewTextsAreCounted) {
  PairKeys distinct;
  for (int64_t i = 0; i < 300; ++i) {
    distinct.hashes.insert(distinct.hashes.end(), {uint64_t(2 * i), uint64_t(2 * i + 1)});
    distinct.offsets.push_back(int64_t(distinct.hashes.size()));
  }
  for (Mixing mixing : kAllModes) {
    const BatchPlan plain(sources_of({180, 120}), settings(16, mixing, 1, 1, true, false));
    const BatchPlan deduped(sources_of({180, 120}), settings(16, mixing, 1, 1, true, false), distinct);
    for (int64_t e = 0; e < 3; ++e)
      for (int64_t t = 0; t < plain.steps_per_epoch(); ++t)
        ASSERT_EQ(deduped.global_batch(e, t), plain.global_batch(e, t)) << name_of(mixing);
  }

  PairKeys few;  // 40 pairs with 10 queries between them: a batch of 16 cannot avoid repeats
  for (int64_t i = 0; i < 40; ++i) {
    few.hashes.insert(few.hashes.end(), {uint64_t(i % 10), uint64_t(100 + i)});
    few.offsets.push_back(int64_t(few.hashes.size()));
  }
  const BatchPlan plan(sources_of({40}), settings(16, Mixing::Proportional), few);
  ASSERT_EQ(plan.steps_per_epoch(), 2);
  EXPECT_EQ(plan.global_batch(0, 0).size(), 16u);
  EXPECT_EQ(plan.dedupe_report(0, 0).repeats, 2 * (16 - 10));
  EXPECT_EQ(repeated_texts(plan, few, 0, 0), 6);
}
