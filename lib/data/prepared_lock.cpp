// PreparedFolderLock (data/prepared.h): flock(2) on DIR.lock.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>

#include <spdlog/spdlog.h>

#include "data/prepared.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

// Who holds the lock, from what its prepare wrote into the file: "pid 4242 on host-a",
// else a description without one (a prepare may not have written it yet).
std::string lock_holder(int fd) {
  char text[256] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  std::string line(text, n > 0 ? size_t(n) : 0);
  line = line.substr(0, line.find('\n'));
  const size_t space = line.find(' ');
  if (space == std::string::npos || space == 0 || line.find_first_not_of("0123456789") != space)
    return "a process that wrote no pid into it";
  return "pid " + line.substr(0, space) + " on " + line.substr(space + 1);
}

std::string this_process() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "unknown-host");
  return std::to_string(::getpid()) + " " + host + "\n";
}

// Whether `fd` is still the file at `path`: a prepare that ends removes DIR.lock while it
// holds it, so a lock taken on the file it removed locks nothing the next one would see.
bool still_at(int fd, const std::string& path) {
  struct stat held {}, named {};
  return ::fstat(fd, &held) == 0 && ::stat(path.c_str(), &named) == 0 && held.st_dev == named.st_dev &&
         held.st_ino == named.st_ino;
}

}  // namespace

PreparedFolderLock::PreparedFolderLock(const std::string& dir, Mode mode)
    : path_(folder_path(dir) + ".lock"), mode_(mode) {
  const std::string folder = folder_path(dir);
  if (mode == Mode::Prepare && fs::path(folder).has_parent_path()) {  // a prepare makes the folders above DIR
    std::error_code ec;
    fs::create_directories(fs::path(folder).parent_path(), ec);
  }
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = mode == Mode::Prepare ? ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)
                                         : ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && mode == Mode::Read) return;  // no prepare has it (or it cannot be read): nothing to wait for
    if (fd < 0)
      throw DataError("cannot create " + path_ + ", the lock a prepare of " + folder + " holds: " +
                      std::strerror(errno) + " (the folder beside it must be writable)");
    if (::flock(fd, (mode == Mode::Prepare ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
      const int err = errno;
      if (err != EWOULDBLOCK) {  // a file system without locks: a prepare goes on, warned
        ::close(fd);
        if (mode == Mode::Prepare)
          spdlog::warn("prepare: cannot lock {} ({}): a second prepare into {} at the same time would not be stopped",
                       path_, std::strerror(err), folder);
        return;
      }
      const std::string holder = lock_holder(fd);
      // Held exclusively (a prepare) or shared (runs opening the folder): a shared probe tells.
      const bool runs_only = mode == Mode::Prepare && ::flock(fd, LOCK_SH | LOCK_NB) == 0;
      ::close(fd);
      if (runs_only)
        throw DataError(folder + " is being opened by a run right now (it holds " + path_ +
                        " while it reads the folder), and a prepare would replace the folder under it: prepare "
                        "again once the run has started training, or prepare into another folder");
      if (mode == Mode::Prepare)
        throw DataError(folder + " is being prepared by another embed-train prepare (" + holder + " holds " + path_ +
                        "): wait for it to finish, or prepare into another folder");
      throw DataError(folder + " is being prepared right now (" + holder + " holds " + path_ +
                      "): wait for that prepare to finish, then run again");
    }
    if (!still_at(fd, path_)) {  // taken on a file its prepare just removed: try the one there now
      ::close(fd);
      continue;
    }
    fd_ = fd;
    if (mode == Mode::Prepare) {
      const std::string me = this_process();
      if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) != ssize_t(me.size()))
        spdlog::warn("prepare: cannot write this process's pid into {}: {}", path_, std::strerror(errno));
    }
    return;
  }
  throw DataError("cannot lock " + path_ + ": it was replaced 100 times while this process tried to take it");
}

PreparedFolderLock::~PreparedFolderLock() {
  if (fd_ < 0) return;
  // Removed while still held: a process that opened it before waits on a file nobody else
  // will open again, and finds that out (still_at) once it has the lock.
  if (mode_ == Mode::Prepare) ::unlink(path_.c_str());
  ::close(fd_);
}

}  // namespace ddp_embed
