// Micro-batches as tensors, built on a background thread.
//
// The loader walks the batch plan (data/batch_plan.h) from a start position, picks each
// pair's positive for the epoch (seeded, so the choice does not depend on the world
// size), collects the hard negatives its source asks for, pads each batch only to its
// own longest sequence, and keeps a few steps ready in a bounded queue: the training
// thread never waits on data. For a GPU the tensors are made in pinned (page-locked)
// memory, so that the copies to the device can be asynchronous (non_blocking) and
// overlap the GPU's work.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "data/pairs.h"
#include "data/batch_plan.h"
#include "model/embedder.h"
#include "train/rerank_batches.h"

namespace ddp_embed {

// Pads `sequences` of `store` into one batch (int64 ids and mask [n, longest]), in
// pinned memory when `pin` (needs a CUDA LibTorch).
EncoderInput collate(const TokenStore& store, const std::vector<int64_t>& sequences, bool pin = false);

struct PairBatch {
  EncoderInput query, pos, neg;  // neg undefined without hard negatives
  // The same sequences in the guide's tokens (PairDataset::guide_tokens); undefined when
  // the guide reads the model's (train/guide.h).
  EncoderInput guide_query, guide_pos, guide_neg;
  // The candidates' text hashes (always) and, when the data has them, the teacher's
  // scores of each query's positive and hard negatives, aligned with the texts taken
  // (model/loss.h says how the loss reads them).
  CandidateLabels labels;
  int64_t real_tokens = 0;     // query + positive (+ negative) tokens, padding excluded
  std::vector<int64_t> indices;  // the pairs' positions in the dataset
  // A cross-encoder's batch (train/rerank_batches.h): the pairs joined, in place of the
  // texts above (which are then undefined).
  RerankPart rerank;
};

// The micro-batches of one optimizer step, for this rank.
struct StepBatches {
  int64_t epoch = 0, step_in_epoch = 0;
  int source = -1;          // the plan's source of the global batch; -1 with data.mixing mixed
  std::string source_name;  // its name, "" with mixed
  std::vector<PairBatch> micro;  // grad_accum_steps of them
};

// Builds the micro-batch of the given dataset indices for `epoch`.
PairBatch make_pair_batch(const PairDataset& data, const std::vector<int64_t>& indices,
                          int64_t epoch, uint64_t seed, int negatives_per_query, bool pin = false);

// Moves the batch's tensors to `device`; from pinned memory the copies are asynchronous.
void move_to(PairBatch& batch, const c10::Device& device);

class BatchLoader {
 public:
  // Produces `total_steps` steps starting at (start_epoch, start_step); `pin`: in pinned
  // memory, for a GPU. negatives_per_source: hard negatives per query for each of the
  // plan's sources (with mixed, the first one's count is used).
  // `rerank`: a cross-encoder run's batching (its micro-batches are RerankParts), which
  // must outlive the loader; null for an embedder.
  BatchLoader(const PairDataset& data, const BatchPlan& plan, int rank, int accum_steps,
              std::vector<int> negatives_per_source, uint64_t seed, int64_t start_epoch,
              int64_t start_step, int64_t total_steps, bool pin = false, size_t prefetch = 4,
              const RerankBatching* rerank = nullptr);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next step's micro-batches; blocks only if the loader fell behind. Rethrows an
  // error of the loader thread.
  StepBatches next();

 private:
  void run();
  // Every rank's candidate rows (positives and hard negatives) at accumulation step
  // `accum` of the step being built (CandidateLabels::rank_rows).
  std::vector<int64_t> rank_candidate_rows(int accum, int negatives) const;

  const PairDataset& data_;
  const BatchPlan& plan_;
  int rank_, accum_;
  std::vector<int> negatives_;
  const RerankBatching* rerank_;
  uint64_t seed_;
  bool pin_;
  int64_t epoch_, step_, remaining_;
  size_t capacity_;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<StepBatches> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddp_embed
