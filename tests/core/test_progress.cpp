// The console progress of util/progress.h: durations, the moving average of step times,
// the line's layout, the redraw rate, and how the status line and log lines share a stream.
#include "util/progress.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace ddp_embed {
namespace {

TEST(Progress, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(42), "42s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(185), "3m05s");
  EXPECT_EQ(format_duration(3600 + 2 * 60 + 30), "1h02m");
  EXPECT_EQ(format_duration(50 * 3600), "50h00m");
  EXPECT_EQ(format_duration(-1), "?");
  EXPECT_EQ(format_duration(std::nan("")), "?");
  EXPECT_EQ(format_duration(INFINITY), "?");
}

TEST(Progress, MovingAverageSkipsWarmupAndForgetsOldSteps) {
  RecentStepTimes times(/*warmup=*/2, /*window=*/3);
  EXPECT_FALSE(times.ready());
  EXPECT_TRUE(std::isnan(times.eta_seconds(10)));
  times.add(30.0);  // warm-up: first allocations, not counted
  times.add(20.0);
  EXPECT_FALSE(times.ready());
  times.add(1.0);
  EXPECT_TRUE(times.ready());
  EXPECT_DOUBLE_EQ(times.mean_seconds(), 1.0);
  times.add(2.0);
  times.add(3.0);
  EXPECT_DOUBLE_EQ(times.mean_seconds(), 2.0);
  times.add(4.0);  // the window keeps 2, 3, 4
  EXPECT_DOUBLE_EQ(times.mean_seconds(), 3.0);
  EXPECT_DOUBLE_EQ(times.eta_seconds(100), 300.0);
  EXPECT_DOUBLE_EQ(times.eta_seconds(0), 0.0);
  EXPECT_DOUBLE_EQ(times.eta_seconds(-5), 0.0);
}

TEST(Progress, LineShowsStepPercentDetailsElapsedAndEta) {
  ProgressView v{"step", 120, 1000, "loss 0.6473 | 402 pairs/s", 65, 140};
  const std::string line = format_progress_line(v, 100);
  EXPECT_EQ(line.rfind("step 120/1000  12% [", 0), 0u) << line;
  EXPECT_NE(line.find("] loss 0.6473 | 402 pairs/s | 1m05s elapsed | ETA 2m20s"), std::string::npos) << line;
  EXPECT_LE(line.size(), 100u);
  // Unknown times read "?".
  v.eta_s = std::nan("");
  EXPECT_NE(format_progress_line(v, 100).find("ETA ?"), std::string::npos);
}

TEST(Progress, LineFitsTheWidth) {
  const ProgressView huge{"step", 123456789012, 987654321098, std::string(300, 'x'), 1e7, 1e9};
  for (size_t width : {20u, 60u, 79u, 100u}) EXPECT_LE(format_progress_line(huge, width).size(), width);
  const ProgressView small{"encode", 5, 10, "", 1, 1};
  const std::string line = format_progress_line(small, 100);
  EXPECT_LE(line.size(), 100u);
  EXPECT_NE(line.find(" 50% [##########----------]"), std::string::npos) << line;
  // Narrow: the bar goes before anything is cut.
  EXPECT_EQ(format_progress_line(small, 40), "encode 5/10  50% 1s elapsed | ETA 1s");
  // An unknown total: no percent, no bar.
  EXPECT_EQ(format_progress_line(ProgressView{"step", 12, 0, "", 1, 1}, 100), "step 12/0 1s elapsed | ETA 1s");
}

TEST(Progress, RedrawAtMostOncePerInterval) {
  RedrawLimiter limiter(std::chrono::milliseconds(100));
  const auto t0 = RedrawLimiter::Clock::time_point{} + std::chrono::hours(1);
  EXPECT_TRUE(limiter.due(t0));
  EXPECT_FALSE(limiter.due(t0 + std::chrono::milliseconds(50)));
  EXPECT_FALSE(limiter.due(t0 + std::chrono::milliseconds(99)));
  EXPECT_TRUE(limiter.due(t0 + std::chrono::milliseconds(100)));
  EXPECT_FALSE(limiter.due(t0 + std::chrono::milliseconds(150)));
}

std::string contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  return out;
}

TEST(Progress, StatusLineErasesItselfAroundLogLines) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  StatusLine status(f);
  const auto t0 = StatusLine::Clock::time_point{} + std::chrono::hours(1);
  status.update("ignored while disabled", t0);
  status.print_above([&] { std::fputs("log 1\n", f); });
  status.enable(true);
  status.update("A", t0);
  status.update("B", t0 + std::chrono::milliseconds(10));  // too soon: kept, not drawn
  status.print_above([&] { std::fputs("log 2\n", f); });  // erase, log, draw the latest text
  status.clear();
  status.print_above([&] { std::fputs("log 3\n", f); });  // nothing left to redraw
  EXPECT_EQ(contents(f), "log 1\n\rA\033[K\r\033[Klog 2\n\rB\033[K\r\033[Klog 3\n");
  std::fclose(f);
}

TEST(Progress, WidthWithoutATerminalIs100) {
  FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(StatusLine(f).width(), 100u);
  std::fclose(f);
}

}  // namespace
}  // namespace ddp_embed
