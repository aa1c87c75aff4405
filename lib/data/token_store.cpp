#include <algorithm>
#include <string>

#include "data/pairs.h"

namespace ddp_embed {

int64_t TokenStore::num_sequences() const { return static_cast<int64_t>(offsets_.size()) - 1; }

int32_t TokenStore::length(int64_t seq) const {
  return static_cast<int32_t>(offsets_[seq + 1] - offsets_[seq]);
}

void TokenStore::copy(int64_t seq, int64_t* out) const {
  const int64_t begin = offsets_[seq], end = offsets_[seq + 1];
  if (wide_)
    std::copy(ids32_.begin() + begin, ids32_.begin() + end, out);
  else
    std::copy(ids16_.begin() + begin, ids16_.begin() + end, out);
}

std::vector<int32_t> TokenStore::ids(int64_t seq) const {
  const int64_t begin = offsets_[seq], end = offsets_[seq + 1];
  if (wide_) return std::vector<int32_t>(ids32_.begin() + begin, ids32_.begin() + end);
  return std::vector<int32_t>(ids16_.begin() + begin, ids16_.begin() + end);
}

size_t TokenStore::memory_bytes() const {
  return ids16_.capacity() * sizeof(uint16_t) + ids32_.capacity() * sizeof(int32_t) +
         offsets_.capacity() * sizeof(int64_t);
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
    ids32_.insert(ids32_.end(), ids, ids + count);
  } else {
    for (size_t i = 0; i < count; ++i)
      if (ids[i] < 0 || ids[i] > 0xFFFF)
        throw DataError("token id " + std::to_string(ids[i]) + " does not fit 16-bit storage");
    ids16_.insert(ids16_.end(), ids, ids + count);  // converts each id
  }
  offsets_.push_back(offsets_.back() + static_cast<int64_t>(count));
}

void TokenStore::shrink_to_fit() {
  ids16_.shrink_to_fit();
  ids32_.shrink_to_fit();
  offsets_.shrink_to_fit();
}

}  // namespace ddp_embed
