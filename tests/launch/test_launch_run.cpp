// ddp-launch end to end, with test-worker as the program: environments, two-node jobs,
// PROGRAM lookup, the rendezvous port, console output, and the command line.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <set>

#include "launch/launcher.h"
#include "launch_test_support.h"

namespace ddp_embed::launch::testing {
namespace {


TEST(LaunchRun, EnvironmentOfEveryRank) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc", "3", "--master-port", "0", kWorker, "--print-env"});
  ASSERT_EQ(r.status, 0) << r.err;
  auto envs = parse_env_lines(r.out);
  ASSERT_EQ(envs.size(), 3u) << r.out;
  const std::string port = envs[0]["MASTER_PORT"], run_id = envs[0]["RUN_ID"];
  EXPECT_GT(std::stoi(port), 0);
  EXPECT_FALSE(run_id.empty());
  const int cores = usable_cores();
  for (int rank = 0; rank < 3; ++rank) {
    auto& env = envs[rank];
    const std::string r_text = std::to_string(rank);
    EXPECT_EQ(env["RANK"], r_text);
    EXPECT_EQ(env["LOCAL_RANK"], r_text);
    EXPECT_EQ(env["ROLE_RANK"], r_text);
    EXPECT_EQ(env["WORLD_SIZE"], "3");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["ROLE_WORLD_SIZE"], "3");
    EXPECT_EQ(env["NODE_RANK"], "0");
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["RESTART_COUNT"], "0");
    EXPECT_EQ(env["MAX_RESTARTS"], "0");
    EXPECT_EQ(env["RUN_ID"], run_id);
    EXPECT_EQ(env["TORCHELASTIC_RESTART_COUNT"], "0");
    EXPECT_EQ(env["TORCHELASTIC_MAX_RESTARTS"], "0");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], run_id);
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "<unset>");
    // Unset OMP_NUM_THREADS with several workers: cores split between them.
    EXPECT_EQ(env["OMP_NUM_THREADS"], std::to_string(std::max(1, cores / 3)));
  }
  EXPECT_EQ(count_of(r.err, "OMP_NUM_THREADS is not set"), 1u) << r.err;
}

TEST(LaunchRun, UserThreadsAndDevicesAreHonoured) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc", "gpu", "--devices", "3,5", "--master-port", "0", kWorker,
                                   "--print-env"},
                             {{"OMP_NUM_THREADS", "7"}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5"}});
  ASSERT_EQ(r.status, 0) << r.err;
  auto envs = parse_env_lines(r.out);
  ASSERT_EQ(envs.size(), 2u);
  EXPECT_EQ(envs[0]["CUDA_VISIBLE_DEVICES"], "3");
  EXPECT_EQ(envs[1]["CUDA_VISIBLE_DEVICES"], "5");
  EXPECT_EQ(envs[1]["LOCAL_RANK"], "1");
  EXPECT_EQ(envs[0]["OMP_NUM_THREADS"], "7");
  EXPECT_EQ(r.err.find("OMP_NUM_THREADS is not set"), std::string::npos);
}

TEST(LaunchRun, NprocGpuCountsVisibleDevices) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc=gpu", "--master-port=0", kWorker, "--print-env"},
                             {{"CUDA_VISIBLE_DEVICES", "0,1,2"}, {"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(parse_env_lines(r.out).size(), 3u);
}

TEST(LaunchRun, TwoLaunchersWithTwoNodesFormOneJob) {
  TempDir dir;
  const std::string port = std::to_string(free_port());
  auto args = [&](const char* node) {
    return std::vector<std::string>{"--nnodes", "2", "--node-rank", node, "--nproc", "2", "--master-port",
                                    port, "--run-id", "two-nodes", kWorker, "--print-env", "--rendezvous"};
  };
  Launcher node0(dir, args("0"), {{"OMP_NUM_THREADS", "1"}}, "node0");
  Launcher node1(dir, args("1"), {{"OMP_NUM_THREADS", "1"}}, "node1");
  ASSERT_EQ(node0.wait(), 0) << node0.err();
  ASSERT_EQ(node1.wait(), 0) << node1.err();

  auto envs0 = parse_env_lines(node0.out()), envs1 = parse_env_lines(node1.out());
  EXPECT_EQ((std::set<int>{0, 1}), (std::set<int>{envs0.begin()->first, envs0.rbegin()->first}));
  EXPECT_EQ((std::set<int>{2, 3}), (std::set<int>{envs1.begin()->first, envs1.rbegin()->first}));
  std::map<int, std::map<std::string, std::string>> all = envs0;
  all.insert(envs1.begin(), envs1.end());
  ASSERT_EQ(all.size(), 4u);
  for (auto& [rank, env] : all) {
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], rank < 2 ? "0" : "1");
    EXPECT_EQ(env["NODE_RANK"], rank < 2 ? "0" : "1");
    EXPECT_EQ(env["GROUP_WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_PORT"], port);
    EXPECT_EQ(env["RUN_ID"], "two-nodes");
  }
  // The workers really met at MASTER_ADDR:MASTER_PORT, served by rank 0.
  EXPECT_NE(node0.out().find("[rank 0] rendezvous: rank 0 saw ranks 1,2,3"), std::string::npos) << node0.out();
  EXPECT_NE(node1.out().find("[rank 3] rendezvous: rank 3 joined"), std::string::npos) << node1.out();
}

TEST(LaunchRun, SlurmAllocationGivesMasterAndRunId) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--master-port", "0", kWorker, "--print-env"},
                             {{"SLURM_JOB_ID", "4242"},
                              {"SLURM_JOB_NUM_NODES", "1"},
                              {"SLURM_NODEID", "0"},
                              {"SLURM_JOB_NODELIST", "localhost,gpu[02-03]"}});
  ASSERT_EQ(r.status, 0) << r.err;
  auto envs = parse_env_lines(r.out);
  EXPECT_EQ(envs[0]["MASTER_ADDR"], "localhost");
  EXPECT_EQ(envs[0]["RUN_ID"], "slurm-4242");
  EXPECT_NE(r.err.find("SLURM job 4242"), std::string::npos) << r.err;
}

TEST(LaunchRun, MasterPortZeroPicksOneEveryWorkerCanUse) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc", "2", "--master-port", "0", kWorker, "--print-env", "--rendezvous"},
                             {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.status, 0) << r.err;
  auto envs = parse_env_lines(r.out);
  EXPECT_NE(envs[0]["MASTER_PORT"], "0");
  EXPECT_EQ(envs[0]["MASTER_PORT"], envs[1]["MASTER_PORT"]);
  EXPECT_NE(r.out.find("[rank 0] rendezvous: rank 0 saw ranks 1"), std::string::npos) << r.out;
}

TEST(LaunchRun, PortInUseIsReportedBeforeAnyWorkerStarts) {
  TempDir dir;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const std::string port = std::to_string(ntohs(addr.sin_port));

  RunResult r = run_launcher(dir, {"--master-port", port, kWorker, "--ready-file", dir / "started"});
  close(fd);
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.err, "ddp-launch: address 127.0.0.1:" + port + " already in use\n");
  EXPECT_FALSE(file_exists(dir / "started"));

  // A node other than the master does not host the store, so it does not check.
  // (Nothing listens any more; this only shows that the check is skipped without error.)
}

TEST(LaunchRun, FindsProgramOnPath) {
  TempDir dir;
  mkdir((dir / "bin").c_str(), 0755);
  ASSERT_EQ(symlink(kWorker.c_str(), (dir / "bin/my-worker").c_str()), 0);
  RunResult r = run_launcher(dir, {"my-worker", "--say", "found on PATH"},
                             {{"PATH", dir / "bin" + ":/usr/bin:/bin"}});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] found on PATH\n");
}

TEST(LaunchRun, FindsProgramBesideTheLauncher) {
  TempDir dir;
  mkdir((dir / "install").c_str(), 0755);
  // A copy, not a link: /proc/self/exe names the real file.
  std::string copy = dir / "install/ddp-launch";
  write_file(copy, read_file(launcher_binary()));
  chmod(copy.c_str(), 0755);
  ASSERT_EQ(symlink(kWorker.c_str(), (dir / "install/beside-worker").c_str()), 0);
  Launcher launcher(dir, {"beside-worker", "--say", "found beside"}, {{"PATH", "/usr/bin:/bin"}}, "launcher",
                    copy);
  ASSERT_EQ(launcher.wait(), 0) << launcher.err();
  EXPECT_EQ(launcher.out(), "[rank 0] found beside\n");
}

TEST(LaunchRun, MissingProgramExitsTwoWithAClearLine) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"no-such-program-zz9", "--x"}, {{"PATH", "/usr/bin:/bin"}});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
  EXPECT_NE(r.err.find("ddp-launch: no-such-program-zz9: program not found on PATH or beside ddp-launch"),
            std::string::npos)
      << r.err;
  r = run_launcher(dir, {dir / "nothing-here"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "ddp-launch: " + dir / "nothing-here" + ": no such executable file\n");
}

TEST(LaunchRun, BadCommandLinesExitTwoWithOneLine) {
  TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nprocs", "2", "/bin/true"}, "ddp-launch: unknown option --nprocs (did you mean --nproc?)\n"},
      {{"--nproc", "x", "/bin/true"}, "ddp-launch: --nproc: expected a positive integer or 'gpu', got 'x'\n"},
      {{"--nnodes", "2", "--master-port", "0", "/bin/true"}, ""},
      {{"--nnodes=2", "--node-rank=5", "/bin/true"}, "ddp-launch: --node-rank 5 must be less than --nnodes 2\n"},
      {{}, ""},
  };
  for (const auto& [args, message] : cases) {
    RunResult r = run_launcher(dir, args);
    EXPECT_EQ(r.status, 2) << r.err;
    EXPECT_EQ(split_lines(r.err).size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("ddp-launch: ", 0), 0u) << r.err;
    if (!message.empty()) {
      EXPECT_EQ(r.err, message);
    }
    EXPECT_EQ(r.out, "");
  }
}

TEST(LaunchRun, HelpAndVersion) {
  TempDir dir;
  RunResult help = run_launcher(dir, {"--help"});
  EXPECT_EQ(help.status, 0);
  for (const char* section : {"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "ENVIRONMENT", "EXIT STATUS", "EXAMPLES"})
    EXPECT_NE(("\n" + help.out).find(std::string("\n") + section + "\n"), std::string::npos) << section;
  RunResult version = run_launcher(dir, {"--version"});
  EXPECT_EQ(version.status, 0);
  EXPECT_EQ(version.out, "ddp-launch 0.1.0\n");
}

TEST(LaunchRun, ProgramArgumentsAreNotParsedAndExitCodePassesThrough) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--nproc", "1", "echo", "--nproc", "5", "--config", "x.json"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "[rank 0] --nproc 5 --config x.json\n");
  // A last line without a newline is still shown, as a whole line.
  r = run_launcher(dir, {"printf", "no newline"});
  EXPECT_EQ(r.out, "[rank 0] no newline\n");
  r = run_launcher(dir, {kWorker, "--exit", "42"});
  EXPECT_EQ(r.status, 42);
}

// ---- console output ----

// Checks one prefixed line "[rank R] rank=R stream=S line=I payload=<len x letter>".
bool well_formed(const std::string& line, const char* stream, int* rank, long* index) {
  int prefix_rank = -1, body_rank = -2;
  char got_stream[8] = {};
  long i = -1;
  int consumed = 0;
  if (std::sscanf(line.c_str(), "[rank %d] rank=%d stream=%3s line=%ld payload=%n", &prefix_rank, &body_rank,
                  got_stream, &i, &consumed) != 4 || consumed == 0)
    return false;
  if (prefix_rank != body_rank || std::string(got_stream) != stream) return false;
  std::string payload = line.substr(static_cast<size_t>(consumed));
  if (payload != std::string(static_cast<size_t>((i * 37) % 300 + 10), static_cast<char>('a' + i % 26)))
    return false;
  *rank = prefix_rank;
  *index = i;
  return true;
}

TEST(LaunchRun, LinesOfFourBusyWorkersAreNeverSplitOrInterleaved) {
  TempDir dir;
  const long kLines = 3000;
  RunResult r = run_launcher(dir, {"--nproc", "4", "--master-port", "0", "--log-dir", dir / "logs", kWorker,
                                   "--lines", std::to_string(kLines)},
                             {{"OMP_NUM_THREADS", "1"}});
  ASSERT_EQ(r.status, 0) << r.err.substr(0, 2000);
  for (const auto& [text, stream] : {std::pair{r.out, "out"}, std::pair{r.err, "err"}}) {
    std::map<int, long> next;  // per rank, the line index expected next
    size_t lines = 0;
    for (const auto& line : split_lines(text)) {
      int rank;
      long index;
      ASSERT_TRUE(well_formed(line, stream, &rank, &index)) << "malformed " << stream << " line: " << line;
      EXPECT_EQ(index, next[rank]) << "rank " << rank << " lost or reordered a line";
      next[rank] = index + 1;
      ++lines;
    }
    EXPECT_EQ(lines, static_cast<size_t>(4 * kLines));
    for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(next[rank], kLines);
  }
  // The log holds the raw lines of both streams, without prefix.
  for (int rank = 0; rank < 4; ++rank) {
    std::vector<std::string> log = split_lines(read_file(dir / "logs/attempt0/rank" + std::to_string(rank) + ".log"));
    ASSERT_EQ(log.size(), static_cast<size_t>(2 * kLines));
    EXPECT_EQ(log[0].rfind("rank=" + std::to_string(rank) + " stream=", 0), 0u) << log[0];
  }
}

TEST(LaunchRun, OverlongLinesAreSplitAndTheConsoleSaysSo) {
  TempDir dir;
  RunResult r = run_launcher(dir, {"--log-dir", dir / "logs", kWorker, "--long-line", "200000"});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> lines = split_lines(r.out);
  ASSERT_EQ(lines.size(), 4u);
  const std::string prefix = "[rank 0] ";
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(lines[i], prefix + std::string(65536, 'x'));
  EXPECT_EQ(lines[3], prefix + std::string(200000 - 3 * 65536, 'x'));
  EXPECT_EQ(count_of(r.err, "wrote a line longer than 65536 bytes"), 1u) << r.err;
  EXPECT_EQ(read_file(dir / "logs/attempt0/rank0.log"), std::string(200000, 'x') + "\n");
}

}  // namespace
}  // namespace ddp_embed::launch::testing
