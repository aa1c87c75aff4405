#include "parallel/network.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

namespace ddp_embed {
namespace {

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(a);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(a);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
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
  if (getaddrinfo(host.c_str(), port_s.c_str(), &hints, &res) != 0 || !res) return -1;
  int fd = -1;
  for (addrinfo* p = res; p && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, p->ai_addr, p->ai_addrlen) != 0 || listen(fd, 2048) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace ddp_embed
