#include "parallel/worker_env.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <sstream>

#include "util/slurm_nodelist.h"

namespace ddp_embed {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Reads variables through the lookup; an empty value counts as unset (schedulers and
// shells often export NAME= to mean "nothing").
class Env {
 public:
  explicit Env(const EnvLookup& lookup) : lookup_(lookup) {}

  std::optional<std::string> str(const std::string& name) const {
    auto v = lookup_(name);
    if (!v) return std::nullopt;
    std::string t = trim(*v);
    if (t.empty()) return std::nullopt;
    return t;
  }
  bool has(const std::string& name) const { return str(name).has_value(); }

  std::optional<long long> integer(const std::string& name) const {
    auto v = str(name);
    if (!v) return std::nullopt;
    long long out = 0;
    const char* first = v->data();
    const char* last = v->data() + v->size();
    if (*first == '+') ++first;
    auto [ptr, ec] = std::from_chars(first, last, out);
    if (ec != std::errc() || ptr != last || first == last) {
      throw DistError("environment variable " + name + "='" + *v + "' is not an integer");
    }
    if (out < -(1LL << 31) || out > (1LL << 31) - 1) {
      throw DistError("environment variable " + name + "=" + *v + " is out of range");
    }
    return out;
  }
  int integer_or(const std::string& name, int fallback) const {
    auto v = integer(name);
    return v ? static_cast<int>(*v) : fallback;
  }
  int required_int(const std::string& name, const std::string& why) const {
    auto v = integer(name);
    if (!v) throw DistError("environment variable " + name + " is not set (" + why + ")");
    return static_cast<int>(*v);
  }

 private:
  const EnvLookup& lookup_;
};

// "4(x2),3" -> 4: the task count of the first node listed in SLURM_TASKS_PER_NODE.
std::optional<int> first_tasks_per_node(const std::string& s) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr == s.data() || v <= 0) return std::nullopt;
  return v;
}

void read_torchrun(const Env& env, WorkerEnv& w) {
  w.source = "ddp-launch/torchrun";
  const std::string why = "RANK and WORLD_SIZE must be set together";
  w.rank = env.required_int("RANK", why);
  w.world_size = env.required_int("WORLD_SIZE", why);
  // Without LOCAL_WORLD_SIZE assume one node (every rank is local); without LOCAL_RANK
  // derive it from the rank.
  w.local_world_size = env.integer_or("LOCAL_WORLD_SIZE", w.world_size);
  w.local_rank = env.integer_or("LOCAL_RANK", w.local_world_size > 0 ? w.rank % w.local_world_size : 0);
  int node = env.integer_or("NODE_RANK", env.integer_or("GROUP_RANK", -1));
  w.node_rank = node >= 0 ? node : (w.local_world_size > 0 ? w.rank / w.local_world_size : 0);
  if (auto a = env.str("MASTER_ADDR")) w.master_addr = *a;
  w.master_port = env.integer_or("MASTER_PORT", w.master_port);
  w.restart_count = env.integer_or("RESTART_COUNT", env.integer_or("TORCHELASTIC_RESTART_COUNT", 0));
  // A file is only shared by the ranks of one machine.
  if (auto f = env.str("DDP_LAUNCH_STORE_FILE"); f && !f->empty() && w.local_world_size == w.world_size)
    w.store_file = *f;
  w.min_nnodes = env.integer_or("DDP_LAUNCH_MIN_NNODES", 0);
  w.max_nnodes = env.integer_or("DDP_LAUNCH_MAX_NNODES", 0);
  if (w.min_nnodes < 0 || w.max_nnodes < w.min_nnodes || (w.min_nnodes == 0) != (w.max_nnodes == 0))
    throw DistError("DDP_LAUNCH_MIN_NNODES=" + std::to_string(w.min_nnodes) + " and DDP_LAUNCH_MAX_NNODES=" +
                    std::to_string(w.max_nnodes) + " do not make a range MIN:MAX of node counts");
  w.membership_change = env.str("DDP_LAUNCH_MEMBERSHIP").value_or("");
}

void read_slurm(const Env& env, WorkerEnv& w) {
  w.source = "SLURM";
  w.rank = env.required_int("SLURM_PROCID", "set by srun");
  auto ntasks = env.integer("SLURM_NTASKS");
  if (!ntasks) ntasks = env.integer("SLURM_NPROCS");
  if (!ntasks) throw DistError("SLURM_PROCID is set but SLURM_NTASKS is not (run the job with srun)");
  w.world_size = static_cast<int>(*ntasks);
  w.local_rank = env.integer_or("SLURM_LOCALID", 0);
  const int nnodes = env.integer_or("SLURM_JOB_NUM_NODES", env.integer_or("SLURM_NNODES", 1));
  if (auto per = env.integer("SLURM_NTASKS_PER_NODE")) {
    w.local_world_size = static_cast<int>(*per);
  } else if (auto tpn = env.str("SLURM_TASKS_PER_NODE"); tpn && first_tasks_per_node(*tpn)) {
    w.local_world_size = *first_tasks_per_node(*tpn);
  } else {
    w.local_world_size = nnodes > 0 ? std::max(1, w.world_size / nnodes) : w.world_size;
  }
  w.node_rank = env.integer_or("SLURM_NODEID", w.local_world_size > 0 ? w.rank / w.local_world_size : 0);
  if (auto a = env.str("MASTER_ADDR")) {
    w.master_addr = *a;
  } else {
    auto list = env.str("SLURM_JOB_NODELIST");
    if (!list) list = env.str("SLURM_NODELIST");
    if (!list) {
      if (w.world_size > 1)
        throw DistError("SLURM job without MASTER_ADDR or SLURM_JOB_NODELIST: cannot find the rendezvous host");
    } else {
      auto hosts = expand_slurm_nodelist(*list);
      if (hosts.empty()) throw DistError("SLURM_JOB_NODELIST='" + *list + "' names no host");
      w.master_addr = hosts.front();
    }
  }
  if (auto p = env.integer("MASTER_PORT")) {
    w.master_port = static_cast<int>(*p);
  } else if (auto id = env.integer("SLURM_JOB_ID")) {
    // Same on every task of the job, and different jobs sharing a node rarely collide.
    w.master_port = 10000 + static_cast<int>(*id % 50000);
  }
  w.restart_count = env.integer_or("SLURM_RESTART_COUNT", 0);
}

void read_openmpi(const Env& env, WorkerEnv& w) {
  w.source = "OpenMPI";
  w.rank = env.required_int("OMPI_COMM_WORLD_RANK", "set by mpirun");
  w.world_size = env.required_int("OMPI_COMM_WORLD_SIZE", "set by mpirun");
  w.local_rank = env.integer_or("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  w.local_world_size = env.integer_or("OMPI_COMM_WORLD_LOCAL_SIZE", w.world_size);
  w.node_rank = w.local_world_size > 0 ? w.rank / w.local_world_size : 0;
  if (w.world_size > 1) {
    // mpirun knows no rendezvous store: the user must say where rank 0 listens.
    const std::string why = "Open MPI gives no rendezvous address; export MASTER_ADDR and MASTER_PORT (mpirun -x)";
    auto a = env.str("MASTER_ADDR");
    if (!a) throw DistError("environment variable MASTER_ADDR is not set (" + why + ")");
    w.master_addr = *a;
    w.master_port = env.required_int("MASTER_PORT", why);
  }
}

void validate(WorkerEnv& w) {
  auto fail = [&](const std::string& msg) { throw DistError(msg + " (worker environment from " + w.source + ")"); };
  if (w.world_size < 1) fail("WORLD_SIZE=" + std::to_string(w.world_size) + " must be at least 1");
  if (w.rank < 0 || w.rank >= w.world_size)
    fail("RANK=" + std::to_string(w.rank) + " is outside 0.." + std::to_string(w.world_size - 1) +
         " for WORLD_SIZE=" + std::to_string(w.world_size));
  if (w.local_world_size < 1 || w.local_world_size > w.world_size)
    fail("LOCAL_WORLD_SIZE=" + std::to_string(w.local_world_size) + " must be in 1..WORLD_SIZE=" +
         std::to_string(w.world_size));
  if (w.local_rank < 0 || w.local_rank >= w.local_world_size)
    fail("LOCAL_RANK=" + std::to_string(w.local_rank) + " is outside 0.." +
         std::to_string(w.local_world_size - 1));
  if (w.master_port < 1 || w.master_port > 65535)
    fail("MASTER_PORT=" + std::to_string(w.master_port) + " is outside 1..65535");
  if (w.restart_count < 0) fail("RESTART_COUNT=" + std::to_string(w.restart_count) + " is negative");
  if (w.node_rank < 0) fail("NODE_RANK=" + std::to_string(w.node_rank) + " is negative");
  // A multi-node job with a loopback MASTER_ADDR is allowed: its "nodes" are then
  // launchers on this one host (how the multi-node tests run). Across real hosts it
  // fails at the rendezvous, whose timeout names the ranks that never arrived.
}

}  // namespace

// The launcher's expander (util/slurm_nodelist.h), with the workers' error type.
std::vector<std::string> expand_slurm_nodelist(const std::string& list) {
  try {
    return slurm::expand_nodelist(trim(list));
  } catch (const std::invalid_argument& e) {
    throw DistError(e.what());
  }
}

WorkerEnv read_worker_env(const EnvLookup& lookup) {
  Env env(lookup);
  WorkerEnv w;
  if (env.has("RANK") || env.has("WORLD_SIZE")) {
    read_torchrun(env, w);
  } else if (env.has("SLURM_PROCID")) {
    read_slurm(env, w);
  } else if (env.has("OMPI_COMM_WORLD_RANK")) {
    read_openmpi(env, w);
  } else {
    w.source = "single process";
    return w;
  }
  if (auto a = env.str("TORCHELASTIC_USE_AGENT_STORE")) {
    w.agent_store = (*a == "True" || *a == "true" || *a == "1");
  }
  validate(w);
  return w;
}

WorkerEnv read_worker_env() {
  return read_worker_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

std::string describe(const WorkerEnv& w) {
  std::ostringstream s;
  s << "rank " << w.rank << "/" << w.world_size << " (local " << w.local_rank << "/" << w.local_world_size
    << ", node " << w.node_rank << ") via " << w.source;
  if (w.distributed()) {
    if (!w.store_file.empty())
      s << ", store file " << w.store_file;
    else
      s << ", store " << w.master_addr << ":" << w.master_port << (w.agent_store ? " (agent store)" : "");
    if (w.restart_count > 0) s << ", restart " << w.restart_count;
  }
  return s.str();
}

}  // namespace ddp_embed
