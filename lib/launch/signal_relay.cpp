// The self-pipe trick: each handler writes its signal number into a non-blocking pipe
// and returns; the supervisor polls the read end.
#include "launch/signal_relay.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ddp_embed::launch {
namespace {

int g_pipe[2] = {-1, -1};
bool g_caught[NSIG] = {};            // signals whose handler we installed
struct sigaction g_original_sigpipe;  // restored in children

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  // A full pipe drops the byte: SIGCHLD is re-checked by waitid anyway, and a flood of
  // identical signals needs handling only once.
  ssize_t ignored = write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

bool catch_signal(int sig, bool keep_if_ignored, std::string* error) {
  struct sigaction current;
  sigaction(sig, nullptr, &current);
  if (keep_if_ignored && current.sa_handler == SIG_IGN) return true;
  struct sigaction action{};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
  if (sigaction(sig, &action, nullptr) != 0) {
    if (error) *error = std::string("sigaction: ") + std::strerror(errno);
    return false;
  }
  g_caught[sig] = true;
  return true;
}

}  // namespace

bool SignalRelay::install(std::string* error) {
  if (pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    if (error) *error = std::string("pipe: ") + std::strerror(errno);
    return false;
  }
  struct sigaction ignore{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  sigaction(SIGPIPE, &ignore, &g_original_sigpipe);

  for (int sig : kForwardedSignals)
    if (!catch_signal(sig, sig == SIGINT || sig == SIGHUP, error)) return false;
  if (!catch_signal(SIGCHLD, false, error)) return false;

  // A parent may have started us with some of these blocked; we need them delivered.
  sigset_t unblock;
  sigemptyset(&unblock);
  for (int sig : kForwardedSignals) sigaddset(&unblock, sig);
  sigaddset(&unblock, SIGCHLD);
  sigprocmask(SIG_UNBLOCK, &unblock, nullptr);
  return true;
}

int SignalRelay::fd() { return g_pipe[0]; }

std::vector<int> SignalRelay::take_pending() {
  std::vector<int> signals;
  unsigned char buffer[256];
  while (true) {
    ssize_t n = read(g_pipe[0], buffer, sizeof buffer);
    if (n > 0) {
      signals.insert(signals.end(), buffer, buffer + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;  // EAGAIN: empty
  }
  return signals;
}

void SignalRelay::block_all(sigset_t* previous) {
  sigset_t all;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, previous);
}

void SignalRelay::restore(const sigset_t& previous) {
  sigprocmask(SIG_SETMASK, &previous, nullptr);
}

void SignalRelay::reset_in_child() {
  // Handlers first, while everything is still blocked: a signal that arrived since
  // fork() must take its default action in the worker, not write into our pipe.
  struct sigaction default_action{};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig)
    if (g_caught[sig]) sigaction(sig, &default_action, nullptr);
  sigaction(SIGPIPE, &g_original_sigpipe, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
}

}  // namespace ddp_embed::launch
