// Several machines for real: two test hosts (network namespaces joined by a bridge, see
// test_hosts.h), one `ddp-launch --nnodes 2 --node-rank i` on each, two workers per host,
// a real (tiny) training between them. What crosses between the hosts crosses a real
// interface: the tests check it does, and that rank 0's store listens on that interface
// alone (a master given by address, or by a name with a loopback line too), then lose a
// host, cut its link, leave it out, restart across hosts, and give the launcher bad addresses.
//
// Every timing a test asserts is a bound (timeout + grace + slack for a busy machine), not
// a measurement; each test prints what it measured on a "[measured]" line.
#include <arpa/inet.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "../torch/e2e_support.h"
#include "jobs.h"
#include "test_hosts.h"

namespace {

using multihost::Clock;
using multihost::Job;
using multihost::TestHosts;
using multihost::all_gone;
using multihost::finish;
using multihost::finish_all;
using multihost::reached;

constexpr int kPort = 29600;
constexpr double kSlack = 15;  // seconds a busy 2-core CI machine may add to any bound

// The tiny BERT of the end-to-end tests, batch 16 over 4 ranks, checkpointing every 5.
json job_config(const fs::path& out, int steps, int timeout_s) {
  json c = e2e::tiny_config(out);
  c["train"]["max_steps"] = steps;
  c["dist"]["timeout_s"] = timeout_s;
  c["output"]["save_every"] = 5;
  return c;
}

// `ddp-launch` for node `node` of a 2-node job, 2 workers, on test host `node`; the master
// address host 0's (or `master`). Nothing names an interface: the launcher and the workers
// must find eth0 by themselves.
std::string launcher_on(const TestHosts& hosts, int node, const fs::path& config, const std::string& extra = "",
                        const std::string& master = "") {
  return hosts.exec(node) + "env -u GLOO_SOCKET_IFNAME -u NCCL_SOCKET_IFNAME OMP_NUM_THREADS=1 " + e2e::kBin +
         "/ddp-launch --nnodes 2 --node-rank " + std::to_string(node) + " --nproc 2 --master-addr " +
         (master.empty() ? hosts.address(0) : master) + " --master-port " + std::to_string(kPort) + " --grace 2 " +
         extra + " " + e2e::kBin + "/embed-train --config " + config.string();
}

Job start(const TestHosts& hosts, int node, const fs::path& dir, const fs::path& config, const std::string& extra = "",
          const std::string& name = "", const std::string& master = "") {
  Job j;
  j.output = dir / ((name.empty() ? "host" + std::to_string(node) : name) + ".out");
  j.pid = e2e::spawn(launcher_on(hosts, node, config, extra, master), j.output);
  return j;
}

// The pid of worker `rank` on host i (its environment says RANK=<rank>), or -1.
pid_t worker_pid(const TestHosts& hosts, int i, int rank) {
  const std::string want = std::string("RANK=") + std::to_string(rank);
  for (pid_t pid : hosts.pids(i)) {
    const std::string cmd = e2e::read_file("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmd.find("embed-train") == std::string::npos) continue;
    const std::string env = e2e::read_file("/proc/" + std::to_string(pid) + "/environ");
    size_t at = 0;
    for (size_t next; (next = env.find('\0', at)) != std::string::npos; at = next + 1)
      if (env.compare(at, next - at, want) == 0) return pid;
  }
  return -1;
}

// The addresses (numeric) that process `pid` holds TCP sockets listening on `port` at, from
// the socket table of its own network namespace (/proc/<pid>/net/tcp and tcp6, the sockets
// matched to the process by the inodes of its open files). 0.0.0.0 and :: are every interface.
std::vector<std::string> listening_addresses(pid_t pid, int port) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::set<std::string> inodes;
  std::error_code ec;
  for (const auto& fd : fs::directory_iterator(proc + "/fd", ec)) {
    const std::string target = fs::read_symlink(fd.path(), ec).string();
    if (target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  std::vector<std::string> found;
  for (const std::string table : {"/net/tcp", "/net/tcp6"}) {
    std::istringstream lines(e2e::read_file(proc + table));
    std::string line;
    std::getline(lines, line);  // the header
    while (std::getline(lines, line)) {
      std::istringstream f(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      f >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      const size_t colon = local.find(':');
      if (state != "0A" || !inodes.count(inode) || colon == std::string::npos ||
          std::stoi(local.substr(colon + 1), nullptr, 16) != port)
        continue;
      // The address as the kernel prints it: 32-bit words in hex, each in this machine's byte order.
      const std::string hex = local.substr(0, colon);
      unsigned char bytes[16] = {0};
      for (size_t w = 0; w * 8 < hex.size() && w < 4; ++w) {
        const uint32_t word = static_cast<uint32_t>(std::stoul(hex.substr(w * 8, 8), nullptr, 16));
        std::memcpy(bytes + 4 * w, &word, 4);
      }
      char text[INET6_ADDRSTRLEN] = {0};
      ::inet_ntop(hex.size() == 8 ? AF_INET : AF_INET6, bytes, text, sizeof text);
      found.push_back(text);
    }
  }
  return found;
}

void expect_same_weights(const fs::path& a, const fs::path& b) {
  const auto wa = e2e::weights(a / "final/model.safetensors"), wb = e2e::weights(b / "final/model.safetensors");
  ASSERT_FALSE(wa.empty());
  ASSERT_EQ(wa.size(), wb.size());
  for (const auto& [name, values] : wa) {
    ASSERT_TRUE(wb.count(name)) << name;
    EXPECT_TRUE(values == wb.at(name)) << name << " differs (bitwise)";
  }
}

class MultiHost : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = TestHosts::unavailable();
    if (!why.empty()) GTEST_SKIP() << "no test hosts: " << why;
    hosts_ = std::make_unique<TestHosts>(2);
    dir_ = e2e::fresh_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  // Both hosts training a long job (until a fault ends it), past its third step.
  void start_long_job(int timeout_s, Job* h0, Job* h1) {
    const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", 100000, timeout_s));
    *h0 = start(*hosts_, 0, dir_, config);
    *h1 = start(*hosts_, 1, dir_, config);
    ASSERT_TRUE(reached(dir_ / "out", 3)) << e2e::read_file(h0->output);
  }

  std::unique_ptr<TestHosts> hosts_;
  fs::path dir_;
};

// 2 hosts x 2 workers train, bitwise, the model 1 host x 4 workers trains; the gradients
// really cross the veth, and each host's Gloo picked eth0 with its own address unasked.
TEST_F(MultiHost, TwoHostsTrainTheModelOfOneHostWithFourWorkers) {
  const int steps = 12;
  fs::create_directories(dir_ / "one-host");
  const auto one_host = e2e::train(dir_ / "one-host", job_config(dir_ / "one-host/out", steps, 60), 4);
  ASSERT_EQ(one_host.exit_code, 0) << one_host.output;

  const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", steps, 60));
  const long long rx0 = hosts_->rx_bytes(1), tx0 = hosts_->tx_bytes(1);
  const auto t0 = Clock::now();
  Job h0 = start(*hosts_, 0, dir_, config), h1 = start(*hosts_, 1, dir_, config);
  ASSERT_TRUE(finish(h0, t0, 300)) << e2e::read_file(h0.output);
  ASSERT_TRUE(finish(h1, t0, 60)) << e2e::read_file(h1.output);
  const std::string out0 = e2e::read_file(h0.output), out1 = e2e::read_file(h1.output);
  ASSERT_EQ(h0.status, 0) << out0;
  ASSERT_EQ(h1.status, 0) << out1;

  expect_same_weights(dir_ / "one-host/out", dir_ / "out");
  EXPECT_NE(out0.find("process group: 4 ranks, gloo over eth0 (" + hosts_->address(0) + ")"), std::string::npos) << out0;
  // Rank 0 logs for the console; host 1's ranks say it in their log files.
  const std::string log2 = e2e::read_file(dir_ / "out/train.rank2.log");
  EXPECT_NE(log2.find("gloo over eth0 (" + hosts_->address(1) + ")"), std::string::npos) << log2;

  // Every step all-reduces the whole gradient (~4 MB of float32 for this model); host 1
  // holds half the ring, so at least a model's worth a step crosses its interface.
  const long long rx = hosts_->rx_bytes(1) - rx0, tx = hosts_->tx_bytes(1) - tx0;
  const long long model_bytes = static_cast<long long>(fs::file_size(dir_ / "out/final/model.safetensors"));
  EXPECT_GT(rx, steps * model_bytes) << "host 1 received only " << rx << " bytes";
  EXPECT_GT(tx, steps * model_bytes) << "host 1 sent only " << tx << " bytes";
  std::printf("[measured] 2x2 over the veth: %d steps in %.1f s; host 1 eth0 received %.1f MB, sent %.1f MB\n", steps,
              h0.seconds, rx / 1e6, tx / 1e6);
}

// Rank 0's store listens on MASTER_ADDR's address (host 0's eth0) only, not on every
// interface: read from host 0's own socket table while the job trains.
TEST_F(MultiHost, TheWorkersStoreListensOnTheAddressOfMasterAddrOnly) {
  Job h0, h1;
  ASSERT_NO_FATAL_FAILURE(start_long_job(60, &h0, &h1));
  const pid_t rank0 = worker_pid(*hosts_, 0, 0);
  const auto listening = rank0 > 0 ? listening_addresses(rank0, kPort) : std::vector<std::string>{};
  ::kill(h0.pid, SIGTERM);
  ::kill(h1.pid, SIGTERM);
  finish_all({&h0, &h1}, Clock::now(), 30);
  const std::string out0 = e2e::read_file(h0.output);
  ASSERT_GT(rank0, 0) << "rank 0 not found on host 0\n" << out0;
  EXPECT_EQ(listening, std::vector<std::string>{hosts_->address(0)}) << "rank 0's listening sockets on port " << kPort;
  EXPECT_NE(out0.find("the workers' store listens on " + hosts_->address(0) + ":" + std::to_string(kPort) +
                      " only (the interface of MASTER_ADDR)"),
            std::string::npos)
      << out0;
}

// MASTER_ADDR a host name that host 0's /etc/hosts also gives a loopback address (Debian's
// "127.0.1.1 <hostname>" line) before its own: the store listens on the address of eth0
// alone, and host 1, to which the name is that address, trains with it.
TEST_F(MultiHost, AMasterHostNameWithALoopbackLineTooListensOnItsInterfaceAddressOnly) {
  hosts_->hosts_file(0, "127.0.0.1 localhost\n127.0.1.1 node0\n" + hosts_->address(0) + " node0\n");
  hosts_->hosts_file(1, "127.0.0.1 localhost\n" + hosts_->address(0) + " node0\n");
  const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", 100000, 60));
  Job h0 = start(*hosts_, 0, dir_, config, "", "", "node0"), h1 = start(*hosts_, 1, dir_, config, "", "", "node0");
  const bool trains = reached(dir_ / "out", 3);
  const pid_t rank0 = worker_pid(*hosts_, 0, 0);
  const auto listening = rank0 > 0 ? listening_addresses(rank0, kPort) : std::vector<std::string>{};
  ::kill(h0.pid, SIGTERM);
  ::kill(h1.pid, SIGTERM);
  finish_all({&h0, &h1}, Clock::now(), 30);
  const std::string out0 = e2e::read_file(h0.output), out1 = e2e::read_file(h1.output);
  ASSERT_TRUE(trains) << out0 << "\n----\n" << out1;
  EXPECT_EQ(listening, std::vector<std::string>{hosts_->address(0)}) << "rank 0's listening sockets on port " << kPort;
  EXPECT_NE(out0.find("the workers' store listens on " + hosts_->address(0) + ":" + std::to_string(kPort) +
                      " only (the interface of MASTER_ADDR node0)"),
            std::string::npos)
      << out0;
}

// MASTER_ADDR a host name that host 0 resolves to loopback alone: the store stays on
// loopback (every rank would be on host 0), and host 0 warns, once, that host 1 cannot
// reach it and what to give instead.
TEST_F(MultiHost, AMasterHostNameThatIsOnlyLoopbackOnNodeZeroIsAWarning) {
  hosts_->hosts_file(0, "127.0.0.1 localhost\n127.0.1.1 node0\n");
  hosts_->hosts_file(1, "127.0.0.1 localhost\n" + hosts_->address(0) + " node0\n");
  const int timeout_s = 5;
  const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", 10, timeout_s));
  const auto t0 = Clock::now();
  Job h0 = start(*hosts_, 0, dir_, config, "", "", "node0"), h1 = start(*hosts_, 1, dir_, config, "", "", "node0");
  const bool ended = finish_all({&h0, &h1}, t0, timeout_s + 2 + kSlack + 30);
  const std::string out0 = e2e::read_file(h0.output);
  ASSERT_TRUE(ended) << out0;
  EXPECT_NE(h0.status, 0) << out0;
  const std::string warning = "the workers' store listens on 127.0.1.1:" + std::to_string(kPort) +
                              " only, on loopback: MASTER_ADDR node0 resolves to no other address on this machine";
  // Rank 0's own lines (the launcher's failure report quotes its last ones again).
  int warned = 0;
  std::istringstream lines(out0);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("[rank 0]", 0) == 0 && line.find("warning " + warning) != std::string::npos) ++warned;
  EXPECT_EQ(warned, 1) << out0;
  EXPECT_NE(out0.find("give --master-addr (MASTER_ADDR) as the address the other nodes reach this one at"),
            std::string::npos)
      << out0;
}

// A host lost mid-run (its launcher and workers SIGKILLed): the other host's launcher stops
// its workers and exits non-zero, naming the missing node and ranks, not hanging.
TEST_F(MultiHost, ALostHostIsNamedAndTheOtherHostStops) {
  const int timeout_s = 10;
  Job h0, h1;
  ASSERT_NO_FATAL_FAILURE(start_long_job(timeout_s, &h0, &h1));

  const auto t0 = Clock::now();
  hosts_->kill_host(1);
  const double bound = timeout_s + 2 + kSlack;
  ASSERT_TRUE(finish(h0, t0, bound)) << "host 0 still running " << bound << " s after host 1 was lost\n"
                                     << e2e::read_file(h0.output);
  const double gone = all_gone(*hosts_, 0, t0, bound);
  finish(h1, t0, 10);
  const std::string out0 = e2e::read_file(h0.output);
  EXPECT_NE(h0.status, 0);
  EXPECT_NE(out0.find("rank(s) 2, 3 (node 1)"), std::string::npos) << out0;
  EXPECT_GE(gone, 0) << "processes left on host 0";
  std::printf("[measured] host lost: host 0's launcher exited %d after %.2f s, its last process gone after %.2f s\n",
              h0.status, h0.seconds, gone);
}

// The link cut mid-run: both hosts stop within the timeout plus grace, and say which
// collective timed out.
TEST_F(MultiHost, ACutLinkStopsBothHostsNamingTheCollective) {
  const int timeout_s = 10;
  Job h0, h1;
  ASSERT_NO_FATAL_FAILURE(start_long_job(timeout_s, &h0, &h1));

  const auto t0 = Clock::now();
  hosts_->cut_link(1);
  const double bound = timeout_s + 5 + 2 + kSlack;  // timeout, the diagnosis's grace, --grace
  const bool ended = finish_all({&h0, &h1}, t0, bound);
  const double gone0 = all_gone(*hosts_, 0, t0, 5), gone1 = all_gone(*hosts_, 1, t0, 5);
  const std::string out0 = e2e::read_file(h0.output), out1 = e2e::read_file(h1.output);
  ASSERT_TRUE(ended) << "still running " << bound << " s after the cut\n" << out0 << "\n----\n" << out1;
  EXPECT_NE(h0.status, 0);
  EXPECT_NE(h1.status, 0);
  EXPECT_NE(out0.find("did not complete within " + std::to_string(timeout_s) + " s"), std::string::npos) << out0;
  EXPECT_NE(out0.find("(collective #"), std::string::npos) << out0;
  EXPECT_NE(out1.find("(collective #"), std::string::npos) << out1;
  EXPECT_GE(gone0, 0);
  EXPECT_GE(gone1, 0);
  std::printf("[measured] link cut: host 0's launcher exited %d after %.2f s, host 1's exited %d after %.2f s "
              "(no process left on either %.2f s after the cut); dist.timeout_s %d\n",
              h0.status, h0.seconds, h1.status, h1.seconds, std::max(gone0, gone1), timeout_s);
}

// A host that never arrives: the host that waits names the ranks (and node) that did not
// join, within the rendezvous timeout.
TEST_F(MultiHost, AHostThatNeverArrivesIsNamed) {
  const int timeout_s = 5;
  const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", 10, timeout_s));
  const auto t0 = Clock::now();
  Job h0 = start(*hosts_, 0, dir_, config);
  ASSERT_TRUE(finish(h0, t0, timeout_s + 2 + kSlack + 10)) << e2e::read_file(h0.output);
  const std::string out0 = e2e::read_file(h0.output);
  EXPECT_NE(h0.status, 0);
  EXPECT_NE(out0.find("rank(s) 2, 3 (node 1) of 4 did not join"), std::string::npos) << out0;
  std::printf("[measured] host never arrives: host 0 exited %d after %.2f s (rendezvous timeout %d s, start-up "
              "included)\n",
              h0.status, h0.seconds, timeout_s);
}

// --max-restarts 2 on both hosts, one worker of host 1 killed: both hosts restart, meet
// again, resume from the last checkpoint and end with the weights of an uninterrupted run.
TEST_F(MultiHost, BothHostsRestartAndResumeToTheUninterruptedWeights) {
  const int steps = 200, timeout_s = 20;
  auto config_for = [&](const fs::path& out) {
    json c = job_config(out, steps, timeout_s);
    c["output"]["resume"] = "auto";
    c["output"]["save_every"] = 20;
    return c;
  };
  fs::create_directories(dir_ / "straight");
  const auto straight = e2e::train(dir_ / "straight", config_for(dir_ / "straight/out"), 4);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;

  const fs::path config = e2e::write_config(dir_, config_for(dir_ / "out"));
  Job h0 = start(*hosts_, 0, dir_, config, "--max-restarts 2"), h1 = start(*hosts_, 1, dir_, config, "--max-restarts 2");
  ASSERT_TRUE(e2e::wait_for([&] { return fs::exists(dir_ / "out/checkpoints/step-40"); }, std::chrono::seconds(240)))
      << e2e::read_file(h0.output);
  const pid_t victim = worker_pid(*hosts_, 1, 3);
  ASSERT_GT(victim, 0) << "rank 3 not found on host 1";
  const auto t0 = Clock::now();
  ::kill(victim, SIGKILL);
  const bool ended = finish_all({&h0, &h1}, t0, 300);
  const std::string out0 = e2e::read_file(h0.output), out1 = e2e::read_file(h1.output);
  ASSERT_TRUE(ended) << out0 << "\n----\n" << out1;
  ASSERT_EQ(h0.status, 0) << out0;
  ASSERT_EQ(h1.status, 0) << out1;
  EXPECT_NE(out0.find("restart"), std::string::npos) << out0;
  EXPECT_NE(out1.find("restart"), std::string::npos) << out1;
  EXPECT_NE(out0.find("resum"), std::string::npos) << out0;
  expect_same_weights(dir_ / "straight/out", dir_ / "out");
  std::printf("[measured] restart across hosts: from the kill to the end of the resumed job %.1f s\n", h0.seconds);
}

// Bad addresses are one clear line each, before any worker starts: the port already taken
// on host 0 (by another job's store), and a master address that does not resolve.
TEST_F(MultiHost, ATakenPortAndAnUnresolvableMasterAreClearErrors) {
  const fs::path config = e2e::write_config(dir_, job_config(dir_ / "out", 10, 60));
  Job holder = start(*hosts_, 0, dir_, config, "", "holder");  // waits for a node 1 that never comes
  ASSERT_TRUE(e2e::wait_for([&] {
    std::string out;
    multihost::shell(hosts_->exec(0) + "ss -Hltn 'sport = :" + std::to_string(kPort) + "'", &out);
    return !out.empty();
  })) << "the first job's store never listened";

  const auto taken = e2e::run(launcher_on(*hosts_, 0, config));
  EXPECT_EQ(taken.exit_code, 1) << taken.output;
  EXPECT_NE(taken.output.find("address " + hosts_->address(0) + ":" + std::to_string(kPort) + " already in use"),
            std::string::npos)
      << taken.output;
  EXPECT_EQ(taken.output.find("[rank"), std::string::npos) << "a worker started:\n" << taken.output;

  // On host 1, which has no route anywhere: the lookup cannot leave the test network.
  std::string unresolvable = launcher_on(*hosts_, 1, config);
  unresolvable.replace(unresolvable.find("--master-addr " + hosts_->address(0)),
                       std::string("--master-addr " + hosts_->address(0)).size(), "--master-addr no-such-host.invalid");
  const auto lost = e2e::run(unresolvable);
  EXPECT_EQ(lost.exit_code, 1) << lost.output;
  EXPECT_NE(lost.output.find("the master address no-such-host.invalid does not resolve"), std::string::npos)
      << lost.output;
  EXPECT_EQ(lost.output.find("[rank"), std::string::npos) << "a worker started:\n" << lost.output;

  ::kill(holder.pid, SIGTERM);
  finish(holder, Clock::now(), 30);
}

}  // namespace
