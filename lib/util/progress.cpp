#include "util/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace ddp_embed {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s % 3600) / 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

// ---- the moving average of step times ---------------------------------------------------

RecentStepTimes::RecentStepTimes(size_t warmup, size_t window)
    : warmup_left_(warmup), window_(std::max<size_t>(1, window)) {}

void RecentStepTimes::add(double seconds) {
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  recent_.push_back(seconds);
  sum_ += seconds;
  if (recent_.size() > window_) {
    sum_ -= recent_.front();
    recent_.pop_front();
  }
}

double RecentStepTimes::mean_seconds() const {
  if (recent_.empty()) return std::numeric_limits<double>::quiet_NaN();
  return sum_ / double(recent_.size());
}

double RecentStepTimes::eta_seconds(int64_t remaining) const {
  return mean_seconds() * double(std::max<int64_t>(0, remaining));
}

// ---- the line ---------------------------------------------------------------------------

namespace {

std::string percent(int64_t done, int64_t total) {
  const long pct = long(100.0 * double(std::clamp<int64_t>(done, 0, total)) / double(total));
  char buf[8];
  std::snprintf(buf, sizeof buf, "%3ld%%", pct);
  return buf;
}

// "[#####-----]" with `inner` cells.
std::string bar(int64_t done, int64_t total, size_t inner) {
  const double fraction = double(std::clamp<int64_t>(done, 0, total)) / double(total);
  const size_t filled = size_t(fraction * double(inner));
  return "[" + std::string(filled, '#') + std::string(inner - filled, '-') + "]";
}

}  // namespace

std::string format_progress_line(const ProgressView& v, size_t width) {
  const bool known_total = v.total > 0;
  std::string head = v.label + " " + std::to_string(v.done) + "/" + std::to_string(v.total);
  if (known_total) head += " " + percent(v.done, v.total);
  std::string tail = v.details.empty() ? "" : " " + v.details + " |";
  tail += " " + format_duration(v.elapsed_s) + " elapsed | ETA " + format_duration(v.eta_s);

  constexpr size_t kMaxBar = 20, kMinBar = 8;
  const size_t without_bar = head.size() + tail.size();
  std::string line;
  if (known_total && without_bar + 1 + kMinBar + 2 <= width) {
    const size_t inner = std::min(kMaxBar, width - without_bar - 3);
    line = head + " " + bar(v.done, v.total, inner) + tail;
  } else {
    line = head + tail;
  }
  if (line.size() > width) line.resize(width);
  return line;
}

bool RedrawLimiter::due(Clock::time_point now) {
  if (drawn_ && now - last_ < interval_) return false;
  drawn_ = true;
  last_ = now;
  return true;
}

// ---- the status line on the terminal ------------------------------------------------------

namespace {
constexpr const char* kEraseLine = "\r\033[K";  // to the line's start, clear to its end
constexpr size_t kMaxWidth = 100;
}  // namespace

StatusLine::StatusLine(FILE* out) : out_(out) {}

void StatusLine::enable(bool on) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!on) erase_locked();
  enabled_ = on;
}

bool StatusLine::enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enabled_;
}

size_t StatusLine::width() const {
  winsize size{};
  if (::ioctl(::fileno(out_), TIOCGWINSZ, &size) == 0 && size.ws_col > 1)
    return std::min<size_t>(kMaxWidth, size_t(size.ws_col) - 1);
  return kMaxWidth;
}

void StatusLine::update(const std::string& text, Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!enabled_) return;
  text_ = text;
  if (limiter_.due(now)) draw_locked();
}

void StatusLine::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_locked();
  text_.clear();
}

void StatusLine::print_above(const std::function<void()>& print) {
  std::lock_guard<std::mutex> lock(mutex_);
  erase_locked();
  print();
  if (enabled_ && !text_.empty()) draw_locked();
}

void StatusLine::erase_locked() {
  if (!shown_) return;
  std::fputs(kEraseLine, out_);
  std::fflush(out_);
  shown_ = false;
}

// The text overwrites the old line from its start; ESC[K removes what a longer old line
// left to the right.
void StatusLine::draw_locked() {
  std::fputs("\r", out_);
  std::fputs(text_.c_str(), out_);
  std::fputs("\033[K", out_);
  std::fflush(out_);
  shown_ = true;
}

StatusLine& console_status() {
  static StatusLine line(stderr);
  return line;
}

bool stderr_is_terminal() {
  if (!::isatty(STDERR_FILENO)) return false;
  const char* term = std::getenv("TERM");
  return !(term && std::strcmp(term, "dumb") == 0);
}

}  // namespace ddp_embed
