// Internal to the launcher: starting the worker group, watching it, stopping it, and
// starting it again after a failure while restarts are left.
#pragma once

#include <string>
#include <vector>

#include "launch/launcher.h"

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

}  // namespace ddp_embed::launch
