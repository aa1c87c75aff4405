// The launchers of a multi-host test as background jobs: started, waited for with a
// bound (never hanging the test), and the events they are waited on for.
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

#include "../torch/e2e_support.h"
#include "test_hosts.h"

namespace multihost {

using Clock = std::chrono::steady_clock;

struct Job {
  pid_t pid = -1;
  fs::path output;  // the launcher's stdout + stderr
  int status = -1;  // exit status once waited
  double seconds = -1;  // from `since` to its exit, once waited
};

// Waits for the job's launcher up to `limit` s; false (and the launcher killed) if it is
// still running then.
inline bool finish(Job& j, Clock::time_point since, double limit) {
  const auto end = Clock::now() + std::chrono::duration<double>(limit);
  int status = 0;
  while (::waitpid(j.pid, &status, WNOHANG) == 0) {
    if (Clock::now() > end) {
      ::kill(-j.pid, SIGKILL);
      ::waitpid(j.pid, &status, 0);
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  j.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  j.seconds = std::chrono::duration<double>(Clock::now() - since).count();
  return true;
}

// Waits for several launchers at once, so that each one's time is its own.
inline bool finish_all(std::vector<Job*> jobs, Clock::time_point since, double limit) {
  const auto end = Clock::now() + std::chrono::duration<double>(limit);
  bool all = true;
  for (;;) {
    bool running = false;
    for (Job* j : jobs) {
      int status = 0;
      if (j->status >= 0) continue;
      if (::waitpid(j->pid, &status, WNOHANG) == 0) {
        running = true;
        continue;
      }
      j->status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      j->seconds = std::chrono::duration<double>(Clock::now() - since).count();
    }
    if (!running) return all;
    if (Clock::now() > end) {
      for (Job* j : jobs)
        if (j->status < 0 && finish(*j, since, 0)) all = false;
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Seconds from `since` until no process is left on host i (at most `limit`), or -1.
inline double all_gone(const TestHosts& hosts, int i, Clock::time_point since, double limit) {
  const bool gone = e2e::wait_for([&] { return hosts.pids(i).empty(); },
                                  std::chrono::seconds(static_cast<int>(limit)));
  return gone ? std::chrono::duration<double>(Clock::now() - since).count() : -1;
}

// Training has reached step `step` (rank 0's metrics.jsonl).
inline bool reached(const fs::path& out, size_t step) {
  return e2e::wait_for([&] { return e2e::metric_lines(out).size() >= step; }, std::chrono::seconds(180));
}

}  // namespace multihost
