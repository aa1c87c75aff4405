// Internal to the launcher: an elastic job (--nnodes MIN:MAX --rdzv-endpoint HOST:PORT),
// seen from one node. docs/distributed.md ("Several machines") tells the story; this is
// the order of things:
//
//   1. Serve or connect. The launcher whose machine the endpoint's host names (an address
//      of it binds) and whose bind of the endpoint's port on every interface succeeds
//      starts the rendezvous server (rendezvous_server.h) in a child process; every
//      launcher, that one included, then connects to HOST:PORT, retrying for the join
//      timeout (the serving node may start a little later).
//   2. Join a round: this node's host, its address as the server sees it (or
//      --local-addr), its workers per node, --nnodes, --node-rank as a preference, a
//      free port for the workers' store should it become node 0 (or --master-port).
//   3. Run the round the server assigns: the workers get the node rank, the world, node
//      0's address and port, RESTART_COUNT = the round, and DDP_LAUNCH_MIN_NNODES /
//      DDP_LAUNCH_MAX_NNODES (and DDP_LAUNCH_MEMBERSHIP after a change), while the
//      launcher keeps its connection (heartbeats) and obeys the server:
//        - a node lost, or a worker failed anywhere: SIGTERM to the workers, SIGKILL after
//          --grace, then join the next round (the workers resume from the last
//          checkpoint at the new world size);
//        - a node arrived, or one leaves: SIGUSR2, on which every rank finishes the step
//          it is in, rank 0 checkpoints, and all exit 75; then the next round.
//      A waiting node is admitted at the next step boundary, not at the next scheduled
//      checkpoint: a node costs money while it waits, and the extra checkpoint costs
//      about what the restart costs anyway.
//   4. The end: every worker exited 0 (the server is told "done"; the serving launcher
//      waits for every node's "done", at most the join timeout, so as not to cut the
//      others off); the server aborts the job (fewer than MIN nodes after the join
//      timeout, too many membership changes, this node out of restarts); or the server is
//      gone (its host was lost): every survivor says so and exits 1. A node that leaves
//      or runs out of restarts while its launcher serves the rendezvous is out of the
//      job, but that launcher stays, serving, until the job ends.
//
// SIGINT/SIGTERM/SIGHUP to an elastic launcher: its node leaves the job (the others
// checkpoint with it at the next step and go on without it, with at least MIN nodes); a
// second one kills its workers at once. SIGUSR1 is passed on as ever: every rank
// checkpoints and the whole job stops.
#pragma once

#include <optional>
#include <string>

#include "launch/supervisor.h"

namespace ddp_embed::launch {

struct ElasticSettings {
  int min_nodes = 1, max_nodes = 1;
  std::string endpoint_host;
  int endpoint_port = 0;
  double join_timeout_s = kDefaultJoinTimeoutSeconds;
  int max_membership_changes = kDefaultMaxMembershipChanges;
  int preferred_rank = -1;   // --node-rank, else SLURM_NODEID inside SLURM, else -1
  int store_port = 0;        // --master-port, else 0: a free one at each join
  std::string local_addr;    // --local-addr, else "" (the server sees it)
  bool run_id_given = false; // --run-id or SLURM's
  std::string secret;        // the job secret (job_secret.h), "" : none
};

// From the parsed options (elastic() is true) and the layout: what the agent needs.
ElasticSettings elastic_settings(const LaunchOptions& options, const JobLayout& layout, const Environment& env);

// Runs this node's part of an elastic job; returns the launcher's exit status (0 when the
// job finished; the failed worker's status when this node ran out of restarts; 1 when the
// job aborted or the rendezvous server is gone). Expects SignalRelay to be installed.
int supervise_elastic(const LaunchPlan& plan, const ElasticSettings& settings);

}  // namespace ddp_embed::launch
