// The job layout: what the command line said, else what SLURM says, else the defaults;
// plus `--nproc gpu` and `--devices`. Pure apart from count_visible_gpus() reading /proc.
#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

#include "launch/launcher.h"
#include "util/slurm_nodelist.h"

namespace ddp_embed::launch {
namespace {

std::string lookup(const Environment& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

// The first of `names` that is set to a whole number >= min_value.
std::optional<int> first_number(const Environment& env, std::initializer_list<const char*> names,
                                int min_value, std::string* from) {
  for (const char* name : names) {
    std::string text = lookup(env, name);
    if (text.empty() || text.size() > 9 || text.find_first_not_of("0123456789") != std::string::npos)
      continue;
    int value = std::stoi(text);
    if (value < min_value) continue;
    *from = name;
    return value;
  }
  return std::nullopt;
}

std::string fresh_run_id() {
  auto now = std::chrono::system_clock::now().time_since_epoch();
  long long ms = std::chrono::duration_cast<std::chrono::milliseconds>(now).count();
  char id[64];
  std::snprintf(id, sizeof id, "%llx-%x", ms, static_cast<unsigned>(getpid()));
  return id;
}

}  // namespace

int count_visible_gpus(const Environment& env, const std::string& proc_gpus_dir) {
  auto cvd = env.find("CUDA_VISIBLE_DEVICES");
  if (cvd != env.end()) {
    // CUDA reads the list up to the first invalid entry; "-1" or "" hide every GPU.
    int count = 0;
    size_t start = 0;
    const std::string& list = cvd->second;
    while (start < list.size()) {
      size_t comma = list.find(',', start);
      std::string entry = list.substr(start, comma == std::string::npos ? comma : comma - start);
      if (entry.empty() || entry[0] == '-') break;
      ++count;
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    return count;
  }
  DIR* dir = opendir(proc_gpus_dir.c_str());
  if (!dir) return 0;
  int count = 0;
  while (dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ++count;
  closedir(dir);
  return count;
}

LayoutResult resolve_layout(const LaunchOptions& options, const Environment& env,
                            const std::function<int()>& count_gpus) {
  LayoutResult result;
  JobLayout& layout = result.layout;
  auto fail = [&](std::string message) {
    result.ok = false;
    result.error = std::move(message);
    return result;
  };

  // --standalone means "this node alone", whatever SLURM says.
  const std::string slurm_job = lookup(env, "SLURM_JOB_ID");
  const bool in_slurm = !slurm_job.empty() && !options.standalone;
  std::vector<std::string> from_slurm;  // what SLURM decided, for the note

  // Nodes. Inside `srun`, the step's node count is the one that matters (a step may use
  // part of the allocation); in the batch script itself, the job's. An elastic job's count
  // is decided at each rendezvous round: here it is MAX, the bound of a node rank.
  if (options.elastic()) {
    layout.nnodes = *options.max_nnodes;
  } else if (options.nnodes) {
    layout.nnodes = *options.nnodes;
  } else if (in_slurm) {
    std::string source;
    if (auto n = first_number(env, {"SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES"},
                              1, &source)) {
      layout.nnodes = *n;
      from_slurm.push_back(std::to_string(*n) + " nodes (" + source + ")");
    }
  }

  if (options.node_rank) {
    layout.node_rank = *options.node_rank;
  } else if (in_slurm && layout.nnodes > 1 && !options.elastic()) {
    std::string source;
    auto r = first_number(env, {"SLURM_NODEID"}, 0, &source);
    if (!r)
      return fail("inside SLURM job " + slurm_job + " with " + std::to_string(layout.nnodes) +
                  " nodes but SLURM_NODEID is unset: start one ddp-launch per node with srun, "
                  "or give --node-rank");
    layout.node_rank = *r;
    from_slurm.push_back("node rank " + std::to_string(*r) + " (SLURM_NODEID)");
  }
  if (layout.node_rank >= layout.nnodes)
    return fail("--node-rank " + std::to_string(layout.node_rank) + " must be less than --nnodes " +
                (options.elastic() ? "MAX " : "") + std::to_string(layout.nnodes));

  if (options.master_addr) {
    layout.master_addr = *options.master_addr;
  } else if (options.rdzv_host && !options.elastic()) {
    layout.master_addr = *options.rdzv_host;
  } else if (options.elastic()) {
    layout.master_addr.clear();  // node 0's, assigned at each round
  } else if (in_slurm) {
    for (const char* name : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      std::string list = lookup(env, name);
      if (list.empty()) continue;
      try {
        layout.master_addr = slurm::expand_nodelist(list).front();
      } catch (const std::invalid_argument& e) {
        return fail(std::string(e.what()) + " (from " + name + "); give --master-addr");
      }
      from_slurm.push_back("master " + layout.master_addr + " (first host of " + name + ")");
      break;
    }
  }

  if (options.master_port)
    layout.master_port = *options.master_port;
  else if (options.rdzv_port && !options.elastic())
    layout.master_port = *options.rdzv_port;
  else if (options.standalone || options.elastic())
    layout.master_port = 0;  // elastic: node 0's launcher picks one at each round
  if (layout.master_port == 0 && layout.nnodes > 1 && !options.elastic())
    return fail("--master-port 0 (pick a free port) needs a single node: the other nodes "
                "could not learn the port; give the same --master-port to every node");

  // Workers and devices.
  layout.devices = options.devices;
  if (options.nproc_per_gpu) {
    layout.nproc = !layout.devices.empty() ? static_cast<int>(layout.devices.size()) : count_gpus();
    if (layout.nproc <= 0)
      return fail("--nproc gpu: no GPU is visible (CUDA_VISIBLE_DEVICES, "
                  "/proc/driver/nvidia/gpus); give a number instead");
  } else {
    layout.nproc = options.nproc.value_or(1);
  }
  if (!layout.devices.empty()) {
    if (layout.nproc > static_cast<int>(layout.devices.size()))
      return fail("--nproc " + std::to_string(layout.nproc) + " needs " +
                  std::to_string(layout.nproc) + " devices but --devices lists " +
                  std::to_string(layout.devices.size()));
    layout.devices.resize(static_cast<size_t>(layout.nproc));
  }

  layout.max_restarts = options.max_restarts;
  layout.grace_seconds = options.grace_seconds;
  layout.log_dir = options.log_dir;

  // Every node of a SLURM step derives the same id; elsewhere give --run-id to agree.
  if (options.run_id) {
    layout.run_id = *options.run_id;
  } else if (in_slurm) {
    std::string step = lookup(env, "SLURM_STEP_ID");
    layout.run_id = "slurm-" + slurm_job + (step.empty() ? "" : "." + step);
  } else {
    layout.run_id = fresh_run_id();
  }

  if (!from_slurm.empty()) {
    std::string note = "SLURM job " + slurm_job + ":";
    for (size_t i = 0; i < from_slurm.size(); ++i) note += (i ? ", " : " ") + from_slurm[i];
    layout.notes.push_back(note);
  }
  result.ok = true;
  return result;
}

}  // namespace ddp_embed::launch
