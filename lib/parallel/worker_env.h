// Who am I in the job? Reads the worker's rank, world size and rendezvous address from
// the environment a launcher set (ddp-launch / torchrun, SLURM, Open MPI), or falls back
// to a single process. No LibTorch here: the launcher-side tests can use it too.
#pragma once

#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddp_embed {

// Every failure of the distributed layer (bad environment, rendezvous, collectives,
// gradient sync) is a DistError whose message says what failed and, where known, which
// rank is at fault.
class DistError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct WorkerEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int restart_count = 0;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE: the launcher hosts the store
  // DDP_LAUNCH_STORE_FILE (single-node jobs of ddp-launch): rendezvous through this file
  // instead of a TCP store, so nothing listens on the network. Empty: the TCP store.
  std::string store_file;
  // An elastic job of ddp-launch (--nnodes MIN:MAX): the node counts it may run at
  // (DDP_LAUNCH_MIN_NNODES, DDP_LAUNCH_MAX_NNODES; 0 when the membership is fixed), and,
  // when this round's nodes differ from the previous round's, what changed
  // (DDP_LAUNCH_MEMBERSHIP: a JSON object; docs/environment.md).
  int min_nnodes = 0, max_nnodes = 0;
  std::string membership_change;
  // "ddp-launch/torchrun", "SLURM", "OpenMPI" or "single process".
  std::string source = "single process";

  bool distributed() const { return world_size > 1; }
  // Whether the job may run at other world sizes than this one (--nnodes MIN:MAX, MIN < MAX).
  bool elastic() const { return min_nnodes > 0 && max_nnodes > min_nnodes; }
  // All ranks on one node (then the rendezvous may stay on the loopback interface).
  bool single_node() const { return local_world_size == world_size; }
};

// Looks a variable up; nullopt when it is not set. The default reads the process environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;

// Reads, in order of precedence:
//   RANK/WORLD_SIZE/LOCAL_RANK/LOCAL_WORLD_SIZE/NODE_RANK(GROUP_RANK)/MASTER_ADDR/
//     MASTER_PORT/RESTART_COUNT(TORCHELASTIC_RESTART_COUNT)        (ddp-launch, torchrun)
//     and DDP_LAUNCH_STORE_FILE (ddp-launch, single node; ignored when the ranks span
//     several nodes), DDP_LAUNCH_MIN_NNODES/MAX_NNODES/MEMBERSHIP (an elastic job)
//   SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID/SLURM_NODEID (master: MASTER_ADDR or the first
//     host of SLURM_JOB_NODELIST; port: MASTER_PORT or 10000 + SLURM_JOB_ID % 50000)
//   OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE (MASTER_ADDR and MASTER_PORT required)
//   otherwise a single process.
// Throws DistError naming the variable for malformed or inconsistent values.
WorkerEnv read_worker_env();
WorkerEnv read_worker_env(const EnvLookup& lookup);

// Expands a SLURM host list: "node[01-03,07],gpu-a[1-2]x" ->
// node01 node02 node03 node07 gpu-a1x gpu-a2x. Throws DistError when malformed.
std::vector<std::string> expand_slurm_nodelist(const std::string& list);

// One line for the log: "rank 1/4 (local 1/2, node 0) via SLURM, store 10.0.0.1:29500".
std::string describe(const WorkerEnv& env);

}  // namespace ddp_embed
