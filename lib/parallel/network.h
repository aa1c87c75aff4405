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

// A listening socket on host:port (host a loopback name), for LibTorch versions whose
// store server adopts a socket; -1 when that fails (the store then binds by itself).
int listen_socket(const std::string& host, int port);

// This machine's host name, or "?".
std::string host_name();

}  // namespace ddp_embed
