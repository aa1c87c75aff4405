#include "train/batches.h"

#include <algorithm>
#include <cmath>

#include "data/sampler.h"

namespace ddp_embed {

EncoderInput collate(const TokenStore& store, const std::vector<int64_t>& sequences, bool pin) {
  int64_t longest = 1;
  for (auto s : sequences) longest = std::max<int64_t>(longest, store.length(s));
  const int64_t n = static_cast<int64_t>(sequences.size());
  const auto options = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pin);
  auto ids = torch::zeros({n, longest}, options);  // 0 = [PAD] for our tokenizers
  auto mask = torch::zeros({n, longest}, options);
  auto* id_rows = ids.data_ptr<int64_t>();
  auto* mask_rows = mask.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t len = store.length(sequences[i]);
    store.copy(sequences[i], id_rows + i * longest);
    std::fill(mask_rows + i * longest, mask_rows + i * longest + len, int64_t{1});
  }
  return {ids, mask};
}

namespace {

// The loss's labels of a batch (model/loss.h CandidateLabels): the text hash and the
// query of every candidate, positives then negatives; with teacher scores in the data, each query's
// group (its positive's row, then its own negatives' rows, -1 after the last) and the
// teacher's score of each, read for the very sequences taken.
CandidateLabels candidate_labels(const PairDataset& data, const std::vector<int64_t>& positives,
                                 const std::vector<int64_t>& negatives, const std::vector<int>& taken, bool pin) {
  CandidateLabels labels;
  const auto options = torch::TensorOptions().pinned_memory(pin);
  const int64_t n = int64_t(positives.size()), k = int64_t(negatives.size());
  labels.hashes = torch::empty({n + k}, options.dtype(torch::kInt64));
  auto* hash = labels.hashes.data_ptr<int64_t>();
  for (const auto* seqs : {&positives, &negatives})
    for (auto s : *seqs) *hash++ = static_cast<int64_t>(data.text_hashes[size_t(s)]);  // the same bits
  // Each candidate's query: positive i is query i's; the hard negatives follow in query
  // order, taken[i] of them each.
  labels.owners = torch::empty({n + k}, options.dtype(torch::kInt64));
  auto* owner = labels.owners.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) *owner++ = i;
  for (int64_t i = 0; i < n; ++i)
    for (int j = 0; j < taken[size_t(i)]; ++j) *owner++ = i;
  if (data.teacher_scores.empty()) return labels;

  const int64_t group = 1 + (taken.empty() ? 0 : *std::max_element(taken.begin(), taken.end()));
  labels.groups = torch::full({n, group}, int64_t{-1}, options.dtype(torch::kInt64));
  labels.teacher_scores = torch::full({n, group}, std::nanf(""), options.dtype(torch::kFloat));
  auto* rows = labels.groups.data_ptr<int64_t>();
  auto* scores = labels.teacher_scores.data_ptr<float>();
  int64_t next_negative = 0;
  for (int64_t i = 0; i < n; ++i) {
    rows[i * group] = i;
    scores[i * group] = data.teacher_scores[size_t(positives[size_t(i)])];
    for (int j = 0; j < taken[size_t(i)]; ++j, ++next_negative) {
      rows[i * group + 1 + j] = n + next_negative;
      scores[i * group + 1 + j] = data.teacher_scores[size_t(negatives[size_t(next_negative)])];
    }
  }
  return labels;
}

}  // namespace

PairBatch make_pair_batch(const PairDataset& data, const std::vector<int64_t>& indices,
                          int64_t epoch, uint64_t seed, int negatives_per_query, bool pin) {
  const PickedSequences picked = pick_sequences(data, indices, epoch, seed, negatives_per_query);
  const std::vector<int64_t>& queries = picked.queries;
  const std::vector<int64_t>& positives = picked.positives;
  const std::vector<int64_t>& negatives = picked.negatives;
  const std::vector<int>& taken = picked.taken;  // hard negatives of each query
  PairBatch batch;
  batch.indices = indices;
  batch.query = collate(data.tokens, queries, pin);
  batch.pos = collate(data.tokens, positives, pin);
  if (!negatives.empty()) batch.neg = collate(data.tokens, negatives, pin);
  if (data.guide_tokens.num_sequences() > 0) {  // loss.guide with a tokenizer of its own
    batch.guide_query = collate(data.guide_tokens, queries, pin);
    batch.guide_pos = collate(data.guide_tokens, positives, pin);
    if (!negatives.empty()) batch.guide_neg = collate(data.guide_tokens, negatives, pin);
  }
  batch.labels = candidate_labels(data, positives, negatives, taken, pin);
  for (const auto* seqs : {&queries, &positives, &negatives})
    for (auto s : *seqs) batch.real_tokens += data.tokens.length(s);
  return batch;
}

void move_to(PairBatch& batch, const c10::Device& device) {
  for (EncoderInput* in : {&batch.query, &batch.pos, &batch.neg, &batch.guide_query, &batch.guide_pos, &batch.guide_neg}) {
    if (!in->defined()) continue;
    in->ids = in->ids.to(device, /*non_blocking=*/true);
    in->mask = in->mask.to(device, /*non_blocking=*/true);
  }
  for (at::Tensor* t : {&batch.labels.hashes, &batch.labels.owners, &batch.labels.groups, &batch.labels.teacher_scores,
                        &batch.rerank.pairs.ids, &batch.rerank.pairs.mask, &batch.rerank.pairs.types,
                        &batch.rerank.group_rows, &batch.rerank.labels})
    if (t->defined()) *t = t->to(device, /*non_blocking=*/true);
}

BatchLoader::BatchLoader(const PairDataset& data, const BatchPlan& plan, int rank,
                         int accum_steps, std::vector<int> negatives_per_source, uint64_t seed,
                         int64_t start_epoch, int64_t start_step, int64_t total_steps,
                         bool pin, size_t prefetch, const RerankBatching* rerank)
    : data_(data),
      plan_(plan),
      rank_(rank),
      accum_(accum_steps),
      negatives_(std::move(negatives_per_source)),
      rerank_(rerank),
      seed_(seed),
      pin_(pin),
      epoch_(start_epoch),
      step_(start_step),
      remaining_(total_steps),
      capacity_(std::max<size_t>(1, prefetch)),
      thread_([this] { run(); }) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

std::vector<int64_t> BatchLoader::rank_candidate_rows(int accum, int negatives) const {
  // Each rank's micro-batch of this accumulation step gives its pairs' positives and up
  // to `negatives` hard negatives each: every rank can count every rank's rows from the
  // plan, so cross-rank negatives need no exchange of counts.
  const int world = plan_.world_size();
  if (world == 1) return {};
  std::vector<int64_t> rows;
  for (int r = 0; r < world; ++r) {
    int64_t count = 0;
    for (int64_t i : plan_.micro_batch(epoch_, step_, accum, r))
      count += 1 + std::min<int64_t>(negatives, data_.pairs[size_t(i)].neg_count);
    rows.push_back(count);
  }
  return rows;
}

void BatchLoader::run() {
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || ready_.size() < capacity_; });
        if (stop_ || remaining_ <= 0) return;
      }
      StepBatches step;
      step.epoch = epoch_;
      step.step_in_epoch = step_;
      step.source = plan_.source_of(epoch_, step_);
      if (step.source >= 0) step.source_name = plan_.sources()[size_t(step.source)].name;
      const int negatives = negatives_.at(size_t(std::max(step.source, 0)));
      for (int a = 0; a < accum_; ++a) {
        if (rerank_) {  // a cross-encoder: the pairs joined, every rank's known from the plan
          std::vector<std::vector<int64_t>> every_rank;
          for (int r = 0; r < plan_.world_size(); ++r) every_rank.push_back(plan_.micro_batch(epoch_, step_, a, r));
          PairBatch batch;
          batch.indices = every_rank[size_t(rank_)];
          batch.rerank = make_rerank_part(data_, *rerank_, every_rank, rank_, epoch_, seed_, negatives, pin_);
          batch.real_tokens = batch.rerank.real_tokens;
          step.micro.push_back(std::move(batch));
          continue;
        }
        step.micro.push_back(make_pair_batch(data_, plan_.micro_batch(epoch_, step_, a, rank_),
                                             epoch_, seed_, negatives, pin_));
        step.micro.back().labels.rank_rows = rank_candidate_rows(a, negatives);
      }
      if (data_.mapped()) data_.release_pages();  // a prepared set: resident memory of one step
      if (++step_ == plan_.steps_per_epoch()) {
        step_ = 0;
        ++epoch_;
      }
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(step));
        --remaining_;
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

StepBatches BatchLoader::next() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || error_ || (remaining_ <= 0); });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw std::logic_error("BatchLoader::next() called after the last step");
  }
  StepBatches out = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  changed_.notify_all();
  return out;
}

}  // namespace ddp_embed
