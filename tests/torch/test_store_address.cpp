// Where rank 0's TCP store listens (parallel/network.h listen_for_store): the choice of the
// address among MASTER_ADDR's, and real binds on this machine's own addresses. The store
// of a real 2-host job is checked in tests/multihost/test_multihost.cpp.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "parallel/network.h"

using namespace ddp_embed;

namespace {

const std::vector<std::string> kLocal = {"127.0.0.1", "127.0.1.1", "10.0.0.6", "10.0.0.5", "::1", "fd77::1"};

// The address (numeric) a socket is bound to.
std::string bound_host(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) return "";
  char buf[INET6_ADDRSTRLEN] = {0};
  if (a.ss_family == AF_INET) inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, buf, sizeof buf);
  if (a.ss_family == AF_INET6) inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, buf, sizeof buf);
  return buf;
}

// This machine's first IPv4 address that is not loopback, or "".
std::string a_local_ipv4_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string found;
  for (ifaddrs* i = list; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET) continue;
    const in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
    if ((ntohl(a.s_addr) >> 24) == 127) continue;
    char buf[INET_ADDRSTRLEN] = {0};
    inet_ntop(AF_INET, &a, buf, sizeof buf);
    found = buf;
  }
  freeifaddrs(list);
  return found;
}

}  // namespace

// A name with a loopback line and a NAT address besides its own: the first of its addresses
// that this machine holds and that is not loopback, in the resolver's order.
TEST(StoreAddress, TheFirstOfMasterAddrsAddressesThatThisMachineHoldsAndIsNotLoopbackIsBound) {
  EXPECT_EQ(pick_store_address({"127.0.1.1", "203.0.113.9", "10.0.0.5", "10.0.0.6"}, kLocal), "10.0.0.5");
  EXPECT_EQ(pick_store_address({"10.0.0.6", "10.0.0.5"}, kLocal), "10.0.0.6");
}

TEST(StoreAddress, IPv6AddressesAreChosenAsIPv4OnesAre) {
  EXPECT_EQ(pick_store_address({"::1", "fd77::1"}, kLocal), "fd77::1");
  EXPECT_EQ(pick_store_address({"::ffff:127.0.0.1", "fd77::1"}, {"::ffff:127.0.0.1", "fd77::1"}), "fd77::1");
}

// Only loopback (Debian's "127.0.1.1 <hostname>"), or only another machine's addresses (a
// NAT or a virtual address): nothing to bind, the caller falls back.
TEST(StoreAddress, LoopbackAndOtherMachinesAddressesAreNeverChosen) {
  EXPECT_EQ(pick_store_address({"127.0.1.1"}, kLocal), "");
  EXPECT_EQ(pick_store_address({"::1", "::ffff:127.0.0.1"}, {"::1", "::ffff:127.0.0.1"}), "");
  EXPECT_EQ(pick_store_address({"203.0.113.9", "fd99::9"}, kLocal), "");
  EXPECT_EQ(pick_store_address({}, kLocal), "");
}

TEST(StoreAddress, AStoreOfRanksOnThisHostListensOnLoopbackOnly) {
  for (const std::string host : {"127.0.0.1", "::1"}) {
    const StoreListener l = listen_for_store(host, 0, /*loopback=*/true, /*single_node=*/true);
    if (l.fd < 0 && host == "::1") continue;  // a machine without IPv6
    ASSERT_GE(l.fd, 0) << host << ": " << l.where;
    EXPECT_EQ(bound_host(l.fd), host);
    EXPECT_FALSE(l.warning) << l.where;
    EXPECT_NE(l.where.find("listens on " + std::string(host == "::1" ? "[::1]:" : "127.0.0.1:")), std::string::npos)
        << l.where;
    EXPECT_NE(l.where.find(" only (loopback: every rank is on this host)"), std::string::npos) << l.where;
    close(l.fd);
  }
}

TEST(StoreAddress, AnAddressOfThisMachineIsTheOnlyOneTheStoreListensOn) {
  const std::string address = a_local_ipv4_address();
  if (address.empty()) GTEST_SKIP() << "this machine has no IPv4 address but loopback";
  const StoreListener l = listen_for_store(address, 0, /*loopback=*/false, /*single_node=*/false);
  ASSERT_GE(l.fd, 0) << l.where;
  EXPECT_EQ(bound_host(l.fd), address);
  EXPECT_FALSE(l.warning) << l.where;
  EXPECT_NE(l.where.find("the workers' store listens on " + address + ":"), std::string::npos) << l.where;
  EXPECT_NE(l.where.find(" only (the interface of MASTER_ADDR)"), std::string::npos) << l.where;
  close(l.fd);
}

// 192.0.2.1 (TEST-NET-1, RFC 5737) is no machine's own address: LibTorch binds every
// interface, and the one warning line says so, why, and what to give instead.
TEST(StoreAddress, AMasterAddrThatIsNotThisMachinesListensOnEveryInterfaceWithAWarning) {
  const StoreListener l = listen_for_store("192.0.2.1", 29531, /*loopback=*/false, /*single_node=*/false);
  EXPECT_EQ(l.fd, -1);
  EXPECT_TRUE(l.warning);
  EXPECT_NE(l.where.find("the workers' store listens on every interface (port 29531): MASTER_ADDR 192.0.2.1 is not "
                         "an address of this machine"),
            std::string::npos)
      << l.where;
  EXPECT_NE(l.where.find("give --master-addr (MASTER_ADDR) as this node's own address"), std::string::npos) << l.where;
  EXPECT_EQ(l.where.find('\n'), std::string::npos) << "one line: " << l.where;
}
