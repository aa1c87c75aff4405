// Helpers for the launcher tests that start the real ddp-launch binary: a private temp
// folder per test, starting/waiting/signalling the launcher, and event-based waits
// (files appearing, processes exiting) whose timeouts are only a safety net.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace ddp_embed::launch::testing {

inline std::string launcher_binary() { return DDP_EMBED_BINARY_DIR "/ddp-launch"; }
inline std::string worker_binary() { return DDP_EMBED_BINARY_DIR "/tests/test-worker"; }
inline const std::string kWorker = worker_binary();

// Generous: the machine may be busy compiling; a passing test never waits this long.
constexpr double kSafetyTimeoutSeconds = 120;

inline bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

inline std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

inline size_t count_of(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// Polls `done` every 10 ms until it holds or the safety timeout passes.
inline bool wait_until(const std::function<bool()>& done, double timeout_s = kSafetyTimeoutSeconds) {
  auto give_up = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Gone: no such process, or a zombie nobody reaped yet (it holds nothing any more).
inline bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return true;
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return true;
  char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// A port that was free a moment ago.
inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

class TempDir {
 public:
  TempDir() {
    std::string pattern = "/tmp/ddp-launch-test-XXXXXX";
    if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    if (!std::getenv("DDP_LAUNCH_TEST_KEEP")) remove_tree(path_);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  static void remove_tree(const std::string& path) {
    if (DIR* dir = opendir(path.c_str())) {
      while (dirent* e = readdir(dir)) {
        std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        std::string child = path + "/" + name;
        struct stat st;
        if (lstat(child.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
          remove_tree(child);
        else
          unlink(child.c_str());
      }
      closedir(dir);
    }
    rmdir(path.c_str());
  }
  std::string path_;
};

// The test process's environment without anything that would change the launcher's
// decisions (SLURM_*, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS), plus `set`.
inline std::vector<std::string> launcher_environment(const std::map<std::string, std::string>& set) {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string entry = *e;
    size_t eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (name.rfind("SLURM_", 0) == 0 || name == "CUDA_VISIBLE_DEVICES" || name == "OMP_NUM_THREADS")
      continue;
    env.emplace(name, entry.substr(eq + 1));
  }
  for (const auto& [name, value] : set) env[name] = value;
  std::vector<std::string> entries;
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

// A running ddp-launch whose stdout/stderr go to files in the test's folder (files, not
// pipes, so an unread pipe can never block it).
class Launcher {
 public:
  Launcher(const TempDir& dir, std::vector<std::string> args,
           const std::map<std::string, std::string>& env = {}, const std::string& name = "launcher",
           const std::string& binary = launcher_binary())
      : out_path_(dir / (name + ".out")), err_path_(dir / (name + ".err")) {
    args.insert(args.begin(), binary);
    std::vector<std::string> envs = launcher_environment(env);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    int out = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int err = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out, 1);
      dup2(err, 2);
      execve(binary.c_str(), argv.data(), envp.data());
      _exit(126);
    }
    close(out);
    close(err);
  }
  ~Launcher() {
    if (!reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  pid_t pid() const { return pid_; }
  void send(int sig) const { kill(pid_, sig); }

  // The exit status as a shell reports it (128+N for a signal), or -1 if it did not
  // end within the safety timeout (it is then killed).
  int wait(double timeout_s = kSafetyTimeoutSeconds) {
    if (reaped_) return status_;
    int raw = 0;
    bool ended = wait_until([&] { return waitpid(pid_, &raw, WNOHANG) == pid_; }, timeout_s);
    if (!ended) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &raw, 0);
      reaped_ = true;
      return status_ = -1;
    }
    reaped_ = true;
    status_ = WIFSIGNALED(raw) ? 128 + WTERMSIG(raw) : WEXITSTATUS(raw);
    return status_;
  }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

 private:
  std::string out_path_, err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = -1;
};

struct RunResult {
  int status;
  std::string out, err;
};

inline RunResult run_launcher(const TempDir& dir, const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env = {}) {
  Launcher launcher(dir, args, env);
  int status = launcher.wait();
  return {status, launcher.out(), launcher.err()};
}

// "[rank R] env NAME=value" lines -> rank -> NAME -> value.
inline std::map<int, std::map<std::string, std::string>> parse_env_lines(const std::string& out) {
  std::map<int, std::map<std::string, std::string>> envs;
  for (const auto& line : split_lines(out)) {
    int rank = -1;
    char rest[4096];
    if (std::sscanf(line.c_str(), "[rank %d] env %4095[^\n]", &rank, rest) != 2) continue;
    std::string entry = rest;
    size_t eq = entry.find('=');
    envs[rank][entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return envs;
}

}  // namespace ddp_embed::launch::testing
