#include "data/batch_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>
#include <unordered_set>

#include "data/index_permutation.h"
#include "data/sampler.h"
#include "util/log.h"
#include "util/text.h"

namespace ddp_embed {
namespace {

// Tags that keep the seeds of different uses of train.seed apart.
constexpr uint64_t kSourceSeedTag = 0x736f75726365ULL;  // "source"
constexpr uint64_t kOrderSeedTag = 0x6f72646572ULL;     // "order"

// Permutations, epoch orders and deduped epochs kept per lane: the loader walks forward
// (a stream's batch may straddle two passes), so two are enough.
constexpr size_t kCacheEntries = 2;

template <class Map>
void trim_cache(Map& cache) {
  while (cache.size() > kCacheEntries) cache.erase(cache.begin());  // the oldest epoch or pass
}

// Shares `total` steps by `weights` with the largest remainders (Hamilton's method):
// each gets ⌊total·w/W⌋, and the steps left over go one each to the largest fractional
// parts, a tie to the earlier source.
std::vector<int64_t> apportion(int64_t total, const std::vector<double>& weights) {
  const long double sum = std::accumulate(weights.begin(), weights.end(), 0.0L);
  std::vector<int64_t> share(weights.size());
  std::vector<long double> fraction(weights.size());
  int64_t given = 0;
  for (size_t s = 0; s < weights.size(); ++s) {
    const long double quota = (long double)(total) * weights[s] / sum;
    share[s] = int64_t(std::floor(quota));
    fraction[s] = quota - (long double)(share[s]);
    given += share[s];
  }
  std::vector<size_t> by_fraction(weights.size());
  std::iota(by_fraction.begin(), by_fraction.end(), size_t{0});
  std::stable_sort(by_fraction.begin(), by_fraction.end(),
                   [&](size_t a, size_t b) { return fraction[a] > fraction[b]; });
  for (size_t i = 0; given < total; i = (i + 1) % by_fraction.size(), ++given) ++share[by_fraction[i]];
  // Rounding could in principle make the floors overshoot: take back from the smallest fractions.
  for (size_t i = by_fraction.size(); given > total; --given) {
    do i = (i + by_fraction.size() - 1) % by_fraction.size();
    while (share[by_fraction[i]] == 0);
    --share[by_fraction[i]];
  }
  return share;
}

}  // namespace

std::vector<PlanSource> plan_sources(const std::vector<SourceRange>& ranges, const std::vector<double>& weights) {
  std::vector<PlanSource> out;
  for (size_t s = 0; s < ranges.size(); ++s)
    out.push_back({ranges[s].name, ranges[s].begin, ranges[s].size(), s < weights.size() ? weights[s] : 1.0});
  return out;
}

PairKeys query_and_positive_keys(const PairDataset& data) {
  PairKeys keys;
  keys.pairs = data.pairs;  // shares the memory (or the mapping)
  keys.text_hashes = data.text_hashes;
  return keys;
}

int64_t split_global_batch(int64_t global_batch, int world_size, int accum_steps) {
  const int64_t parts = int64_t(world_size) * accum_steps;
  if (global_batch <= 0 || parts <= 0 || global_batch % parts != 0)
    throw std::invalid_argument("train.batch_size (" + std::to_string(global_batch) +
                                ") must be divisible by WORLD_SIZE (" + std::to_string(world_size) +
                                ") x train.grad_accum_steps (" + std::to_string(accum_steps) +
                                "): each rank's micro-batch must be whole");
  return global_batch / parts;
}

BatchPlan::BatchPlan(std::vector<PlanSource> sources, const PlanSettings& settings, std::optional<PairKeys> dedupe)
    : sources_(std::move(sources)), settings_(settings), keys_(std::move(dedupe)) {
  const int64_t B = settings_.global_batch;
  micro_batch_ = split_global_batch(B, settings_.world_size, settings_.accum_steps);
  if (sources_.empty()) throw std::invalid_argument("the training set has no sources");
  for (size_t s = 1; s < sources_.size(); ++s)
    if (sources_[s].begin != sources_[s - 1].begin + sources_[s - 1].size)
      throw std::invalid_argument("batch plan: the sources' pairs must follow one another");
  int64_t total = 0;
  for (const auto& s : sources_) {
    if (s.size <= 0) throw std::invalid_argument("data.train source " + json_quoted(s.name) + " has no pairs");
    total += s.size;
  }
  if (keys_ && keys_->size() < sources_.back().begin + sources_.back().size)
    throw std::invalid_argument("batch plan: the dedupe keys do not cover every pair");
  auto epoch_batches = [&](int64_t n) { return settings_.drop_last ? n / B : (n + B - 1) / B; };

  if (settings_.mixing == Mixing::Mixed) {
    if (total < B && settings_.drop_last)
      throw std::invalid_argument("the training set has " + std::to_string(total) +
                                  " pairs, fewer than one global batch (train.batch_size = " + std::to_string(B) +
                                  "): lower train.batch_size, or set data.drop_last=false to wrap around");
    lanes_.push_back({sources_.front().begin, total, settings_.seed, epoch_batches(total), epoch_batches(total)});
  } else {
    std::vector<double> weights;
    for (size_t s = 0; s < sources_.size(); ++s) {
      const PlanSource& src = sources_[s];
      if (src.size < B && settings_.drop_last)
        throw std::invalid_argument(
            "data.train[" + std::to_string(s) + "] (source " + json_quoted(src.name) + ") has " + std::to_string(src.size) +
            " pairs, fewer than one global batch (train.batch_size = " + std::to_string(B) +
            "): lower train.batch_size, set data.drop_last=false to let its batches wrap around, "
            "or give it more pairs");
      // Source 0 keeps train.seed itself: one source draws the batches it always drew.
      const uint64_t seed = s == 0 ? settings_.seed : mix_hash(settings_.seed, s, kSourceSeedTag);
      lanes_.push_back({src.begin, src.size, seed, epoch_batches(src.size), epoch_batches(src.size)});
      weights.push_back(settings_.mixing == Mixing::Weighted ? src.weight : 1.0);
    }
    if (settings_.mixing != Mixing::Proportional) {
      int64_t steps = 0;  // proportional's
      for (const Lane& lane : lanes_) steps += lane.batches_per_pass;
      const std::vector<int64_t> share = apportion(steps, weights);
      for (size_t s = 0; s < lanes_.size(); ++s) lanes_[s].batches_per_epoch = share[s];
    }
  }
  for (const Lane& lane : lanes_) steps_per_epoch_ += lane.batches_per_epoch;
  deduped_.resize(lanes_.size());
}

bool BatchPlan::streams() const {
  return settings_.mixing == Mixing::Weighted || settings_.mixing == Mixing::RoundRobin;
}

std::vector<int64_t> BatchPlan::steps_per_epoch_by_source() const {
  if (!batches_have_sources()) return {};
  std::vector<int64_t> out;
  for (const Lane& lane : lanes_) out.push_back(lane.batches_per_epoch);
  return out;
}

std::vector<std::string> BatchPlan::describe() const {
  const int64_t B = settings_.global_batch;
  std::string plan = fmt::format("batch plan: data.mixing {}, {} steps an epoch of {} pairs", choice_name(mixing()),
                                 steps_per_epoch_, B);
  if (batches_have_sources() && sources_.size() > 1) {
    plan += ", each from one source:";
    for (size_t s = 0; s < sources_.size(); ++s)
      plan += fmt::format("{} {} {} ({:.1f}%)", s == 0 ? "" : ",", json_quoted(sources_[s].name),
                          lanes_[s].batches_per_epoch, 100.0 * double(lanes_[s].batches_per_epoch) / double(steps_per_epoch_));
    if (streams()) plan += "; each source read in passes of its own";
  } else if (sources_.size() > 1) {
    plan += fmt::format(", drawn from the {} pairs of the {} sources together", lanes_.front().size, sources_.size());
  }
  if (keys_) plan += "; data.dedupe_batches on";
  std::vector<std::string> lines{plan};
  for (size_t l = 0; l < lanes_.size(); ++l)
    if (lanes_[l].size < B)
      lines.push_back(fmt::format("batch plan: {} has {} pairs, fewer than one global batch ({}): its batches wrap "
                                  "around and repeat pairs (data.drop_last false)",
                                  batches_have_sources() ? "source " + json_quoted(sources_[l].name) : "the training set",
                                  lanes_[l].size, B));
  return lines;
}

// ---- the order of an epoch's steps ----------------------------------------------------------

std::shared_ptr<const BatchPlan::EpochOrder> BatchPlan::order(int64_t epoch) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (auto it = orders_.find(epoch); it != orders_.end()) return it->second;
  }
  auto out = std::make_shared<EpochOrder>();
  const int64_t K = steps_per_epoch_;
  const int S = int(lanes_.size());
  out->lane.reserve(size_t(K));
  if (S == 1) {
    out->lane.assign(size_t(K), 0);
  } else if (settings_.mixing == Mixing::RoundRobin) {
    // Turns in data.train's order; the shares (apportion with equal weights) say the same.
    for (int64_t t = 0; t < K; ++t) out->lane.push_back(int32_t(t % S));
  } else if (settings_.shuffle) {
    for (int s = 0; s < S; ++s) out->lane.insert(out->lane.end(), size_t(lanes_[size_t(s)].batches_per_epoch), s);
    SplitMix64 rng(mix_hash(settings_.seed, uint64_t(epoch), kOrderSeedTag));
    for (int64_t i = K - 1; i > 0; --i)  // Fisher-Yates
      std::swap(out->lane[size_t(i)], out->lane[size_t(rng.below(uint64_t(i) + 1))]);
  } else {
    // Spread evenly: source s's j-th batch belongs at (j + ½) / k_s of the epoch.
    std::vector<std::pair<int32_t, int64_t>> slots;  // (source, j)
    for (int s = 0; s < S; ++s)
      for (int64_t j = 0; j < lanes_[size_t(s)].batches_per_epoch; ++j) slots.emplace_back(s, j);
    std::stable_sort(slots.begin(), slots.end(), [&](const auto& a, const auto& b) {
      const int64_t ka = lanes_[size_t(a.first)].batches_per_epoch, kb = lanes_[size_t(b.first)].batches_per_epoch;
      return (2 * a.second + 1) * kb < (2 * b.second + 1) * ka;
    });
    for (const auto& slot : slots) out->lane.push_back(slot.first);
  }
  std::vector<int64_t> seen(size_t(S), 0);
  out->nth.reserve(size_t(K));
  for (int32_t lane : out->lane) out->nth.push_back(seen[size_t(lane)]++);
  std::lock_guard<std::mutex> lock(mutex_);
  orders_[epoch] = out;
  trim_cache(orders_);
  return out;
}

int BatchPlan::source_of(int64_t epoch, int64_t step) const {
  if (!batches_have_sources()) return -1;
  return order(epoch)->lane.at(size_t(step));
}

std::vector<int64_t> BatchPlan::steps_per_source(int64_t epoch, int64_t step) const {
  if (!batches_have_sources()) return {};
  std::vector<int64_t> out;
  for (const Lane& lane : lanes_) out.push_back(epoch * lane.batches_per_epoch);
  if (step > 0) {
    const auto o = order(epoch);
    for (int64_t t = 0; t < step; ++t) ++out[size_t(o->lane.at(size_t(t)))];
  }
  return out;
}

// ---- passes: permutations of a source -------------------------------------------------------

BatchPlan::PassOrder BatchPlan::permutation(int lane, int64_t pass) const {
  const Lane& l = lanes_[size_t(lane)];
  return PassOrder{IndexPermutation(uint64_t(l.size), l.seed + uint64_t(pass)), settings_.shuffle};
}

BatchPlan::PassBatch BatchPlan::locate(int lane, int64_t epoch, int64_t nth) const {
  const Lane& l = lanes_[size_t(lane)];
  if (!streams()) return {epoch, nth};
  // The source's batches so far, over every epoch, in passes of batches_per_pass.
  const int64_t taken = epoch * l.batches_per_epoch + nth;
  return {taken / l.batches_per_pass, taken % l.batches_per_pass};
}

std::vector<int64_t> BatchPlan::global_batch(int64_t epoch, int64_t step) const {
  if (step < 0 || step >= steps_per_epoch_)
    throw std::out_of_range("batch plan: step " + std::to_string(step) + " of an epoch of " +
                            std::to_string(steps_per_epoch_));
  const auto o = order(epoch);
  const int lane = o->lane[size_t(step)];
  const Lane& l = lanes_[size_t(lane)];
  const PassBatch at = locate(lane, epoch, o->nth[size_t(step)]);
  const int64_t B = settings_.global_batch, first = at.batch * B;
  std::vector<int64_t> out(static_cast<size_t>(B));
  if (keys_) {
    const auto d = deduped(lane, at.pass);
    for (int64_t k = 0; k < B; ++k) out[size_t(k)] = l.begin + d->pairs[size_t(first + k)];
  } else {
    // The pass's permutation in chunks of B; the last chunk wraps around to its start.
    const PassOrder perm = permutation(lane, at.pass);
    for (int64_t k = 0; k < B; ++k) out[size_t(k)] = l.begin + perm((first + k) % l.size);
  }
  return out;
}

std::vector<int64_t> BatchPlan::micro_batch(int64_t epoch, int64_t step, int accum, int rank) const {
  const std::vector<int64_t> global = global_batch(epoch, step);
  const auto first = global.begin() + (int64_t(accum) * settings_.world_size + rank) * micro_batch_;
  return std::vector<int64_t>(first, first + micro_batch_);
}

// ---- data.dedupe_batches ---------------------------------------------------------------------

DedupeReport BatchPlan::dedupe_report(int source, int64_t pass) const {
  if (!keys_) return {};
  return deduped(std::max(source, 0), pass)->report;
}

std::shared_ptr<const BatchPlan::DedupedPass> BatchPlan::deduped(int lane, int64_t pass) const {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& cache = deduped_[size_t(lane)];
    if (auto it = cache.find(pass); it != cache.end()) return it->second;
  }
  auto out = std::make_shared<const DedupedPass>(dedupe_pass(lane, pass));
  const std::string where = fmt::format("{}, {} {}", batches_have_sources() ? "source " + json_quoted(sources_[size_t(lane)].name)
                                                                             : std::string("the training set"),
                                        streams() ? "pass" : "epoch", pass);
  if (out->report.left_out > 0)
    spdlog::info("data.dedupe_batches: {}: {} of {} pairs left out, each repeating a query or positive text in "
                 "every batch with room for it; their places went to pairs placed before in the {}", where,
                 out->report.left_out, lanes_[size_t(lane)].size, streams() ? "pass" : "epoch");
  if (out->report.repeats > 0)
    spdlog::info("data.dedupe_batches: {}: {} batch places had to repeat a text after all (too few distinct "
                 "queries and positives for a global batch of {})", where, out->report.repeats, settings_.global_batch);
  std::lock_guard<std::mutex> lock(mutex_);
  auto& cache = deduped_[size_t(lane)];
  cache[pass] = out;
  trim_cache(cache);
  return out;
}

BatchPlan::DedupedPass BatchPlan::dedupe_pass(int lane, int64_t pass) const {
  const Lane& l = lanes_[size_t(lane)];
  const int64_t B = settings_.global_batch, batches = l.batches_per_pass, n = l.size;
  const PassOrder perm = permutation(lane, pass);
  // The waiting pairs, positions in the permutation, as a singly linked list; -1 ends it.
  std::vector<int64_t> next_of(static_cast<size_t>(n));
  std::iota(next_of.begin(), next_of.end(), int64_t{1});
  next_of.back() = -1;
  int64_t head = 0, wrap = 0;  // `wrap`: where taking the pass's pairs again goes on from

  const PairKeys& keys = *keys_;
  std::unordered_set<uint64_t> used;  // the texts of the batch being filled
  used.reserve(size_t(B) * 4);
  auto repeats_a_text = [&](int64_t pair) {
    const int64_t g = l.begin + pair;
    for (const uint64_t* h = keys.begin(g); h != keys.end(g); ++h)
      if (used.count(*h)) return true;
    return false;
  };
  DedupedPass out;
  out.pairs.reserve(size_t(batches * B));
  auto take = [&](int64_t pair) {
    const int64_t g = l.begin + pair;
    used.insert(keys.begin(g), keys.end(g));
    out.pairs.push_back(pair);
  };
  for (int64_t b = 0; b < batches; ++b) {
    used.clear();
    const size_t full = size_t((b + 1) * B);
    // The waiting pairs first, in order; one that repeats a text stays for a later batch.
    for (int64_t at = head, before = -1; at != -1 && out.pairs.size() < full;) {
      const int64_t following = next_of[size_t(at)];
      if (repeats_a_text(perm(at))) {
        before = at;
      } else {
        take(perm(at));
        (before == -1 ? head : next_of[size_t(before)]) = following;
      }
      at = following;
    }
    // Then the pass's pairs again from its start (as the wrap-around without drop_last
    // does), skipping those that repeat a text, for at most one round.
    for (int64_t tried = 0; out.pairs.size() < full && tried < n; ++tried, ++wrap)
      if (!repeats_a_text(perm(wrap % n))) take(perm(wrap % n));
    // Too few distinct texts: repeats it must be, of pairs not yet placed where there are.
    for (; out.pairs.size() < full; ++out.report.repeats) {
      if (head != -1) {
        take(perm(head));
        head = next_of[size_t(head)];
      } else {
        take(perm(wrap++ % n));
      }
    }
  }
  int64_t still_waiting = 0;
  for (int64_t at = head; at != -1; at = next_of[size_t(at)]) ++still_waiting;
  // The tail that drop_last leaves out anyway is not dedupe's doing.
  out.report.left_out = still_waiting - std::max<int64_t>(0, n - batches * B);
  return out;
}

}  // namespace ddp_embed
