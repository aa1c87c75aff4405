// Process start-up for workers, and the orphan guard (see worker_process.h).
#include "launch/worker_process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <set>

#include "launch/signal_relay.h"

namespace ddp_embed::launch {
namespace {

// One message on the guard's channel. 8 bytes: pipe writes this small are atomic, so
// messages from the launcher and from starting workers never mix.
struct GuardMessage {
  int32_t op;  // kRegister or kForget
  int32_t group;
};
constexpr int32_t kRegister = 1;
constexpr int32_t kForget = 2;

void write_fully(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    size -= static_cast<size_t>(n);
  }
}

// A directory of plain files (the launcher's rendezvous files) and the directory itself.
void remove_private_dir(const std::string& path) {
  if (path.empty()) return;
  if (DIR* dir = opendir(path.c_str())) {
    while (dirent* e = readdir(dir)) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") unlink((path + "/" + name).c_str());
    }
    closedir(dir);
  }
  rmdir(path.c_str());
}

[[noreturn]] void run_guard(int channel, const std::string& private_dir) {
  setpgid(0, 0);
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGCHLD})
    sigaction(sig, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  // Hold nothing of the launcher's: a guard keeping the launcher's stdout pipe open would
  // make whoever reads it wait for the guard.
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0), dup2(devnull, 1), dup2(devnull, 2);
  }
  if (channel != 3) {
    dup2(channel, 3);
    channel = 3;
  }
  if (close_range(4, ~0u, 0) != 0)
    for (int fd = 4; fd < 1024; ++fd) close(fd);

  std::set<pid_t> groups;
  GuardMessage messages[64];
  size_t have = 0;
  while (true) {
    ssize_t n = read(channel, reinterpret_cast<char*>(messages) + have, sizeof messages - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: the launcher is gone (or done)
    have += static_cast<size_t>(n);
    size_t whole = have / sizeof(GuardMessage);
    for (size_t i = 0; i < whole; ++i) {
      if (messages[i].op == kRegister) groups.insert(messages[i].group);
      if (messages[i].op == kForget) groups.erase(messages[i].group);
    }
    size_t rest = have - whole * sizeof(GuardMessage);
    std::memmove(messages, reinterpret_cast<char*>(messages) + whole * sizeof(GuardMessage), rest);
    have = rest;
  }
  for (pid_t group : groups)
    if (group > 1) kill(-group, SIGKILL);
  remove_private_dir(private_dir);
  _exit(0);
}

}  // namespace

OrphanGuard::~OrphanGuard() { stop(); }

bool OrphanGuard::start(std::string* error, const std::string& private_dir) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    if (error) *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  sigset_t previous;
  SignalRelay::block_all(&previous);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[1]);
    run_guard(fds[0], private_dir);
  }
  int fork_errno = errno;
  SignalRelay::restore(previous);
  close(fds[0]);
  if (pid < 0) {
    close(fds[1]);
    if (error) *error = std::string("fork: ") + std::strerror(fork_errno);
    return false;
  }
  setpgid(pid, pid);  // also done by the guard; whichever runs first
  pid_ = pid;
  channel_ = fds[1];
  return true;
}

void OrphanGuard::register_group(int channel, pid_t group) {
  GuardMessage message{kRegister, static_cast<int32_t>(group)};
  write_fully(channel, &message, sizeof message);
}

void OrphanGuard::forget(pid_t group) const {
  if (channel_ < 0) return;
  GuardMessage message{kForget, static_cast<int32_t>(group)};
  write_fully(channel_, &message, sizeof message);
}

void OrphanGuard::stop() {
  if (channel_ >= 0) close(channel_);
  channel_ = -1;
  if (pid_ > 0) {
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

bool start_worker(const WorkerCommand& command, const OrphanGuard& guard,
                  StartedWorker* started, std::string* error) {
  auto fail = [&](const char* what) {
    if (error) *error = std::string(what) + ": " + std::strerror(errno);
    return false;
  };
  int out_pipe[2], err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0) return fail("pipe");
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    int saved = errno;
    close(out_pipe[0]), close(out_pipe[1]);
    errno = saved;
    return fail("pipe");
  }
  int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);

  // Everything the child needs is built before fork().
  std::vector<char*> argv, envp;
  for (const auto& a : command.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : command.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t launcher = getpid();
  const int channel = guard.channel();

  sigset_t previous;
  SignalRelay::block_all(&previous);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // Registered before anything can run in the group, so the guard always knows it.
    if (channel >= 0) OrphanGuard::register_group(channel, getpid());
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher may have died before prctl() took effect; then nobody would send it.
    if (getppid() != launcher) _exit(128 + SIGKILL);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out_pipe[1], 1);
    dup2(err_pipe[1], 2);
    SignalRelay::reset_in_child();
    execve(command.path.c_str(), argv.data(), envp.data());
    const char* reason = std::strerror(errno);
    std::string message = "ddp-launch: cannot execute " + command.path + ": " + reason + "\n";
    write_fully(2, message.data(), message.size());
    _exit(127);
  }
  int fork_errno = errno;
  SignalRelay::restore(previous);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(out_pipe[0]), close(err_pipe[0]);
    errno = fork_errno;
    return fail("fork");
  }
  // Also here, so that a stop signal sent right after fork() reaches the new group.
  setpgid(pid, pid);
  fcntl(out_pipe[0], F_SETFL, O_NONBLOCK);
  fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);
  started->pid = pid;
  started->stdout_fd = out_pipe[0];
  started->stderr_fd = err_pipe[0];
  return true;
}

void signal_group(pid_t group, int sig) {
  if (group > 1) kill(-group, sig);
}

}  // namespace ddp_embed::launch
