// One array of a data set (token ids, offsets, pair records, text hashes): either built
// in memory, in a std::vector it owns, or a view of a prepared data set's file, mapped
// read-only (data/prepared.h) — the same reading code either way. Only an owned column
// grows (push_back, append); copies share the memory until one of them grows (then it
// takes its own copy first).
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <vector>

#include "util/mapped_file.h"

namespace ddp_embed {

template <class T>
class Column {
 public:
  Column() : owned_(std::make_shared<std::vector<T>>()) {}
  explicit Column(std::vector<T> values) : owned_(std::make_shared<std::vector<T>>(std::move(values))) { refresh(); }
  // `count` values of the mapped file, from byte `offset` on (the file must hold them).
  Column(std::shared_ptr<const MappedFile> file, std::size_t offset, std::size_t count)
      : mapped_(std::move(file)),
        data_(reinterpret_cast<const T*>(static_cast<const char*>(mapped_->data()) + offset)),
        size_(count) {}

  const T& operator[](std::size_t i) const { return data_[i]; }
  const T& at(std::size_t i) const {
    if (i >= size_) throw std::out_of_range("Column::at");
    return data_[i];
  }
  const T* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T& back() const { return data_[size_ - 1]; }
  bool mapped() const { return mapped_ != nullptr; }
  // A mapped column: its file's touched pages unmapped (MappedFile::release_pages).
  void release_pages() const {
    if (mapped_) mapped_->release_pages();
  }
  // Heap bytes held (a mapped column's pages belong to the page cache, not to us).
  std::size_t heap_bytes() const { return owned_ ? owned_->capacity() * sizeof(T) : 0; }

  void push_back(const T& value) {
    vector().push_back(value);
    refresh();
  }
  template <class It>
  void append(It first, It last) {
    vector().insert(vector().end(), first, last);
    refresh();
  }
  void reserve(std::size_t n) {
    vector().reserve(n);
    refresh();
  }
  void shrink_to_fit() {
    if (!owned_) return;
    vector().shrink_to_fit();
    refresh();
  }
  void clear() {
    *this = Column();
  }

 private:
  std::vector<T>& vector() {
    if (!owned_) throw std::logic_error("a mapped column is read-only");
    if (owned_.use_count() > 1) owned_ = std::make_shared<std::vector<T>>(*owned_);
    return *owned_;
  }
  void refresh() {
    data_ = owned_->data();
    size_ = owned_->size();
  }

  std::shared_ptr<std::vector<T>> owned_;
  std::shared_ptr<const MappedFile> mapped_;
  const T* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ddp_embed
