// Internal to the launcher: how a worker ended, and the report (console text and
// failure.json) that says which rank failed first and why.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace ddp_embed::launch {

struct WorkerExit {
  enum class Fate {
    finished,  // exited 0 on its own
    failed,    // exited non-zero or was killed, before the launcher stopped it
    stopped,   // the launcher was stopping it (after another's failure or a signal)
  };
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool signaled = false;
  int exit_code = 0;  // when !signaled
  int signal = 0;     // when signaled
  std::string time;   // when it ended, UTC ISO 8601
  Fate fate = Fate::finished;
  int launcher_signal = 0;  // the last stop signal ddp-launch sent it (0: none)
  std::string kill_reason;  // why ddp-launch sent SIGKILL, e.g. "second SIGINT"
  std::vector<std::string> last_lines;
};

// The shell's convention: the exit code, or 128+N for signal N.
int exit_status_of(const WorkerExit& exit);

// "SIGKILL"; "signal 42" for the ones without a name here.
std::string signal_name(int sig);

// "exit code 7", or "SIGKILL (9) — killed, possibly out of memory".
std::string describe_exit(const WorkerExit& exit);

struct FailureReport {
  std::string run_id;
  std::string host;
  int attempt = 0;
  size_t root_cause = 0;  // index into workers: the first failure
  std::vector<WorkerExit> workers;
  // Restart accounting: this node's failures so far (this one included) against its
  // --max-restarts; for an elastic job also the job's membership changes so far against
  // --max-membership-changes (-1: a job of fixed membership, not counted).
  int failures = 1;
  int max_restarts = 0;
  int membership_changes = -1;
  int max_membership_changes = -1;
};

// The multi-line stderr report.
std::string format_failure_report(const FailureReport& report);
// The same facts as JSON (DIR/attempt<A>/failure.json).
std::string format_failure_json(const FailureReport& report);
// One line: why attempt A failed and that the group restarts.
std::string format_restart_line(const FailureReport& report, int restart, int max_restarts);

// Now, as UTC ISO 8601 with milliseconds.
std::string utc_timestamp_now();

}  // namespace ddp_embed::launch
