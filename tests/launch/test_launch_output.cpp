// Line assembly and failure reports, without starting anything.
#include <gtest/gtest.h>

#include <csignal>

#include "launch/failure_report.h"
#include "launch/output_mux.h"

namespace ddp_embed::launch {
namespace {

struct Piece {
  std::string text;
  bool newline;
  bool operator==(const Piece& o) const { return text == o.text && newline == o.newline; }
};

std::vector<Piece> split(const std::vector<std::string>& chunks, size_t max_line, bool finish = true) {
  LineSplitter splitter(max_line);
  std::vector<Piece> pieces;
  auto emit = [&](const char* d, size_t n, bool newline) { pieces.push_back({std::string(d, n), newline}); };
  for (const auto& c : chunks) splitter.feed(c.data(), c.size(), emit);
  if (finish) splitter.finish(emit);
  return pieces;
}

TEST(LaunchOutput, SplitterReassemblesLinesAcrossReads) {
  using P = std::vector<Piece>;
  EXPECT_EQ(split({"ab", "c\nde", "f\n"}, 100), (P{{"abc", true}, {"def", true}}));
  EXPECT_EQ(split({"\n\nx\n"}, 100), (P{{"", true}, {"", true}, {"x", true}}));
  EXPECT_EQ(split({"tail"}, 100), (P{{"tail", false}}));  // flushed at EOF
  EXPECT_EQ(split({"tail"}, 100, false), P{});               // held until then
}

TEST(LaunchOutput, SplitterCapsLongLines) {
  using P = std::vector<Piece>;
  EXPECT_EQ(split({"abcdefghij\n"}, 4), (P{{"abcd", false}, {"efgh", false}, {"ij", true}}));
  // A line of exactly the cap is one line, even when its newline comes in a later read.
  EXPECT_EQ(split({"abcd", "\n"}, 4), (P{{"abcd", true}}));
  EXPECT_EQ(split({"ab", "cdef", "g\n"}, 4), (P{{"abcd", false}, {"efg", true}}));
  LineSplitter splitter(4);
  splitter.feed("abcdefg\n", 8, [](const char*, size_t, bool) {});
  EXPECT_TRUE(splitter.split_a_line());
}

WorkerExit exit_with(int rank, bool signaled, int value, WorkerExit::Fate fate, int launcher_signal = 0) {
  WorkerExit e;
  e.rank = rank;
  e.local_rank = rank;
  e.pid = 1000 + rank;
  e.signaled = signaled;
  (signaled ? e.signal : e.exit_code) = value;
  e.fate = fate;
  e.launcher_signal = launcher_signal;
  e.time = "2026-01-01T00:00:00.000Z";
  return e;
}

TEST(LaunchOutput, ReportDescribesExitsAndSignals) {
  using F = WorkerExit::Fate;
  EXPECT_EQ(describe_exit(exit_with(0, false, 7, F::failed)), "exit code 7");
  EXPECT_EQ(describe_exit(exit_with(0, true, SIGKILL, F::failed)),
            "SIGKILL (9) \xE2\x80\x94 killed, possibly out of memory");
  EXPECT_EQ(describe_exit(exit_with(0, true, SIGSEGV, F::failed)),
            "SIGSEGV (11) \xE2\x80\x94 segmentation fault");
  WorkerExit killed = exit_with(0, true, SIGKILL, F::stopped, SIGKILL);
  killed.kill_reason = "second SIGINT";
  EXPECT_EQ(describe_exit(killed), "SIGKILL (9) \xE2\x80\x94 killed by ddp-launch (second SIGINT)");
  EXPECT_EQ(describe_exit(exit_with(0, true, SIGTERM, F::stopped, SIGTERM)),
            "SIGTERM (15) \xE2\x80\x94 terminated (sent by ddp-launch)");
  EXPECT_EQ(exit_status_of(exit_with(0, true, SIGKILL, F::failed)), 137);
  EXPECT_EQ(exit_status_of(exit_with(0, false, 3, F::failed)), 3);
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(signal_name(63), "signal 63");
}

FailureReport sample_report() {
  using F = WorkerExit::Fate;
  FailureReport r;
  r.run_id = "run\"1";
  r.host = "host-a";
  r.attempt = 2;
  r.workers = {exit_with(0, true, SIGTERM, F::stopped, SIGTERM), exit_with(1, false, 7, F::failed),
               exit_with(2, false, 0, F::finished)};
  r.workers[1].last_lines = {"loss 0.5", "bad \xff byte\tand \"quotes\""};
  r.root_cause = 1;
  return r;
}

TEST(LaunchOutput, TextReportNamesTheRootCauseFirst) {
  std::string text = format_failure_report(sample_report());
  EXPECT_NE(text.find("root cause : rank 1 (local rank 1) on host host-a, pid 1001"), std::string::npos) << text;
  EXPECT_NE(text.find("exit       : exit code 7"), std::string::npos) << text;
  EXPECT_NE(text.find("    | loss 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("stopped    : rank 0 (local rank 0, pid 1000): SIGTERM (15)"), std::string::npos) << text;
  EXPECT_NE(text.find("finished   : rank 2"), std::string::npos) << text;
  EXPECT_NE(text.find("exit status 7 (rank 1's)"), std::string::npos) << text;
  EXPECT_LT(text.find("root cause"), text.find("stopped"));

  std::string line = format_restart_line(sample_report(), 1, 3);
  EXPECT_EQ(std::count(line.begin(), line.end(), '\n'), 1);
  EXPECT_NE(line.find("attempt 2 failed: rank 1"), std::string::npos) << line;
  EXPECT_NE(line.find("(restart 1 of 3)"), std::string::npos) << line;
}

TEST(LaunchOutput, JsonReportHasTheSameFactsAndIsEscaped) {
  std::string json = format_failure_json(sample_report());
  EXPECT_NE(json.find("\"run_id\": \"run\\\"1\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"attempt\": 2"), std::string::npos);
  EXPECT_NE(json.find("\"exit_status\": 7"), std::string::npos);
  EXPECT_NE(json.find("\"root_cause\": {\n    \"rank\": 1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"signal_name\": \"SIGTERM\""), std::string::npos);
  EXPECT_NE(json.find("\"fate\": \"stopped by ddp-launch\""), std::string::npos);
  // Invalid UTF-8 becomes U+FFFD, control characters and quotes are escaped.
  EXPECT_NE(json.find("\"bad \xEF\xBF\xBD byte\\tand \\\"quotes\\\"\""), std::string::npos) << json;
  EXPECT_EQ(json.find('\xff'), std::string::npos);
}

TEST(LaunchOutput, ReportTimestampIsUtcIso8601) {
  std::string t = utc_timestamp_now();
  ASSERT_EQ(t.size(), 24u) << t;
  EXPECT_EQ(t[10], 'T');
  EXPECT_EQ(t.back(), 'Z');
}

}  // namespace
}  // namespace ddp_embed::launch
