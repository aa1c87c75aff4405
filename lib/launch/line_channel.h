// Internal to the launcher: one TCP connection that carries JSON objects, one a line, in
// both directions, without blocking the poll() loop that owns it. The elastic rendezvous
// (rendezvous_server.h, elastic_agent.h) speaks through it.
//
// Why lines of JSON: the messages are few and small (a join, a round, a heartbeat a
// second), a person can read them with `nc`, and nlohmann_json is already linked. Why
// non-blocking with an output buffer: a peer whose link is cut stops reading; a blocking
// send would then stall the launcher that must notice exactly that.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddp_embed::launch {

using SteadyClock = std::chrono::steady_clock;

// How often each side of a rendezvous connection says it is alive, and how long a silent
// peer is given before it counts as lost (a cut link closes nothing: only silence shows it).
inline constexpr auto kHeartbeatEvery = std::chrono::seconds(1);
inline constexpr auto kHeartbeatTimeout = std::chrono::seconds(5);

// What one receive() reads at most, and the longest line by default.
inline constexpr size_t kReadPerTurn = 64 * 1024;
inline constexpr size_t kDefaultMaxLine = 1 << 20;

class LineChannel {
 public:
  LineChannel() = default;
  explicit LineChannel(int fd);  // takes a connected socket; makes it non-blocking
  LineChannel(LineChannel&& other) noexcept;
  LineChannel& operator=(LineChannel&& other) noexcept;
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;
  ~LineChannel();

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0 && !closed_; }
  // Why the connection ended ("closed by the peer", "Connection reset by peer", ...).
  const std::string& close_reason() const { return close_reason_; }
  // The peer's address as this side sees it (getpeername), e.g. "10.77.0.2".
  std::string peer_address() const;

  // Queues one message and writes what the socket takes now; the rest goes out with
  // flush() when poll() says POLLOUT. A broken connection is noted, not thrown.
  void send(const nlohmann::json& message);
  void flush();
  bool wants_to_write() const { return !out_.empty(); }
  // The events to poll for: POLLIN, and POLLOUT while output waits.
  short poll_events() const;

  // Reads what has arrived (at most kReadPerTurn bytes a call: what a peer that floods has
  // left in the socket waits for the next turn of the poll loop, the others are served
  // meanwhile) and returns the
  // complete messages. A line that is not a JSON object with a string "op", or longer than
  // max_line(), closes the connection (a stranger speaking another protocol); what the op
  // and fields say is read_op()'s and from_json's to check.
  std::vector<nlohmann::json> receive();
  // The longest line the peer may send (default kDefaultMaxLine); what is buffered of an
  // unfinished line never exceeds it.
  void set_max_line(size_t bytes) { max_line_ = bytes; }
  size_t max_line() const { return max_line_; }

  // Heartbeats: when this side should next send one, and whether the peer has been
  // silent for longer than kHeartbeatTimeout.
  SteadyClock::time_point last_heard() const { return last_heard_; }
  SteadyClock::time_point next_beat_due() const { return last_sent_ + kHeartbeatEvery; }
  bool peer_silent(SteadyClock::time_point now) const { return now - last_heard_ > kHeartbeatTimeout; }
  // Sends a beat (rendezvous_protocol.h) when one is due.
  void beat_if_due(SteadyClock::time_point now);

  void close_now(const std::string& reason);

 private:
  int fd_ = -1;
  bool closed_ = false;
  std::string close_reason_;
  std::string in_, out_;
  size_t max_line_ = kDefaultMaxLine;
  SteadyClock::time_point last_heard_ = SteadyClock::now();
  SteadyClock::time_point last_sent_ = SteadyClock::now();
};

// "HOST:PORT" split; IPv6 in brackets ("[::1]:29400"). False when malformed.
bool split_host_port(const std::string& text, std::string* host, int* port);

// A TCP connection to host:port, made within `timeout` (blocking; the launcher has nothing
// else to do before it has one). -1 with *error when it cannot.
int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* error);

// Whether `host` resolves to an address of this machine (one a socket can bind). The
// launcher on that machine serves the rendezvous.
bool names_this_machine(const std::string& host);

}  // namespace ddp_embed::launch
