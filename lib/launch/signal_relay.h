// Internal to the launcher: turns asynchronous signals into bytes on a pipe, so the
// supervisor's poll() loop handles them like any other event (no work in handlers).
#pragma once

#include <csignal>
#include <string>
#include <vector>

namespace ddp_embed::launch {

// The signals ddp-launch passes on to its workers.
inline constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGUSR2};

class SignalRelay {
 public:
  // Installs handlers for the forwarded signals and SIGCHLD, and ignores SIGPIPE (a
  // closed console must not kill the launcher and, with it, the job). SIGINT and SIGHUP
  // stay ignored when the launcher started with them ignored (a background job, nohup),
  // and the workers then inherit that. Call once.
  static bool install(std::string* error);

  // The read end to poll for POLLIN.
  static int fd();

  // The signals received since the last call, in order (SIGCHLD coalesces).
  static std::vector<int> take_pending();

  // Blocks every signal; used around fork() so that a signal cannot reach a child that
  // still runs the launcher's handlers.
  static void block_all(sigset_t* previous);
  static void restore(const sigset_t& previous);

  // In a forked child before exec: default handlers, SIGPIPE as the launcher found it,
  // no blocked signals. Async-signal-safe.
  static void reset_in_child();
};

}  // namespace ddp_embed::launch
