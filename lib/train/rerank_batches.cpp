#include "train/rerank_batches.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "data/sampler.h"

namespace ddp_embed {
namespace {

// Whether the loss reads labels (binary_cross_entropy, lambda, listnet, margin_mse; a
// classifier's cross_entropy its classes).
bool rerank_reads_labels(const RerankBatching& b) {
  return b.num_labels > 1 || (b.loss.type != RerankLoss::Mnrl && b.loss.type != RerankLoss::CrossEntropy);
}

// The source of pair `index` and its number there (from 1), for messages.
std::string rerank_pair_place(const PairDataset& data, int64_t index) {
  for (const SourceRange& s : data.sources)
    if (index >= s.begin && index < s.end)
      return fmt::format("pair {} of source \"{}\"", index - s.begin + 1, s.name);
  return fmt::format("pair {}", index + 1);
}

// A candidate's label (see the header): the teacher's score, the pair's score for its
// positive, or 1 / 0. Checked against what the loss takes.
float rerank_label(const PairDataset& data, const RerankBatching& b, int64_t pair_index, int64_t sequence,
                   bool positive) {
  float label;
  std::string what;
  if (data.all_teacher_scored) {
    label = data.teacher_scores[size_t(sequence)];
    what = "teacher score";
  } else if (data.has_scores) {
    label = positive ? data.pairs[size_t(pair_index)].score : 0.0f;
    what = "score";
  } else {
    label = positive ? 1.0f : 0.0f;
    what = "label";
  }
  if (b.num_labels > 1) what = "class";
  const std::string takes = rerank_label_refusal(b.loss.type, label, b.num_labels);
  if (!takes.empty())
    throw DataError(fmt::format("{}: its {} {:g} is not what loss.cross_encoder.type \"{}\" takes ({})",
                                rerank_pair_place(data, pair_index), what, label, choice_name(b.loss.type), takes));
  return label;
}

// A stored sequence's pieces, its special ids left out.
std::pair<const int32_t*, size_t> rerank_pieces(const TokenStore& store, const Tokenizer& tokenizer, int64_t seq,
                                                std::vector<int32_t>& buffer) {
  buffer.resize(size_t(store.length(seq)));
  std::vector<int64_t> wide(buffer.size());
  store.copy(seq, wide.data());
  for (size_t i = 0; i < wide.size(); ++i) buffer[i] = int32_t(wide[i]);
  const PieceRange r = piece_range(tokenizer, buffer.data(), buffer.size());
  return {buffer.data() + r.begin, r.end - r.begin};
}

// The loss's units on every rank over the world size (model/rerank_loss.h), from the
// plan, so no exchange: each query's candidates; for lambda, the pairs its grades order,
// from every rank's labels. Lambda with loss.cross_encoder.k counts by the logits' order,
// which only the device knows: 0, and forward_rerank takes this rank's own count.
double rerank_divisor(const PairDataset& data, const RerankBatching& b, const std::vector<PickedSequences>& picked,
                      const std::vector<std::vector<int64_t>>& rank_indices, int world) {
  const CrossEncoderLossConfig& loss = b.loss;
  if (loss.type != RerankLoss::Lambda) {
    std::vector<int64_t> candidates;
    for (const PickedSequences& p : picked)
      for (int t : p.taken) candidates.push_back(1 + t);
    return double(rerank_loss_units(loss.type, candidates)) / double(world);
  }
  if (loss.k > 0) return 0;
  int64_t pairs = 0;
  for (size_t r = 0; r < picked.size(); ++r) {
    const PickedSequences& p = picked[r];
    int widest = 1;
    for (int t : p.taken) widest = std::max(widest, 1 + t);
    const int64_t n = int64_t(p.queries.size());
    at::Tensor valid = at::zeros({n, widest}, at::kBool), labels = at::zeros({n, widest}, at::kFloat);
    bool* valid_at = valid.data_ptr<bool>();
    float* label_at = labels.data_ptr<float>();
    int64_t next_negative = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pair = rank_indices[r][size_t(i)];
      valid_at[i * widest] = true;
      label_at[i * widest] = rerank_label(data, b, pair, p.positives[size_t(i)], true);
      for (int k = 0; k < p.taken[size_t(i)]; ++k, ++next_negative) {
        valid_at[i * widest + k + 1] = true;
        label_at[i * widest + k + 1] = rerank_label(data, b, pair, p.negatives[size_t(next_negative)], false);
      }
    }
    pairs += rerank_lambda_units({at::Tensor(), valid, labels}, loss).item<int64_t>();
  }
  return double(std::max<int64_t>(pairs, 1)) / double(world);  // LambdaLoss divides by at least 1
}

}  // namespace

EncoderInput collate_pairs(const std::vector<PairIds>& joined, const std::vector<int64_t>& rows, bool pin) {
  int64_t longest = 1;
  for (int64_t r : rows) longest = std::max<int64_t>(longest, int64_t(joined[size_t(r)].ids.size()));
  const int64_t n = int64_t(rows.size());
  const auto options = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pin);
  at::Tensor ids = torch::zeros({n, longest}, options), mask = torch::zeros({n, longest}, options),
             types = torch::zeros({n, longest}, options);  // 0 past the end: masked out
  int64_t* id_rows = ids.data_ptr<int64_t>();
  int64_t* mask_rows = mask.data_ptr<int64_t>();
  int64_t* type_rows = types.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    const PairIds& p = joined[size_t(rows[size_t(i)])];
    std::copy(p.ids.begin(), p.ids.end(), id_rows + i * longest);
    std::copy(p.types.begin(), p.types.end(), type_rows + i * longest);
    std::fill(mask_rows + i * longest, mask_rows + i * longest + int64_t(p.ids.size()), int64_t{1});
  }
  return {ids, mask, types};
}

RerankBatching make_rerank_batching(const Tokenizer& tokenizer, int max_length, const CrossEncoderLossConfig& loss,
                                    int num_labels) {
  RerankBatching b;
  b.tokenizer = &tokenizer;
  b.pair_template = pair_template(tokenizer);
  b.max_length = max_length;
  b.loss = loss;
  b.num_labels = num_labels;
  return b;
}

void check_rerank_data(const PairDataset& data, const RerankBatching& b, const std::vector<int>& negatives_per_source) {
  const RerankLoss type = b.loss.type;
  const bool ranks_among_negatives = type != RerankLoss::BinaryCrossEntropy && type != RerankLoss::Mnrl;
  const bool with_labels = rerank_reads_labels(b);
  if (b.num_labels > 1 && !data.has_scores && !data.all_teacher_scored)
    throw DataError(fmt::format("a classifier (model.num_labels {}) trains on labeled pairs, {{\"query\", \"doc\", "
                                "\"label\": class}} with each class from 0 to {}: the training data's pairs have no "
                                "labels",
                                b.num_labels, b.num_labels - 1));
  for (size_t s = 0; s < data.sources.size(); ++s) {
    const int takes = s < negatives_per_source.size() ? negatives_per_source[s] : 0;
    for (int64_t i = data.sources[s].begin; i < data.sources[s].end; ++i) {
      const PairIndex& p = data.pairs[size_t(i)];
      if (ranks_among_negatives && takes > 0 && p.neg_count == 0)
        throw DataError(fmt::format("{} has no hard negative (\"neg\"), and loss.cross_encoder.type \"{}\" ranks "
                                    "each positive among its candidates: give every pair negatives (embed-train mine "
                                    "makes them), or train with \"binary_cross_entropy\" on labeled pairs",
                                    rerank_pair_place(data, i), choice_name(type)));
      if (!with_labels) continue;
      for (int32_t k = 0; k < p.pos_count; ++k) rerank_label(data, b, i, p.pos_begin + k, true);
      for (int32_t k = 0; k < p.neg_count; ++k) rerank_label(data, b, i, p.neg_begin + k, false);
    }
  }
}

PickedSequences pick_sequences(const PairDataset& data, const std::vector<int64_t>& indices, int64_t epoch,
                               uint64_t seed, int negatives_per_query) {
  PickedSequences s;
  s.queries.reserve(indices.size());
  s.positives.reserve(indices.size());
  for (auto i : indices) {
    const PairIndex& p = data.pairs[size_t(i)];
    s.queries.push_back(p.query);
    // One positive per epoch, drawn from (seed, epoch, pair): the same whichever rank
    // and step the pair lands on.
    const uint64_t pick = p.pos_count > 1 ? mix_hash(seed, uint64_t(epoch), uint64_t(i)) % uint64_t(p.pos_count) : 0;
    s.positives.push_back(p.pos_begin + int64_t(pick));
    // Hard negatives: up to negatives_per_query of the pair's list, starting at a
    // seeded rotation so that different negatives are used in different epochs.
    const int take = std::min<int>(negatives_per_query, p.neg_count);
    const uint64_t start = p.neg_count > 0 ? mix_hash(seed + 1, uint64_t(epoch), uint64_t(i)) % uint64_t(p.neg_count) : 0;
    for (int k = 0; k < take; ++k) s.negatives.push_back(p.neg_begin + int64_t((start + k) % p.neg_count));
    s.taken.push_back(take);
  }
  return s;
}

RerankPart make_rerank_part(const PairDataset& data, const RerankBatching& b,
                            const std::vector<std::vector<int64_t>>& rank_indices, int rank, int64_t epoch,
                            uint64_t seed, int negatives_per_query, bool pin) {
  const CrossEncoderLossConfig& loss = b.loss;
  const int world = int(rank_indices.size());
  std::vector<PickedSequences> picked;
  for (const auto& indices : rank_indices) picked.push_back(pick_sequences(data, indices, epoch, seed, negatives_per_query));
  const PickedSequences& mine = picked[size_t(rank)];
  const std::vector<int64_t>& my_pairs = rank_indices[size_t(rank)];
  const int64_t n = int64_t(mine.queries.size());

  // mnrl: every rank's candidates in rank order (positives, then hard negatives), and
  // where this rank's own begin.
  std::vector<int64_t> global;
  int64_t own_begin = 0;
  if (loss.type == RerankLoss::Mnrl)
    for (int r = 0; r < world; ++r) {
      if (r == rank) own_begin = int64_t(global.size());
      global.insert(global.end(), picked[size_t(r)].positives.begin(), picked[size_t(r)].positives.end());
      global.insert(global.end(), picked[size_t(r)].negatives.begin(), picked[size_t(r)].negatives.end());
    }

  // Each query's group: sequences and labels.
  std::vector<std::vector<int64_t>> groups(static_cast<size_t>(n));
  std::vector<std::vector<float>> labels(static_cast<size_t>(n));
  const bool with_labels = rerank_reads_labels(b);
  int64_t next_negative = 0;
  for (int64_t i = 0; i < n; ++i) {
    auto& group = groups[size_t(i)];
    group.push_back(mine.positives[size_t(i)]);
    if (with_labels) labels[size_t(i)].push_back(rerank_label(data, b, my_pairs[size_t(i)], group.back(), true));
    const int64_t own_negatives = next_negative;
    if (loss.type == RerankLoss::Mnrl) {
      // The others: every global candidate but query i's own positive and negatives.
      std::vector<int64_t> others;
      const int64_t own_pos = own_begin + i;
      const int64_t neg_from = own_begin + n + own_negatives, neg_to = neg_from + mine.taken[size_t(i)];
      for (int64_t c = 0; c < int64_t(global.size()); ++c)
        if (c != own_pos && !(c >= neg_from && c < neg_to)) others.push_back(global[size_t(c)]);
      const int64_t want = loss.in_batch_negatives;
      if (want >= 0 && want < int64_t(others.size())) {  // a seeded partial shuffle: the first `want`
        std::mt19937_64 rng(mix_hash(seed + 2, uint64_t(epoch), uint64_t(my_pairs[size_t(i)])));
        for (int64_t k = 0; k < want; ++k)
          std::swap(others[size_t(k)], others[size_t(k + int64_t(rng() % uint64_t(int64_t(others.size()) - k)))]);
        others.resize(size_t(want));
      }
      group.insert(group.end(), others.begin(), others.end());
    }
    for (int k = 0; k < mine.taken[size_t(i)]; ++k, ++next_negative) {
      group.push_back(mine.negatives[size_t(next_negative)]);
      if (with_labels) labels[size_t(i)].push_back(rerank_label(data, b, my_pairs[size_t(i)], group.back(), false));
    }
  }

  // The pairs joined, one row each, and the groups' rows.
  size_t widest = 1, rows = 0;
  for (const auto& g : groups) {
    widest = std::max(widest, g.size());
    rows += g.size();
  }
  std::vector<PairIds> joined;
  joined.reserve(rows);
  std::vector<int32_t> query_buffer, doc_buffer;
  RerankPart part;
  for (int64_t i = 0; i < n; ++i) {
    const auto q = rerank_pieces(data.tokens, *b.tokenizer, mine.queries[size_t(i)], query_buffer);
    for (int64_t seq : groups[size_t(i)]) {
      const auto d = rerank_pieces(data.tokens, *b.tokenizer, seq, doc_buffer);
      joined.push_back(join_pair(b.pair_template, q.first, q.second, d.first, d.second, b.max_length));
      part.real_tokens += int64_t(joined.back().ids.size());
    }
  }
  std::vector<int64_t> every_row(joined.size());
  std::iota(every_row.begin(), every_row.end(), int64_t{0});
  part.pairs = collate_pairs(joined, every_row, pin);
  const auto options = torch::TensorOptions().dtype(torch::kInt64).pinned_memory(pin);
  const int64_t G = int64_t(widest);
  part.group_rows = torch::full({n, G}, int64_t{-1}, options);
  int64_t* group_rows = part.group_rows.data_ptr<int64_t>();
  if (with_labels) part.labels = torch::full({n, G}, std::nanf(""), torch::TensorOptions().dtype(torch::kFloat).pinned_memory(pin));
  int64_t row = 0;
  for (int64_t i = 0; i < n; ++i)
    for (size_t j = 0; j < groups[size_t(i)].size(); ++j, ++row) {
      group_rows[i * G + int64_t(j)] = row;
      if (with_labels) part.labels.data_ptr<float>()[i * G + int64_t(j)] = labels[size_t(i)][j];
    }

  part.divisor = rerank_divisor(data, b, picked, rank_indices, world);
  return part;
}

}  // namespace ddp_embed
