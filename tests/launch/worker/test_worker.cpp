// test-worker: a stand-in for a training worker, started by the launcher tests through
// ddp-launch. It does what its arguments say, in this order whatever their order:
//
//   --record-signals F     append the name of each SIGHUP/SIGINT/SIGTERM/SIGUSR1/SIGUSR2
//                          to F; on SIGHUP/SIGINT/SIGTERM then exit 0 (unless ignored)
//   --exit-on-usr2 C       with --record-signals: exit C on SIGUSR2 (as embed-train exits 75
//                          after a membership change's checkpoint)
//   --ignore-sigterm       ignore SIGTERM (recorded first with --record-signals)
//   --ignore-sigint        ignore SIGINT (likewise)
//   --spawn-grandchild     fork a child that just waits (to test process-group cleanup)
//   --pid-file F           write "WORKER_PID GRANDCHILD_PID" to F
//   --print-env            print "env NAME=value" for the launcher's variables
//   --rendezvous           rank 0 listens on MASTER_ADDR:MASTER_PORT, the others connect
//   --say TEXT / --say-err TEXT   print TEXT on stdout / stderr
//   --lines N              N checkable lines on stdout and N on stderr, each written in
//                          several write() calls
//   --long-line BYTES      one line of BYTES 'x' on stdout
//   --ready-file F         create F
//   --barrier F            create F, then wait until F exists for every rank
//   --fail-on-attempt A    exit 3 when RESTART_COUNT == A (repeatable)
//   --exit-on-rank R:C     exit C when RANK == R
//   --kill-self SIG        raise SIG;  --kill-self-on-rank R:SIG likewise on rank R only
//   --sleep S              sleep S seconds (signals do not cut it short)
//   --exit CODE            exit status at the end (default 0)
//
// In file names, %r becomes RANK and %a RESTART_COUNT.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Settings {
  std::string record_signals, pid_file, ready_file, barrier;
  bool ignore_sigterm = false, ignore_sigint = false, spawn_grandchild = false;
  int exit_on_usr2 = -1;
  bool print_env = false, rendezvous = false;
  std::vector<std::pair<int, std::string>> says;  // (fd, text)
  long lines = 0, long_line = 0;
  std::set<int> fail_on_attempts;
  int exit_on_rank = -1, exit_on_rank_code = 0;
  int kill_self = 0, kill_self_on_rank = -1, kill_self_on_rank_sig = 0;
  double sleep_seconds = 0;
  int exit_code = 0;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

std::string expand(std::string path) {
  for (size_t p; (p = path.find("%r")) != std::string::npos;)
    path.replace(p, 2, std::to_string(env_int("RANK", 0)));
  for (size_t p; (p = path.find("%a")) != std::string::npos;)
    path.replace(p, 2, std::to_string(env_int("RESTART_COUNT", 0)));
  return path;
}

void write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// Written whole or not at all: a reader polling for the file never sees half of it.
void write_file_atomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp" + std::to_string(getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    std::perror(tmp.c_str());
    std::exit(100);
  }
  write_all(fd, text);
  close(fd);
  rename(tmp.c_str(), path.c_str());
}

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// ---- signals (handlers use only async-signal-safe calls) ----
char g_record_path[4096];
bool g_ignore_term = false, g_ignore_int = false;
int g_exit_on_usr2 = -1;

void on_signal(int sig) {
  const char* name = sig == SIGHUP ? "SIGHUP\n" : sig == SIGINT ? "SIGINT\n" : sig == SIGTERM ? "SIGTERM\n"
                     : sig == SIGUSR1 ? "SIGUSR1\n" : "SIGUSR2\n";
  int fd = open(g_record_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd >= 0) {
    ssize_t ignored = write(fd, name, strlen(name));
    (void)ignored;
    close(fd);
  }
  if ((sig == SIGTERM && !g_ignore_term) || (sig == SIGINT && !g_ignore_int) || sig == SIGHUP) _exit(0);
  if (sig == SIGUSR2 && g_exit_on_usr2 >= 0) _exit(g_exit_on_usr2);
}

void install_signals(const Settings& s) {
  g_ignore_term = s.ignore_sigterm;
  g_ignore_int = s.ignore_sigint;
  g_exit_on_usr2 = s.exit_on_usr2;
  if (!s.record_signals.empty()) {
    std::snprintf(g_record_path, sizeof g_record_path, "%s", expand(s.record_signals).c_str());
    struct sigaction action{};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    for (int sig : {SIGHUP, SIGINT, SIGTERM, SIGUSR1, SIGUSR2}) sigaction(sig, &action, nullptr);
    return;
  }
  if (s.ignore_sigterm) signal(SIGTERM, SIG_IGN);
  if (s.ignore_sigint) signal(SIGINT, SIG_IGN);
}

void sleep_for(double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void wait_for_file(const std::string& path) {
  while (!file_exists(path)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

// ---- rendezvous: proves that every rank agrees on MASTER_ADDR:MASTER_PORT ----
int rendezvous() {
  int rank = env_int("RANK", 0), world = env_int("WORLD_SIZE", 1);
  const char* host = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  addrinfo hints{}, *found = nullptr;
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  if (!host || !port || getaddrinfo(host, port, &hints, &found) != 0) {
    std::fprintf(stderr, "rendezvous: cannot resolve MASTER_ADDR/MASTER_PORT\n");
    return 101;
  }
  int fd = socket(found->ai_family, SOCK_STREAM, 0);
  if (rank == 0) {
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      std::fprintf(stderr, "rendezvous: rank 0 cannot listen on %s:%s: %s\n", host, port, strerror(errno));
      return 102;
    }
    std::set<int> seen;
    std::vector<int> peers;
    while (static_cast<int>(seen.size()) < world - 1) {
      int peer = accept(fd, nullptr, nullptr);
      if (peer < 0) continue;
      char buffer[32] = {};
      ssize_t n = read(peer, buffer, sizeof buffer - 1);
      if (n > 0) seen.insert(std::atoi(buffer));
      peers.push_back(peer);
    }
    for (int peer : peers) write_all(peer, "ok\n"), close(peer);
    std::string list;
    for (int r : seen) list += (list.empty() ? "" : ",") + std::to_string(r);
    std::printf("rendezvous: rank 0 saw ranks %s\n", list.c_str());
  } else {
    auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    while (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        std::fprintf(stderr, "rendezvous: rank %d cannot reach %s:%s\n", rank, host, port);
        return 103;
      }
      close(fd);
      fd = socket(found->ai_family, SOCK_STREAM, 0);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    write_all(fd, std::to_string(rank) + "\n");
    char buffer[8] = {};
    if (read(fd, buffer, sizeof buffer - 1) <= 0 || std::string(buffer) != "ok\n") return 104;
    std::printf("rendezvous: rank %d joined\n", rank);
  }
  close(fd);
  freeaddrinfo(found);
  std::fflush(stdout);
  return 0;
}

void print_lines(long count) {
  int rank = env_int("RANK", 0);
  for (long i = 0; i < count; ++i)
    for (int fd : {1, 2}) {
      size_t length = static_cast<size_t>((i * 37) % 300 + 10);
      std::string line = "rank=" + std::to_string(rank) + " stream=" + (fd == 1 ? "out" : "err") +
                         " line=" + std::to_string(i) + " payload=" +
                         std::string(length, static_cast<char>('a' + i % 26)) + "\n";
      // Three write() calls per line: the launcher must reassemble it.
      size_t third = line.size() / 3;
      write_all(fd, line.substr(0, third));
      write_all(fd, line.substr(third, third));
      write_all(fd, line.substr(2 * third));
    }
}

bool parse_pair(const char* text, int* a, int* b) { return std::sscanf(text, "%d:%d", a, b) == 2; }

}  // namespace

int main(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "test-worker: %s needs a value\n", a.c_str());
        std::exit(99);
      }
      return argv[++i];
    };
    if (a == "--record-signals") s.record_signals = value();
    else if (a == "--ignore-sigterm") s.ignore_sigterm = true;
    else if (a == "--exit-on-usr2") s.exit_on_usr2 = std::atoi(value());
    else if (a == "--ignore-sigint") s.ignore_sigint = true;
    else if (a == "--spawn-grandchild") s.spawn_grandchild = true;
    else if (a == "--pid-file") s.pid_file = value();
    else if (a == "--print-env") s.print_env = true;
    else if (a == "--rendezvous") s.rendezvous = true;
    else if (a == "--say") s.says.emplace_back(1, value());
    else if (a == "--say-err") s.says.emplace_back(2, value());
    else if (a == "--lines") s.lines = std::atol(value());
    else if (a == "--long-line") s.long_line = std::atol(value());
    else if (a == "--ready-file") s.ready_file = value();
    else if (a == "--barrier") s.barrier = value();
    else if (a == "--fail-on-attempt") s.fail_on_attempts.insert(std::atoi(value()));
    else if (a == "--exit-on-rank") { if (!parse_pair(value(), &s.exit_on_rank, &s.exit_on_rank_code)) return 99; }
    else if (a == "--kill-self") s.kill_self = std::atoi(value());
    else if (a == "--kill-self-on-rank") { if (!parse_pair(value(), &s.kill_self_on_rank, &s.kill_self_on_rank_sig)) return 99; }
    else if (a == "--sleep") s.sleep_seconds = std::atof(value());
    else if (a == "--exit") s.exit_code = std::atoi(value());
    else {
      std::fprintf(stderr, "test-worker: unknown argument %s\n", a.c_str());
      return 99;
    }
  }
  const int rank = env_int("RANK", 0);
  const int attempt = env_int("RESTART_COUNT", 0);

  install_signals(s);
  pid_t grandchild = 0;
  if (s.spawn_grandchild) {
    grandchild = fork();
    if (grandchild == 0) {
      while (true) pause();  // no PR_SET_PDEATHSIG here: the launcher must clean up
    }
  }
  if (!s.pid_file.empty())
    write_file_atomically(expand(s.pid_file), std::to_string(getpid()) + " " + std::to_string(grandchild) + "\n");
  if (s.print_env) {
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GROUP_WORLD_SIZE",
          "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT", "RESTART_COUNT",
          "MAX_RESTARTS", "RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
          "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
          "DDP_LAUNCH_MIN_NNODES", "DDP_LAUNCH_MAX_NNODES", "DDP_LAUNCH_MEMBERSHIP"}) {
      const char* v = std::getenv(name);
      std::printf("env %s=%s\n", name, v ? v : "<unset>");
    }
    std::fflush(stdout);
  }
  if (s.rendezvous) {
    int code = rendezvous();
    if (code != 0) return code;
  }
  for (const auto& [fd, text] : s.says) write_all(fd, text + "\n");
  if (s.lines > 0) print_lines(s.lines);
  if (s.long_line > 0) write_all(1, std::string(static_cast<size_t>(s.long_line), 'x') + "\n");
  if (!s.ready_file.empty()) write_file_atomically(expand(s.ready_file), "ready\n");
  if (!s.barrier.empty()) {
    write_file_atomically(expand(s.barrier), "here\n");
    int world = env_int("WORLD_SIZE", 1);
    for (int r = 0; r < world; ++r) {
      std::string path = s.barrier;
      for (size_t p; (p = path.find("%r")) != std::string::npos;) path.replace(p, 2, std::to_string(r));
      for (size_t p; (p = path.find("%a")) != std::string::npos;) path.replace(p, 2, std::to_string(attempt));
      wait_for_file(path);
    }
  }
  if (s.fail_on_attempts.count(attempt)) {
    std::fprintf(stderr, "test-worker: rank %d failing on attempt %d\n", rank, attempt);
    return 3;
  }
  if (s.exit_on_rank == rank) {
    std::fprintf(stderr, "test-worker: rank %d exits with %d\n", rank, s.exit_on_rank_code);
    return s.exit_on_rank_code;
  }
  if (s.kill_self_on_rank == rank && s.kill_self_on_rank_sig > 0) {
    signal(s.kill_self_on_rank_sig, SIG_DFL);
    raise(s.kill_self_on_rank_sig);
  }
  if (s.kill_self > 0) {
    signal(s.kill_self, SIG_DFL);
    raise(s.kill_self);
  }
  if (s.sleep_seconds > 0) sleep_for(s.sleep_seconds);
  return s.exit_code;
}
