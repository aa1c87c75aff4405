// The rendezvous address and port: checked (or the port picked) before any worker starts,
// so "port in use" or "does not resolve" is one clear line instead of a rank-0 crash deep
// inside the store's start-up, or every worker retrying its connection until the timeout.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launch/launcher.h"

namespace ddp_embed::launch {
namespace {

// A socket bound to the wildcard address on `port`: IPv6 dual-stack (covers IPv4 too,
// as the store's own listener does), falling back to IPv4 where IPv6 is missing.
// Returns the fd, or -1 with errno set.
int bind_wildcard(int port) {
  int one = 1, zero = 0;
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 addr{};
    addr.sin6_family = AF_INET6;
    addr.sin6_addr = in6addr_any;
    addr.sin6_port = htons(static_cast<uint16_t>(port));
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    int saved = errno;
    close(fd);
    errno = saved;
    if (saved != EAFNOSUPPORT && saved != EADDRNOTAVAIL) return -1;
  } else if (errno != EAFNOSUPPORT) {
    return -1;
  }
  fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
  int saved = errno;
  close(fd);
  errno = saved;
  return -1;
}

}  // namespace

bool address_resolves(const std::string& host, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (res) freeaddrinfo(res);
  if (rc != 0 && error) *error = gai_strerror(rc);
  return rc == 0;
}

PortState probe_port(int port, std::string* error) {
  int fd = bind_wildcard(port);
  if (fd >= 0) {
    close(fd);  // never listened: closing leaves no TIME_WAIT behind
    return PortState::free;
  }
  if (errno == EADDRINUSE) return PortState::in_use;
  if (error) *error = std::strerror(errno);
  return PortState::error;
}

int pick_free_port(std::string* error) {
  int fd = bind_wildcard(0);
  if (fd < 0) {
    if (error) *error = std::strerror(errno);
    return 0;
  }
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  int port = 0;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    if (addr.ss_family == AF_INET6)
      port = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    else
      port = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
  } else if (error) {
    *error = std::strerror(errno);
  }
  close(fd);
  return port;
}

int listen_on_port(int port) {
  int fd = bind_wildcard(port);
  if (fd < 0) return -1;
  // The longest queue the system allows: a flood of strangers' connections must not fill
  // it, or a real launcher's connect waits a second for its SYN to be sent again.
  if (listen(fd, SOMAXCONN) != 0) {
    int saved = errno;
    close(fd);
    errno = saved;
    return -1;
  }
  return fd;
}

}  // namespace ddp_embed::launch
