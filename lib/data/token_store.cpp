#include <algorithm>
#include <string>

#include "data/pairs.h"

namespace ddp_embed {

int64_t TokenStore::num_sequences() const { return static_cast<int64_t>(offsets_.size()) - 1; }

int32_t TokenStore::length(int64_t seq) const {
  if (checked_vocab_ > 0) check(seq);
  return static_cast<int32_t>(offsets_[seq + 1] - offsets_[seq]);
}

void TokenStore::copy(int64_t seq, int64_t* out) const {
  if (checked_vocab_ > 0) check(seq);
  const int64_t begin = offsets_[seq], end = offsets_[seq + 1];
  if (wide_)
    std::copy(ids32_.begin() + begin, ids32_.begin() + end, out);
  else
    std::copy(ids16_.begin() + begin, ids16_.begin() + end, out);
}

void TokenStore::release_pages() const {
  ids16_.release_pages();
  ids32_.release_pages();
  offsets_.release_pages();
}

void PairDataset::release_pages() const {
  tokens.release_pages();
  pairs.release_pages();
  text_hashes.release_pages();
  teacher_scores.release_pages();
}

void TokenStore::set_checked(int32_t vocab_size, std::string origin) {
  checked_vocab_ = vocab_size;
  origin_ = std::move(origin);
}

void TokenStore::check(int64_t seq) const {
  const int64_t n = num_sequences();
  if (seq < 0 || seq >= n)
    throw DataError(origin_ + "/pairs.bin: a pair names sequence " + std::to_string(seq) + ", which does not exist (" +
                    std::to_string(n) + " sequences): the folder is damaged; prepare it again");
  const int64_t begin = offsets_[seq], end = offsets_[seq + 1];
  const int64_t total = static_cast<int64_t>(wide_ ? ids32_.size() : ids16_.size());
  if (begin < 0 || begin > end || end > total)
    throw DataError(origin_ + "/offsets.i64: sequence " + std::to_string(seq) + " has offsets " + std::to_string(begin) + ".." +
                    std::to_string(end) + " outside its " + std::to_string(total) +
                    " token ids: the folder is damaged; prepare it again");
  for (int64_t i = begin; i < end; ++i) {
    const int64_t id = wide_ ? int64_t(ids32_[size_t(i)]) : int64_t(ids16_[size_t(i)]);
    if (id < 0 || id >= checked_vocab_)
      throw DataError(origin_ + (wide_ ? "/ids.i32" : "/ids.u16") + ": sequence " + std::to_string(seq) + " has token id " + std::to_string(id) +
                      ", outside the tokenizer's vocabulary of " + std::to_string(checked_vocab_) +
                      ": the folder is damaged or was prepared with another tokenizer; prepare it again");
  }
}

TokenStore TokenStore::from_columns(bool wide, Column<uint16_t> ids16, Column<int32_t> ids32, Column<int64_t> offsets) {
  TokenStore store;
  store.wide_ = wide;
  store.wide_fixed_ = true;
  store.ids16_ = std::move(ids16);
  store.ids32_ = std::move(ids32);
  store.offsets_ = std::move(offsets);
  return store;
}

std::vector<int32_t> TokenStore::ids(int64_t seq) const {
  if (checked_vocab_ > 0) check(seq);
  const int64_t begin = offsets_[seq], end = offsets_[seq + 1];
  if (wide_) return std::vector<int32_t>(ids32_.begin() + begin, ids32_.begin() + end);
  return std::vector<int32_t>(ids16_.begin() + begin, ids16_.begin() + end);
}

size_t TokenStore::memory_bytes() const {
  return ids16_.heap_bytes() + ids32_.heap_bytes() + offsets_.heap_bytes();
}

void TokenStore::reserve(bool wide, int64_t sequences, int64_t ids) {
  if (!wide_fixed_) {
    if (num_sequences() > 0 && wide != wide_)
      throw DataError("TokenStore: the id width must be chosen before the first sequence");
    wide_ = wide;
    wide_fixed_ = true;
  }
  offsets_.reserve(static_cast<size_t>(std::max<int64_t>(sequences, 0)) + 1);
  if (wide_)
    ids32_.reserve(static_cast<size_t>(std::max<int64_t>(ids, 0)));
  else
    ids16_.reserve(static_cast<size_t>(std::max<int64_t>(ids, 0)));
}

void TokenStore::append(const std::vector<int32_t>& ids) { append(ids.data(), ids.size()); }

void TokenStore::append(const int32_t* ids, size_t count) {
  wide_fixed_ = true;  // appending without reserve() settles on the current width
  if (wide_) {
    ids32_.append(ids, ids + count);
  } else {
    for (size_t i = 0; i < count; ++i)
      if (ids[i] < 0 || ids[i] > 0xFFFF)
        throw DataError("token id " + std::to_string(ids[i]) + " does not fit 16-bit storage");
    ids16_.append(ids, ids + count);  // converts each id
  }
  offsets_.push_back(offsets_.back() + static_cast<int64_t>(count));
}

void TokenStore::shrink_to_fit() {
  ids16_.shrink_to_fit();
  ids32_.shrink_to_fit();
  offsets_.shrink_to_fit();
}

}  // namespace ddp_embed
