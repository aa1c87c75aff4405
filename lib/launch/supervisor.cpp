// The supervisor: one poll() loop per attempt over the signal pipe, every worker's
// stdout/stderr and, for an elastic job, the rendezvous connection (AttemptHooks), reaping
// exits as they come. Fail fast: the first worker to fail is the root cause, the others
// get SIGTERM, then SIGKILL after --grace.
#include "launch/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "launch/failure_report.h"
#include "launch/output_mux.h"
#include "launch/signal_relay.h"
#include "launch/worker_process.h"
#include "util/exit_status.h"

namespace ddp_embed::launch {
namespace {

using Clock = std::chrono::steady_clock;

// After the last worker exited, how long its output pipes may stay open (held by a
// process that left the worker's process group) before we stop reading them.
constexpr auto kDrainAfterLastExit = std::chrono::seconds(2);

void say(const std::string& line) { write_whole(2, "ddp-launch: " + line + "\n"); }

bool make_directories(const std::string& path, std::string* error) {
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty() || partial == "/") continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot create " + partial + ": " + std::strerror(errno);
      return false;
    }
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = path + " is not a directory";
    return false;
  }
  return true;
}

bool write_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_whole(fd, text);
  return close(fd) == 0 && ok;
}

struct Worker {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  std::unique_ptr<WorkerOutput> output;
  bool running = false;
  WorkerExit exit;
};

}  // namespace

class WorkerGroup::Impl {
 public:
  explicit Impl(const Environment& base_env) : base_env_(base_env) {}

  bool prepare(bool single_node, std::string* error) {
    // A single-node job rendezvouses through a file in a private directory: nothing
    // listens on the network, and no other user of the machine can join the job.
    if (single_node && !store_dir_.create(base_env_, error)) return false;
    std::string why;
    if (!guard_.start(&why, store_dir_.path()))
      say("warning: cannot start the orphan guard (" + why +
          "); if ddp-launch is killed, workers' children may survive it");
    return true;
  }

  void take_signals_between_attempts() {
    for (int sig : SignalRelay::take_pending()) note_signal_between_attempts(sig);
  }
  int stop_request() const { return stop_request_; }
  int last_status() const { return last_status_; }
  const std::string& attempt_dir() const { return attempt_dir_; }

  AttemptEnd run(const LaunchPlan& plan, int attempt, AttemptHooks* hooks) {
    plan_ = &plan;
    layout_ = &plan.layout;
    hooks_ = hooks;
    ordered_ = GroupOrder::none;
    hooks_took_signal_ = false;
    workers_.clear();
    exit_order_.clear();
    root_cause_.reset();
    kill_deadline_.reset();
    stop_signal_sent_ = 0;
    std::optional<Clock::time_point> drain_deadline;
    last_status_ = 0;

    std::string error;
    attempt_dir_.clear();
    if (!layout_->log_dir.empty()) {
      attempt_dir_ = layout_->log_dir + "/attempt" + std::to_string(attempt);
      if (!make_directories(attempt_dir_, &error)) {
        say("--log-dir: " + error);
        return AttemptEnd::launcher_error;
      }
    }
    if (!start_workers(attempt, &error)) {
      say(error);
      kill_all_now("another worker could not start");
      while (any_running()) wait_and_reap_blocking();
      close_all_streams();
      return AttemptEnd::launcher_error;
    }

    static char buffer[64 * 1024];
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, int>> owners;  // (worker, stream) per pollfd after the first two
    while (true) {
      bool running = any_running();
      bool streams_open = any_stream_open();
      if (!running && !streams_open) break;
      Clock::time_point now = Clock::now();
      if (!running && !drain_deadline) drain_deadline = now + kDrainAfterLastExit;

      fds.clear();
      owners.clear();
      fds.push_back({SignalRelay::fd(), POLLIN, 0});
      // The hooks' descriptor has slot 1 always (-1 when none: poll() skips it).
      fds.push_back({hooks_ ? hooks_->fd() : -1, hooks_ ? hooks_->events() : short(0), 0});
      for (size_t i = 0; i < workers_.size(); ++i)
        for (int s = 0; s < 2; ++s)
          if (workers_[i].fds[s] >= 0) {
            fds.push_back({workers_[i].fds[s], POLLIN, 0});
            owners.emplace_back(i, s + 1);
          }
      int timeout = -1;
      const std::optional<Clock::time_point> hooks_deadline = hooks_ ? hooks_->deadline() : std::nullopt;
      for (const auto& deadline : {kill_deadline_, drain_deadline, hooks_deadline})
        if (deadline) {
          auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*deadline - now).count();
          int ms = left < 0 ? 0 : static_cast<int>(std::min<long long>(left + 1, 1 << 30));
          timeout = timeout < 0 ? ms : std::min(timeout, ms);
        }

      int ready = poll(fds.data(), fds.size(), timeout);
      if (ready < 0 && errno != EINTR) {
        // Cannot watch the workers any more: do not leave them behind unwatched.
        say(std::string("poll: ") + std::strerror(errno) + "; killing the workers");
        kill_all_now("ddp-launch could not watch them");
        while (any_running()) wait_and_reap_blocking();
        close_all_streams();
        break;
      }
      if (ready > 0) {
        if (fds[0].revents & POLLIN)
          for (int sig : SignalRelay::take_pending()) handle_signal(sig);
        for (size_t k = 2; k < fds.size(); ++k) {
          if (!fds[k].revents) continue;
          auto [index, stream] = owners[k - 2];
          Worker& w = workers_[index];
          ssize_t n = read(w.fds[stream - 1], buffer, sizeof buffer);
          if (n > 0)
            w.output->on_data(stream, buffer, static_cast<size_t>(n));
          else if (n == 0 || (errno != EAGAIN && errno != EINTR))
            close_stream(w, stream);
        }
      }
      reap();
      if (hooks_) obey(hooks_->poll());

      now = Clock::now();
      if (kill_deadline_ && now >= *kill_deadline_) {
        kill_deadline_.reset();
        std::string ranks;
        for (const auto& w : workers_)
          if (w.running) ranks += (ranks.empty() ? "rank " : ", rank ") + std::to_string(w.rank);
        if (!ranks.empty()) {
          say(ranks + " still running " + grace_text() + " s after being asked to stop; sending SIGKILL");
          kill_all_now("still running " + grace_text() + " s after " + signal_name(stop_signal_sent_));
        }
      }
      if (drain_deadline && now >= *drain_deadline) close_all_streams();
    }

    for (auto& w : workers_) w.exit.last_lines.assign(w.output->recent().begin(), w.output->recent().end());
    return how_it_ended();
  }

  // Once every worker has ended: why the attempt did, and last_status_.
  AttemptEnd how_it_ended() {
    if (root_cause_) {
      last_status_ = exit_status_of(workers_[*root_cause_].exit);
      return AttemptEnd::failure;
    }
    if (stop_request_) {
      for (size_t i : exit_order_) {
        int status = exit_status_of(workers_[i].exit);
        if (status != 0) {
          last_status_ = status;
          break;
        }
      }
      return AttemptEnd::stopped;
    }
    if (ordered_ == GroupOrder::stop_now) return AttemptEnd::ordered;  // exit 0 on SIGTERM: stopped, not done
    if (ordered_ == GroupOrder::checkpoint_and_exit) {
      // Workers that reached the end of training as the order came did finish it (they
      // exit 75 when they stopped for it).
      for (size_t i : exit_order_)
        if (exit_status_of(workers_[i].exit) != 0) return AttemptEnd::ordered;
    }
    return AttemptEnd::success;
  }

  bool start_workers(int attempt, std::string* error) {
    workers_.resize(static_cast<size_t>(layout_->nproc));
    for (int local = 0; local < layout_->nproc; ++local) {
      Worker& w = workers_[static_cast<size_t>(local)];
      w.local_rank = local;
      w.rank = layout_->global_rank(local);
      int log_fd = -1;
      if (!attempt_dir_.empty()) {
        std::string log = attempt_dir_ + "/rank" + std::to_string(w.rank) + ".log";
        log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (log_fd < 0) {
          *error = "cannot create " + log + ": " + std::strerror(errno);
          return false;
        }
      }
      w.output = std::make_unique<WorkerOutput>(w.rank, log_fd);
      WorkerCommand command{plan_->program_path, plan_->argv,
                            build_worker_env(plan_->base_env, *layout_, local, attempt, plan_->omp_threads,
                                             store_dir_.path().empty() ? "" : store_dir_.path() + "/store")};
      StartedWorker started;
      std::string why;
      if (!start_worker(command, guard_, &started, &why)) {
        *error = "cannot start rank " + std::to_string(w.rank) + ": " + why;
        return false;
      }
      w.pid = started.pid;
      w.fds[0] = started.stdout_fd;
      w.fds[1] = started.stderr_fd;
      w.running = true;
      w.exit.rank = w.rank;
      w.exit.local_rank = local;
      w.exit.pid = started.pid;
    }
    return true;
  }

  bool any_running() const {
    for (const auto& w : workers_)
      if (w.running) return true;
    return false;
  }
  bool any_stream_open() const {
    for (const auto& w : workers_)
      if (w.fds[0] >= 0 || w.fds[1] >= 0) return true;
    return false;
  }

  void close_stream(Worker& w, int stream) {
    int& fd = w.fds[stream - 1];
    if (fd < 0) return;
    // Whatever is still in the pipe, but not forever: a process that left the worker's
    // group may hold it open and keep writing.
    static char rest[64 * 1024];
    ssize_t n;
    for (int reads = 0; reads < 16 && (n = read(fd, rest, sizeof rest)) > 0; ++reads)
      w.output->on_data(stream, rest, static_cast<size_t>(n));
    w.output->on_eof(stream);
    close(fd);
    fd = -1;
  }
  void close_all_streams() {
    for (auto& w : workers_)
      for (int s = 1; s <= 2; ++s) close_stream(w, s);
  }

  // Sends `sig` to every running worker's process group. Stop signals are remembered
  // per worker, so its exit is reported as "stopped by ddp-launch", not as a failure.
  void signal_running(int sig) {
    // SIGUSR2 counts as a stop when the hooks ordered it (a membership change).
    bool stop = sig == SIGINT || sig == SIGTERM || sig == SIGHUP || (sig == SIGUSR2 && ordered_ != GroupOrder::none);
    if (stop) stop_signal_sent_ = sig;
    for (auto& w : workers_)
      if (w.running) {
        signal_group(w.pid, sig);
        if (stop) w.exit.launcher_signal = sig;
      }
  }
  void kill_all_now(const std::string& reason) {
    for (auto& w : workers_)
      if (w.running) {
        signal_group(w.pid, SIGKILL);
        w.exit.launcher_signal = SIGKILL;
        w.exit.kill_reason = reason;
      }
  }

  std::string grace_text() const {
    char text[32];
    std::snprintf(text, sizeof text, "%g", layout_->grace_seconds);
    return text;
  }

  int running_count() const {
    int n = 0;
    for (const auto& w : workers_) n += w.running;
    return n;
  }

  // The hooks' order: a membership change (SIGUSR2: checkpoint at the next step and exit)
  // or a lost peer (SIGTERM now, SIGKILL after --grace). An order never weakens: a stop
  // now during a checkpoint stop escalates, the reverse does nothing.
  void obey(GroupOrder order) {
    if (order == GroupOrder::none || order <= ordered_ || stop_request_ || !any_running()) return;
    ordered_ = order;
    if (order == GroupOrder::checkpoint_and_exit) {
      signal_running(SIGUSR2);
      return;
    }
    signal_running(SIGTERM);
    if (!kill_deadline_)
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(layout_->grace_seconds));
  }

  void handle_signal(int sig) {
    if (sig == SIGCHLD) return;  // reap() runs after every wake-up
    if (sig == SIGUSR1 || sig == SIGUSR2) {
      signal_running(sig);
      return;
    }
    // An elastic node leaves at the next step; a second signal kills as below.
    if (hooks_ && !hooks_took_signal_ && !stop_request_ && hooks_->stop_signal(sig)) {
      hooks_took_signal_ = true;
      return;
    }
    if (hooks_took_signal_ && !stop_request_ && (sig == SIGINT || sig == SIGTERM)) {
      stop_request_ = sig;
      say("got " + signal_name(sig) + " again; killing " + std::to_string(running_count()) + " workers now");
      kill_all_now("second stop signal");
      kill_deadline_.reset();
      return;
    }
    if (!stop_request_) {
      stop_request_ = sig;
      say("got " + signal_name(sig) + "; passing it to " + std::to_string(running_count()) +
          " workers, SIGKILL in " + grace_text() + " s" +
          (sig == SIGINT ? " (Ctrl-C again to kill them now)" : ""));
      signal_running(sig);
      if (!kill_deadline_)
        kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(layout_->grace_seconds));
    } else if (sig == SIGINT || sig == SIGTERM) {
      say("got " + signal_name(sig) + " again; killing " + std::to_string(running_count()) +
          " workers now");
      kill_all_now("second " + signal_name(sig));
      kill_deadline_.reset();
    } else {
      signal_running(sig);
    }
  }

  void note_signal_between_attempts(int sig) {
    if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP) && !stop_request_) stop_request_ = sig;
  }

  // Reaps every child that has exited. A worker is first observed with WNOWAIT, so its
  // process-group id cannot be reused while we kill what is left of the group (its own
  // children) and tell the guard to forget it; only then is it reaped.
  void reap() {
    bool failed_now = false;
    while (true) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
      pid_t pid = info.si_pid;
      Worker* worker = nullptr;
      for (auto& w : workers_)
        if (w.running && w.pid == pid) worker = &w;
      if (worker) {
        signal_group(pid, SIGKILL);
        guard_.forget(pid);
      }
      int status = 0;
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      if (!worker) {
        if (pid == guard_.pid()) {
          guard_.mark_gone();
          say("warning: the orphan guard exited; if ddp-launch is killed, workers' children may survive it");
        }
        continue;
      }
      size_t index = static_cast<size_t>(worker - workers_.data());
      WorkerExit& e = worker->exit;
      worker->running = false;
      e.time = utc_timestamp_now();
      e.signaled = WIFSIGNALED(status);
      e.signal = e.signaled ? WTERMSIG(status) : 0;
      e.exit_code = e.signaled ? 0 : WEXITSTATUS(status);
      exit_order_.push_back(index);
      bool ok = !e.signaled && e.exit_code == 0;
      if (e.launcher_signal != 0) {
        e.fate = WorkerExit::Fate::stopped;
      } else if (ok) {
        e.fate = WorkerExit::Fate::finished;
      } else {
        e.fate = WorkerExit::Fate::failed;
        if (!root_cause_ && !stop_request_ && ordered_ == GroupOrder::none) {
          root_cause_ = index;
          failed_now = true;
        } else if (ordered_ != GroupOrder::none) {
          e.fate = WorkerExit::Fate::stopped;  // it ended while the group was being stopped
        }
      }
    }
    // After the whole batch: a worker that died on its own at the same moment counts as
    // failed, not as stopped by us.
    if (failed_now && hooks_) hooks_->worker_failed(workers_[*root_cause_].exit);
    if (failed_now && any_running()) {
      signal_running(SIGTERM);
      kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(layout_->grace_seconds));
    }
  }

  void wait_and_reap_blocking() {
    siginfo_t info{};
    while (waitid(P_ALL, 0, &info, WEXITED | WNOWAIT) < 0 && errno == EINTR) {
    }
    reap();
  }

  FailureReport report(int attempt) const {
    FailureReport report;
    report.run_id = layout_->run_id;
    report.host = plan_->host;
    report.attempt = attempt;
    report.root_cause = *root_cause_;
    for (const auto& w : workers_) report.workers.push_back(w.exit);
    return report;
  }

  // After a stop request: silent when the workers obeyed (exit 0, or death by the very
  // signal passed on), else one line per worker that ended otherwise.
  void report_stop() const {
    if (last_status_ == 0) return;
    for (size_t i : exit_order_) {
      const WorkerExit& e = workers_[i].exit;
      bool obeyed = e.signaled && e.signal == e.launcher_signal && e.signal != SIGKILL;
      if (exit_status_of(e) != 0 && !obeyed)
        say("rank " + std::to_string(e.rank) + " (local rank " + std::to_string(e.local_rank) + ", pid " +
            std::to_string(e.pid) + ") ended with " + describe_exit(e));
    }
    say("stopped on " + signal_name(stop_request_) + "; exit status " + std::to_string(last_status_));
  }

  const Environment& base_env_;
  const LaunchPlan* plan_ = nullptr;  // the attempt's (run()'s argument)
  const JobLayout* layout_ = nullptr;
  AttemptHooks* hooks_ = nullptr;
  GroupOrder ordered_ = GroupOrder::none;
  bool hooks_took_signal_ = false;
  OrphanGuard guard_;
  PrivateDir store_dir_;  // single-node jobs only
  std::vector<Worker> workers_;
  std::vector<size_t> exit_order_;
  std::optional<size_t> root_cause_;
  std::optional<Clock::time_point> kill_deadline_;
  std::string attempt_dir_;
  int stop_request_ = 0;     // the first SIGINT/SIGTERM/SIGHUP received
  int stop_signal_sent_ = 0;  // the last stop signal sent to the workers
  int last_status_ = 0;
};

WorkerGroup::WorkerGroup(const Environment& base_env) : impl_(std::make_unique<Impl>(base_env)) {}
WorkerGroup::~WorkerGroup() = default;
bool WorkerGroup::prepare(bool single_node, std::string* error) { return impl_->prepare(single_node, error); }
AttemptEnd WorkerGroup::run(const LaunchPlan& plan, int attempt, AttemptHooks* hooks) {
  return impl_->run(plan, attempt, hooks);
}
int WorkerGroup::last_status() const { return impl_->last_status(); }
FailureReport WorkerGroup::report(int attempt) const { return impl_->report(attempt); }
const std::string& WorkerGroup::attempt_dir() const { return impl_->attempt_dir(); }
int WorkerGroup::stop_request() const { return impl_->stop_request(); }
void WorkerGroup::take_signals_between_attempts() { impl_->take_signals_between_attempts(); }
void WorkerGroup::report_stop() const { impl_->report_stop(); }

namespace {

// Whether the first failure says that the input is wrong (util/exit_status.h): the same
// command would fail the same way, so no restart is spent on it.
bool ends_the_job(const FailureReport& report) {
  const WorkerExit& root = report.workers.at(report.root_cause);
  return !root.signaled && root.exit_code == kExitBadInput;
}

std::string not_restarted_line(const FailureReport& report) {
  return "not restarting: rank " + std::to_string(report.workers.at(report.root_cause).rank) + " exited with " +
         std::to_string(kExitBadInput) + ", its input is wrong (the config, a data file or a model folder): a " +
         "restart would fail the same way; mend what its error says and run again";
}

}  // namespace

int supervise(const LaunchPlan& plan) {
  WorkerGroup group(plan.base_env);
  std::string error;
  if (!group.prepare(plan.layout.nnodes == 1, &error)) {
    say(error);
    return kExitRuntimeError;
  }
  for (int attempt = 0;; ++attempt) {
    group.take_signals_between_attempts();
    if (group.stop_request()) {
      say("got " + signal_name(group.stop_request()) + "; not starting attempt " + std::to_string(attempt));
      return attempt == 0 ? 128 + group.stop_request() : group.last_status();
    }
    switch (group.run(plan, attempt)) {
      case AttemptEnd::success:
      case AttemptEnd::ordered:  // no hooks here: never
        return 0;
      case AttemptEnd::launcher_error:
        return kExitRuntimeError;
      case AttemptEnd::stopped:
        group.report_stop();
        return group.last_status();
      case AttemptEnd::failure: {
        FailureReport report = group.report(attempt);
        report.failures = attempt + 1;
        report.max_restarts = plan.layout.max_restarts;
        if (!group.attempt_dir().empty() &&
            !write_file(group.attempt_dir() + "/failure.json", format_failure_json(report)))
          say("cannot write " + group.attempt_dir() + "/failure.json: " + std::strerror(errno));
        const bool bad_input = ends_the_job(report);
        if (attempt < plan.layout.max_restarts && !group.stop_request() && !bad_input) {
          write_whole(2, format_restart_line(report, attempt + 1, plan.layout.max_restarts));
          continue;
        }
        if (bad_input && attempt < plan.layout.max_restarts) say(not_restarted_line(report));
        write_whole(2, format_failure_report(report));
        return group.last_status();
      }
    }
  }
}

}  // namespace ddp_embed::launch
