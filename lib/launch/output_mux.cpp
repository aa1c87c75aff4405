// Line assembly and console/log writing for the workers' output. The launcher is the
// only writer of its stdout and stderr, and it writes each prefixed line with one
// write() call, so lines of different workers can never interleave.
#include "launch/output_mux.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddp_embed::launch {
namespace {

// The console: the stream numbers (kStdout 1, kStderr 2) are its file descriptors.
bool g_console_gone[3] = {false, false, false};  // reader went away (EPIPE)

}  // namespace

void LineSplitter::feed(const char* data, size_t size, const Emit& emit) {
  while (size > 0) {
    const char* newline = static_cast<const char*>(memchr(data, '\n', size));
    size_t take = newline ? static_cast<size_t>(newline - data) : size;
    // Never hold more than max_line_ bytes: emit a full piece of an overlong line.
    if (pending_.size() + take > max_line_) {
      size_t room = max_line_ - pending_.size();
      pending_.append(data, room);
      emit(pending_.data(), pending_.size(), false);
      pending_.clear();
      split_a_line_ = true;
      data += room;
      size -= room;
      continue;
    }
    if (!newline) {
      pending_.append(data, size);
      return;
    }
    if (pending_.empty()) {
      emit(data, take, true);
    } else {
      pending_.append(data, take);
      emit(pending_.data(), pending_.size(), true);
      pending_.clear();
    }
    data += take + 1;
    size -= take + 1;
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (!pending_.empty()) emit(pending_.data(), pending_.size(), false);
  pending_.clear();
}

bool write_whole(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

WorkerOutput::WorkerOutput(int rank, int log_fd, size_t recent_lines)
    : rank_(rank), log_fd_(log_fd), prefix_("[rank " + std::to_string(rank) + "] "),
      recent_limit_(recent_lines) {}

WorkerOutput::~WorkerOutput() {
  if (log_fd_ >= 0) close(log_fd_);
}

void WorkerOutput::on_data(int stream, const char* data, size_t size) {
  splitters_[stream - 1].feed(data, size, [&](const char* d, size_t n, bool newline) {
    emit(stream, d, n, newline);
  });
}

void WorkerOutput::on_eof(int stream) {
  splitters_[stream - 1].finish([&](const char* d, size_t n, bool newline) {
    emit(stream, d, n, newline);
  });
}

void WorkerOutput::emit(int stream, const char* data, size_t size, bool newline) {
  // The log gets exactly the bytes the worker wrote.
  if (log_fd_ >= 0) {
    line_.assign(data, size);
    if (newline) line_ += '\n';
    if (!write_whole(log_fd_, line_)) {
      close(log_fd_);
      log_fd_ = -1;
    }
  }

  // The console gets one whole prefixed line per write().
  if (!g_console_gone[stream]) {
    line_.assign(prefix_);
    line_.append(data, size);
    line_ += '\n';
    if (!write_whole(stream, line_)) g_console_gone[stream] = true;
  }
  if (!newline && !told_about_split_[stream - 1] && splitters_[stream - 1].split_a_line()) {
    told_about_split_[stream - 1] = true;
    std::string note = "ddp-launch: rank " + std::to_string(rank_) + " wrote a line longer than " +
                       std::to_string(kMaxLineBytes) + " bytes to " +
                       (stream == kStdout ? "stdout" : "stderr") +
                       "; the console shows it split into lines of that length\n";
    if (!g_console_gone[kStderr]) write_whole(kStderr, note);
  }

  if (recent_limit_ > 0) {
    constexpr size_t kRecentLineBytes = 1000;
    recent_.emplace_back(data, size < kRecentLineBytes ? size : kRecentLineBytes);
    if (size > kRecentLineBytes) recent_.back() += "...";
    if (recent_.size() > recent_limit_) recent_.pop_front();
  }
}

}  // namespace ddp_embed::launch
