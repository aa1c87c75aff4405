// Internal to the launcher: the elastic rendezvous server. It accepts the launchers'
// connections, reads their messages (JSON lines, line_channel.h), feeds them and the
// passing time to RendezvousRounds (rendezvous_rounds.h, where every decision is), and
// sends what that returns. It also keeps the heartbeats: a connection silent for
// kHeartbeatTimeout is a lost node (a cut link closes nothing).
//
// The protocol (the ops, their fields, what a line that does not read does):
// rendezvous_protocol.h.
//
// Where it runs: in a child process of the launcher whose node the endpoint names
// (start_rendezvous_server()), so that a busy launcher never delays a heartbeat and the
// server dies with that launcher, whatever kills it; or alone (ddp-launch
// --serve-rendezvous PORT), where it ends with the job.
#pragma once

#include <sys/types.h>

#include <string>

#include "launch/rendezvous_rounds.h"

namespace ddp_embed::launch {

// Serves the job `job` (its settings: never a joiner's) on `listen_fd` (listening) until it
// is finished or aborted; `quit_fd` (-1: none) reading end-of-file also ends it. Every
// connection must first prove `secret` (job_secret.h; "": none, anyone may join); one
// that does not, or says what the protocol does not allow, is closed before it touches the
// job, and counted in the log. Its log lines go to stderr, prefixed "ddp-launch: rendezvous: ".
// Returns 0 when the job finished, 1 when it aborted or quit.
int serve_rendezvous(int listen_fd, int quit_fd, const RendezvousJob& job, const std::string& secret);

struct LaunchOptions;

// `ddp-launch --serve-rendezvous PORT --nnodes MIN:MAX`: the server alone, until the job
// ends, with the job's settings from its own command line (`options`); `secret` as above.
// Returns the launcher's exit status.
int serve_rendezvous_alone(const LaunchOptions& options, const std::string& secret);

// Forks the server of this launcher's node: its own process group (a Ctrl-C to the
// launcher's group does not reach it), killed when the launcher dies
// (PR_SET_PDEATHSIG). Takes `listen_fd` (closed here). Returns its pid, or -1 with *error.
class RendezvousServerProcess {
 public:
  RendezvousServerProcess() = default;
  RendezvousServerProcess(const RendezvousServerProcess&) = delete;
  RendezvousServerProcess& operator=(const RendezvousServerProcess&) = delete;
  ~RendezvousServerProcess();  // stop()

  bool start(int listen_fd, const RendezvousJob& job, const std::string& secret, std::string* error);
  pid_t pid() const { return pid_; }
  // Whether it still serves (reaps it once it has ended; false too when the supervisor's
  // reaping of every child got it first).
  bool running();
  // Ends it (the quit pipe closes; SIGKILL if it lingers) and reaps it, unless the
  // supervisor's reaping already did.
  void stop();

 private:
  pid_t pid_ = -1;
  int quit_fd_ = -1;  // the write end: closing it tells the server to end
};

}  // namespace ddp_embed::launch
