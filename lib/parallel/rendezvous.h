// The rendezvous: every rank meets the others at a key-value store before the process
// group is made, and the store later helps name the ranks a failed collective is missing.
// Private to process_group.cpp.
//
// Rank 0 hosts the store (unless ddp-launch gave a store file, or torchrun's agent hosts
// it), listening on MASTER_ADDR's address only where it can (listen_for_store, network.h);
// every rank posts "ready" there and waits for all the others; the first to see them all
// seals the store: its rendezvous is over.
//
// Why seal. After a failure the launchers of a multi-node job restart their workers on
// their own, a few seconds apart, and the new rank 0 hosts a fresh store. A restarted
// worker that starts before the old rank 0 has exited would find the old store, see the
// old attempt's "ready" keys and join a group that is ending. A worker that finds a
// sealed store knows it is an earlier attempt's: it lets go and connects again until it
// finds the fresh one (or its deadline passes). So nodes never need to agree on their
// restart counts: they meet at the one store that is open. An agent store outlives the
// workers; there each attempt's keys are apart (torchrun's agents agree on the attempt).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "parallel/network.h"
#include "parallel/worker_env.h"

namespace c10d {
class Store;
}

namespace ddp_embed {

// Opens the store (at `store_addr`, "host:port" or "file PATH", as messages name it) and
// meets every rank there; returns the store under this job's prefix. A client of rank 0's
// store skips sealed stores and outlives a store that goes away until the deadline.
// Throws DistError naming the ranks, and their nodes, that did not join in time.
c10::intrusive_ptr<c10d::Store> meet_every_rank(const WorkerEnv& env, const NetworkChoice& net,
                                                const std::string& store_addr, bool loopback,
                                                std::chrono::steady_clock::time_point deadline,
                                                std::chrono::milliseconds timeout);

// After collective `what` (number `seq`) failed on this rank: which ranks never reached
// it, as a clause to append to the error ("; no sign of rank(s) 3 (node 1) at this
// collective ..."). Every rank that fails posts "stuck/<seq>/<rank>" to the store and
// looks, for a short while, for the others' posts: ranks stuck in the same collective
// post theirs at about the same time; a rank that exited or is busy elsewhere never does.
// `peer`: the address of a connection that broke, if the error named one; the ranks
// there are named too. Says so when the store itself does not answer. "" without a store.
std::string describe_missing_ranks(const c10::intrusive_ptr<c10d::Store>& store, const std::string& store_addr,
                                   const WorkerEnv& env, std::uint64_t seq, const std::string& what,
                                   const std::string& peer, std::chrono::milliseconds timeout);

}  // namespace ddp_embed
