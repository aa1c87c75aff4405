// The rendezvous server's loop: sockets and heartbeats around RendezvousRounds
// (rendezvous_server.h).
#include "launch/rendezvous_server.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <array>
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

#include "launch/job_secret.h"
#include "launch/launcher.h"
#include "launch/line_channel.h"
#include "launch/output_mux.h"
#include "launch/rendezvous_protocol.h"
#include "launch/rendezvous_rounds.h"
#include "launch/signal_relay.h"

namespace ddp_embed::launch {
namespace {

using nlohmann::json;

void log_line(const std::string& line) { write_whole(2, "ddp-launch: rendezvous: " + line + "\n"); }

int ms_until(SteadyClock::time_point when, SteadyClock::time_point now) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(when - now).count();
  return left <= 0 ? 0 : static_cast<int>(std::min<long long>(left + 1, 60000));
}

// Bounds on connections that have not proved the job secret yet (the handshake,
// rendezvous_protocol.h): how long one may take, how long its hello may be, how many may
// wait at once (the oldest is closed to make room: a launcher answers within milliseconds,
// a stranger that holds a connection open is what gets dropped), and how many connections
// one turn of the loop accepts (the members' lines come first).
constexpr auto kHandshakeTimeout = std::chrono::seconds(3);
constexpr size_t kMaxHelloLine = 1024;
constexpr size_t kMaxMemberLine = 64 * 1024;
constexpr size_t kMaxPending = 256;
constexpr int kAcceptsPerTurn = 64;
// How often the count of connections turned away is logged (the first of each kind at once).
constexpr auto kTurnedAwayReportEvery = std::chrono::seconds(10);

// Why a connection was closed before it joined.
enum class TurnedAway { NoSecret, WrongSecret, NotTheProtocol, TooSlow, TooMany, Count };
constexpr const char* kTurnedAwayNames[] = {"without the job secret", "with a wrong proof of the secret",
                                            "not the protocol", "no hello within 3 s",
                                            "too many connections waiting"};

// The connections turned away, counted; the log says the first of each kind with its peer,
// then a count every kTurnedAwayReportEvery, so that a flood is a few lines.
class TurnedAwayLog {
 public:
  void add(TurnedAway why, const std::string& peer, const std::string& detail) {
    const auto k = static_cast<size_t>(why);
    if (total_[k]++ == 0)
      log_line("closed a connection from " + peer + " before it joined (" + kTurnedAwayNames[k] + "): " + detail +
               "; more such are counted every " + std::to_string(kTurnedAwayReportEvery.count()) + " s");
    else
      ++since_[k];
  }
  void report_if_due(SteadyClock::time_point now) {
    if (now < next_) return;
    next_ = now + kTurnedAwayReportEvery;
    std::string counts;
    for (size_t k = 0; k < since_.size(); ++k)
      if (since_[k]) counts += (counts.empty() ? "" : ", ") + std::to_string(since_[k]) + " " + kTurnedAwayNames[k];
    if (counts.empty()) return;
    log_line("closed more connections before they joined in the last " +
             std::to_string(kTurnedAwayReportEvery.count()) + " s: " + counts);
    since_.fill(0);
  }

 private:
  std::array<long, static_cast<size_t>(TurnedAway::Count)> total_{}, since_{};
  SteadyClock::time_point next_ = SteadyClock::now() + kTurnedAwayReportEvery;
};

// One connection: a launcher once it has proved the secret (proven), a stranger until then.
struct Peer {
  LineChannel channel;
  bool proven = false;
  SteadyClock::time_point since = SteadyClock::now();
  std::string nonce;  // the challenge's
};

class Server {
 public:
  Server(int listen_fd, int quit_fd, RendezvousJob job, std::string secret)
      : listen_fd_(listen_fd), quit_fd_(quit_fd), start_(SteadyClock::now()), secret_(std::move(secret)),
        rounds_(std::move(job)) {}

  int run() {
    std::vector<pollfd> fds;
    std::vector<int> ids;  // the connection of each pollfd after the first two
    while (!rounds_.finished() && !rounds_.aborted()) {
      const auto now = SteadyClock::now();
      fds.clear();
      ids.clear();
      fds.push_back({listen_fd_, POLLIN, 0});
      fds.push_back({quit_fd_, POLLIN, 0});
      int timeout = 1000;
      // The members first: their lines are served before any stranger's in each turn.
      for (bool proven : {true, false})
        for (auto& [id, peer] : peers_) {
          if (peer.proven != proven) continue;
          fds.push_back({peer.channel.fd(), peer.channel.poll_events(), 0});
          ids.push_back(id);
          if (proven) {
            timeout = std::min(timeout, ms_until(peer.channel.next_beat_due(), now));
            timeout = std::min(timeout, ms_until(peer.channel.last_heard() + kHeartbeatTimeout, now));
          } else {
            timeout = std::min(timeout, ms_until(peer.since + kHandshakeTimeout, now));
          }
        }
      if (auto deadline = rounds_.next_deadline())
        timeout = std::min(timeout, ms_until(start_ + std::chrono::duration_cast<SteadyClock::duration>(
                                                            std::chrono::duration<double>(*deadline)),
                                             now));
      if (poll(fds.data(), fds.size(), timeout) < 0 && errno != EINTR) {
        log_line(std::string("poll: ") + std::strerror(errno));
        return 1;
      }
      if (fds[1].revents) return 1;  // the launcher that started us is done
      for (size_t k = 2; k < fds.size(); ++k) {
        auto it = peers_.find(ids[k - 2]);
        if (it == peers_.end()) continue;
        Peer& peer = it->second;
        if (fds[k].revents & POLLOUT) peer.channel.flush();
        if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) serve(it->first, peer);
      }
      if (fds[0].revents & POLLIN) accept_some();
      check_connections();
      turned_away_.report_if_due(SteadyClock::now());
      RendezvousRounds::Outbox out;
      rounds_.tick(seconds(), out);
      deliver(out);
    }
    // The last word (finished, abort) goes out before the server ends.
    const auto until = SteadyClock::now() + std::chrono::seconds(2);
    for (bool pending = true; pending && SteadyClock::now() < until;) {
      pending = false;
      for (auto& [id, peer] : peers_) {
        if (!peer.proven) continue;
        peer.channel.flush();
        pending = pending || (peer.channel.open() && peer.channel.wants_to_write());
      }
      if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return rounds_.finished() ? 0 : 1;
  }

 private:
  double seconds() const { return std::chrono::duration<double>(SteadyClock::now() - start_).count(); }

  size_t pending_count() const {
    size_t n = 0;
    for (const auto& [id, peer] : peers_) n += !peer.proven;
    return n;
  }

  // At most kAcceptsPerTurn new connections; each is challenged at once. With kMaxPending
  // waiting, the oldest waiting one makes room.
  void accept_some() {
    for (int k = 0; k < kAcceptsPerTurn; ++k) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN (nothing more), or a connection that went away
      if (pending_count() >= kMaxPending) {
        auto oldest = peers_.end();
        for (auto it = peers_.begin(); it != peers_.end(); ++it)
          if (!it->second.proven && (oldest == peers_.end() || it->second.since < oldest->second.since)) oldest = it;
        turned_away_.add(TurnedAway::TooMany, oldest->second.channel.peer_address(),
                         std::to_string(kMaxPending) + " connections were waiting; the oldest made room");
        peers_.erase(oldest);
      }
      Peer peer;
      peer.channel = LineChannel(fd);
      peer.channel.set_max_line(kMaxHelloLine);
      peer.nonce = new_nonce();
      peer.channel.send(ChallengeMessage{peer.nonce, !secret_.empty()}.to_json());
      peers_.emplace(next_id_++, std::move(peer));
    }
  }

  // What a connection sent: a stranger's hello, or a launcher's lines.
  void serve(int id, Peer& peer) {
    for (const json& line : peer.channel.receive()) {
      if (!peer.proven) {
        if (!prove(peer, line)) return;
        continue;
      }
      try {
        handle(id, peer.channel, line);
      } catch (const RendezvousProtocolError& e) {  // no launcher of ours (rendezvous_protocol.h)
        cut_off(id, peer.channel, e.what());
        return;
      }
    }
    if (!peer.proven && !peer.channel.open())
      turned_away_.add(TurnedAway::NotTheProtocol, peer.channel.peer_address(), peer.channel.close_reason());
  }

  // The first line of a connection: the hello that proves the job secret. False (and the
  // connection closed, counted) when it is not one or does not prove it.
  bool prove(Peer& peer, const json& line) {
    const std::string from = peer.channel.peer_address();
    HelloMessage hello;
    try {
      if (read_op(line) != RendezvousOp::Hello)
        throw RendezvousProtocolError("its first line is a \"" + line["op"].get<std::string>() + "\" message, not a hello");
      hello = HelloMessage::from_json(line);
    } catch (const RendezvousProtocolError& e) {
      turned_away_.add(TurnedAway::NotTheProtocol, from, e.what());
      peer.channel.close_now(e.what());
      return false;
    }
    if (!secret_.empty()) {
      const bool none = hello.proof.empty();
      if (none || !same_proof(hello.proof, handshake_proof(secret_, ProofOf::Launcher, peer.nonce, hello.nonce))) {
        const std::string text = none ? "this job has a secret and this launcher none: give every node the job's "
                                        "--rdzv-secret-file (or DDP_LAUNCH_SECRET_FILE)"
                                      : "this launcher's secret is not the job's: give every node the same "
                                        "--rdzv-secret-file";
        turned_away_.add(none ? TurnedAway::NoSecret : TurnedAway::WrongSecret, from, text);
        peer.channel.send(RefusedMessage{text}.to_json());
        peer.channel.flush();
        peer.channel.close_now(text);
        return false;
      }
    }
    peer.proven = true;
    peer.channel.set_max_line(kMaxMemberLine);
    peer.channel.send(
        WelcomeMessage{secret_.empty() ? "" : handshake_proof(secret_, ProofOf::Server, hello.nonce, peer.nonce)}
            .to_json());
    return true;
  }

  // One line from a launcher. Throws RendezvousProtocolError for a line that does not
  // read (other than a join: that one is refused).
  void handle(int id, LineChannel& channel, const json& line) {
    RendezvousRounds::Outbox out;
    const RendezvousOp op = read_op(line);
    switch (op) {
      case RendezvousOp::Join:
        join(id, channel, line, out);
        break;
      case RendezvousOp::Failed:
      {
        const FailedMessage failed = FailedMessage::from_json(line);
        if (failed.bad_input)
          rounds_.failed_on_input(id, failed.what, out);
        else
          rounds_.failed(id, failed.what, seconds(), out);
      }
        break;
      case RendezvousOp::Leave:
        rounds_.leave(id, LeaveMessage::from_json(line).why, seconds(), out);
        break;
      case RendezvousOp::Done:
        DoneMessage::from_json(line);
        rounds_.done(id, seconds(), out);
        break;
      case RendezvousOp::Beat:  // receiving it was the point (LineChannel::last_heard)
        BeatMessage::from_json(line);
        break;
      case RendezvousOp::Hello:
        throw RendezvousProtocolError("a launcher sent a second hello");
      case RendezvousOp::Challenge:
      case RendezvousOp::Welcome:
      case RendezvousOp::Round:
      case RendezvousOp::Ended:
      case RendezvousOp::Lost:
      case RendezvousOp::Wait:
      case RendezvousOp::Abort:
      case RendezvousOp::Refused:
      case RendezvousOp::Finished:
        throw RendezvousProtocolError("a launcher sent the server's \"" + wire_name(op) + "\" message");
    }
    deliver(out);
  }

  // A join that does not read, or that the rounds cannot take, is refused with the reason.
  void join(int id, LineChannel& channel, const json& line, RendezvousRounds::Outbox& out) {
    try {
      JoinRequest request = JoinRequest::from_json(line);
      if (request.addr.empty()) request.addr = channel.peer_address();
      rounds_.join(id, request, seconds(), out);
    } catch (const std::exception& e) {
      log_line("refused a join from " + channel.peer_address() + ": " + e.what());
      channel.send(RefusedMessage{e.what()}.to_json());
    }
  }

  // A peer whose line does not read is no launcher of ours: its connection closes (and
  // check_connections() counts it as lost, if it had joined).
  void cut_off(int id, LineChannel& channel, const std::string& why) {
    log_line("cut off connection " + std::to_string(id) + " (" + channel.peer_address() + "): " + why);
    channel.close_now("the peer sent a malformed message (" + why + ")");
  }

  // Closed connections, and silent ones, are lost nodes; a stranger past the handshake's
  // time is closed.
  void check_connections() {
    const auto now = SteadyClock::now();
    for (auto it = peers_.begin(); it != peers_.end();) {
      Peer& peer = it->second;
      LineChannel& channel = peer.channel;
      if (!peer.proven) {
        const bool late = channel.open() && now - peer.since > kHandshakeTimeout;
        if (late) turned_away_.add(TurnedAway::TooSlow, channel.peer_address(), "it sent no hello");
        it = late || !channel.open() ? peers_.erase(it) : std::next(it);
        continue;
      }
      std::string why;
      if (!channel.open())
        why = "its connection closed (" + channel.close_reason() + ")";
      else if (channel.peer_silent(now))
        why = "no heartbeat for " + std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kHeartbeatTimeout).count()) +
              " s (its link is cut, or its host hangs)";
      else
        channel.beat_if_due(now);
      if (why.empty()) {
        ++it;
        continue;
      }
      const int id = it->first;
      it = peers_.erase(it);
      RendezvousRounds::Outbox out;
      rounds_.lost(id, why, seconds(), out);
      deliver(out);
    }
  }

  void deliver(const RendezvousRounds::Outbox& out) {
    for (const std::string& line : out.log) log_line(line);
    for (const auto& [id, message] : out.messages) {
      auto it = peers_.find(id);
      if (it != peers_.end() && it->second.proven) it->second.channel.send(to_json(message));
    }
  }

  int listen_fd_, quit_fd_;
  SteadyClock::time_point start_;
  const std::string secret_;  // "" : none; anyone who reaches the port may join
  RendezvousRounds rounds_;
  std::map<int, Peer> peers_;
  TurnedAwayLog turned_away_;
  int next_id_ = 1;
};

}  // namespace

int serve_rendezvous(int listen_fd, int quit_fd, const RendezvousJob& job, const std::string& secret) {
  fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
  return Server(listen_fd, quit_fd, job, secret).run();
}

int serve_rendezvous_alone(const LaunchOptions& options, const std::string& secret) {
  const int port = *options.serve_rendezvous;
  RendezvousJob job;
  job.min_nodes = *options.min_nnodes;
  job.max_nodes = *options.max_nnodes;
  job.join_timeout_s = options.join_timeout_s;
  job.grace_s = options.grace_seconds;
  job.max_membership_changes = options.max_membership_changes;
  job.run_id = options.run_id.value_or("");
  job.run_id_given = options.run_id.has_value();
  job.nproc = options.nproc.value_or(0);
  const std::string nodes = std::to_string(job.min_nodes) + ":" + std::to_string(job.max_nodes);
  const int fd = listen_on_port(port);
  if (fd < 0) {
    write_whole(2, "ddp-launch: cannot serve the rendezvous on port " + std::to_string(port) + ": " +
                       std::strerror(errno) +
                       (errno == EADDRINUSE ? " (another job's server, or another program, holds it)\n" : "\n"));
    return kExitRuntimeError;
  }
  write_whole(2, "ddp-launch: serving the rendezvous on port " + std::to_string(port) + " for --nnodes " + nodes +
                     " until the job ends; start each training node with --nnodes " + nodes +
                     " --rdzv-endpoint THIS_HOST:" + std::to_string(port) +
                     (secret.empty() ? "" : " and the same --rdzv-secret-file") + "\n");
  return serve_rendezvous(fd, -1, job, secret);
}

RendezvousServerProcess::~RendezvousServerProcess() { stop(); }

bool RendezvousServerProcess::start(int listen_fd, const RendezvousJob& job, const std::string& secret,
                                     std::string* error) {
  int quit[2];
  if (pipe2(quit, O_CLOEXEC) != 0) {
    *error = std::string("pipe: ") + std::strerror(errno);
    close(listen_fd);
    return false;
  }
  const pid_t launcher = getpid();
  sigset_t previous;
  SignalRelay::block_all(&previous);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != launcher) _exit(1);
    SignalRelay::reset_in_child();
    struct sigaction ignore{};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) sigaction(sig, &ignore, nullptr);
    close(quit[1]);
    // stdout stays the launcher's business; stderr carries the server's log.
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull >= 0) dup2(devnull, 0), dup2(devnull, 1);
    _exit(serve_rendezvous(listen_fd, quit[0], job, secret));
  }
  const int fork_errno = errno;
  SignalRelay::restore(previous);
  close(quit[0]);
  close(listen_fd);
  if (pid < 0) {
    close(quit[1]);
    *error = std::string("fork: ") + std::strerror(fork_errno);
    return false;
  }
  setpgid(pid, pid);
  pid_ = pid;
  quit_fd_ = quit[1];
  return true;
}

bool RendezvousServerProcess::running() {
  if (pid_ <= 0) return false;
  int status;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_ || (r < 0 && errno == ECHILD)) {
    pid_ = -1;
    if (quit_fd_ >= 0) close(quit_fd_);
    quit_fd_ = -1;
    return false;
  }
  return true;
}

void RendezvousServerProcess::stop() {
  if (quit_fd_ >= 0) close(quit_fd_);
  quit_fd_ = -1;
  if (pid_ <= 0) return;
  // It ends on the closed pipe within a moment; a server that does not is killed.
  for (int i = 0; i < 200; ++i) {
    int status;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace ddp_embed::launch
