// One node of an elastic job: serve or connect, join rounds, run the workers each round
// assigns, obey the rendezvous server (elastic_agent.h).
#include "launch/elastic_agent.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "launch/line_channel.h"
#include "launch/output_mux.h"
#include "launch/rendezvous_handshake.h"
#include "launch/rendezvous_protocol.h"
#include "launch/rendezvous_server.h"
#include "launch/signal_relay.h"
#include "util/exit_status.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// How long a launcher waits for the server's side of the handshake.
constexpr auto kHandshakeLimit = std::chrono::seconds(5);

void say(const std::string& line) { write_whole(2, "ddp-launch: " + line + "\n"); }

std::string seconds_text(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", s);
  return text;
}

bool write_file(const std::string& path, const std::string& text) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  bool ok = write_whole(fd, text);
  return close(fd) == 0 && ok;
}

bool is_stop_signal(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

// Whether this end of a connection is a loopback address (then the server saw this node
// as 127.x, an address no other machine can use).
bool local_end_is_loopback(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return false;
  if (addr.ss_family == AF_INET)
    return (ntohl(reinterpret_cast<sockaddr_in*>(&addr)->sin_addr.s_addr) >> 24) == 127;
  if (addr.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<sockaddr_in6*>(&addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

class ElasticAgent : public AttemptHooks {
 public:
  ElasticAgent(const LaunchPlan& plan, const ElasticSettings& settings)
      : plan_(plan), s_(settings), group_(plan.base_env) {}

  int run() {
    if (!serve_if_this_node()) return kExitRuntimeError;
    std::string error;
    if (!group_.prepare(/*single_node=*/false, &error)) {
      say(error);
      return kExitRuntimeError;
    }
    if (int status = connect(); status >= 0) return status;
    say("elastic job: --nnodes " + std::to_string(s_.min_nodes) + ":" + std::to_string(s_.max_nodes) +
        ", rendezvous at " + endpoint() + (serving_ ? " (served by this launcher)" : "") + ", join timeout " +
        seconds_text(s_.join_timeout_s) + " s");
    for (;;) {
      join();
      if (int status = wait_for_round(); status >= 0) return finish(status);
      const LaunchPlan round_plan = plan_for_round(*round_message_);
      announce_round(*round_message_);
      const AttemptEnd end = group_.run(round_plan, round_, this);
      if (int status = after_server_news(); status >= 0) return finish(status);
      switch (end) {
        case AttemptEnd::success:
          channel_.send(DoneMessage{}.to_json());
          if (serving_) wait_for_everyone();
          return finish(kExitOk);
        case AttemptEnd::launcher_error:
          return finish(kExitRuntimeError);
        case AttemptEnd::stopped:
          group_.report_stop();
          return finish(group_.last_status());
        case AttemptEnd::failure: {
          FailureReport report = group_.report(round_);
          account(report, failures_ + 1);
          if (!group_.attempt_dir().empty() &&
              !write_file(group_.attempt_dir() + "/failure.json", format_failure_json(report)))
            say("cannot write " + group_.attempt_dir() + "/failure.json: " + std::strerror(errno));
          const WorkerExit& root = report.workers.at(report.root_cause);
          const bool bad_input = !root.signaled && root.exit_code == kExitBadInput;
          say("round " + std::to_string(round_) + " failed: rank " + std::to_string(root.rank) + " (local rank " +
              std::to_string(root.local_rank) + ", pid " + std::to_string(root.pid) + ") ended with " +
              describe_exit(root) +
              (bad_input ? ", its input is wrong: the job ends for every node"
                         : "; joining the next round (whether it counts against --max-restarts " +
                               std::to_string(plan_.layout.max_restarts) +
                               " the rendezvous decides: not when a node was lost)"));
          last_failure_ = std::move(report);
          continue;
        }
        case AttemptEnd::ordered:
          if (leaving_) {
            say("this node left the job after its workers checkpointed");
            return finish(kExitOk);
          }
          continue;
      }
    }
  }

  // ---- AttemptHooks: the server's connection while the workers run ----
  int fd() const override { return channel_.open() ? channel_.fd() : -1; }
  short events() const override { return channel_.poll_events(); }
  std::optional<Clock::time_point> deadline() const override {
    if (!channel_.open()) return std::nullopt;
    return std::min(channel_.next_beat_due(), channel_.last_heard() + kHeartbeatTimeout);
  }
  GroupOrder poll() override {
    read_server();
    return order_;
  }
  void worker_failed(const WorkerExit& e) override {
    channel_.send(FailedMessage{"rank " + std::to_string(e.rank) + " (local rank " + std::to_string(e.local_rank) +
                                    ") ended with " + describe_exit(e),
                                !e.signaled && e.exit_code == kExitBadInput}
                      .to_json());
  }
  bool stop_signal(int sig) override {
    leaving_ = true;
    channel_.send(LeaveMessage{signal_name(sig)}.to_json());
    say("got " + signal_name(sig) + ": this node leaves the job; every node checkpoints at the next step and the "
        "others go on without it (" + signal_name(sig) + " again kills the workers now)");
    return true;
  }

 private:
  std::string endpoint() const { return s_.endpoint_host + ":" + std::to_string(s_.endpoint_port); }

  // Step 1 (elastic_agent.h): serve when the endpoint names this machine and its port is free here.
  bool serve_if_this_node() {
    if (!names_this_machine(s_.endpoint_host)) return true;
    const int fd = listen_on_port(s_.endpoint_port);
    if (fd < 0) {
      if (errno == EADDRINUSE) {
        say("port " + std::to_string(s_.endpoint_port) + " is in use on this machine: another launcher here serves "
            "the rendezvous (or another program holds the port); connecting to it");
        return true;
      }
      say("cannot serve the rendezvous on port " + std::to_string(s_.endpoint_port) + ": " + std::strerror(errno));
      return false;
    }
    std::string error;
    if (!server_.start(fd, job_of_this_launcher(), s_.secret, &error)) {
      say("cannot start the rendezvous server: " + error);
      return false;
    }
    serving_ = true;
    return true;
  }

  // The job as this launcher's command line says it, for the server it starts.
  RendezvousJob job_of_this_launcher() const {
    RendezvousJob job;
    job.min_nodes = s_.min_nodes;
    job.max_nodes = s_.max_nodes;
    job.join_timeout_s = s_.join_timeout_s;
    job.grace_s = plan_.layout.grace_seconds;
    job.max_membership_changes = s_.max_membership_changes;
    job.run_id = plan_.layout.run_id;
    job.run_id_given = s_.run_id_given;
    job.nproc = plan_.layout.nproc;
    return job;
  }

  // Connects and proves the job secret (rendezvous_handshake.h), retrying for the join
  // timeout. -1 when connected, else the exit status.
  int connect() {
    const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(std::max(s_.join_timeout_s, 1.0)));
    std::string error;
    for (;;) {
      const int fd = connect_tcp(s_.endpoint_host, s_.endpoint_port, std::chrono::milliseconds(1000), &error);
      if (fd >= 0) {
        channel_ = LineChannel(fd);
        HandshakeResult shake = prove_to_server(channel_, s_.secret, kHandshakeLimit);
        if (shake.ok) {
          early_lines_ = std::move(shake.rest);
          break;
        }
        if (shake.final) {
          say("the rendezvous server at " + endpoint() + ": " + shake.error);
          return kExitBadInput;
        }
        error = shake.error;
      }
      if (Clock::now() >= give_up) {
        say("cannot reach the rendezvous server at " + endpoint() + " within " + seconds_text(s_.join_timeout_s) +
            " s (--join-timeout): " + error + "; it is served by the ddp-launch on the node " + s_.endpoint_host +
            " names, or by `ddp-launch --serve-rendezvous " + std::to_string(s_.endpoint_port) + "` there");
        return kExitRuntimeError;
      }
      if (int sig = wait_for_signal(std::chrono::milliseconds(200))) return 128 + sig;
    }
    const std::string& h = s_.endpoint_host;
    const bool loopback_endpoint = h == "localhost" || h.rfind("127.", 0) == 0 || h == "::1";
    if (s_.max_nodes > 1 && s_.local_addr.empty() && !loopback_endpoint && local_end_is_loopback(channel_.fd()))
      say("warning: this node reaches the rendezvous server through loopback, so the other nodes would be told "
          "to reach it at a loopback address; with nodes on other machines, give --rdzv-endpoint an address they "
          "reach, or this node --local-addr");
    return -1;
  }

  // Waits up to `limit` for a stop signal (other signals are dropped: no workers run).
  int wait_for_signal(std::chrono::milliseconds limit) {
    pollfd p{SignalRelay::fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(limit.count()));
    for (int sig : SignalRelay::take_pending())
      if (is_stop_signal(sig)) return sig;
    return 0;
  }

  void join() {
    JoinRequest r;
    r.run_id = plan_.layout.run_id;
    r.run_id_given = s_.run_id_given;
    r.host = plan_.host;
    r.addr = s_.local_addr;
    r.nproc = plan_.layout.nproc;
    r.min_nodes = s_.min_nodes;
    r.max_nodes = s_.max_nodes;
    r.join_timeout_s = s_.join_timeout_s;
    r.grace_s = plan_.layout.grace_seconds;
    r.preferred_rank = s_.preferred_rank;
    r.store_port = s_.store_port > 0 ? s_.store_port : pick_free_port();
    if (r.store_port == 0) r.store_port = 29500;  // no free port found: the store says so if taken
    r.max_restarts = plan_.layout.max_restarts;
    r.max_membership_changes = s_.max_membership_changes;
    round_message_.reset();
    channel_.send(r.to_json());
  }

  // Between rounds: the server's messages, heartbeats and signals until a round is
  // assigned (-1) or this node's part ends (the exit status).
  int wait_for_round() {
    for (;;) {
      read_server();
      if (int status = after_server_news(); status >= 0) return status;
      if (round_message_) return -1;
      if (finished_) {  // a node waiting for a place when the others finished
        say("the job finished while this node waited for a place");
        return kExitOk;
      }
      pollfd fds[2] = {{SignalRelay::fd(), POLLIN, 0}, {channel_.fd(), channel_.poll_events(), 0}};
      const auto now = Clock::now();
      const auto until = std::min(channel_.next_beat_due(), channel_.last_heard() + kHeartbeatTimeout);
      const long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count();
      ::poll(fds, 2, static_cast<int>(std::clamp(ms + 1, 0LL, 1000LL)));
      for (int sig : SignalRelay::take_pending())
        if (is_stop_signal(sig)) {
          leaving_ = true;
          channel_.send(LeaveMessage{signal_name(sig)}.to_json());
          channel_.flush();
          say("got " + signal_name(sig) + " between rounds: this node leaves the job");
          return 128 + sig;
        }
    }
  }

  // Reads the server's messages and keeps the heartbeats; a closed or silent connection
  // means the server is gone.
  void read_server() {
    channel_.flush();
    std::vector<json> lines = std::move(early_lines_);
    early_lines_.clear();
    for (json& line : channel_.receive()) lines.push_back(std::move(line));
    for (const json& line : lines) {
      try {
        handle(line);
      } catch (const RendezvousProtocolError& e) {  // no server of ours (rendezvous_protocol.h)
        channel_.close_now(std::string("it sent a malformed message (") + e.what() + ")");
        break;
      }
    }
    const auto now = Clock::now();
    if (gone_why_.empty() && !finished_) {
      if (!channel_.open())
        gone_why_ = "its connection closed (" + channel_.close_reason() + ")";
      else if (channel_.peer_silent(now))
        gone_why_ = "no heartbeat for " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kHeartbeatTimeout).count()) +
                    " s: its host is lost or the link to it is cut";
      if (!gone_why_.empty()) {
        channel_.close_now(gone_why_);  // nothing more to hear: no more wake-ups for it either
        raise(GroupOrder::stop_now);
      }
    }
    channel_.beat_if_due(now);
  }

  void raise(GroupOrder order) { order_ = std::max(order_, order); }

  // One line from the server. Throws RendezvousProtocolError for a line that does not read.
  void handle(const json& line) {
    const RendezvousOp op = read_op(line);
    switch (op) {
      case RendezvousOp::Round:
        round_message_ = RoundMessage::from_json(line);
        round_ = round_message_->round;
        order_ = GroupOrder::none;
        break;
      case RendezvousOp::Ended:
        round_ended(EndedMessage::from_json(line));
        break;
      case RendezvousOp::Lost:
        say(LostMessage::from_json(line).text);
        if (order_ == GroupOrder::checkpoint_and_exit) raise(GroupOrder::stop_now);  // its peers wait on it
        break;
      case RendezvousOp::Wait:
        say(WaitMessage::from_json(line).text);
        break;
      case RendezvousOp::Abort: {
        const AbortMessage abort = AbortMessage::from_json(line);
        told_to_end(abort.text, abort.kind);
        break;
      }
      case RendezvousOp::Refused:
        told_to_end("the rendezvous server at " + endpoint() + " refused this node: " +
                        RefusedMessage::from_json(line).text,
                    std::nullopt);
        break;
      case RendezvousOp::Finished:
        FinishedMessage::from_json(line);
        finished_ = true;
        break;
      case RendezvousOp::Beat:  // receiving it was the point (LineChannel::last_heard)
        BeatMessage::from_json(line);
        break;
      case RendezvousOp::Challenge:
      case RendezvousOp::Welcome:
        throw RendezvousProtocolError("the server sent a second \"" + wire_name(op) + "\" after the handshake");
      case RendezvousOp::Hello:
      case RendezvousOp::Join:
      case RendezvousOp::Failed:
      case RendezvousOp::Leave:
      case RendezvousOp::Done:
        throw RendezvousProtocolError("the server sent a launcher's \"" + wire_name(op) + "\" message");
    }
  }

  void round_ended(const EndedMessage& ended) {
    if (ended.round != round_ || !round_message_) return;  // a round this node is no longer in
    const bool now = ended.stop == RoundStop::Now;
    say(ended.text + (now ? "; stopping the workers (SIGTERM, SIGKILL after " +
                                seconds_text(plan_.layout.grace_seconds) + " s)"
                          : "; the workers finish their step, checkpoint and exit (SIGUSR2)"));
    raise(now ? GroupOrder::stop_now : GroupOrder::checkpoint_and_exit);
  }

  // The server ends the job, or this node's part in it (abort, refused).
  void told_to_end(const std::string& text, std::optional<AbortKind> kind) {
    // The first end that says why wins: this node's own (out of restarts) or the job's for
    // wrong input, not the "the job has already ended" answering a join sent meanwhile.
    if (!out_of_restarts_ && !bad_input_) {
      abort_text_ = text;
      out_of_restarts_ = kind == AbortKind::OutOfRestarts;
      bad_input_ = kind == AbortKind::BadInput;
    }
    raise(GroupOrder::stop_now);
  }

  // What ends this node's part whatever its workers did: -1 when nothing does.
  int after_server_news() {
    if (!abort_text_.empty()) {
      if (out_of_restarts_ && last_failure_) {
        FailureReport report = *last_failure_;
        account(report, ++failures_);
        write_whole(2, format_failure_report(report));
        say(abort_text_);
        return exit_status_of(report.workers.at(report.root_cause));
      }
      say(abort_text_);
      return bad_input_ ? kExitBadInput : kExitRuntimeError;  // the job's status for wrong input, on every node
    }
    if (!gone_why_.empty() && !finished_) {
      say("the rendezvous server at " + endpoint() + " is gone: " + gone_why_ +
          "; this node cannot meet the others again and stops (run the server apart with `ddp-launch "
          "--serve-rendezvous " + std::to_string(s_.endpoint_port) + "` so that any training node may be lost)");
      return kExitRuntimeError;
    }
    return -1;
  }

  // The serving launcher stays until every node's workers are done (or the join timeout).
  void wait_for_everyone() {
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                          std::chrono::duration<double>(std::max(s_.join_timeout_s, 5.0)));
    while (!finished_ && gone_why_.empty() && abort_text_.empty() && Clock::now() < until) {
      pollfd p{channel_.fd(), channel_.poll_events(), 0};
      ::poll(&p, 1, 200);
      read_server();
    }
  }

  // This node is out of the job (it left, or ran out of restarts) but the others meet at
  // the rendezvous its launcher serves: the launcher stays until the server ends with the
  // job (every node done, or the job aborted), so that losing this node is like losing
  // any other. A stop signal now ends the server, and with it the job.
  void keep_serving() {
    channel_.flush();
    channel_.close_now("this node is out of the job");
    if (!server_.running()) return;
    say("this node is out of the job, but this launcher serves the rendezvous at " + endpoint() +
        ": it stays until the job ends (a stop signal ends the rendezvous, and with it the others' job)");
    while (server_.running())
      if (int sig = wait_for_signal(std::chrono::milliseconds(200))) {
        say("got " + signal_name(sig) + ": ending the rendezvous server; the other nodes stop");
        server_.stop();
        return;
      }
    say("the rendezvous server has ended with the job");
  }

  LaunchPlan plan_for_round(const RoundMessage& r) const {
    LaunchPlan p = plan_;
    p.layout.nnodes = r.nnodes;
    p.layout.node_rank = r.node_rank;
    p.layout.master_addr = r.master_addr;
    p.layout.master_port = r.master_port;
    p.layout.run_id = r.run_id;
    p.base_env["DDP_LAUNCH_MIN_NNODES"] = std::to_string(s_.min_nodes);
    p.base_env["DDP_LAUNCH_MAX_NNODES"] = std::to_string(s_.max_nodes);
    p.base_env.erase("DDP_LAUNCH_MEMBERSHIP");
    if (r.change) {
      json change = r.change->to_json();
      change["round"] = round_;
      p.base_env["DDP_LAUNCH_MEMBERSHIP"] = change.dump();
    }
    return p;
  }

  void announce_round(const RoundMessage& r) {
    const bool charged_here = r.failures > failures_;
    failures_ = r.failures;
    membership_changes_ = r.membership_changes;
    std::string line = "round " + std::to_string(round_) + ": this node is node " + std::to_string(r.node_rank) +
                       " of " + std::to_string(r.nnodes) + " (the workers' store at " + r.master_addr + ":" +
                       std::to_string(r.master_port) + ")";
    if (r.change)
      line += "; " + r.change->text + " (" + r.change->detail + "); the workers resume from the last checkpoint";
    if (r.after_failure) {
      line += "; after the failure of " + r.after_failure->node + " (" + r.after_failure->what + ")";
      if (charged_here)
        line += ": restart " + std::to_string(failures_) + " of --max-restarts " +
                std::to_string(plan_.layout.max_restarts) + " for this node";
      else if (!r.after_failure->charged)
        line += ", not counted: a node was lost";
    }
    say(line);
  }

  void account(FailureReport& report, int failures) const {
    report.failures = failures;
    report.max_restarts = plan_.layout.max_restarts;
    report.membership_changes = membership_changes_;
    report.max_membership_changes = s_.max_membership_changes;
  }

  int finish(int status) {
    if (serving_ && (leaving_ || out_of_restarts_)) keep_serving();
    if (round_ >= 0)
      say("elastic job: " + std::to_string(round_ + 1) + " round(s); " + std::to_string(failures_) +
          " failure(s) counted against this node (--max-restarts " + std::to_string(plan_.layout.max_restarts) +
          "); " + std::to_string(membership_changes_) + " membership change(s) (--max-membership-changes " +
          std::to_string(s_.max_membership_changes) + "); exit status " + std::to_string(status));
    channel_.flush();
    return status;
  }

  const LaunchPlan& plan_;
  const ElasticSettings s_;
  WorkerGroup group_;
  RendezvousServerProcess server_;
  bool serving_ = false;
  LineChannel channel_;
  std::vector<json> early_lines_;  // what came with the handshake's welcome: read first

  std::optional<RoundMessage> round_message_;
  int round_ = -1;
  GroupOrder order_ = GroupOrder::none;
  bool leaving_ = false;
  bool finished_ = false;
  bool out_of_restarts_ = false;
  bool bad_input_ = false;  // the job ended because a worker's input is wrong
  std::string abort_text_, gone_why_;
  int failures_ = 0, membership_changes_ = 0;
  std::optional<FailureReport> last_failure_;
};

}  // namespace

ElasticSettings elastic_settings(const LaunchOptions& options, const JobLayout& layout, const Environment& env) {
  ElasticSettings s;
  s.min_nodes = *options.min_nnodes;
  s.max_nodes = *options.max_nnodes;
  s.endpoint_host = *options.rdzv_host;
  s.endpoint_port = *options.rdzv_port;
  s.join_timeout_s = options.join_timeout_s;
  s.max_membership_changes = options.max_membership_changes;
  if (options.node_rank) {
    s.preferred_rank = *options.node_rank;
  } else if (env.count("SLURM_JOB_ID") && env.count("SLURM_NODEID")) {
    const std::string id = env.at("SLURM_NODEID");
    if (!id.empty() && id.size() < 9 && id.find_first_not_of("0123456789") == std::string::npos)
      s.preferred_rank = std::stoi(id);
  }
  s.store_port = options.master_port.value_or(0);
  s.local_addr = options.local_addr.value_or("");
  s.run_id_given = options.run_id.has_value() || env.count("SLURM_JOB_ID") > 0;
  (void)layout;
  return s;
}

int supervise_elastic(const LaunchPlan& plan, const ElasticSettings& settings) {
  ElasticAgent agent(plan, settings);
  return agent.run();
}

}  // namespace ddp_embed::launch
