// Internal to the launcher: starting the worker group, watching it, stopping it, and
// starting it again after a failure while restarts are left.
//
//   supervise()     a job of fixed membership: attempts until success or no restart left
//   WorkerGroup     one attempt at a time, for supervise() and for the elastic agent
//                   (elastic_agent.h), which also watches its rendezvous connection through
//                   AttemptHooks and may order the group to stop
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "launch/failure_report.h"
#include "launch/launcher.h"
#include "launch/worker_process.h"

namespace ddp_embed::launch {

// Everything decided before the first worker starts.
struct LaunchPlan {
  JobLayout layout;                // master_port is concrete here (never 0)
  std::string program_path;        // resolved executable
  std::vector<std::string> argv;   // argv[0] as the user typed it
  Environment base_env;            // the launcher's environment
  int omp_threads = 0;             // > 0: OMP_NUM_THREADS for every worker
  std::string host;                // this node's name, for reports
};

// Runs the job and returns the launcher's exit status: 0, the first failed worker's
// status (128+N for signal N) once no restart is left, or what the workers returned
// after a forwarded SIGINT/SIGTERM/SIGHUP. Expects SignalRelay to be installed.
int supervise(const LaunchPlan& plan);

// What an attempt must do besides watching its workers, on an order of its hooks.
enum class GroupOrder {
  none,
  checkpoint_and_exit,  // SIGUSR2 to every worker: finish the step, checkpoint, exit 75
  stop_now,             // SIGTERM to every worker, SIGKILL after --grace
};

// Something else an attempt's poll() loop watches: the elastic rendezvous connection.
class AttemptHooks {
 public:
  virtual ~AttemptHooks() = default;
  // A descriptor to poll, and the events to poll it for (-1: none).
  virtual int fd() const = 0;
  virtual short events() const = 0;
  // When the loop must wake up at the latest (heartbeats), if ever.
  virtual std::optional<std::chrono::steady_clock::time_point> deadline() const = 0;
  // After every wake-up: read, write, send heartbeats; what the group must do now.
  virtual GroupOrder poll() = 0;
  // A worker failed on its own (the attempt's root cause), as it happens.
  virtual void worker_failed(const WorkerExit& exit) = 0;
  // SIGINT/SIGTERM/SIGHUP reached the launcher. true: the hooks take it over (and order
  // a stop through poll()); false: the group passes it on to the workers as usual.
  virtual bool stop_signal(int sig) = 0;
};

enum class AttemptEnd {
  success,         // every worker exited 0
  failure,         // a worker failed on its own: the root cause
  stopped,         // a stop signal was passed on to the workers, and they ended
  ordered,         // the hooks ordered the stop (a membership change or a lost node)
  launcher_error,  // cannot watch or start the workers, cannot write --log-dir
};

// The workers of one node, one attempt at a time.
class WorkerGroup {
 public:
  explicit WorkerGroup(const Environment& base_env);
  ~WorkerGroup();
  WorkerGroup(const WorkerGroup&) = delete;
  WorkerGroup& operator=(const WorkerGroup&) = delete;

  // The orphan guard, and for a single-node job its private rendezvous directory. false
  // (with *error) when the directory cannot be made.
  bool prepare(bool single_node, std::string* error);
  // Starts the plan's workers as attempt `attempt` (their RESTART_COUNT), supervises them
  // until every one has ended, and says how the attempt ended.
  AttemptEnd run(const LaunchPlan& plan, int attempt, AttemptHooks* hooks = nullptr);

  // About the attempt that just ended.
  int last_status() const;           // the root cause's, or the first non-zero after a stop
  FailureReport report(int attempt) const;  // after AttemptEnd::failure
  const std::string& attempt_dir() const;  // DIR/attempt<A> with --log-dir, else ""
  int stop_request() const;          // the first SIGINT/SIGTERM/SIGHUP received, or 0
  // Signals that arrived between attempts: a stop request is remembered.
  void take_signals_between_attempts();
  // After a stop request: one line per worker that did not obey, and the status line.
  void report_stop() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ddp_embed::launch
