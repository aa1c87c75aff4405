// The batch plan: which pairs every optimizer step trains on, and from which source
// (data.train, data.mixing, data.dedupe_batches; docs/config.md).
//
// The position in training is (epoch, step in epoch), counted in global batches. Every
// global batch, and its source, is a pure function of the seed and that position: the
// same on every rank, whatever the world size, so that the same config trains the same
// model on any number of workers and a checkpoint resumes at any world size. The number
// of steps per epoch is known before the first.
//
// A source is read in passes. Pass p is a permutation of its pairs drawn from the
// source's seed + p (data/index_permutation.h: no memory, whatever the size; the file
// order without data.shuffle), cut into global batches of B pairs: ⌊n / B⌋ of them, the
// tail dropped; or, without data.drop_last, ⌈n / B⌉, the last wrapping around to the
// pass's start. The source's seed is train.seed for the first source and a hash of
// (seed, source) for the others, so a single source draws the batches that one data set
// of its pairs does (mixed).
//
// Modes (data.mixing):
//   proportional  an epoch is one pass over every source (pass = epoch), so the sources
//                 take steps in proportion to their sizes; the epoch's batches in an
//                 order drawn from (seed, epoch).
//   weighted      the same steps per epoch as proportional, shared by weight with the
//                 largest remainders (ties to the earlier source), in a drawn order; each
//                 source goes on through its passes, wherever an epoch ends.
//   round_robin   the same, equal shares; the sources take turns in data.train's order
//                 (the first ones take the steps left over).
//   mixed         all pairs as one source, pass = epoch; a global batch may mix sources
//                 and has none (-1).
// Without data.shuffle the drawn orders become one that spreads each source's batches
// evenly over the epoch.
//
// data.dedupe_batches: within a global batch no two pairs share a query or positive text
// (PairDataset::text_hashes, of the normalized text). A pass's batches are filled in turn,
// like sentence-transformers' NoDuplicatesBatchSampler: each takes the first waiting
// pairs of the permutation that repeat no text already in it; a pair that does waits for
// a later batch of the same pass (the same epoch, with proportional). A batch the waiting
// pairs cannot fill takes the pass's pairs again from its start (as the wrap-around
// without drop_last does), skipping those that repeat a text; only when a whole round
// cannot fill it does it take repeats (a source with too few distinct texts). Pairs still
// waiting after the pass's last batch are left out of it, and the log says how many. A
// source without repeated texts gets exactly the batches it gets without dedupe.
//
// micro_batch(): global batch g is cut into world × accum equal micro-batches, and
// micro-batch a·world + r goes to rank r at accumulation step a.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/choices.h"  // Mixing
#include "data/index_permutation.h"
#include "data/pairs.h"

namespace ddp_embed {

// One source as the plan sees it: its pairs are [begin, begin + size) of the dataset.
struct PlanSource {
  std::string name;
  int64_t begin = 0, size = 0;
  double weight = 1;  // weighted only
};

// The plan's sources from a loaded dataset's, with data.train's weights.
std::vector<PlanSource> plan_sources(const std::vector<SourceRange>& ranges, const std::vector<double>& weights);

struct PlanSettings {
  int64_t global_batch = 0;  // train.batch_size
  int world_size = 1;
  int accum_steps = 1;       // train.grad_accum_steps
  bool shuffle = true;       // data.shuffle
  bool drop_last = true;     // data.drop_last
  uint64_t seed = 0;         // train.seed
  Mixing mixing = Mixing::Proportional;
};

// data.dedupe_batches: per pair, the hashes of its query and all its positives. Either
// written out — pair i's at hashes[offsets[i], offsets[i + 1]) — or, from a data set,
// read where they are: a pair's query and positives are consecutive sequences, so its
// keys are text_hashes[query, pos_begin + pos_count) (no copy of a mapped data set).
struct PairKeys {
  std::vector<int64_t> offsets{0};
  std::vector<uint64_t> hashes;
  Column<PairIndex> pairs;          // from a data set: its pairs ...
  Column<uint64_t> text_hashes;     // ... and its sequences' hashes

  int64_t size() const { return pairs.empty() ? int64_t(offsets.size()) - 1 : int64_t(pairs.size()); }
  const uint64_t* begin(int64_t pair) const {
    return pairs.empty() ? hashes.data() + offsets[size_t(pair)] : text_hashes.data() + pairs[size_t(pair)].query;
  }
  const uint64_t* end(int64_t pair) const {
    if (pairs.empty()) return hashes.data() + offsets[size_t(pair) + 1];
    const PairIndex& p = pairs[size_t(pair)];
    return text_hashes.data() + p.pos_begin + p.pos_count;
  }
};
PairKeys query_and_positive_keys(const PairDataset& data);

// What dedupe did to one pass over a source.
struct DedupeReport {
  int64_t left_out = 0;  // pairs it could not place without a repeat (beside a tail drop_last drops)
  int64_t repeats = 0;   // places filled with a repeated text after all (too few distinct texts)
};

// Each rank's micro-batch: train.batch_size split into WORLD_SIZE x train.grad_accum_steps
// whole parts. Throws std::invalid_argument naming the keys when it does not split (the
// worker asks as soon as it knows the world size, the plan again when it is made).
int64_t split_global_batch(int64_t global_batch, int world_size, int accum_steps);

class BatchPlan {
 public:
  // `dedupe`: the pairs' keys for data.dedupe_batches, else no dedupe. Throws
  // std::invalid_argument naming the keys to change: a global batch that does not split
  // into world × accum, a source (or, mixed, the data set) smaller than one global batch
  // with data.drop_last.
  BatchPlan(std::vector<PlanSource> sources, const PlanSettings& settings, std::optional<PairKeys> dedupe = {});
  BatchPlan(const BatchPlan&) = delete;
  BatchPlan& operator=(const BatchPlan&) = delete;

  int64_t steps_per_epoch() const { return steps_per_epoch_; }
  int64_t micro_batch_size() const { return micro_batch_; }
  int world_size() const { return settings_.world_size; }
  const std::vector<PlanSource>& sources() const { return sources_; }
  Mixing mixing() const { return settings_.mixing; }
  // Whether each global batch comes from one source (every mode but mixed).
  bool batches_have_sources() const { return settings_.mixing != Mixing::Mixed; }
  // Per source, its steps in each epoch (mixed: empty).
  std::vector<int64_t> steps_per_epoch_by_source() const;
  // Lines for the start-up log: the plan, and each source that wraps around.
  std::vector<std::string> describe() const;

  // The source of step `step` of `epoch` (an index into sources()), -1 with mixed.
  int source_of(int64_t epoch, int64_t step) const;
  // Dataset indices of global batch `step` of `epoch` (global_batch of them).
  std::vector<int64_t> global_batch(int64_t epoch, int64_t step) const;
  // Dataset indices of the micro-batch rank `rank` trains on at accumulation step `accum`.
  std::vector<int64_t> micro_batch(int64_t epoch, int64_t step, int accum, int rank) const;
  // Per source, the steps taken from it before (epoch, step) (mixed: empty).
  std::vector<int64_t> steps_per_source(int64_t epoch, int64_t step) const;
  // data.dedupe_batches: what it did to `source`'s batches of one pass (the epoch with
  // proportional and mixed); zeros without it.
  DedupeReport dedupe_report(int source, int64_t pass) const;

 private:
  // What batches are drawn from: one per source, or (mixed) one of all pairs.
  struct Lane {
    int64_t begin = 0, size = 0;
    uint64_t seed = 0;
    int64_t batches_per_pass = 0;   // ⌊size / B⌋, or ⌈size / B⌉ without drop_last
    int64_t batches_per_epoch = 0;  // its share of an epoch's steps
  };
  // An epoch's steps: each one's lane and its number among that lane's batches.
  struct EpochOrder {
    std::vector<int32_t> lane;
    std::vector<int64_t> nth;
  };
  // A batch of a lane: its pass and its number in the pass.
  struct PassBatch {
    int64_t pass = 0, batch = 0;
  };
  struct DedupedPass {
    std::vector<int64_t> pairs;  // the pass's batches, back to back (lane-local)
    DedupeReport report;
  };

  // A pass's order of a lane's pairs: drawn (data.shuffle), else the file order. No
  // memory: a pass over a hundred million pairs is not a vector of them.
  struct PassOrder {
    IndexPermutation drawn;
    bool shuffle = true;
    int64_t operator()(int64_t i) const { return shuffle ? int64_t(drawn(uint64_t(i))) : i; }
  };

  bool streams() const;
  std::shared_ptr<const EpochOrder> order(int64_t epoch) const;
  PassOrder permutation(int lane, int64_t pass) const;
  // The pass and batch of the lane's nth batch of `epoch`.
  PassBatch locate(int lane, int64_t epoch, int64_t nth) const;
  std::shared_ptr<const DedupedPass> deduped(int lane, int64_t pass) const;
  DedupedPass dedupe_pass(int lane, int64_t pass) const;

  std::vector<PlanSource> sources_;
  PlanSettings settings_;
  std::optional<PairKeys> keys_;
  std::vector<Lane> lanes_;
  int64_t micro_batch_ = 0, steps_per_epoch_ = 0;

  // Caches: the loader thread walks forward, the training thread asks for counts; both
  // share them, hence the lock and the shared pointers (an entry outlives its eviction).
  mutable std::mutex mutex_;
  mutable std::map<int64_t, std::shared_ptr<const EpochOrder>> orders_;
  mutable std::vector<std::map<int64_t, std::shared_ptr<const DedupedPass>>> deduped_;
};

}  // namespace ddp_embed
