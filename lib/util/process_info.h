// What the log says about this process: its peak memory and how long it has been running.
#pragma once

#include <chrono>

namespace ddp_embed {

// Seconds from `start` to now, on the steady clock: what a log line says an event took.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The peak resident set of this process so far, in MB (getrusage's ru_maxrss).
double peak_rss_mb();

// Seconds since this process was created (/proc/self/stat's start time against
// /proc/uptime), so that start-up counts loading the libraries too; 0 where /proc is missing.
double seconds_since_process_start();

}  // namespace ddp_embed
