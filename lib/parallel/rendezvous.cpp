// The rendezvous through the store, and the store's part in naming missing ranks
// (rendezvous.h).
#define DDP_EMBED_COMPAT_C10D
#include "compat/torch_compat.h"

#include "parallel/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "parallel/dist_messages.h"

namespace ddp_embed {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

constexpr const char* kSealedKey = "sealed";

// The key under which rank r posts "ready" (with its node, host, address and pid).
std::string ready_key(int r) { return "rank/" + std::to_string(r) + "/ready"; }

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

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
    // Rank 0 serves the store on a socket bound to the address the job uses (LibTorch's
    // own server would listen on every interface), and says where.
    StoreListener listener;
    if (server) {
      listener = listen_for_store(env.master_addr, env.master_port, loopback, env.single_node());
      if (listener.warning)
        spdlog::warn("{}", listener.where);
      else if (!listener.where.empty())
        spdlog::info("{}", listener.where);
    }
    return compat::make_tcp_store(env.master_addr, static_cast<std::uint16_t>(env.master_port), server,
                                  static_cast<std::size_t>(env.world_size), timeout, listener.fd);
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

}  // namespace

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

// Bounded by a grace period: on a cut link the store does not answer either, and its
// calls would block for the whole timeout again. The lookup runs on a thread of its own
// that owns everything it uses, so it may outlive this call (the process is failing).
std::string describe_missing_ranks(const c10::intrusive_ptr<c10d::Store>& store, const std::string& store_addr,
                                   const WorkerEnv& env, std::uint64_t seq_no, const std::string& what,
                                   const std::string& peer, milliseconds timeout) {
  if (!store) return "";
  const auto grace = std::clamp(timeout / 4, milliseconds(500), milliseconds(5000));
  auto answer = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = answer->get_future();
  std::thread([answer, store = store, env = env, me = env.rank, n = env.world_size, seq_no, what, grace, peer] {
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
           (env.rank == 0 ? std::string("rank 0 hosts it: the network of this node may be down")
                          : "rank 0 hosts it: it may have exited, or the network to " +
                                (node_of(0, env).empty() ? std::string("it") : node_of(0, env)) + " is down") +
           ")";
  return text;
}

}  // namespace ddp_embed
