// Formatting of exits and failure reports (text and JSON).
#include "launch/failure_report.h"

#include <sys/time.h>

#include <csignal>
#include <cstdio>
#include <ctime>

namespace ddp_embed::launch {
namespace {

struct SignalInfo {
  int number;
  const char* name;
  const char* meaning;
};

constexpr SignalInfo kSignals[] = {
    {SIGHUP, "SIGHUP", "hangup"},
    {SIGINT, "SIGINT", "interrupted"},
    {SIGQUIT, "SIGQUIT", "quit"},
    {SIGILL, "SIGILL", "illegal instruction"},
    {SIGTRAP, "SIGTRAP", "trace trap"},
    {SIGABRT, "SIGABRT", "aborted (failed assertion or uncaught exception?)"},
    {SIGBUS, "SIGBUS", "bus error (bad memory access)"},
    {SIGFPE, "SIGFPE", "arithmetic exception"},
    {SIGKILL, "SIGKILL", "killed, possibly out of memory"},
    {SIGUSR1, "SIGUSR1", "user signal 1"},
    {SIGSEGV, "SIGSEGV", "segmentation fault"},
    {SIGUSR2, "SIGUSR2", "user signal 2"},
    {SIGPIPE, "SIGPIPE", "broken pipe"},
    {SIGALRM, "SIGALRM", "alarm clock"},
    {SIGTERM, "SIGTERM", "terminated"},
    {SIGXCPU, "SIGXCPU", "CPU time limit exceeded"},
    {SIGXFSZ, "SIGXFSZ", "file size limit exceeded"},
    {SIGSYS, "SIGSYS", "bad system call"},
};

const SignalInfo* find_signal(int sig) {
  for (const auto& s : kSignals)
    if (s.number == sig) return &s;
  return nullptr;
}

std::string worker_label(const WorkerExit& w) {
  return "rank " + std::to_string(w.rank) + " (local rank " + std::to_string(w.local_rank) +
         ", pid " + std::to_string(w.pid) + ")";
}

// JSON string with escapes; invalid UTF-8 bytes become U+FFFD so the file stays valid.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      char escape[8];
      switch (c) {
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          std::snprintf(escape, sizeof escape, "\\u%04x", c);
          out += escape;
      }
      ++i;
    } else if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
    } else {
      size_t length = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 ? 3 : c >= 0xC2 && c < 0xE0 ? 2 : 0;
      bool valid = length > 0 && i + length <= s.size();
      for (size_t k = 1; valid && k < length; ++k)
        valid = (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80;
      if (valid) {
        out.append(s, i, length);
        i += length;
      } else {
        out += "\xEF\xBF\xBD";
        ++i;
      }
    }
  }
  return out + "\"";
}

const char* fate_name(WorkerExit::Fate fate) {
  switch (fate) {
    case WorkerExit::Fate::finished: return "finished";
    case WorkerExit::Fate::failed: return "failed";
    case WorkerExit::Fate::stopped: return "stopped by ddp-launch";
  }
  return "";
}

std::string worker_json(const WorkerExit& w, const char* indent) {
  std::string in = indent;
  std::string out = "{\n";
  out += in + "  \"rank\": " + std::to_string(w.rank) + ",\n";
  out += in + "  \"local_rank\": " + std::to_string(w.local_rank) + ",\n";
  out += in + "  \"pid\": " + std::to_string(w.pid) + ",\n";
  out += in + "  \"fate\": " + json_string(fate_name(w.fate)) + ",\n";
  out += in + "  \"exit_code\": " + (w.signaled ? "null" : std::to_string(w.exit_code)) + ",\n";
  out += in + "  \"signal\": " + (w.signaled ? std::to_string(w.signal) : "null") + ",\n";
  out += in + "  \"signal_name\": " + (w.signaled ? json_string(signal_name(w.signal)) : "null") + ",\n";
  out += in + "  \"exit_status\": " + std::to_string(exit_status_of(w)) + ",\n";
  out += in + "  \"description\": " + json_string(describe_exit(w)) + ",\n";
  out += in + "  \"time\": " + json_string(w.time) + ",\n";
  out += in + "  \"last_lines\": [";
  for (size_t i = 0; i < w.last_lines.size(); ++i)
    out += (i ? ",\n" : "\n") + in + "    " + json_string(w.last_lines[i]);
  out += w.last_lines.empty() ? "]\n" : "\n" + in + "  ]\n";
  return out + in + "}";
}

}  // namespace

int exit_status_of(const WorkerExit& exit) {
  return exit.signaled ? 128 + exit.signal : exit.exit_code;
}

std::string signal_name(int sig) {
  const SignalInfo* info = find_signal(sig);
  return info ? info->name : "signal " + std::to_string(sig);
}

std::string describe_exit(const WorkerExit& exit) {
  if (!exit.signaled) {
    std::string text = "exit code " + std::to_string(exit.exit_code);
    if (exit.exit_code == 127) text += " (command not found or could not be executed)";
    return text;
  }
  const SignalInfo* info = find_signal(exit.signal);
  std::string text = signal_name(exit.signal) + " (" + std::to_string(exit.signal) + ")";
  if (exit.signal == SIGKILL && exit.launcher_signal == SIGKILL)
    return text + " \xE2\x80\x94 killed by ddp-launch" +
           (exit.kill_reason.empty() ? std::string() : " (" + exit.kill_reason + ")");
  if (exit.signal == exit.launcher_signal && exit.signal != SIGKILL)
    return text + " \xE2\x80\x94 " + (info ? info->meaning : "signal") + " (sent by ddp-launch)";
  return info ? text + " \xE2\x80\x94 " + info->meaning : text;
}

std::string format_failure_report(const FailureReport& r) {
  const WorkerExit& root = r.workers.at(r.root_cause);
  std::string out = "ddp-launch: ===== worker failure (run " + r.run_id + ", attempt " +
                    std::to_string(r.attempt) + ") =====\n";
  out += "  root cause : rank " + std::to_string(root.rank) + " (local rank " +
         std::to_string(root.local_rank) + ") on host " + r.host + ", pid " +
         std::to_string(root.pid) + "\n";
  out += "  exit       : " + describe_exit(root) + "\n";
  out += "  time       : " + root.time + "\n";
  if (root.last_lines.empty()) {
    out += "  last lines : (it printed nothing)\n";
  } else {
    out += "  last lines : (" + std::to_string(root.last_lines.size()) + ", oldest first)\n";
    for (const auto& line : root.last_lines) out += "    | " + line + "\n";
  }
  auto list = [&](WorkerExit::Fate fate, const char* title) {
    bool first = true;
    for (size_t i = 0; i < r.workers.size(); ++i) {
      const WorkerExit& w = r.workers[i];
      if (i == r.root_cause || w.fate != fate) continue;
      out += (first ? std::string(title) : std::string(15, ' ')) + worker_label(w) + ": " +
             describe_exit(w) + (fate == WorkerExit::Fate::failed ? " at " + w.time : "") +
             "\n";
      first = false;
    }
  };
  list(WorkerExit::Fate::failed, "  also failed: ");
  list(WorkerExit::Fate::stopped, "  stopped    : ");
  list(WorkerExit::Fate::finished, "  finished   : ");
  out += "  restarts   : " + std::to_string(r.failures) + " failure(s) on this node, --max-restarts " +
         std::to_string(r.max_restarts);
  if (r.membership_changes >= 0)
    out += "; " + std::to_string(r.membership_changes) + " membership change(s) of the job, --max-membership-changes " +
           std::to_string(r.max_membership_changes);
  out += "\n";
  out += "ddp-launch: exit status " + std::to_string(exit_status_of(root)) + " (rank " +
         std::to_string(root.rank) + "'s)\n";
  return out;
}

std::string format_failure_json(const FailureReport& r) {
  const WorkerExit& root = r.workers.at(r.root_cause);
  std::string out = "{\n";
  out += "  \"run_id\": " + json_string(r.run_id) + ",\n";
  out += "  \"attempt\": " + std::to_string(r.attempt) + ",\n";
  out += "  \"host\": " + json_string(r.host) + ",\n";
  out += "  \"exit_status\": " + std::to_string(exit_status_of(root)) + ",\n";
  out += "  \"restarts\": {\"failures\": " + std::to_string(r.failures) +
         ", \"max_restarts\": " + std::to_string(r.max_restarts);
  if (r.membership_changes >= 0)
    out += ", \"membership_changes\": " + std::to_string(r.membership_changes) +
           ", \"max_membership_changes\": " + std::to_string(r.max_membership_changes);
  out += "},\n";
  out += "  \"root_cause\": " + worker_json(root, "  ") + ",\n";
  out += "  \"workers\": [\n";
  for (size_t i = 0; i < r.workers.size(); ++i)
    out += "    " + worker_json(r.workers[i], "    ") + (i + 1 < r.workers.size() ? ",\n" : "\n");
  out += "  ]\n}\n";
  return out;
}

std::string format_restart_line(const FailureReport& r, int restart, int max_restarts) {
  const WorkerExit& root = r.workers.at(r.root_cause);
  return "ddp-launch: attempt " + std::to_string(r.attempt) + " failed: rank " +
         std::to_string(root.rank) + " (local rank " + std::to_string(root.local_rank) + ", pid " +
         std::to_string(root.pid) + ") ended with " + describe_exit(root) +
         "; restarting all " + std::to_string(r.workers.size()) + " workers (restart " +
         std::to_string(restart) + " of " + std::to_string(max_restarts) + ")\n";
}

std::string utc_timestamp_now() {
  timeval now;
  gettimeofday(&now, nullptr);
  std::tm utc;
  gmtime_r(&now.tv_sec, &utc);
  char text[40];
  size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(now.tv_usec / 1000));
  return text;
}

}  // namespace ddp_embed::launch
