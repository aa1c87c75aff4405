// Internal to the launcher: the workers' output, line by line, to the console (prefixed
// "[rank R] "), to the log file (raw) and to the failure report (the last lines).
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <string>

namespace ddp_embed::launch {

// Longest line shown as one console line; longer ones are split (and we say so once).
inline constexpr size_t kMaxLineBytes = 64 * 1024;

// Cuts a byte stream into lines. `emit(data, size, newline)` gets each complete line
// without its '\n' (newline = true), each kMaxLineBytes piece of an overlong line, and
// at finish() the unterminated tail (both newline = false).
class LineSplitter {
 public:
  using Emit = std::function<void(const char* data, size_t size, bool newline)>;
  explicit LineSplitter(size_t max_line = kMaxLineBytes) : max_line_(max_line) {}
  void feed(const char* data, size_t size, const Emit& emit);
  void finish(const Emit& emit);
  bool split_a_line() const { return split_a_line_; }

 private:
  size_t max_line_;
  std::string pending_;
  bool split_a_line_ = false;
};

// Writes all of `text` to `fd` with as few write() calls as the kernel allows (one for
// anything a pipe or terminal takes at once). Returns false once the reader is gone.
bool write_whole(int fd, const std::string& text);

// One worker's two output streams.
class WorkerOutput {
 public:
  static constexpr int kStdout = 1;
  static constexpr int kStderr = 2;

  // `log_fd` (owned; -1 for none) receives the raw bytes of both streams.
  WorkerOutput(int rank, int log_fd, size_t recent_lines = 20);
  ~WorkerOutput();
  WorkerOutput(const WorkerOutput&) = delete;
  WorkerOutput& operator=(const WorkerOutput&) = delete;

  void on_data(int stream, const char* data, size_t size);
  void on_eof(int stream);

  // The last lines of both streams, oldest first (each cut to 1000 bytes).
  const std::deque<std::string>& recent() const { return recent_; }

 private:
  void emit(int stream, const char* data, size_t size, bool newline);

  int rank_;
  int log_fd_;
  std::string prefix_;
  size_t recent_limit_;
  std::deque<std::string> recent_;
  LineSplitter splitters_[2];
  bool told_about_split_[2] = {false, false};
  std::string line_;  // reused buffer for the prefixed console line
};

}  // namespace ddp_embed::launch
