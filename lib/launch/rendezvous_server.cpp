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
#include <map>
#include <thread>
#include <nlohmann/json.hpp>

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

class Server {
 public:
  Server(int listen_fd, int quit_fd) : listen_fd_(listen_fd), quit_fd_(quit_fd), start_(SteadyClock::now()) {}

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
      for (auto& [id, channel] : channels_) {
        fds.push_back({channel.fd(), channel.poll_events(), 0});
        ids.push_back(id);
        timeout = std::min(timeout, ms_until(channel.next_beat_due(), now));
        timeout = std::min(timeout, ms_until(channel.last_heard() + kHeartbeatTimeout, now));
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
      if (fds[0].revents & POLLIN) accept_all();
      for (size_t k = 2; k < fds.size(); ++k) {
        auto it = channels_.find(ids[k - 2]);
        if (it == channels_.end()) continue;
        if (fds[k].revents & POLLOUT) it->second.flush();
        if (fds[k].revents & (POLLIN | POLLHUP | POLLERR))
          for (const json& line : it->second.receive()) {
            try {
              handle(it->first, it->second, line);
            } catch (const RendezvousProtocolError& e) {  // no launcher of ours (rendezvous_protocol.h)
              cut_off(it->first, it->second, e.what());
              break;
            }
          }
      }
      check_connections();
      RendezvousRounds::Outbox out;
      rounds_.tick(seconds(), out);
      deliver(out);
    }
    // The last word (finished, abort) goes out before the server ends.
    const auto until = SteadyClock::now() + std::chrono::seconds(2);
    for (bool pending = true; pending && SteadyClock::now() < until;) {
      pending = false;
      for (auto& [id, channel] : channels_) {
        channel.flush();
        pending = pending || (channel.open() && channel.wants_to_write());
      }
      if (pending) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return rounds_.finished() ? 0 : 1;
  }

 private:
  double seconds() const { return std::chrono::duration<double>(SteadyClock::now() - start_).count(); }

  void accept_all() {
    while (true) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) return;  // EAGAIN (nothing more), or a connection that went away
      channels_.emplace(next_id_++, LineChannel(fd));
    }
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

  // Closed connections, and silent ones, are lost nodes.
  void check_connections() {
    const auto now = SteadyClock::now();
    for (auto it = channels_.begin(); it != channels_.end();) {
      LineChannel& channel = it->second;
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
      it = channels_.erase(it);
      RendezvousRounds::Outbox out;
      rounds_.lost(id, why, seconds(), out);
      deliver(out);
    }
  }

  void deliver(const RendezvousRounds::Outbox& out) {
    for (const std::string& line : out.log) log_line(line);
    for (const auto& [id, message] : out.messages) {
      auto it = channels_.find(id);
      if (it != channels_.end()) it->second.send(to_json(message));
    }
  }

  int listen_fd_, quit_fd_;
  SteadyClock::time_point start_;
  RendezvousRounds rounds_;
  std::map<int, LineChannel> channels_;
  int next_id_ = 1;
};

}  // namespace

int serve_rendezvous(int listen_fd, int quit_fd) {
  fcntl(listen_fd, F_SETFL, fcntl(listen_fd, F_GETFL) | O_NONBLOCK);
  return Server(listen_fd, quit_fd).run();
}

RendezvousServerProcess::~RendezvousServerProcess() { stop(); }

bool RendezvousServerProcess::start(int listen_fd, std::string* error) {
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
    _exit(serve_rendezvous(listen_fd, quit[0]));
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
