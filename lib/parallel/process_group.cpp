// Rendezvous, process group creation and the collectives (process_group.h), plus the
// differentiable all-gather. All LibTorch-version differences go through compat/.
#define DDP_EMBED_COMPAT_C10D
#include "compat/torch_compat.h"

#include "parallel/process_group.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <ATen/ATen.h>
#include <c10/util/Logging.h>
#include <c10/util/accumulate.h>
#include <torch/csrc/autograd/custom_function.h>

namespace ddp_embed {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// ---- small helpers -------------------------------------------------------------------
namespace {

std::string seconds_str(milliseconds ms) {
  std::ostringstream s;
  s << static_cast<double>(ms.count()) / 1000.0 << " s";
  return s.str();
}

std::string rank_list(const std::vector<int>& ranks) {
  std::ostringstream s;
  const size_t shown = std::min<size_t>(ranks.size(), 16);
  for (size_t i = 0; i < shown; ++i) s << (i ? ", " : "") << ranks[i];
  if (ranks.size() > shown) s << " and " << ranks.size() - shown << " more";
  return s.str();
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// c10 errors append "Exception raised from ..." and a backtrace: keep the message.
std::string first_line(const std::string& s) { return s.substr(0, std::min(s.find('\n'), size_t{600})); }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

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

// True when every address the host resolves to is a loopback address.
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

// A listening socket on host:port (host a loopback name), for LibTorch versions whose store
// server adopts a socket; -1 when that fails (the store then binds by itself).
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

// Which network the collectives' sockets use. Peers connect to the address a rank
// advertises, so it must be one they can reach:
//  - a single-node job (loopback master, or a store file from ddp-launch): loopback,
//    nothing exposed;
//  - otherwise the interface that routes to MASTER_ADDR: the network the nodes share. The
//    libraries' own defaults are worse: Gloo takes the address the host name resolves to
//    (often 127.0.1.1, or an interface the other nodes cannot reach), NCCL the first
//    interface that is not loopback (often a docker bridge or a management network).
// GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME, when the user sets them, win (as in PyTorch).
struct NetworkChoice {
  std::string interface;  // "lo", "eth0"; empty: unknown (the library's default)
  std::string address;    // this rank's address on it
};

NetworkChoice choose_network(const WorkerEnv& env, bool loopback) {
  if (loopback) return {"lo", "127.0.0.1"};
  const std::string address = route_source_address(env.master_addr, env.master_port);
  return {interface_with_address(address), address};
}

std::vector<compat::GlooDevice> gloo_devices(const NetworkChoice& net) {
  std::vector<compat::GlooDevice> devices;
  if (const char* ifn = std::getenv("GLOO_SOCKET_IFNAME"); ifn && *ifn) {
    std::stringstream s(ifn);
    std::string name;
    while (std::getline(s, name, ','))
      if (!name.empty()) devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
    if (!devices.empty()) return devices;
  }
  devices.push_back(net.address.empty() ? c10d::ProcessGroupGloo::createDefaultDevice()
                                        : c10d::ProcessGroupGloo::createDeviceForHostname(net.address));
  return devices;
}

// "over eth0 (10.0.0.2)", for the log; what the user set wins there too.
std::string describe_network(const std::string& backend, const NetworkChoice& net) {
  const char* user = std::getenv(backend == "nccl" ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME");
  if (user && *user) return std::string("over ") + user + " (" + (backend == "nccl" ? "NCCL" : "GLOO") + "_SOCKET_IFNAME)";
  if (net.address.empty()) return "over the library's default interface (no route to MASTER_ADDR found)";
  return "over " + (net.interface.empty() ? std::string("?") : net.interface) + " (" + net.address + ")";
}

// The key under which rank r posts "ready" (with its node, host, address and pid).
std::string ready_key(int r) { return "rank/" + std::to_string(r) + "/ready"; }

// The peer address in a Gloo error ("[pair.cc:545] Read error [10.0.0.2]:3821: Connection
// reset by peer"): the first "[...]:" whose inside is an IP address; "" when none is.
std::string peer_address(const std::string& err) {
  for (size_t open = err.find('['); open != std::string::npos; open = err.find('[', open + 1)) {
    const size_t close = err.find(']', open);
    if (close == std::string::npos) break;
    const std::string inside = err.substr(open + 1, close - open - 1);
    if (err.compare(close, 2, "]:") == 0 && !inside.empty() && inside.size() <= 45 &&
        inside.find_first_not_of("0123456789abcdefABCDEF.:") == std::string::npos)
      return inside;
  }
  return "";
}

// The node a rank runs on, where launchers number ranks node by node (ddp-launch, torchrun,
// SLURM's block distribution): "node 1". Empty when the layout says nothing.
std::string node_of(int rank, const WorkerEnv& env) {
  if (env.local_world_size <= 0 || env.world_size % env.local_world_size != 0 || env.single_node()) return "";
  return "node " + std::to_string(rank / env.local_world_size);
}

// "rank(s) 2, 3 (node 1)" / "rank(s) 1, 5 (nodes 0, 2)".
std::string ranks_and_nodes(const std::vector<int>& ranks, const WorkerEnv& env) {
  std::vector<std::string> nodes;
  for (int r : ranks) {
    const std::string n = node_of(r, env);
    if (!n.empty() && std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  std::string text = "rank(s) " + rank_list(ranks);
  if (nodes.size() == 1) text += " (" + nodes[0] + ")";
  if (nodes.size() > 1) {
    text += " (nodes ";
    for (size_t i = 0; i < nodes.size(); ++i) text += (i ? ", " : "") + nodes[i].substr(5);
    text += ")";
  }
  return text;
}

}  // namespace

// ---- state ---------------------------------------------------------------------------
struct ProcessGroup::Impl {
  int rank = 0;
  int world = 1;
  std::string backend = "none";
  c10::Device device{c10::kCPU};
  milliseconds timeout{600000};
  WorkerEnv env;                          // the layout, to name the nodes of ranks
  std::string store_addr;                 // "host:port", for messages
  std::string network;                    // "gloo over eth0 (10.0.0.2)", for the log
  c10::intrusive_ptr<c10d::Store> store;  // prefixed (see meet_every_rank)
  // Declared after the store: destroyed first (it may still talk to the store).
  c10::intrusive_ptr<compat::CollectiveBackend> pg;

  std::mutex mu;  // seq, broken, store use for diagnostics
  std::uint64_t seq = 0;
  std::string broken;  // the first failure; later collectives fail at once with it

  bool distributed() const { return world > 1; }

  std::uint64_t begin(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    if (!broken.empty())
      throw DistError(what + " on rank " + std::to_string(rank) +
                      ": the process group is unusable after an earlier failure: " + broken);
    return ++seq;
  }

  // Host-side wait limit. Gloo: always the timeout. NCCL: for tensors that stay on the GPU
  // only order the current stream after the collective (the CPU keeps queuing work; the
  // NCCL watchdog enforces the timeout); block the host only when it reads the result.
  milliseconds wait_limit(bool host_reads_result) const {
    if (backend == "nccl" && !host_reads_result) return milliseconds(0);
    return timeout;
  }

  template <class Launch>
  c10::intrusive_ptr<c10d::Work> launch(const std::string& what, std::uint64_t seq_no, Launch&& f) {
    try {
      return f();
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      fail(what, seq_no, e.what());
    }
  }

  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what, std::uint64_t seq_no,
            bool host_reads_result) {
    try {
      compat::wait_work(work, wait_limit(host_reads_result));
    } catch (const std::exception& e) {
      fail(what, seq_no, e.what());
    }
  }

  // Turns a c10d/Gloo/NCCL failure into a DistError that says which collective failed, how,
  // and which ranks never reached it. For the latter every rank that fails posts
  // "stuck/<seq>/<rank>" to the store and looks, for a short while, for the others' posts:
  // ranks stuck in the same collective post theirs at about the same time; a rank that
  // exited or is busy elsewhere never does.
  [[noreturn]] void fail(const std::string& what, std::uint64_t seq_no, const std::string& err) {
    const std::string e = lower(err);
    std::string how = "failed";
    if (e.find("timed out") != std::string::npos || e.find("timeout") != std::string::npos) {
      how = "did not complete within " + seconds_str(timeout);
    } else if (e.find("closed") != std::string::npos || e.find("reset") != std::string::npos ||
               e.find("broken pipe") != std::string::npos || e.find("eof") != std::string::npos ||
               e.find("refused") != std::string::npos) {
      how = "failed because a peer closed its connection (another rank probably exited or crashed)";
    }
    std::string msg = what + " (collective #" + std::to_string(seq_no) + ") " + how + " on rank " +
                      std::to_string(rank) + " of " + std::to_string(world);
    std::lock_guard<std::mutex> lock(mu);
    if (broken.empty()) {
      msg += missing_ranks(seq_no, what, peer_address(err));
      broken = msg;
    }
    throw DistError(msg + " [" + first_line(err) + "]");
  }

  // Bounded by a grace period: on a cut link the store does not answer either, and its
  // calls would block for the whole timeout again. The lookup runs on a thread of its own
  // that owns everything it uses, so it may outlive this call (the process is failing).
  std::string missing_ranks(std::uint64_t seq_no, const std::string& what, const std::string& peer) {
    if (!store) return "";
    const auto grace = std::clamp(timeout / 4, milliseconds(500), milliseconds(5000));
    auto answer = std::make_shared<std::promise<std::string>>();
    std::future<std::string> result = answer->get_future();
    std::thread([answer, store = store, env = env, me = rank, n = world, seq_no, what, grace, peer] {
      auto key = [&](int r) { return "stuck/" + std::to_string(seq_no) + "/" + std::to_string(r); };
      try {
        // The peer whose connection broke, by the address each rank posted with "ready":
        // direct evidence, where the scan below only sees who is slow to fail (a rank
        // blocked on a failing rank of its own node fails only when that one exits).
        std::string closed;
        if (!peer.empty()) {
          std::vector<int> at_peer;
          for (int r = 0; r < n; ++r) {
            const auto v = store->get(ready_key(r));
            if ((std::string(v.begin(), v.end()) + ",").find(" " + peer + ",") != std::string::npos) at_peer.push_back(r);
          }
          closed = "; the connection that broke was to " + peer +
                   (at_peer.empty() ? std::string() : ", " + ranks_and_nodes(at_peer, env));
        }
        store->set(key(me), bytes(what));
        const auto deadline = Clock::now() + grace;
        std::vector<int> missing;
        for (int r = 0; r < n; ++r)
          if (r != me) missing.push_back(r);
        while (!missing.empty()) {
          std::vector<int> still;
          for (int r : missing)
            if (!store->check({key(r)})) still.push_back(r);
          missing.swap(still);
          if (missing.empty() || Clock::now() >= deadline) break;
          std::this_thread::sleep_for(milliseconds(50));
        }
        answer->set_value(closed + (missing.empty() ? "; every other rank failed in the same collective"
                                                    : "; no sign of " + ranks_and_nodes(missing, env) +
                                                          " at this collective (missing, exited, or issuing different "
                                                          "collectives)"));
      } catch (const std::exception&) {
        answer->set_value("");
      }
    }).detach();
    std::string text;
    if (result.wait_for(grace + milliseconds(1000)) == std::future_status::ready) text = result.get();
    if (text.empty())
      text = "; the rendezvous store at " + store_addr + " does not answer either (" +
             (rank == 0 ? std::string("rank 0 hosts it: the network of this node may be down")
                        : "rank 0 hosts it: it may have exited, or the network to " +
                              (node_of(0, env).empty() ? std::string("it") : node_of(0, env)) + " is down") +
             ")";
    return text;
  }
};

struct PendingCollective::State {
  ProcessGroup::Impl* impl = nullptr;
  c10::intrusive_ptr<c10d::Work> work;
  std::string what;
  std::uint64_t seq = 0;
};

PendingCollective::PendingCollective() = default;
PendingCollective::~PendingCollective() = default;
PendingCollective::PendingCollective(PendingCollective&&) noexcept = default;
PendingCollective& PendingCollective::operator=(PendingCollective&&) noexcept = default;

bool PendingCollective::done() const { return !state_ || state_->work->isCompleted(); }

void PendingCollective::wait() {
  if (!state_) return;
  auto s = std::move(state_);  // waited once, whatever happens
  s->impl->wait(s->work, s->what, s->seq, /*host_reads_result=*/false);
}

// ---- creation ------------------------------------------------------------------------
ProcessGroup::ProcessGroup(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ProcessGroup::~ProcessGroup() = default;

std::unique_ptr<ProcessGroup> ProcessGroup::single() {
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::make_unique<Impl>()));
}

namespace {

// ---- rendezvous ------------------------------------------------------------------------
//
// Rank 0 hosts the store (unless ddp-launch gave a store file, or torchrun's agent hosts
// it); every rank posts "ready" there and waits for all the others; the first to see them
// all seals the store: its rendezvous is over.
//
// Why seal. After a failure the launchers of a multi-node job restart their workers on
// their own, a few seconds apart, and the new rank 0 hosts a fresh store. A restarted
// worker that starts before the old rank 0 has exited would find the old store, see the
// old attempt's "ready" keys and join a group that is ending. A worker that finds a
// sealed store knows it is an earlier attempt's: it lets go and connects again until it
// finds the fresh one (or its deadline passes). So nodes never need to agree on their
// restart counts: they meet at the one store that is open. An agent store outlives the
// workers; there each attempt's keys are apart (torchrun's agents agree on the attempt).

constexpr const char* kSealedKey = "sealed";

// Posts this rank's "ready" (what it is, for the others' error messages) and waits for
// everyone's; on timeout the error names the ranks, and their nodes, that never posted.
void post_ready_and_wait(const c10::intrusive_ptr<c10d::Store>& store, const WorkerEnv& env, const std::string& me,
                         const std::string& addr, Clock::time_point deadline, milliseconds timeout) {
  store->set(ready_key(env.rank), bytes(me));
  std::vector<std::string> keys;
  for (int r = 0; r < env.world_size; ++r) keys.push_back(ready_key(r));
  auto pause = milliseconds(5);
  while (!store->check(keys)) {
    if (Clock::now() >= deadline) {
      std::vector<int> missing, joined;
      for (int r = 0; r < env.world_size; ++r) (store->check({ready_key(r)}) ? joined : missing).push_back(r);
      if (missing.empty()) break;
      throw DistError("rendezvous at " + addr + " timed out after " + seconds_str(timeout) + ": " +
                      ranks_and_nodes(missing, env) + " of " + std::to_string(env.world_size) +
                      " did not join (rank " + std::to_string(env.rank) + " saw rank(s) " + rank_list(joined) + ")");
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, milliseconds(100));
  }
  store->set(kSealedKey, bytes("1"));
}

// Opens the store: the file ddp-launch gave (single node: no port is opened at all), else a
// TCP store that rank 0 hosts unless the launcher's agent already does.
c10::intrusive_ptr<c10d::Store> open_store(const WorkerEnv& env, const std::string& addr, bool loopback,
                                           milliseconds timeout) {
  const bool server = env.rank == 0 && !env.agent_store;
  try {
    if (!env.store_file.empty()) return compat::make_file_store(env.store_file, env.world_size, timeout);
    int fd = -1;
    // Single node on loopback: serve the store on a socket bound to the loopback interface
    // only (LibTorch's own server would listen on every interface).
    if (server && loopback) fd = listen_socket(env.master_addr, env.master_port);
    return compat::make_tcp_store(env.master_addr, static_cast<std::uint16_t>(env.master_port), server,
                                  static_cast<std::size_t>(env.world_size), timeout, fd);
  } catch (const std::exception& e) {
    if (!env.store_file.empty())
      throw DistError("rank " + std::to_string(env.rank) + " could not open the rendezvous " + addr + ": " +
                      first_line(e.what()));
    if (server)
      throw DistError("rank 0 could not host the rendezvous store on " + addr + ": " + first_line(e.what()) +
                      " (is MASTER_PORT " + std::to_string(env.master_port) + " used by another job?)");
    throw DistError("rank " + std::to_string(env.rank) + " could not reach the rendezvous store at " + addr +
                    " within " + seconds_str(timeout) + ": " + first_line(e.what()) +
                    " (is rank 0 running, and is MASTER_ADDR reachable from this node?)");
  }
}

// Opens the store and meets every rank there; returns the store under this job's prefix.
// A client of rank 0's store skips sealed stores and outlives a store that goes away (see
// "Why seal" above) until the deadline.
c10::intrusive_ptr<c10d::Store> meet_every_rank(const WorkerEnv& env, const NetworkChoice& net,
                                                const std::string& addr, bool loopback,
                                                Clock::time_point deadline, milliseconds timeout) {
  const bool client_of_rank0 = env.store_file.empty() && !env.agent_store && env.rank != 0;
  const std::string prefix =
      env.agent_store ? "ddp_embed/attempt" + std::to_string(env.restart_count) : std::string("ddp_embed");
  const std::string node = node_of(env.rank, env);
  const std::string me = (node.empty() ? "" : node + ", ") + "host " + host_name() +
                         (net.address.empty() || net.address == "127.0.0.1" ? "" : " " + net.address) + ", pid " +
                         std::to_string(getpid());
  std::string skipped;  // why an earlier try let go, for the timeout message
  for (;;) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
    if (left <= milliseconds(0))
      throw DistError("rank " + std::to_string(env.rank) + " found no open rendezvous at " + addr + " within " +
                      seconds_str(timeout) + ": " + skipped);
    auto store = compat::make_prefix_store(prefix, open_store(env, addr, loopback, client_of_rank0 ? left : timeout));
    try {
      if (client_of_rank0 && store->check({kSealedKey})) {
        skipped = "the store there belongs to an earlier attempt that has not ended yet";
      } else {
        post_ready_and_wait(store, env, me, addr, deadline, timeout);
        return store;
      }
    } catch (const DistError&) {
      throw;
    } catch (const std::exception& e) {
      if (!client_of_rank0)
        throw DistError("rendezvous at " + addr + " failed on rank " + std::to_string(env.rank) + ": " +
                        first_line(e.what()));
      skipped = "the store went away during the rendezvous (" + first_line(e.what()) + ")";
    }
    std::this_thread::sleep_for(milliseconds(250));
  }
}

// c10d logs every connection retry as a warning with a stack trace (tens of lines for one
// unreachable MASTER_ADDR), where our DistError already says what failed and what to
// check. Unless the user chose a level (TORCH_CPP_LOG_LEVEL), only c10's errors remain.
void quiet_c10d_retries() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL")) return;
  FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);  // 2: ERROR
  c10::UpdateLoggingLevelsFromFlags();
}

}  // namespace

std::unique_ptr<ProcessGroup> ProcessGroup::init(const WorkerEnv& env, const std::string& backend_in,
                                                 bool cuda_available, std::chrono::seconds timeout_s) {
  const std::string backend = lower(backend_in);
  if (backend != "auto" && backend != "gloo" && backend != "nccl")
    throw DistError("unknown dist.backend '" + backend_in + "' (expected auto, gloo or nccl)");
  if (!env.distributed()) return single();  // nothing to connect, whatever the backend
  if (backend == "nccl" && !compat::kHasNccl)
    throw DistError("dist.backend 'nccl' requested, but this build has no NCCL (LibTorch without CUDA)");
  if (backend == "nccl" && !cuda_available)
    throw DistError("dist.backend 'nccl' requested, but no CUDA device is available");
  if (timeout_s.count() <= 0) throw DistError("dist.timeout_s must be positive");
  quiet_c10d_retries();

  auto impl = std::make_unique<Impl>();
  impl->rank = env.rank;
  impl->world = env.world_size;
  impl->timeout = std::chrono::duration_cast<milliseconds>(timeout_s);
  impl->backend = (backend == "nccl" || (backend == "auto" && cuda_available && compat::kHasNccl)) ? "nccl" : "gloo";
  impl->store_addr = env.store_file.empty() ? env.master_addr + ":" + std::to_string(env.master_port)
                                            : "file " + env.store_file;
  const auto start = Clock::now();
  const auto deadline = start + impl->timeout;
  // Every rank is on this host when the master is a loopback address (whatever the node
  // count) or ddp-launch gave a store file (single node): then the collectives' own
  // sockets stay on the loopback interface too.
  const bool loopback = resolves_to_loopback(env.master_addr) || !env.store_file.empty();

  // 1. The store, and everyone there (or an error that names who is not).
  impl->env = env;
  const NetworkChoice net = choose_network(env, loopback);
  impl->store = meet_every_rank(env, net, impl->store_addr, loopback, deadline, impl->timeout);

  // 2. The process group.
  try {
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
    if (impl->backend == "nccl") {
      // NCCL's bootstrap listens on the first non-loopback interface unless told otherwise.
      if (!net.interface.empty()) setenv("NCCL_SOCKET_IFNAME", net.interface.c_str(), /*overwrite=*/0);
      const int n = compat::cuda_device_count();
      impl->device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(n > 0 ? env.local_rank % n : 0));
      impl->pg = compat::make_nccl(compat::make_prefix_store("nccl/", impl->store), env.rank, env.world_size,
                                   impl->timeout);
    }
#endif
    if (impl->backend == "gloo") {
      impl->pg = compat::make_gloo(compat::make_prefix_store("gloo/", impl->store), env.rank, env.world_size,
                                   gloo_devices(net), impl->timeout);
    }
  } catch (const std::exception& e) {
    throw DistError("rank " + std::to_string(env.rank) + " could not set up the " + impl->backend +
                    " process group with the other ranks: " + first_line(e.what()));
  }
  impl->network = impl->backend + " " + describe_network(impl->backend, net);
  return std::unique_ptr<ProcessGroup>(new ProcessGroup(std::move(impl)));
}

// ---- accessors -----------------------------------------------------------------------
int ProcessGroup::rank() const { return impl_->rank; }
int ProcessGroup::world_size() const { return impl_->world; }
const std::string& ProcessGroup::backend() const { return impl_->backend; }
const std::string& ProcessGroup::network() const { return impl_->network; }
c10::Device ProcessGroup::device() const { return impl_->device; }
milliseconds ProcessGroup::timeout() const { return impl_->timeout; }
std::uint64_t ProcessGroup::collectives_issued() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->seq;
}

// ---- collectives ---------------------------------------------------------------------
void ProcessGroup::allreduce_sum_(const at::Tensor& t) {
  if (!impl_->distributed()) return;
  at::Tensor buf = t.is_contiguous() ? t : t.contiguous();
  const std::uint64_t seq = impl_->begin("allreduce");
  auto work = impl_->launch("allreduce", seq, [&] {
    std::vector<at::Tensor> v{buf};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = impl_->timeout;
    return impl_->pg->allreduce(v, o);
  });
  impl_->wait(work, "allreduce", seq, false);
  if (!buf.is_same(t)) t.copy_(buf);
}

void ProcessGroup::allreduce_mean_(const at::Tensor& t) {
  if (!at::isFloatingType(t.scalar_type()))
    throw DistError("allreduce_mean_ needs a floating-point tensor, got " + std::string(c10::toString(t.scalar_type())));
  allreduce_sum_(t);
  if (impl_->distributed()) t.div_(impl_->world);
}

PendingCollective ProcessGroup::allreduce_sum_async(const at::Tensor& t, const std::string& what) {
  if (!impl_->distributed()) return PendingCollective();
  if (!t.is_contiguous()) throw DistError(what + ": allreduce_sum_async needs a contiguous tensor");
  return pending(what, [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.timeout = impl_->timeout;
    return impl_->pg->allreduce(v, o);
  });
}

PendingCollective ProcessGroup::reduce_sum_async(const at::Tensor& t, int root, const std::string& what) {
  if (root < 0 || root >= impl_->world)
    throw DistError(what + ": root " + std::to_string(root) + " is not a rank of the group");
  if (!impl_->distributed()) return PendingCollective();
  if (!t.is_contiguous()) throw DistError(what + ": reduce_sum_async needs a contiguous tensor");
  return pending(what, [&] {
    std::vector<at::Tensor> v{t};
    c10d::ReduceOptions o;
    o.reduceOp = c10d::ReduceOp::SUM;
    o.rootRank = root;
    o.rootTensor = 0;
    o.timeout = impl_->timeout;
    return impl_->pg->reduce(v, o);
  });
}

PendingCollective ProcessGroup::pending(const std::string& what,
                                        const std::function<c10::intrusive_ptr<c10d::Work>()>& issue) {
  PendingCollective p;
  const std::uint64_t seq = impl_->begin(what);
  auto work = impl_->launch(what, seq, issue);
  p.state_ = std::make_unique<PendingCollective::State>();
  p.state_->impl = impl_.get();
  p.state_->work = std::move(work);
  p.state_->what = what;
  p.state_->seq = seq;
  return p;
}

void ProcessGroup::broadcast_(std::vector<at::Tensor>& tensors, int root) {
  if (root < 0 || root >= impl_->world)
    throw DistError("broadcast_: root " + std::to_string(root) + " is not a rank of the group");
  if (!impl_->distributed()) return;
  at::NoGradGuard no_grad;  // parameters are leaves that require grad
  // One flat buffer per (device, dtype), in order of first appearance: the same grouping
  // on every rank, since every rank passes the same list of tensors.
  std::vector<std::pair<std::pair<c10::Device, at::ScalarType>, std::vector<size_t>>> groups;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].numel() == 0) continue;
    auto k = std::make_pair(tensors[i].device(), tensors[i].scalar_type());
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == k; });
    if (it == groups.end()) {
      groups.push_back({k, {}});
      it = std::prev(groups.end());
    }
    it->second.push_back(i);
  }
  for (const auto& g : groups) {
    std::vector<at::Tensor> flat_parts;
    for (size_t i : g.second) flat_parts.push_back(tensors[i].reshape({-1}));
    // A lone contiguous tensor is broadcast in place; otherwise through a packed copy.
    const bool in_place = g.second.size() == 1 && tensors[g.second[0]].is_contiguous();
    at::Tensor flat = in_place ? tensors[g.second[0]].view({-1}) : at::cat(flat_parts);
    const std::uint64_t seq = impl_->begin("broadcast");
    auto work = impl_->launch("broadcast", seq, [&] {
      std::vector<at::Tensor> v{flat};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      o.rootTensor = 0;
      o.timeout = impl_->timeout;
      return impl_->pg->broadcast(v, o);
    });
    impl_->wait(work, "broadcast", seq, false);
    if (impl_->rank == root || in_place) continue;
    int64_t off = 0;
    for (size_t i : g.second) {
      at::Tensor& t = tensors[i];
      t.copy_(flat.narrow(0, off, t.numel()).view(t.sizes()));
      off += t.numel();
    }
  }
}

at::Tensor ProcessGroup::all_gather(const at::Tensor& t) {
  if (!impl_->distributed()) return t.dim() == 0 ? t.reshape({1}).clone() : t.contiguous().clone();
  at::Tensor in = t.dim() == 0 ? t.reshape({1}).contiguous() : t.contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < impl_->world; ++r) out[0].push_back(at::empty(in.sizes(), in.options()));
  const std::uint64_t seq = impl_->begin("all_gather");
  auto work = impl_->launch("all_gather", seq, [&] {
    std::vector<at::Tensor> inputs{in};
    c10d::AllgatherOptions o;
    o.timeout = impl_->timeout;
    return impl_->pg->allgather(out, inputs, o);
  });
  impl_->wait(work, "all_gather", seq, false);
  return at::cat(out[0], 0);
}

ProcessGroup::VarsizeGather ProcessGroup::all_gather_varsize(const at::Tensor& t) {
  if (t.dim() == 0) throw DistError("all_gather_varsize needs a tensor with at least one dimension");
  VarsizeGather g;
  if (!impl_->distributed()) {
    g.data = t.contiguous().clone();
    g.counts = {t.size(0)};
    return g;
  }
  // Row counts and the size of one row, from every rank.
  const int64_t row = c10::multiply_integers(t.sizes().begin() + 1, t.sizes().end());
  at::Tensor meta = at::tensor({t.size(0), row}, at::kLong).to(impl_->device);
  at::Tensor all = all_gather(meta).cpu();
  int64_t max_rows = 0;
  std::vector<int> bad_rows;
  for (int r = 0; r < impl_->world; ++r) {
    g.counts.push_back(all[2 * r].item<int64_t>());
    max_rows = std::max(max_rows, g.counts.back());
    if (all[2 * r + 1].item<int64_t>() != row) bad_rows.push_back(r);
  }
  if (!bad_rows.empty())
    throw DistError("all_gather_varsize: rank(s) " + rank_list(bad_rows) + " have rows of another size than rank " +
                    std::to_string(impl_->rank) + " (" + std::to_string(row) + " elements)");
  // Pad to the longest, gather, keep each rank's real rows.
  std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
  shape[0] = max_rows;
  at::Tensor padded = at::zeros(shape, t.options());
  if (t.size(0) > 0) padded.narrow(0, 0, t.size(0)).copy_(t);
  at::Tensor gathered = all_gather(padded);
  std::vector<at::Tensor> parts;
  for (int r = 0; r < impl_->world; ++r) parts.push_back(gathered.narrow(0, r * max_rows, g.counts[r]));
  g.data = at::cat(parts, 0);
  return g;
}

void ProcessGroup::barrier() {
  if (!impl_->distributed()) return;
  const std::uint64_t seq = impl_->begin("barrier");
  auto work = impl_->launch("barrier", seq, [&] {
    c10d::BarrierOptions o;
    o.timeout = impl_->timeout;
    return impl_->pg->barrier(o);
  });
  impl_->wait(work, "barrier", seq, true);
}

namespace {
std::vector<std::uint64_t> gather_values(ProcessGroup& pg, std::uint64_t value, const c10::Device& device) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  at::Tensor all = pg.all_gather(at::tensor({bits}, at::kLong).to(device)).cpu();
  std::vector<std::uint64_t> values(pg.world_size());
  for (int r = 0; r < pg.world_size(); ++r) {
    int64_t v = all[r].item<int64_t>();
    std::memcpy(&values[r], &v, sizeof(v));
  }
  return values;
}
}  // namespace

std::vector<int> ProcessGroup::ranks_differing_from_rank0(std::uint64_t value) {
  if (!impl_->distributed()) return {};
  const std::vector<std::uint64_t> values = gather_values(*this, value, impl_->device);
  std::vector<int> differ;
  for (int r = 1; r < impl_->world; ++r)
    if (values[r] != values[0]) differ.push_back(r);
  return differ;
}

void ProcessGroup::check_same(std::uint64_t value, const std::string& what) {
  if (!impl_->distributed()) return;
  const std::vector<std::uint64_t> values = gather_values(*this, value, impl_->device);
  std::ostringstream msg;
  std::vector<int> differ;
  for (int r = 1; r < impl_->world; ++r)
    if (values[r] != values[0]) differ.push_back(r);
  if (differ.empty()) return;
  msg << what << " differs across ranks: rank(s) " << rank_list(differ) << " differ from rank 0 (rank 0: 0x"
      << std::hex << values[0];
  for (size_t i = 0; i < differ.size() && i < 8; ++i) msg << ", rank " << std::dec << differ[i] << ": 0x" << std::hex << values[differ[i]];
  msg << ")";
  throw DistError(msg.str());
}

std::int64_t ProcessGroup::allreduce_max_int(std::int64_t value) {
  if (!impl_->distributed()) return value;
  at::Tensor t = at::tensor({value}, at::kLong).to(impl_->device);
  const std::uint64_t seq = impl_->begin("allreduce_max");
  auto work = impl_->launch("allreduce_max", seq, [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    o.timeout = impl_->timeout;
    return impl_->pg->allreduce(v, o);
  });
  impl_->wait(work, "allreduce_max", seq, true);
  return t.cpu().item<int64_t>();
}

// ---- differentiable all-gather -------------------------------------------------------
// Why backward is "all-reduce SUM, then take my slice":
// Each rank r computes a loss L_r from the gathered G = [x_0; ...; x_{W-1}] (rows of all
// ranks). The objective is the mean loss L = (1/W) Σ_r L_r. Rank k's rows x_k influence
// every L_r, so dL/dx_k = (1/W) Σ_r (dL_r/dG)[slice k]. Rank r's autograd only sees its
// own L_r and produces dL_r/dG ([W*B, D]); summing these over ranks and keeping slice k on
// rank k gives Σ_r dL_r/dx_k — rank k's own L_k included exactly once, since the gathered
// copy of x_k is what L_k used. Backward then continues locally from x_k into rank k's
// parameters, and the gradient averaging of data parallelism (÷W) supplies the 1/W:
// every rank ends with exactly the gradient a single process would get for the mean loss
// over the concatenated batch.
namespace {
struct AllGatherWithGradFn : public torch::autograd::Function<AllGatherWithGradFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, ProcessGroup* pg) {
    // The group outlives any backward through it (it lives for the whole run).
    ctx->saved_data["pg"] = static_cast<int64_t>(reinterpret_cast<intptr_t>(pg));
    ctx->saved_data["rows"] = x.size(0);
    return pg->all_gather(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* pg = reinterpret_cast<ProcessGroup*>(static_cast<intptr_t>(ctx->saved_data["pg"].toInt()));
    const int64_t rows = ctx->saved_data["rows"].toInt();
    // A fresh buffer: the collective writes in place, and the incoming gradient may be
    // shared with other nodes of the graph.
    at::Tensor g = grads[0].defined() ? grads[0].contiguous().clone() : at::Tensor();
    if (!g.defined()) throw DistError("all_gather_with_grad: backward received no gradient");
    pg->allreduce_sum_(g);
    return {g.narrow(0, pg->rank() * rows, rows), at::Tensor()};
  }
};
}  // namespace

at::Tensor all_gather_with_grad(ProcessGroup& pg, const at::Tensor& x) {
  if (x.dim() == 0) throw DistError("all_gather_with_grad needs a tensor with a batch dimension");
  if (pg.world_size() == 1) return x;
  return AllGatherWithGradFn::apply(x, &pg);
}

// ---- checksum ------------------------------------------------------------------------
std::uint64_t tensors_checksum(const std::vector<at::Tensor>& tensors) {
  // FNV-1a over 64-bit words (then the tail bytes), with dtype and shape mixed in.
  std::uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::uint64_t v) {
    h ^= v;
    h *= 1099511628211ULL;
  };
  for (const auto& t0 : tensors) {
    at::Tensor t = t0.detach().to(at::kCPU).contiguous();
    mix(static_cast<std::uint64_t>(t.scalar_type()));
    for (int64_t s : t.sizes()) mix(static_cast<std::uint64_t>(s));
    const auto* p = static_cast<const unsigned char*>(t.data_ptr());
    const size_t n = t.numel() * t.element_size();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      std::uint64_t w;
      std::memcpy(&w, p + i, 8);
      mix(w);
    }
    for (; i < n; ++i) mix(p[i]);
  }
  return h;
}

}  // namespace ddp_embed
