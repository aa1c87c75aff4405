// Signals to the launcher, and the launcher's own death, end to end. Every wait is for
// an event (a file appearing or growing, a process ending); timeouts are a safety net.
#include <gtest/gtest.h>

#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {


bool all_files_exist(const TempDir& dir, const std::string& prefix, int n) {
  for (int r = 0; r < n; ++r)
    if (!file_exists(dir / (prefix + std::to_string(r)))) return false;
  return true;
}

bool all_recorded(const TempDir& dir, int n, const std::string& signal_name) {
  for (int r = 0; r < n; ++r)
    if (read_file(dir / ("signals." + std::to_string(r))).find(signal_name + "\n") == std::string::npos)
      return false;
  return true;
}

std::vector<std::string> recording_worker(const TempDir& dir, int nproc, const std::string& grace,
                                          std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--nproc", std::to_string(nproc), "--master-port", "0", "--grace", grace,
                                   kWorker, "--record-signals", dir / "signals.%r", "--ready-file",
                                   dir / "ready.%r", "--sleep", "1000"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

TEST(LaunchSignals, Usr1Usr2AndHupReachEveryWorker) {
  TempDir dir;
  Launcher launcher(dir, recording_worker(dir, 3, "600"), {{"OMP_NUM_THREADS", "1"}});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "ready.", 3); })) << launcher.err();

  launcher.send(SIGUSR1);
  ASSERT_TRUE(wait_until([&] { return all_recorded(dir, 3, "SIGUSR1"); })) << launcher.err();
  launcher.send(SIGUSR2);
  ASSERT_TRUE(wait_until([&] { return all_recorded(dir, 3, "SIGUSR2"); })) << launcher.err();
  // SIGHUP is a stop request; these workers exit 0 on it, so the launcher exits 0.
  launcher.send(SIGHUP);
  EXPECT_EQ(launcher.wait(), 0) << launcher.err();
  EXPECT_TRUE(all_recorded(dir, 3, "SIGHUP"));
  EXPECT_NE(launcher.err().find("got SIGHUP; passing it to 3 workers"), std::string::npos) << launcher.err();
}

TEST(LaunchSignals, ForwardedSigtermWithCleanExitsGivesZero) {
  TempDir dir;
  Launcher launcher(dir, recording_worker(dir, 2, "600"), {{"OMP_NUM_THREADS", "1"}});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "ready.", 2); })) << launcher.err();
  launcher.send(SIGTERM);
  EXPECT_EQ(launcher.wait(), 0) << launcher.err();
  EXPECT_TRUE(all_recorded(dir, 2, "SIGTERM"));
}

TEST(LaunchSignals, SigtermEscalatesToSigkillAfterGrace) {
  TempDir dir;
  Launcher launcher(dir, recording_worker(dir, 2, "1", {"--ignore-sigterm"}), {{"OMP_NUM_THREADS", "1"}});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "ready.", 2); })) << launcher.err();
  launcher.send(SIGTERM);
  EXPECT_EQ(launcher.wait(), 137) << launcher.err();
  EXPECT_TRUE(all_recorded(dir, 2, "SIGTERM")) << "the workers saw SIGTERM before SIGKILL";
  std::string err = launcher.err();
  EXPECT_NE(err.find("rank 0, rank 1 still running 1 s after being asked to stop; sending SIGKILL"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("stopped on SIGTERM; exit status 137"), std::string::npos) << err;
}

TEST(LaunchSignals, SecondCtrlCKillsAtOnce) {
  TempDir dir;
  // A grace far longer than the safety timeout: only the second SIGINT can end this.
  Launcher launcher(dir, recording_worker(dir, 2, "100000", {"--ignore-sigint"}), {{"OMP_NUM_THREADS", "1"}});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "ready.", 2); })) << launcher.err();
  launcher.send(SIGINT);
  ASSERT_TRUE(wait_until([&] { return all_recorded(dir, 2, "SIGINT"); })) << launcher.err();
  launcher.send(SIGINT);
  EXPECT_EQ(launcher.wait(), 137) << launcher.err();
  EXPECT_NE(launcher.err().find("Ctrl-C again to kill them now"), std::string::npos) << launcher.err();
  EXPECT_NE(launcher.err().find("got SIGINT again; killing 2 workers now"), std::string::npos) << launcher.err();
}

// The launcher's private rendezvous directories (ddp-launch-XXXXXX) under `tmp`.
int private_dirs_in(const std::string& tmp) {
  int n = 0;
  if (DIR* d = opendir(tmp.c_str())) {
    while (dirent* e = readdir(d)) n += std::string(e->d_name).rfind("ddp-launch-", 0) == 0;
    closedir(d);
  }
  return n;
}

// The launcher dies without a chance to clean up: every worker and every process a
// worker started must still go away, and its private rendezvous directory too (a
// SIGKILLed launcher runs no destructor: the orphan guard removes it).
TEST(LaunchSignals, KillingTheLauncherKillsWorkersAndTheirChildren) {
  TempDir dir;
  const int kWorkers = 3;
  const std::string tmp = dir / "tmp";
  ASSERT_EQ(mkdir(tmp.c_str(), 0700), 0);
  Launcher launcher(dir,
                    {"--nproc", std::to_string(kWorkers), "--master-port", "0", kWorker, "--spawn-grandchild",
                     "--pid-file", dir / "pids.%r", "--ready-file", dir / "ready.%r", "--sleep", "1000"},
                    {{"OMP_NUM_THREADS", "1"}, {"TMPDIR", tmp}});
  ASSERT_TRUE(wait_until([&] { return all_files_exist(dir, "ready.", kWorkers); })) << launcher.err();
  ASSERT_EQ(private_dirs_in(tmp), 1) << "a single-node launcher makes one private directory";
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorkers; ++r) {
    int worker = 0, grandchild = 0;
    ASSERT_EQ(std::sscanf(read_file(dir / ("pids." + std::to_string(r))).c_str(), "%d %d", &worker, &grandchild), 2);
    ASSERT_GT(worker, 0);
    ASSERT_GT(grandchild, 0);
    pids.push_back(worker);
    pids.push_back(grandchild);
  }
  for (pid_t pid : pids) ASSERT_FALSE(process_gone(pid)) << pid << " should be running before the kill";

  launcher.send(SIGKILL);
  EXPECT_EQ(launcher.wait(), 137);
  auto all_gone = [&] {
    for (pid_t pid : pids)
      if (!process_gone(pid)) return false;
    return true;
  };
  EXPECT_TRUE(wait_until(all_gone));
  for (pid_t pid : pids) EXPECT_TRUE(process_gone(pid)) << "pid " << pid << " survived the launcher";
  EXPECT_TRUE(wait_until([&] { return private_dirs_in(tmp) == 0; })) << "the private directory outlived the launcher";
}

TEST(LaunchSignals, WorkersChildrenDieWithTheWorker) {
  TempDir dir;
  // The worker exits normally but leaves a child behind in its process group.
  RunResult r = run_launcher(dir, {kWorker, "--spawn-grandchild", "--pid-file", dir / "pids.%r"});
  ASSERT_EQ(r.status, 0) << r.err;
  int worker = 0, grandchild = 0;
  ASSERT_EQ(std::sscanf(read_file(dir / "pids.0").c_str(), "%d %d", &worker, &grandchild), 2);
  EXPECT_TRUE(wait_until([&] { return process_gone(grandchild); })) << "grandchild " << grandchild << " survived";
}

}  // namespace
}  // namespace ddp_embed::launch::testing
