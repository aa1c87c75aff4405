#include "util/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

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

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace ddp_embed
