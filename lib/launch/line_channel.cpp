// JSON lines over a non-blocking TCP socket (line_channel.h).
#include "launch/line_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "launch/rendezvous_protocol.h"

namespace ddp_embed::launch {
namespace {

std::string address_text(const sockaddr_storage& addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr.ss_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&addr)->sin_addr, text, sizeof text);
  } else if (addr.ss_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    // An IPv4 peer of a dual-stack listener shows as ::ffff:a.b.c.d.
    if (IN6_IS_ADDR_V4MAPPED(&a6->sin6_addr))
      inet_ntop(AF_INET, &a6->sin6_addr.s6_addr[12], text, sizeof text);
    else
      inet_ntop(AF_INET6, &a6->sin6_addr, text, sizeof text);
  }
  return text;
}

}  // namespace

LineChannel::LineChannel(int fd) : fd_(fd) {
  fcntl(fd_, F_SETFL, fcntl(fd_, F_GETFL) | O_NONBLOCK);
  fcntl(fd_, F_SETFD, FD_CLOEXEC);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

LineChannel::LineChannel(LineChannel&& other) noexcept { *this = std::move(other); }

LineChannel& LineChannel::operator=(LineChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    closed_ = other.closed_;
    close_reason_ = std::move(other.close_reason_);
    in_ = std::move(other.in_);
    out_ = std::move(other.out_);
    max_line_ = other.max_line_;
    last_heard_ = other.last_heard_;
    last_sent_ = other.last_sent_;
    other.fd_ = -1;
  }
  return *this;
}

LineChannel::~LineChannel() {
  if (fd_ >= 0) ::close(fd_);
}

std::string LineChannel::peer_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "";
  return address_text(addr);
}

void LineChannel::close_now(const std::string& reason) {
  if (closed_) return;
  closed_ = true;
  close_reason_ = reason;
  out_.clear();
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

void LineChannel::send(const nlohmann::json& message) {
  if (!open()) return;
  out_ += message.dump() + "\n";
  last_sent_ = SteadyClock::now();
  flush();
}

void LineChannel::flush() {
  while (open() && !out_.empty()) {
    ssize_t n = ::send(fd_, out_.data(), out_.size(), MSG_NOSIGNAL);
    if (n > 0) {
      out_.erase(0, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;  // POLLOUT will say when
    close_now(n < 0 ? std::strerror(errno) : "closed by the peer");
  }
}

short LineChannel::poll_events() const { return static_cast<short>(POLLIN | (out_.empty() ? 0 : POLLOUT)); }

std::vector<nlohmann::json> LineChannel::receive() {
  std::vector<nlohmann::json> messages;
  if (!open()) return messages;
  char buffer[16 * 1024];
  for (size_t got = 0;;) {
    if (got >= kReadPerTurn) break;  // the rest: poll() says POLLIN again
    ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n > 0) {
      in_.append(buffer, static_cast<size_t>(n));
      got += static_cast<size_t>(n);
      last_heard_ = SteadyClock::now();
      // An unfinished line past the bound is no message of ours: stop buffering it now.
      const size_t newline = in_.rfind('\n');
      if (in_.size() - (newline == std::string::npos ? 0 : newline + 1) > max_line_) {
        close_now("the peer sent a line longer than " + std::to_string(max_line_) + " bytes");
        in_.clear();
        return messages;
      }
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    close_now(n == 0 ? "closed by the peer" : std::strerror(errno));
    break;
  }
  size_t start = 0;
  for (size_t newline; (newline = in_.find('\n', start)) != std::string::npos; start = newline + 1) {
    if (newline - start > max_line_) {
      close_now("the peer sent a line longer than " + std::to_string(max_line_) + " bytes");
      in_.clear();
      return messages;
    }
    const std::string line = in_.substr(start, newline - start);
    if (line.empty()) continue;
    nlohmann::json message = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!message.is_object() || !message.contains("op") || !message["op"].is_string()) {
      close_now("the peer sent a line that is not a rendezvous message");
      in_.clear();
      return messages;
    }
    messages.push_back(std::move(message));
  }
  in_.erase(0, start);
  return messages;
}

void LineChannel::beat_if_due(SteadyClock::time_point now) {
  if (open() && now >= next_beat_due()) send(BeatMessage{}.to_json());
}

bool split_host_port(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  std::string h = text.substr(0, colon);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  else if (h.find(':') != std::string::npos) return false;
  if (h.empty()) return false;
  const std::string p = text.substr(colon + 1);
  if (p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos) return false;
  const int value = std::stoi(p);
  if (value < 1 || value > 65535) return false;
  *host = h;
  *port = value;
  return true;
}

int connect_tcp(const std::string& host, int port, std::chrono::milliseconds timeout, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) {
    *error = std::string("does not resolve (") + gai_strerror(rc) + ")";
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      *error = std::strerror(errno);
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int ready;
      while ((ready = poll(&p, 1, static_cast<int>(timeout.count()))) < 0 && errno == EINTR) {
      }
      int so_error = ready == 0 ? ETIMEDOUT : 0;
      socklen_t len = sizeof so_error;
      if (ready > 0) getsockopt(fd, SOL_SOCKET, SO_ERROR, &so_error, &len);
      if (so_error == 0) break;
      *error = std::strerror(so_error);
    } else {
      *error = std::strerror(errno);
    }
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  return fd;
}

bool names_this_machine(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool local = false;
  for (addrinfo* a = found; a && !local; a = a->ai_next) {
    // Port 0 of an address: bind succeeds only where the address is this machine's.
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    ::close(fd);
  }
  freeaddrinfo(found);
  return local;
}

}  // namespace ddp_embed::launch
