// A cross-encoder's micro-batches (model.kind "cross_encoder"): the same pairs, positives
// and hard negatives the batch plan gives an embedder (train/batches.h picks them), read by
// the reranker as (query, candidate) sequences.
//
// Each query's group is its positive first, then its hard negatives; for mnrl, between
// them, other candidates of the global micro-batch (every rank's, in rank order: the
// loader knows every rank's pairs from the plan, so no text is exchanged), all of them or
// loss.cross_encoder.in_batch_negatives drawn from (seed, epoch, pair). Every (query,
// candidate) of a group is one row of `pairs`, joined from the stored sequences by the
// tokenizer's pair template (tokenize/pair_template.h) at the batch's making, so a query
// with 30 candidates is stored once. (Joined from sequences cut to tokenizer.max_length,
// the one case that can differ from joining the texts: a query and a candidate both longer
// than max_length, where which of them was the longer is lost; the truncation then may
// keep the odd token on the other side.)
//
// Labels (RerankPart::labels) for the losses that read them: the teacher's scores when
// every pair has them (pos_scores/neg_scores, or "label"), else a pair's "score" for its
// positive ({"text1", "text2", "score"} labeled pairs) and 0 for its negatives, else 1 for
// a positive and 0 for a negative. A classifier's (model.num_labels > 1): each labeled
// pair's label, its class.
#pragma once

#include <cstdint>
#include <vector>

#include "config/loss_config.h"
#include "data/pairs.h"
#include "model/embedder.h"
#include "tokenize/pair_template.h"

namespace ddp_embed {

struct RerankPart {
  EncoderInput pairs;    // every (query, candidate) joined: ids, mask and token types [P, L]
  at::Tensor group_rows; // int64 [n, G]: query i's candidates' rows of `pairs`, positive first, -1 past the last
  at::Tensor labels;     // float [n, G] (NaN past the last); undefined where the loss reads none
  double divisor = 1;    // the loss's units over every rank / world size (model/rerank_loss.h)
  int64_t real_tokens = 0;
  bool defined() const { return pairs.defined(); }
};

// What a cross-encoder run's loader needs to make them, fixed for the run.
// Joined pairs (rows of `joined`, in that order) as one batch padded to its longest with
// zeros, its mask and token types; in pinned memory when `pin`.
EncoderInput collate_pairs(const std::vector<PairIds>& joined, const std::vector<int64_t>& rows, bool pin = false);

// `tokenizer` must outlive the loader that uses it (the run's, in train/setup.h's Inputs).
struct RerankBatching {
  const Tokenizer* tokenizer = nullptr;  // where a stored sequence's pieces begin and end
  PairTemplate pair_template;
  int max_length = 128;
  CrossEncoderLossConfig loss;
  int num_labels = 1;  // > 1: a classifier, each labeled pair's label its class (model/rerank_loss.h)
};

// The batching of `tokenizer` and the run's settings. TokenizerError when the tokenizer
// has no pair template (tokenize/pair_template.h).
RerankBatching make_rerank_batching(const Tokenizer& tokenizer, int max_length, const CrossEncoderLossConfig& loss,
                                    int num_labels = 1);

// Every pair's labels against what the loss takes (a classifier's: labeled pairs, each
// label a class from 0 to num_labels − 1), and, for the losses that rank a
// positive among its negatives, every pair of a source that takes negatives
// (`negatives_per_source`, the plan's sources in order) having some: once, before the first
// step, so that a run never trains up to a damaged pair. DataError naming the pair (its
// number in its source) and what the loss takes.
void check_rerank_data(const PairDataset& data, const RerankBatching& batching,
                       const std::vector<int>& negatives_per_source);

// The sequences a micro-batch takes: each pair's query, its positive of the epoch and its
// hard negatives (`taken[i]` of them for pair i, in order).
struct PickedSequences {
  std::vector<int64_t> queries, positives, negatives;
  std::vector<int> taken;
};
PickedSequences pick_sequences(const PairDataset& data, const std::vector<int64_t>& indices, int64_t epoch,
                               uint64_t seed, int negatives_per_query);

// The micro-batch of this rank (`rank_indices[rank]`), every rank's pairs given (in rank
// order) for mnrl's in-batch candidates and for the divisor. Throws DataError for labels the
// loss does not take, naming the pair and its source.
RerankPart make_rerank_part(const PairDataset& data, const RerankBatching& batching,
                            const std::vector<std::vector<int64_t>>& rank_indices, int rank, int64_t epoch,
                            uint64_t seed, int negatives_per_query, bool pin = false);

}  // namespace ddp_embed
