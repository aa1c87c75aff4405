// Fail fast, failure reports and restarts, end to end.
#include <gtest/gtest.h>

#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {


TEST(LaunchFailure, FirstFailureStopsTheOthersAndIsReported) {
  TempDir dir;
  // Every rank reaches the barrier, then rank 1 fails while 0 and 2 sleep "forever".
  RunResult r = run_launcher(dir, {"--nproc", "3", "--master-port", "0", "--log-dir", dir / "logs", kWorker,
                                   "--say", "step 1 done", "--barrier", dir / "barrier.%r", "--exit-on-rank",
                                   "1:7", "--sleep", "1000"},
                             {{"OMP_NUM_THREADS", "1"}});
  EXPECT_EQ(r.status, 7) << r.err;
  EXPECT_NE(r.err.find("root cause : rank 1 (local rank 1) on host "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exit       : exit code 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("    | step 1 done\n    | test-worker: rank 1 exits with 7"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped    : rank 0 (local rank 0, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(": SIGTERM (15)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("exit status 7 (rank 1's)"), std::string::npos) << r.err;
  // The worker's own stderr line also reached the console, prefixed.
  EXPECT_NE(r.err.find("[rank 1] test-worker: rank 1 exits with 7\n"), std::string::npos) << r.err;

  std::string json = read_file(dir / "logs/attempt0/failure.json");
  EXPECT_NE(json.find("\"root_cause\": {\n    \"rank\": 1,"), std::string::npos) << json;
  EXPECT_NE(json.find("\"exit_code\": 7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"exit_status\": 7"), std::string::npos) << json;
  EXPECT_NE(json.find("\"test-worker: rank 1 exits with 7\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"fate\": \"stopped by ddp-launch\""), std::string::npos) << json;
}

TEST(LaunchFailure, WorkerKilledBySigkillGives137AndNamesTheSignal) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc", "2", "--master-port", "0", kWorker, "--barrier",
                                   dir / "barrier.%r", "--kill-self-on-rank", "0:9", "--sleep", "1000"},
                             {{"OMP_NUM_THREADS", "1"}});
  EXPECT_EQ(r.status, 137) << r.err;
  EXPECT_NE(r.err.find("root cause : rank 0 (local rank 0)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGKILL (9) \xE2\x80\x94 killed, possibly out of memory"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped    : rank 1"), std::string::npos) << r.err;
}

TEST(LaunchFailure, WorkerIgnoringSigtermIsKilledAfterGrace) {
  TempDir dir;
  // Rank 1 fails; rank 0 ignores the SIGTERM that follows and must get SIGKILL.
  RunResult r = run_launcher(dir, {"--nproc", "2", "--master-port", "0", "--grace", "0.5", kWorker,
                                   "--ignore-sigterm", "--barrier", dir / "barrier.%r", "--exit-on-rank", "1:5",
                                   "--sleep", "1000"},
                             {{"OMP_NUM_THREADS", "1"}});
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_NE(r.err.find("rank 0 still running 0.5 s after being asked to stop; sending SIGKILL"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("stopped    : rank 0 (local rank 0, pid "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SIGKILL (9) \xE2\x80\x94 killed by ddp-launch"), std::string::npos) << r.err;
}

TEST(LaunchFailure, RestartsUntilAnAttemptSucceeds) {
  TempDir dir;
  const std::string logs = dir / "logs";
  RunResult r = run_launcher(dir, {"--nproc", "2", "--master-port", "0", "--max-restarts", "2", "--log-dir", logs,
                                   kWorker, "--print-env", "--barrier", dir / "barrier.%a.%r", "--fail-on-attempt",
                                   "0", "--fail-on-attempt", "1"},
                             {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(count_of(r.err, "restarting all 2 workers"), 2u) << r.err;
  EXPECT_NE(r.err.find("ddp-launch: attempt 0 failed: rank "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("ended with exit code 3; restarting all 2 workers (restart 1 of 2)"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("ddp-launch: attempt 1 failed: rank "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(restart 2 of 2)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("worker failure"), std::string::npos) << "no full report after a restart";
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string folder = logs + "/attempt" + std::to_string(attempt);
    EXPECT_EQ(file_exists(folder + "/failure.json"), attempt < 2) << folder;
    for (int rank = 0; rank < 2; ++rank) {
      std::string log = read_file(folder + "/rank" + std::to_string(rank) + ".log");
      EXPECT_NE(log.find("env RESTART_COUNT=" + std::to_string(attempt) + "\n"), std::string::npos) << log;
      EXPECT_NE(log.find("env TORCHELASTIC_RESTART_COUNT=" + std::to_string(attempt) + "\n"), std::string::npos);
      EXPECT_NE(log.find("env MAX_RESTARTS=2\n"), std::string::npos);
    }
  }
  EXPECT_FALSE(file_exists(logs + "/attempt3"));
  EXPECT_NE(read_file(logs + "/attempt1/failure.json").find("\"attempt\": 1"), std::string::npos);
}

TEST(LaunchFailure, GivesUpWhenRestartsRunOut) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--max-restarts", "1", "--log-dir", dir / "logs", "--master-port", "0",
                                   kWorker, "--exit", "4"});
  EXPECT_EQ(r.status, 4) << r.err;
  EXPECT_EQ(count_of(r.err, "(restart 1 of 1)"), 1u) << r.err;
  EXPECT_NE(r.err.find("worker failure (run "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", attempt 1) ====="), std::string::npos) << r.err;
  EXPECT_TRUE(file_exists(dir / "logs/attempt0/failure.json"));
  EXPECT_TRUE(file_exists(dir / "logs/attempt1/failure.json"));
  EXPECT_FALSE(file_exists(dir / "logs/attempt2"));
}

}  // namespace
}  // namespace ddp_embed::launch::testing
