#include "parallel/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace ddp_embed {
namespace {

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    // ::1, or ::ffff:127.x.x.x (an IPv4 loopback address in IPv6's form)
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127);
  }
  return false;
}

std::string numeric_host(const sockaddr* a, socklen_t len) {
  char buf[NI_MAXHOST] = {0};
  if (getnameinfo(a, len, buf, sizeof(buf), nullptr, 0, NI_NUMERICHOST) != 0) return "";
  return buf;
}

// The local address this node would use to reach host:port (a connected UDP socket sends
// nothing; it only asks the kernel's routing table). Empty when unknown.
std::string route_source_address(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res) != 0 || !res) return "";
  std::string out;
  for (addrinfo* p = res; p && out.empty(); p = p->ai_next) {
    int fd = socket(p->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    if (connect(fd, p->ai_addr, p->ai_addrlen) == 0) {
      sockaddr_storage local{};
      socklen_t len = sizeof(local);
      if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
          !is_loopback(reinterpret_cast<sockaddr*>(&local))) {
        out = numeric_host(reinterpret_cast<sockaddr*>(&local), len);
      }
    }
    close(fd);
  }
  freeaddrinfo(res);
  return out;
}

// The name of the network interface that holds `address` (numeric), e.g. "eth0"; empty
// when none does.
std::string interface_with_address(const std::string& address) {
  ifaddrs* list = nullptr;
  if (address.empty() || getifaddrs(&list) != 0) return "";
  std::string name;
  for (ifaddrs* i = list; i && name.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    if (numeric_host(i->ifa_addr, len) == address) name = i->ifa_name;
  }
  freeifaddrs(list);
  return name;
}

// The numeric form of every address `host` resolves to, in getaddrinfo's order; empty
// when it does not resolve.
std::vector<std::string> resolved_addresses(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::vector<std::string> out;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return out;
  for (addrinfo* p = res; p; p = p->ai_next) {
    const std::string a = numeric_host(p->ai_addr, p->ai_addrlen);
    if (!a.empty()) out.push_back(a);
  }
  freeaddrinfo(res);
  return out;
}

// Every address of this machine's interfaces, numeric (link-local ones with their "%eth0").
std::vector<std::string> local_addresses() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    const socklen_t len = i->ifa_addr->sa_family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    const std::string a = numeric_host(i->ifa_addr, len);
    if (!a.empty()) out.push_back(a);
  }
  freeifaddrs(list);
  return out;
}

// Whether `host` is written as an address (IPv4, IPv6), not a name; *loopback says
// whether it is a loopback one.
bool is_numeric_address(const std::string& host, bool* loopback = nullptr) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  if (loopback) *loopback = is_loopback(res->ai_addr);
  freeaddrinfo(res);
  return true;
}

// "10.0.0.1:29500" / "[fd00::1]:29500": the address and port a socket is bound to.
std::string bound_address(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "?";
  const std::string host = numeric_host(reinterpret_cast<sockaddr*>(&a), len);
  const int port = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  return (a.ss_family == AF_INET6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// LibTorch's server binds by itself, on every interface: a warning, with the reason.
StoreListener on_every_interface(int port, const std::string& reason) {
  const std::string p = std::to_string(port);
  return {-1,
          "the workers' store listens on every interface (port " + p + "): " + reason +
              "; give --master-addr (MASTER_ADDR) as this node's own address on the network the nodes share, "
              "or firewall port " + p + " from outside that network",
          true};
}

// The bind of `address` failed with `err`. The port taken: LibTorch's own bind fails the
// same way, and its error says so; anything else: every interface.
StoreListener on_bind_failure(int err, const std::string& address, int port) {
  if (err == EADDRINUSE) return {};
  return on_every_interface(port, "binding " + address + " failed (" + std::strerror(err) + ")");
}

}  // namespace

NetworkChoice choose_network(const std::string& master_addr, int master_port, bool loopback) {
  if (loopback) return {"lo", "127.0.0.1"};
  const std::string address = route_source_address(master_addr, master_port);
  return {interface_with_address(address), address};
}

std::string describe_network(DistBackend backend, const NetworkChoice& net) {
  const char* variable = backend == DistBackend::Nccl ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME";
  const char* user = std::getenv(variable);
  if (user && *user) return std::string("over ") + user + " (" + variable + ")";
  if (net.address.empty()) return "over the library's default interface (no route to MASTER_ADDR found)";
  return "over " + (net.interface.empty() ? std::string("?") : net.interface) + " (" + net.address + ")";
}

bool resolves_to_loopback(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return false;
  bool all = true;
  for (addrinfo* p = res; p; p = p->ai_next) all = all && is_loopback(p->ai_addr);
  freeaddrinfo(res);
  return all;
}

int listen_socket(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res) != 0 || !res) {
    errno = EADDRNOTAVAIL;
    return -1;
  }
  int fd = -1, err = EADDRNOTAVAIL;
  for (addrinfo* p = res; p && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, p->ai_addr, p->ai_addrlen) != 0 || listen(fd, 2048) != 0) {
      err = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  if (fd < 0) errno = err;
  return fd;
}

std::string pick_store_address(const std::vector<std::string>& resolved, const std::vector<std::string>& local) {
  for (const std::string& a : resolved) {
    bool loopback = false;
    if (!is_numeric_address(a, &loopback) || loopback) continue;
    for (const std::string& l : local)
      if (l == a) return a;
  }
  return "";
}

StoreListener listen_for_store(const std::string& master_addr, int port, bool loopback, bool single_node) {
  StoreListener s;
  if (loopback) {
    s.fd = listen_socket(master_addr, port);
    if (s.fd < 0) return on_bind_failure(errno, master_addr, port);
    // A name that resolves to loopback on this host only (Debian's "127.0.1.1 <hostname>"
    // line in /etc/hosts): ranks on other machines resolve it elsewhere and find nothing.
    // "localhost" or a loopback address is meant: nodes on this host (as the tests run).
    const bool meant = is_numeric_address(master_addr) || master_addr.find("localhost") != std::string::npos;
    if (single_node || meant) {
      s.where = "the workers' store listens on " + bound_address(s.fd) + " only (loopback: every rank is on this host)";
    } else {
      s.warning = true;
      s.where = "the workers' store listens on " + bound_address(s.fd) + " only, on loopback: MASTER_ADDR " +
                master_addr + " resolves to no other address on this machine (an /etc/hosts line such as '127.0.1.1 " +
                master_addr + "'?), so ranks on other machines cannot reach it; give --master-addr (MASTER_ADDR) "
                "as the address the other nodes reach this one at";
    }
    return s;
  }
  const std::vector<std::string> resolved = resolved_addresses(master_addr);
  const std::string address = pick_store_address(resolved, local_addresses());
  if (address.empty())
    return on_every_interface(port, "MASTER_ADDR " + master_addr +
                                        (resolved.empty() ? " does not resolve on this machine"
                                                          : " is not an address of this machine (a NAT or virtual "
                                                            "address?)"));
  s.fd = listen_socket(address, port);
  if (s.fd < 0) return on_bind_failure(errno, address, port);
  s.where = "the workers' store listens on " + bound_address(s.fd) + " only (the interface of MASTER_ADDR" +
            (address == master_addr ? "" : " " + master_addr) + ")";
  return s;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace ddp_embed
