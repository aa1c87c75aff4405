// Which network the ranks talk over, found from this node's interfaces and routing table
// (no LibTorch). Peers connect to the address a rank advertises, so it must be one they
// can reach:
//  - a single-node job (loopback master, or a store file from ddp-launch): loopback,
//    nothing exposed;
//  - otherwise the interface that routes to MASTER_ADDR: the network the nodes share. The
//    libraries' own defaults are worse: Gloo takes the address the host name resolves to
//    (often 127.0.1.1, or an interface the other nodes cannot reach), NCCL the first
//    interface that is not loopback (often a docker bridge or a management network).
// GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, when the user sets them, win (as in PyTorch);
// process_group.cpp applies that.
#pragma once

#include <string>
#include <vector>

#include "config/choices.h"  // DistBackend

namespace ddp_embed {

struct NetworkChoice {
  std::string interface;  // "lo", "eth0"; empty: unknown (the library's default)
  std::string address;    // this rank's address on it; empty: no route to the master found
};

// loopback: every rank is on this host. Otherwise the interface and address this node
// would use to reach master_addr:master_port.
NetworkChoice choose_network(const std::string& master_addr, int master_port, bool loopback);

// "over eth0 (10.0.0.2)", for the log; what the user set (<BACKEND>_SOCKET_IFNAME) wins.
std::string describe_network(DistBackend backend, const NetworkChoice& net);

// True when every address `host` resolves to is a loopback address.
bool resolves_to_loopback(const std::string& host);

// A listening socket on host:port (the first of host's addresses that binds), for the
// store server to adopt; -1 with errno set (the last bind's) when none binds.
int listen_socket(const std::string& host, int port);

// Where rank 0's TCP store listens. LibTorch's own server listens on every interface; a
// socket bound here keeps it on the one address the job uses:
//  - loopback (every rank on this host): MASTER_ADDR's loopback address;
//  - otherwise pick_store_address() of MASTER_ADDR's addresses: the interface the other
//    nodes reach this one on;
//  - no such address (MASTER_ADDR is a NAT or virtual address that another machine holds,
//    or it does not resolve here), or its bind fails with EADDRNOTAVAIL: every interface,
//    and `where` is a warning that says why and what to give instead.
struct StoreListener {
  int fd = -1;        // bound and listening, for the store to adopt (it closes it); -1: LibTorch binds
  std::string where;  // rank 0's one log line: where the store listens; empty when the port
                      // is taken (LibTorch's own bind then fails and says so)
  bool warning = false;  // `where` is a warning: the store is more exposed, or unreachable, than asked
};
StoreListener listen_for_store(const std::string& master_addr, int port, bool loopback, bool single_node);

// The address the store binds to: the first of `resolved` (MASTER_ADDR's addresses, numeric,
// in getaddrinfo's order) that is not loopback and is one of `local` (this machine's
// interface addresses, numeric, as getnameinfo writes them); empty when none is.
std::string pick_store_address(const std::vector<std::string>& resolved, const std::vector<std::string>& local);

// This machine's host name, or "?".
std::string host_name();

}  // namespace ddp_embed
