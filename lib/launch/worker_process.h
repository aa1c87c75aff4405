// Internal to the launcher: starting one worker process, and making sure no worker (nor
// anything it started) outlives the launcher.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddp_embed::launch {

// Kills the process groups of the workers if the launcher dies, however it dies.
//
// Why a separate process: PR_SET_PDEATHSIG on each worker makes the worker itself die
// with the launcher, but not the worker's own children (data loaders, compilers, shell
// pipelines), which would be re-parented and live on, holding GPUs. The guard is a tiny
// forked copy of the launcher, in its own process group (so a signal to the launcher's
// group does not reach it), that reads a pipe only the launcher holds open. Each worker
// registers its process group there before it execs; when the pipe reports EOF — the
// launcher exited or was SIGKILLed — the guard SIGKILLs every group still registered,
// then removes the launcher's private rendezvous directory, if it has one (a SIGKILLed
// launcher runs no destructor).
class OrphanGuard {
 public:
  OrphanGuard() = default;
  OrphanGuard(const OrphanGuard&) = delete;
  OrphanGuard& operator=(const OrphanGuard&) = delete;
  ~OrphanGuard();

  // private_dir: a directory of plain files to remove when the launcher is gone ("": none).
  bool start(std::string* error, const std::string& private_dir = "");
  // The write end, for a forked worker to register itself with before exec.
  int channel() const { return channel_; }
  pid_t pid() const { return pid_; }
  // The group is finished (its leader is a zombie not yet reaped, so its id cannot have
  // been reused): the guard must not kill it any more.
  void forget(pid_t group) const;
  // Closes the channel (nothing is registered any more) and reaps the guard.
  void stop();
  // The guard exited on its own (the supervisor reaped it).
  void mark_gone() { pid_ = -1; }

  // Written by register_group() in the child; the guard's wire format.
  static void register_group(int channel, pid_t group);  // async-signal-safe

 private:
  int channel_ = -1;
  pid_t pid_ = -1;
};

struct WorkerCommand {
  std::string path;               // resolved executable
  std::vector<std::string> argv;  // argv[0] as the user typed it
  std::vector<std::string> env;   // "NAME=value"
};

struct StartedWorker {
  pid_t pid = -1;         // also its process-group id
  int stdout_fd = -1;     // read ends, non-blocking, close-on-exec
  int stderr_fd = -1;
};

// Forks and execs one worker: its own process group, PR_SET_PDEATHSIG(SIGKILL), stdin
// from /dev/null, stdout/stderr into fresh pipes, default signal handling. An exec
// failure shows up as exit code 127 with a message on the worker's stderr.
bool start_worker(const WorkerCommand& command, const OrphanGuard& guard,
                  StartedWorker* started, std::string* error);

// Sends `sig` to a worker's whole process group (its children too); a group that is
// already gone is not an error.
void signal_group(pid_t group, int sig);

}  // namespace ddp_embed::launch
