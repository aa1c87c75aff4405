// Test hosts on one machine, for the multi-node tests: network namespaces joined by a
// bridge, each with its own address in a private test subnet, so that what the job sends
// between nodes crosses a real interface (a veth pair) that a test can cut.
//
//   switch namespace   bridge br0 -- p0, p1, ...           (the veth ends on the switch)
//   host i namespace   eth0 10.77.0.<i+1>/24, and lo       (the other end)
//
// Nothing outside these namespaces is touched or addressed: the links are made inside the
// switch namespace with one end moved into the host's, and no namespace has a route
// anywhere else. The one file outside is a host's own /etc/hosts when a test gives it one
// (hosts_file: /etc/netns/<namespace>/hosts, which `ip netns exec` mounts over /etc/hosts),
// removed with the namespace. Needs root and iproute2's `ip`; unavailable() says why not.
//
// Removal is guaranteed, however the test ends: a guard process in a session of its own
// (no signal to the test's process group reaches it) reads a pipe only the test holds.
// When the test returns, fails or is killed, the pipe reads end-of-file and the guard
// kills every process in the namespaces and deletes them. The destructor just closes the
// pipe and waits for the guard: one clean-up path for every ending. Namespaces whose owner
// died with its guard (their names carry the owner's pid) are swept by the next harness.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace multihost {

// Runs a shell command; returns its exit status and, in *output, stdout and stderr.
inline int shell(const std::string& command, std::string* output = nullptr) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) text.append(buf, n);
  const int status = ::pclose(p);
  if (output) *output = text;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class TestHosts {
 public:
  static constexpr const char* kPrefix = "ddpe";

  // Empty when namespaces can be made here; else the reason, for GTEST_SKIP.
  static std::string unavailable() {
    if (::geteuid() != 0) return "network namespaces need root (the CI runs as root)";
    if (shell("command -v ip") != 0) return "iproute2's ip is not installed (scripts/setup.sh installs it)";
    std::string out;
    const std::string probe = std::string(kPrefix) + std::to_string(::getpid()) + "-probe";
    if (shell("ip netns add " + probe, &out) != 0) return "ip netns add failed: " + out;
    shell("ip netns del " + probe);
    return "";
  }

  explicit TestHosts(int n) : n_(n), tag_(std::string(kPrefix) + std::to_string(::getpid())) {
    sweep_stale();
    start_guard();
    std::vector<std::string> steps = {"ip netns add " + switch_ns(), "ip -n " + switch_ns() + " link set lo up",
                                      "ip -n " + switch_ns() + " link add br0 type bridge",
                                      "ip -n " + switch_ns() + " link set br0 up"};
    for (int i = 0; i < n_; ++i) {
      const std::string h = ns(i), port = "p" + std::to_string(i);
      steps.push_back("ip netns add " + h);
      steps.push_back("ip -n " + h + " link set lo up");
      steps.push_back("ip -n " + switch_ns() + " link add " + port + " type veth peer name eth0 netns " + h);
      steps.push_back("ip -n " + switch_ns() + " link set " + port + " master br0");
      steps.push_back("ip -n " + switch_ns() + " link set " + port + " up");
      steps.push_back("ip -n " + h + " addr add " + address(i) + "/24 dev eth0");
      steps.push_back("ip -n " + h + " link set eth0 up");
    }
    for (const auto& step : steps) {
      std::string out;
      if (shell(step, &out) != 0) throw std::runtime_error("making the test hosts: `" + step + "` failed: " + out);
    }
  }

  ~TestHosts() {
    if (guard_fd_ >= 0) ::close(guard_fd_);
    if (guard_pid_ > 0) ::waitpid(guard_pid_, nullptr, 0);
  }
  TestHosts(const TestHosts&) = delete;
  TestHosts& operator=(const TestHosts&) = delete;

  int size() const { return n_; }
  std::string ns(int i) const { return tag_ + "-h" + std::to_string(i); }
  std::string address(int i) const { return "10.77.0." + std::to_string(i + 1); }
  // The prefix that runs a command on host i.
  std::string exec(int i) const { return "ip netns exec " + ns(i) + " "; }

  // Every process on host i (the launcher, its workers, its guard).
  std::vector<pid_t> pids(int i) const {
    std::string out;
    shell("ip netns pids " + ns(i), &out);
    std::vector<pid_t> list;
    std::istringstream in(out);
    for (long pid; in >> pid;) list.push_back(static_cast<pid_t>(pid));
    return list;
  }

  // The machine is lost: SIGKILL to everything on host i at once.
  void kill_host(int i) const {
    for (pid_t pid : pids(i)) ::kill(pid, SIGKILL);
  }

  // The cable is pulled: host i's interface goes down.
  void cut_link(int i) const { shell("ip -n " + ns(i) + " link set eth0 down"); }

  // Host i's /etc/hosts, for the commands exec(i) starts from now on: the names the test
  // gives the hosts, resolved differently on each (as on real machines).
  void hosts_file(int i, const std::string& text) const {
    const std::string dir = "/etc/netns/" + ns(i);
    if (shell("mkdir -p " + dir) != 0) throw std::runtime_error("cannot make " + dir);
    std::ofstream(dir + "/hosts") << text;
  }

  // Bytes host i's eth0 has received and sent (the kernel's interface counters).
  long long rx_bytes(int i) const { return counter(i, "rx_bytes"); }
  long long tx_bytes(int i) const { return counter(i, "tx_bytes"); }

 private:
  std::string switch_ns() const { return tag_ + "-sw"; }

  long long counter(int i, const std::string& name) const {
    std::string out;
    shell(exec(i) + "cat /sys/class/net/eth0/statistics/" + name, &out);
    return std::atoll(out.c_str());
  }

  // The guard: `sh` reading the pipe until EOF, then the clean-up. setsid: its own session.
  void start_guard() {
    std::string names = switch_ns();
    for (int i = 0; i < n_; ++i) names += " " + ns(i);
    const std::string script = "trap '' INT TERM HUP QUIT; cat >/dev/null; " + cleanup_script(names);
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    guard_pid_ = ::fork();
    if (guard_pid_ == 0) {
      ::setsid();
      ::dup2(fds[0], 0);
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      for (int fd = 3; fd < 1024; ++fd) ::close(fd);
      ::execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    ::close(fds[0]);
    ::fcntl(fds[1], F_SETFD, FD_CLOEXEC);  // only this process holds it: no child keeps it open
    guard_fd_ = fds[1];
  }

  // Kills what runs in the namespaces, then deletes them (the veth pairs go with them) and
  // their /etc/netns folders.
  static std::string cleanup_script(const std::string& names) {
    return "for ns in " + names + "; do for p in $(ip netns pids $ns 2>/dev/null); do kill -9 $p; done; done; " +
           "for ns in " + names + "; do ip netns del $ns 2>/dev/null; rm -rf /etc/netns/$ns; done; " +
           "rmdir /etc/netns 2>/dev/null; true";
  }

  // Namespaces named ddpe<pid>-... whose pid is gone: a harness killed with its guard.
  static void sweep_stale() {
    DIR* d = ::opendir("/run/netns");
    if (!d) return;
    std::string stale;
    while (dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind(kPrefix, 0) != 0) continue;
      const long owner = std::atol(name.c_str() + std::string(kPrefix).size());
      if (owner > 0 && ::kill(static_cast<pid_t>(owner), 0) != 0 && errno == ESRCH) stale += " " + name;
    }
    ::closedir(d);
    if (!stale.empty()) shell(cleanup_script(stale));
  }

  int n_;
  std::string tag_;
  int guard_fd_ = -1;
  pid_t guard_pid_ = -1;
};

}  // namespace multihost
