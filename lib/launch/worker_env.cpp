// The environment each worker starts with: torchrun's names, so that torchrun-style
// programs (and embed-train) find their rank, world and rendezvous without flags.
#include <dirent.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "launch/launcher.h"

namespace ddp_embed::launch {

Environment environment_from(char** envp) {
  Environment env;
  for (char** e = envp; e && *e; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));  // first definition wins, as getenv
  }
  return env;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

// torchrun sets OMP_NUM_THREADS=1 here; we split the cores instead, which is what the
// trainer itself chooses when OMP_NUM_THREADS is unset (cores ÷ workers on the node:
// several workers each taking every core would fight over them), so that a launched run
// and a hand-started one use the machine the same way.
int default_omp_threads(const Environment& env, int nproc, int cores) {
  if (nproc <= 1 || env.count("OMP_NUM_THREADS")) return 0;
  int threads = cores / nproc;
  return threads < 1 ? 1 : threads;
}

std::vector<std::string> build_worker_env(const Environment& base, const JobLayout& layout,
                                          int local_rank, int restart_count,
                                          int omp_threads, const std::string& store_file) {
  Environment env = base;
  const std::string rank = std::to_string(layout.global_rank(local_rank));
  const std::string world = std::to_string(layout.world_size());
  const std::string node = std::to_string(layout.node_rank);
  const std::string restarts = std::to_string(restart_count);
  const std::string max_restarts = std::to_string(layout.max_restarts);

  env["RANK"] = rank;
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = world;
  env["LOCAL_WORLD_SIZE"] = std::to_string(layout.nproc);
  env["NODE_RANK"] = node;
  env["GROUP_RANK"] = node;
  env["GROUP_WORLD_SIZE"] = std::to_string(layout.nnodes);
  env["ROLE_RANK"] = rank;
  env["ROLE_WORLD_SIZE"] = world;
  env["ROLE_NAME"] = "default";
  env["MASTER_ADDR"] = layout.master_addr;
  env["MASTER_PORT"] = std::to_string(layout.master_port);
  env["RESTART_COUNT"] = restarts;
  env["MAX_RESTARTS"] = max_restarts;
  env["RUN_ID"] = layout.run_id;
  env["TORCHELASTIC_RESTART_COUNT"] = restarts;
  env["TORCHELASTIC_MAX_RESTARTS"] = max_restarts;
  env["TORCHELASTIC_RUN_ID"] = layout.run_id;
  // There is no agent-side store: rank 0 hosts the TCP store at MASTER_ADDR:MASTER_PORT.
  env["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  // A new file per attempt: a restarted group never reads the keys of the one before.
  if (!store_file.empty()) env["DDP_LAUNCH_STORE_FILE"] = store_file + ".attempt" + restarts;

  // With --devices each worker sees exactly its own GPU, so a program that simply uses
  // "the current CUDA device" (cuda:0) lands on the right one, and NCCL cannot pick a
  // GPU another worker owns. LOCAL_RANK stays the worker's local index (not a device
  // number), because programs use it for ranks too; such programs should pick device
  // LOCAL_RANK % device_count(), which is 0 here.
  if (!layout.devices.empty())
    env["CUDA_VISIBLE_DEVICES"] = layout.devices.at(static_cast<size_t>(local_rank));
  if (omp_threads > 0) env["OMP_NUM_THREADS"] = std::to_string(omp_threads);

  std::vector<std::string> entries;
  entries.reserve(env.size());
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  return entries;
}

bool PrivateDir::create(const Environment& env, std::string* error) {
  auto tmp = env.find("TMPDIR");
  std::string base = tmp != env.end() && !tmp->second.empty() ? tmp->second : "/tmp";
  std::string pattern = base + "/ddp-launch-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (!mkdtemp(name.data())) {  // mode 0700
    *error = "cannot create a private directory in " + base + ": " + std::strerror(errno);
    return false;
  }
  path_ = name.data();
  return true;
}

// The directory only ever holds plain files (the workers' store files).
PrivateDir::~PrivateDir() {
  if (path_.empty()) return;
  if (DIR* dir = opendir(path_.c_str())) {
    while (dirent* e = readdir(dir)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") unlink((path_ + "/" + name).c_str());
    }
    closedir(dir);
  }
  rmdir(path_.c_str());
}

}  // namespace ddp_embed::launch
