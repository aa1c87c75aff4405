// The SLURM batch scripts, run for real on this host: scripts/slurm/train-srun.sbatch
// (srun starts the embed-train workers themselves, which find their rank in SLURM_*) and
// scripts/slurm/train.sbatch (srun starts one ddp-launch, which starts the workers).
//
// There is no SLURM here, so the test plays both sbatch and srun: it exports what sbatch
// exports for a one-node allocation of two tasks (SLURM_JOB_ID, SLURM_JOB_NODELIST=
// localhost, SLURM_JOB_NUM_NODES=1, SLURM_NTASKS_PER_NODE=2, ...) and puts
// tests/slurm/srun first on PATH: a stand-in that starts the step's tasks on this host
// with the variables srun gives each (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, ...).
// The rendezvous port is the one embed-train derives from the job id, 10000 + id % 50000,
// so the job id is chosen to make it a free port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "e2e_support.h"

using namespace e2e;

namespace {

bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A SLURM job id whose derived rendezvous port (10000 + id % 50000) is free now.
int job_id_with_a_free_port() {
  for (int id = 20000 + ::getpid() % 20000, tries = 0; tries < 1000; ++id, ++tries)
    if (port_is_free(10000 + id % 50000)) return id;
  ADD_FAILURE() << "no free port in 10000..59999";
  return 0;
}

// What sbatch exports for `--nodes=1 --ntasks-per-node=TASKS` on host "localhost", plus
// the fake srun on PATH, as shell assignments in front of a command.
std::string allocation_env(int job_id, int tasks) {
  const std::string n = std::to_string(tasks);
  return "PATH=" + kSrc + "/tests/slurm:$PATH SLURM_JOB_ID=" + std::to_string(job_id) +
         " SLURM_JOB_NODELIST=localhost SLURM_NODELIST=localhost SLURM_JOB_NUM_NODES=1 SLURM_NNODES=1"
         " SLURM_NTASKS=" + n + " SLURM_NTASKS_PER_NODE=" + n + " SLURM_TASKS_PER_NODE=" + n +
         " SLURM_CPUS_PER_TASK=1 DDP_EMBED_BIN=" + kBin;
}

json five_steps(const fs::path& out) {
  json cfg = tiny_config(out);
  cfg["train"]["max_steps"] = 5;
  return cfg;
}

TEST(Slurm, SrunScriptStartsTwoWorkersThatFormOneJob) {
  auto d = fresh_dir("slurm-srun");
  const fs::path config = write_config(d, five_steps(d / "out"));
  const int job = job_id_with_a_free_port();
  auto r = run(allocation_env(job, 2) + " bash " + kSrc + "/scripts/slurm/train-srun.sbatch " + config.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;

  // Each worker read its place from SLURM_*; rank 0 hosted the store on the first host
  // of the node list, at the port derived from the job id.
  const std::string store = "store localhost:" + std::to_string(10000 + job % 50000);
  const std::string log0 = read_file(d / "out" / "train.log"), log1 = read_file(d / "out" / "train.rank1.log");
  EXPECT_NE(log0.find("rank 0/2 (local 0/2, node 0) via SLURM, " + store), std::string::npos) << log0;
  EXPECT_NE(log1.find("rank 1/2 (local 1/2, node 0) via SLURM, " + store), std::string::npos) << log1;
  // One intra-op thread each, from SLURM_CPUS_PER_TASK.
  EXPECT_NE(log0.find("; 1 threads;"), std::string::npos) << log0;
  EXPECT_EQ(series(d / "out", "loss").size(), 5u);

  // The same job through ddp-launch trains the same model bit for bit. Why on every CPU:
  // the same two ranks, one thread each, the same micro-batches and kernels; only who
  // started the processes differs.
  auto l = fresh_dir("slurm-srun-launcher");
  ASSERT_EQ(train(l, five_steps(l / "out"), 2).exit_code, 0);
  expect_identical_models(d / "out", l / "out", "srun against ddp-launch");
  expect_same_series(series(d / "out", "grad_norm"), series(l / "out", "grad_norm"), 0, "grad_norm");
}

TEST(Slurm, LauncherScriptStartsOneDdpLaunchThatReadsTheAllocation) {
  auto d = fresh_dir("slurm-launch");
  const fs::path config = write_config(d, five_steps(d / "out"));
  const int job = job_id_with_a_free_port();
  // One launcher task on the node (the script's srun says --ntasks-per-node=1), two
  // workers under it instead of one per GPU.
  auto r = run(kThreads + allocation_env(job, 1) + " NPROC=2 bash " + kSrc + "/scripts/slurm/train.sbatch " +
               config.string() + " --set train.seed=7");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // ddp-launch took the node count and the master host from SLURM...
  EXPECT_NE(r.output.find("SLURM job " + std::to_string(job) + ": 1 nodes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("master localhost"), std::string::npos) << r.output;
  // ...its workers the torchrun variables (which win over the SLURM_* they inherit); on
  // one node they rendezvous through the launcher's store file, not a port.
  const std::string log1 = read_file(d / "out" / "train.rank1.log");
  EXPECT_NE(log1.find("rank 1/2 (local 1/2, node 0) via ddp-launch/torchrun, store file /"), std::string::npos)
      << log1;
  EXPECT_EQ(series(d / "out", "loss").size(), 5u);
  EXPECT_TRUE(fs::exists(d / "out" / "final" / "modules.json"));
}

}  // namespace
