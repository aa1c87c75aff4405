#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace ddp_embed {

MappedFile::MappedFile(const std::string& path, bool random_access) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot stat " + path + ": " + std::strerror(err));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    data_ = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (data_ == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      data_ = nullptr;
      throw std::runtime_error("cannot map " + path + ": " + std::strerror(err));
    }
    ::madvise(data_, size_, random_access ? MADV_RANDOM : MADV_SEQUENTIAL);
  }
  ::close(fd);  // the mapping keeps the file
}

void MappedFile::release_pages() const {
  if (data_) ::madvise(data_, size_, MADV_DONTNEED);  // a shared file mapping: nothing is lost
}

namespace {

// [offset, offset + bytes) of a mapping of `size` bytes, widened to whole pages, as
// madvise takes it; {nullptr, 0} when it is empty.
std::pair<char*, std::size_t> page_range(void* data, std::size_t size, std::size_t offset, std::size_t bytes) {
  if (!data || offset >= size || bytes == 0) return {nullptr, 0};
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t begin = offset / page * page, end = std::min(size, offset + bytes);
  return {static_cast<char*>(data) + begin, end - begin};
}

}  // namespace

void MappedFile::release_range(std::size_t offset, std::size_t bytes) const {
  const auto [at, length] = page_range(data_, size_, offset, bytes);
  if (at) ::madvise(at, length, MADV_DONTNEED);
}

void MappedFile::prefetch_range(std::size_t offset, std::size_t bytes) const {
  const auto [at, length] = page_range(data_, size_, offset, bytes);
  if (at) ::madvise(at, length, MADV_WILLNEED);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace ddp_embed
