// A file mapped read-only into memory. Workers on one machine that map the same file
// share one copy of it in the page cache, and only the pages a worker touches count in
// its resident memory: the way a training set larger than memory is read.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace ddp_embed {

class MappedFile {
 public:
  // Maps `path` whole; throws std::runtime_error naming it when it cannot be opened or
  // mapped. `random_access`: tell the kernel not to read ahead (batches jump about);
  // false: read far ahead (the file is read front to back).
  explicit MappedFile(const std::string& path, bool random_access = true);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Unmaps the pages this process has touched; they stay in the page cache, and a later
  // read maps them again. The kernel maps whole page-cache folios (up to megabytes) on a
  // fault, so random reads over a large file would otherwise leave the resident memory
  // growing with every batch, although none of it is the process's own.
  void release_pages() const;
  // The same for the pages of bytes [offset, offset + bytes) only (a check that reads the
  // file region by region keeps one region resident, not the file).
  void release_range(std::size_t offset, std::size_t bytes) const;
  // Asks the kernel to read bytes [offset, offset + bytes) ahead (a region about to be
  // read through, in a file mapped for random access).
  void prefetch_range(std::size_t offset, std::size_t bytes) const;

  const void* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace ddp_embed
