// Progress on the console: the ETA arithmetic and the one updating status line.
//
// On a terminal, a long job (training, encode) keeps one line at the bottom of stderr up
// to date: "step 120/1000  12% [###-----] loss 0.6473 | 402 pairs/s | 1m05s elapsed | ETA
// 2m20s". It is redrawn in place (carriage return, then ESC[K to clear the rest), at most
// ten times a second, and the console log sink (util/log.cpp) erases it before a log line
// and redraws it after, so log lines are never cut into. Off a terminal (batch jobs,
// ddp-launch's pipes) nothing of this is written: the periodic log lines carry the ETA.
//
// The pieces that decide what is shown (durations, the moving average of step times, the
// line's layout, the redraw rate) are plain functions and classes so that they can be
// tested without a terminal or a clock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <mutex>
#include <string>

namespace ddp_embed {

// "1h02m", "3m05s", "42s"; "?" for a negative or non-finite number of seconds.
std::string format_duration(double seconds);

// The mean of the most recent step times, leaving out the first `warmup` steps (the
// first steps of a process allocate memory and warm caches and are much slower than
// the rest). Callers add only the time of the step itself, not of evaluation or
// checkpoint pauses between steps.
class RecentStepTimes {
 public:
  RecentStepTimes(size_t warmup, size_t window);
  void add(double seconds);
  bool ready() const { return !recent_.empty(); }
  // The mean over the window; NaN before the first step after the warm-up.
  double mean_seconds() const;
  // Estimated time for `remaining` more steps; NaN while not ready().
  double eta_seconds(int64_t remaining) const;

 private:
  size_t warmup_left_;
  size_t window_;
  std::deque<double> recent_;
  double sum_ = 0;
};

// What one status line shows. `details` is the job's own part ("loss 0.6473 | 402
// pairs/s"); negative or NaN times show as "?".
struct ProgressView {
  std::string label;  // "step", "encode"
  int64_t done = 0;
  int64_t total = 0;
  std::string details;
  double elapsed_s = 0;
  double eta_s = 0;
};

// The line, at most `width` columns (one column per byte: the line is ASCII). The bar
// shrinks first, then goes; what still does not fit is cut.
std::string format_progress_line(const ProgressView& view, size_t width);

// At most one redraw per `interval`; the first is always due.
class RedrawLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit RedrawLimiter(Clock::duration interval) : interval_(interval) {}
  bool due(Clock::time_point now);

 private:
  Clock::duration interval_;
  Clock::time_point last_{};
  bool drawn_ = false;
};

// The one status line at the bottom of a terminal. Disabled (every call a no-op) until
// enable(); the console log sink and the jobs that report progress share the process's
// instance, console_status().
class StatusLine {
 public:
  using Clock = RedrawLimiter::Clock;
  explicit StatusLine(FILE* out = stderr);

  void enable(bool on);
  bool enabled() const;
  // The width a line may take: the terminal's columns less one (a line that fills the
  // last column wraps on some terminals, and \r would then return to the wrong row),
  // at most 100; 100 when the size is unknown.
  size_t width() const;

  // Sets the text; draws it now if the redraw rate allows, else at the next redraw.
  void update(const std::string& text, Clock::time_point now = Clock::now());
  // Erases the line from the screen and forgets the text (the job is over).
  void clear();
  // Erases the line, runs `print` (which writes whole lines to the same stream), draws
  // the line again below them.
  void print_above(const std::function<void()>& print);

 private:
  void erase_locked();
  void draw_locked();

  FILE* out_;
  mutable std::mutex mutex_;
  bool enabled_ = false;
  bool shown_ = false;
  std::string text_;
  RedrawLimiter limiter_{std::chrono::milliseconds(100)};
};

// The process's status line, on stderr.
StatusLine& console_status();

// True when stderr is an interactive terminal that understands ESC[K (not TERM=dumb).
bool stderr_is_terminal();

// Clears the console status line when a job ends, also by an exception, so that an
// error message starts on a clean line.
class StatusLineScope {
 public:
  StatusLineScope() = default;
  StatusLineScope(const StatusLineScope&) = delete;
  StatusLineScope& operator=(const StatusLineScope&) = delete;
  ~StatusLineScope() { console_status().clear(); }
};

}  // namespace ddp_embed
