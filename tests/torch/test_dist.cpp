// The distributed layer over real Gloo and a real TCPStore: W ranks run as W threads of
// this process (each its own store client and process group), on a free loopback port.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <limits>
#include <map>
#include <thread>

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include "config/config.h"
#include "parallel/grad_sync.h"
#include "parallel/process_group.h"
#include "parallel/worker_env.h"
#include "parallel/zero.h"
#include "launch/launcher.h"
#include "train/precision.h"

using namespace ddp_embed;
using namespace std::chrono_literals;

namespace {

// ---- worker environment --------------------------------------------------------------
EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    read_worker_env(env_of(vars));
  } catch (const DistError& e) {
    return e.what();
  }
  return "";
}

TEST(Distributed, WorkerEnvIsSingleProcessWhenNothingIsSet) {
  WorkerEnv w = read_worker_env(env_of({{"HOME", "/root"}}));
  EXPECT_EQ(w.world_size, 1);
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.source, "single process");
  EXPECT_FALSE(w.distributed());
}

TEST(Distributed, WorkerEnvFromTorchrunVariables) {
  WorkerEnv w = read_worker_env(env_of({{"RANK", "5"},
                                        {"WORLD_SIZE", "8"},
                                        {"LOCAL_RANK", "1"},
                                        {"LOCAL_WORLD_SIZE", "4"},
                                        {"NODE_RANK", "1"},
                                        {"MASTER_ADDR", "node0"},
                                        {"MASTER_PORT", "1234"},
                                        {"TORCHELASTIC_RESTART_COUNT", "2"},
                                        {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                        {"SLURM_PROCID", "3"}}));  // torchrun wins over SLURM
  EXPECT_EQ(w.source, "ddp-launch/torchrun");
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "node0");
  EXPECT_EQ(w.master_port, 1234);
  EXPECT_EQ(w.restart_count, 2);
  EXPECT_TRUE(w.agent_store);
  EXPECT_FALSE(w.single_node());
  EXPECT_NE(describe(w).find("rank 5/8"), std::string::npos);

  WorkerEnv d = read_worker_env(env_of({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"RESTART_COUNT", "1"}}));
  EXPECT_EQ(d.local_rank, 1);  // one node assumed
  EXPECT_EQ(d.local_world_size, 2);
  EXPECT_EQ(d.master_addr, "127.0.0.1");
  EXPECT_EQ(d.master_port, 29500);
  EXPECT_EQ(d.restart_count, 1);
  EXPECT_FALSE(d.agent_store);
}

TEST(Distributed, WorkerEnvFromSlurm) {
  WorkerEnv w = read_worker_env(env_of({{"SLURM_PROCID", "6"},
                                        {"SLURM_NTASKS", "8"},
                                        {"SLURM_LOCALID", "2"},
                                        {"SLURM_NODEID", "1"},
                                        {"SLURM_TASKS_PER_NODE", "4(x2)"},
                                        {"SLURM_JOB_NODELIST", "gpu[07-08,11],login"},
                                        {"SLURM_JOB_ID", "123456"}}));
  EXPECT_EQ(w.source, "SLURM");
  EXPECT_EQ(w.rank, 6);
  EXPECT_EQ(w.world_size, 8);
  EXPECT_EQ(w.local_rank, 2);
  EXPECT_EQ(w.local_world_size, 4);
  EXPECT_EQ(w.node_rank, 1);
  EXPECT_EQ(w.master_addr, "gpu07");
  EXPECT_EQ(w.master_port, 10000 + 123456 % 50000);
  EXPECT_GE(w.master_port, 10000);
  EXPECT_LE(w.master_port, 59999);

  WorkerEnv m = read_worker_env(env_of({{"SLURM_PROCID", "0"},
                                        {"SLURM_NTASKS", "2"},
                                        {"SLURM_NNODES", "2"},
                                        {"SLURM_JOB_NODELIST", "a,b"},
                                        {"MASTER_ADDR", "10.1.2.3"},
                                        {"MASTER_PORT", "4000"}}));
  EXPECT_EQ(m.master_addr, "10.1.2.3");
  EXPECT_EQ(m.master_port, 4000);
  EXPECT_EQ(m.local_world_size, 1);
}

TEST(Distributed, WorkerEnvFromOpenMpiNeedsMasterAddress) {
  const std::map<std::string, std::string> base = {{"OMPI_COMM_WORLD_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_SIZE", "2"},
                                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}};
  EXPECT_NE(error_of(base).find("MASTER_ADDR"), std::string::npos);
  auto with = base;
  with["MASTER_ADDR"] = "127.0.0.1";
  EXPECT_NE(error_of(with).find("MASTER_PORT"), std::string::npos);
  with["MASTER_PORT"] = "29511";
  WorkerEnv w = read_worker_env(env_of(with));
  EXPECT_EQ(w.source, "OpenMPI");
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world_size, 2);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.master_port, 29511);
}

TEST(Distributed, WorkerEnvErrorsNameTheProblem) {
  EXPECT_NE(error_of({{"RANK", "abc"}, {"WORLD_SIZE", "2"}}).find("RANK='abc' is not an integer"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2x"}}).find("WORLD_SIZE"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "2"}, {"WORLD_SIZE", "2"}}).find("RANK=2 is outside 0..1"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE=0"), std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "0"}}).find("MASTER_PORT=0"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT=70000"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("WORLD_SIZE is not set"), std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "x"}}).find("SLURM_NTASKS"), std::string::npos);
  // Several "nodes" on one host may meet at a loopback address (the multi-node tests).
  EXPECT_EQ(error_of({{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_WORLD_SIZE", "2"}}), "");
}

// An elastic job of ddp-launch: the range of node counts, and what changed this round.
TEST(Distributed, WorkerEnvOfAnElasticJobHasItsRangeAndMembershipChange) {
  WorkerEnv w = read_worker_env(env_of({{"RANK", "1"},
                                        {"WORLD_SIZE", "2"},
                                        {"LOCAL_WORLD_SIZE", "1"},
                                        {"DDP_LAUNCH_MIN_NNODES", "2"},
                                        {"DDP_LAUNCH_MAX_NNODES", "3"},
                                        {"DDP_LAUNCH_MEMBERSHIP", "{\"text\":\"continuing on 2 of 3 nodes\"}"}}));
  EXPECT_TRUE(w.elastic());
  EXPECT_EQ(w.min_nnodes, 2);
  EXPECT_EQ(w.max_nnodes, 3);
  EXPECT_EQ(w.membership_change, "{\"text\":\"continuing on 2 of 3 nodes\"}");
  // N:N may lose and replace nodes, but never runs at another size.
  EXPECT_FALSE(read_worker_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DDP_LAUNCH_MIN_NNODES", "2"},
                                       {"DDP_LAUNCH_MAX_NNODES", "2"}}))
                   .elastic());
  EXPECT_FALSE(read_worker_env(env_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}})).elastic());
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DDP_LAUNCH_MIN_NNODES", "3"}, {"DDP_LAUNCH_MAX_NNODES", "2"}})
                .find("do not make a range MIN:MAX"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"DDP_LAUNCH_MIN_NNODES", "2"}}).find("DDP_LAUNCH_MAX_NNODES=0"),
            std::string::npos);
}

// ---- whole jobs: every task of a fake allocation, as each would see its environment ----

// The variables sbatch + srun give task `local` of node `node` in a two-node allocation
// "node[01-02]" with `tasks_per_node` tasks a node.
std::map<std::string, std::string> srun_task_env(int node, int local, int tasks_per_node) {
  const int tasks = 2 * tasks_per_node;
  return {{"SLURM_JOB_ID", "31337"},
          {"SLURM_JOB_NODELIST", "node[01-02]"},
          {"SLURM_NNODES", "2"},
          {"SLURM_JOB_NUM_NODES", "2"},
          {"SLURM_NODEID", std::to_string(node)},
          {"SLURM_PROCID", std::to_string(node * tasks_per_node + local)},
          {"SLURM_NTASKS", std::to_string(tasks)},
          {"SLURM_LOCALID", std::to_string(local)},
          {"SLURM_NTASKS_PER_NODE", std::to_string(tasks_per_node)},
          {"SLURM_TASKS_PER_NODE", std::to_string(tasks_per_node) + "(x2)"},
          {"SLURM_STEP_ID", "0"},
          {"SLURM_STEP_NUM_NODES", "2"},
          {"SLURM_STEP_NODELIST", "node[01-02]"}};
}

// scripts/slurm/train-srun.sbatch: embed-train straight under srun, two tasks a node.
TEST(Distributed, EveryTaskOfAnSrunJobFindsItsPlace) {
  for (int node = 0; node < 2; ++node) {
    for (int local = 0; local < 2; ++local) {
      const WorkerEnv w = read_worker_env(env_of(srun_task_env(node, local, 2)));
      EXPECT_EQ(w.source, "SLURM");
      EXPECT_EQ(w.rank, node * 2 + local);
      EXPECT_EQ(w.world_size, 4);
      EXPECT_EQ(w.local_rank, local);
      EXPECT_EQ(w.local_world_size, 2);
      EXPECT_EQ(w.node_rank, node);
      EXPECT_EQ(w.master_addr, "node01");  // the first host, the same for every task
      EXPECT_EQ(w.master_port, 10000 + 31337 % 50000);
      EXPECT_FALSE(w.single_node());
    }
  }
}

// scripts/slurm/train.sbatch: one ddp-launch per node under srun, two workers each. The
// launcher reads the allocation; its workers inherit SLURM_* as well, but the torchrun
// variables the launcher sets win.
TEST(Distributed, LauncherUnderSrunAndItsWorkersAgree) {
  for (int node = 0; node < 2; ++node) {
    const auto task = srun_task_env(node, 0, 1);
    const launch::Environment env(task.begin(), task.end());
    launch::LaunchOptions options;
    options.nproc = 2;
    options.master_port = 12345;
    const launch::LayoutResult layout = launch::resolve_layout(options, env, [] { return 0; });
    ASSERT_TRUE(layout.ok) << layout.error;
    for (int local = 0; local < 2; ++local) {
      std::map<std::string, std::string> worker;
      for (const auto& entry : launch::build_worker_env(env, layout.layout, local, 0, 0))
        worker[entry.substr(0, entry.find('='))] = entry.substr(entry.find('=') + 1);
      const WorkerEnv w = read_worker_env(env_of(worker));
      EXPECT_EQ(w.source, "ddp-launch/torchrun");
      EXPECT_EQ(w.rank, node * 2 + local);
      EXPECT_EQ(w.world_size, 4);
      EXPECT_EQ(w.local_rank, local);
      EXPECT_EQ(w.local_world_size, 2);
      EXPECT_EQ(w.node_rank, node);
      EXPECT_EQ(w.master_addr, "node01");
      EXPECT_EQ(w.master_port, 12345);
    }
  }
}

// mpirun -np 4 --npernode 2 -x MASTER_ADDR=node01 -x MASTER_PORT=29400 embed-train ...
TEST(Distributed, EveryRankOfAnOpenMpiJobFindsItsPlace) {
  for (int rank = 0; rank < 4; ++rank) {
    const WorkerEnv w = read_worker_env(env_of({{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                                                {"OMPI_COMM_WORLD_SIZE", "4"},
                                                {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank % 2)},
                                                {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                                {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(rank / 2)},
                                                {"MASTER_ADDR", "node01"},
                                                {"MASTER_PORT", "29400"}}));
    EXPECT_EQ(w.source, "OpenMPI");
    EXPECT_EQ(w.rank, rank);
    EXPECT_EQ(w.world_size, 4);
    EXPECT_EQ(w.local_rank, rank % 2);
    EXPECT_EQ(w.local_world_size, 2);
    EXPECT_EQ(w.node_rank, rank / 2);
    EXPECT_EQ(w.master_addr, "node01");
    EXPECT_EQ(w.master_port, 29400);
  }
}

TEST(Distributed, SlurmNodelistExpands) {
  using V = std::vector<std::string>;
  EXPECT_EQ(expand_slurm_nodelist("host[01-04,07],other"), (V{"host01", "host02", "host03", "host04", "host07", "other"}));
  EXPECT_EQ(expand_slurm_nodelist("a1"), (V{"a1"}));
  EXPECT_EQ(expand_slurm_nodelist("n[8-10]"), (V{"n8", "n9", "n10"}));
  EXPECT_EQ(expand_slurm_nodelist("r[1-2]c[3,5]"), (V{"r1c3", "r1c5", "r2c3", "r2c5"}));
  EXPECT_EQ(expand_slurm_nodelist("gpu-[009-011]-ib"), (V{"gpu-009-ib", "gpu-010-ib", "gpu-011-ib"}));
  EXPECT_THROW(expand_slurm_nodelist("host[1-"), DistError);
  EXPECT_THROW(expand_slurm_nodelist("host[3-1]"), DistError);
  EXPECT_THROW(expand_slurm_nodelist("a,,b"), DistError);
}

// ---- multi-rank helpers --------------------------------------------------------------
int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return 0;
  }
  close(fd);
  return ntohs(a.sin_port);
}

WorkerEnv env_for(int rank, int world, int port) {
  WorkerEnv w;
  w.rank = rank;
  w.world_size = world;
  w.local_rank = rank;
  w.local_world_size = world;
  w.master_addr = "127.0.0.1";
  w.master_port = port;
  w.source = "test";
  return w;
}

// Runs fn(rank, pg) on W threads, each with its own process group; rethrows the first
// failure with its rank.
void run_ranks(int world, const std::function<void(int, ProcessGroup&)>& fn, std::chrono::seconds timeout = 30s) {
  const int port = free_port();
  ASSERT_GT(port, 0);
  std::vector<std::exception_ptr> errors(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = ProcessGroup::init(env_for(r, world, port), DistBackend::Gloo, false, timeout);
        fn(r, *pg);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < world; ++r) {
    if (!errors[r]) continue;
    try {
      std::rethrow_exception(errors[r]);
    } catch (const std::exception& e) {
      FAIL() << "rank " << r << ": " << e.what();
    }
  }
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Every collective of a one-rank world gives back what it was given.
void expect_identity_collectives(ProcessGroup& pg) {
  EXPECT_EQ(pg.world_size(), 1);
  at::Tensor t = at::arange(6, at::kFloat).view({2, 3});
  pg.allreduce_mean_(t);
  EXPECT_TRUE(t.equal(at::arange(6, at::kFloat).view({2, 3})));
  EXPECT_TRUE(pg.all_gather(t).equal(t));
  auto v = pg.all_gather_varsize(t);
  EXPECT_EQ(v.counts, std::vector<int64_t>{2});
  EXPECT_TRUE(v.data.equal(t));
  std::vector<at::Tensor> b{t.clone()};
  pg.broadcast_(b, 0);
  EXPECT_TRUE(b[0].equal(t));
  pg.reduce_sum_async(b[0], 0, "reduce").wait();
  EXPECT_TRUE(b[0].equal(t));
  pg.barrier();
  pg.check_same(42, "config hash");
  EXPECT_EQ(pg.allreduce_max_int(7), 7);
}

// ---- process group -------------------------------------------------------------------
TEST(Distributed, SingleProcessCollectivesAreIdentity) {
  auto pg = ProcessGroup::init(WorkerEnv{}, DistBackend::Auto, false, 10s);
  EXPECT_EQ(pg->backend(), "none");
  expect_identity_collectives(*pg);
  EXPECT_EQ(pg->collectives_issued(), 0u);
  at::Tensor x = at::randn({3, 2}, at::requires_grad());
  EXPECT_TRUE(all_gather_with_grad(*pg, x).is_same(x));
  EXPECT_THROW(parse_choice<DistBackend>("mpi", "dist.backend"), ConfigError);  // refused when the config is read
}

// Under ddp-launch or torchrun, naming the backend makes a process group of one: every
// collective runs through it (and is counted), with the identity's results. `auto`, no
// launcher, or one that gives no rendezvous of its own (SLURM, Open MPI) makes none.
TEST(Distributed, AGroupOfOneWhenALauncherNamesTheBackend) {
  WorkerEnv launched = env_for(0, 1, free_port());
  launched.source = "ddp-launch/torchrun";
  EXPECT_FALSE(ProcessGroup::init(launched, DistBackend::Auto, false, 10s)->communicates());
  EXPECT_FALSE(ProcessGroup::init(WorkerEnv{}, DistBackend::Gloo, false, 10s)->communicates());
  WorkerEnv slurm = launched;
  slurm.source = "SLURM";
  EXPECT_FALSE(ProcessGroup::init(slurm, DistBackend::Gloo, false, 10s)->communicates());
  auto pg = ProcessGroup::init(launched, DistBackend::Gloo, false, 10s);
  ASSERT_TRUE(pg->communicates());
  EXPECT_EQ(pg->backend(), "gloo");
  expect_identity_collectives(*pg);
  EXPECT_GE(pg->collectives_issued(), 9u);
  const uint64_t before_gather = pg->collectives_issued();
  at::Tensor x = at::randn({3, 2}).requires_grad_();
  at::Tensor gathered = all_gather_with_grad(*pg, x);
  EXPECT_FALSE(gathered.is_same(x));
  EXPECT_TRUE(gathered.equal(x));
  gathered.sum().backward();
  EXPECT_TRUE(x.grad().equal(at::ones({3, 2})));
  EXPECT_GE(pg->collectives_issued(), before_gather + 2) << "the gather and its backward's all-reduce";
}

TEST(Distributed, NcclNeedsCuda) {
  WorkerEnv w = env_for(0, 2, 1);
  try {
    ProcessGroup::init(w, DistBackend::Nccl, false, 5s);
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    EXPECT_NE(std::string(e.what()).find("nccl"), std::string::npos) << e.what();
  }
}

TEST(Distributed, Collectives) {
  const int W = 3;
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    EXPECT_EQ(pg.rank(), rank);
    EXPECT_EQ(pg.world_size(), W);
    EXPECT_EQ(pg.backend(), "gloo");
    // allreduce sum / mean, also on a non-contiguous view
    at::Tensor s = at::full({2, 3}, static_cast<float>(rank + 1));
    pg.allreduce_sum_(s);
    EXPECT_TRUE(s.equal(at::full({2, 3}, 6.0f)));
    at::Tensor m = at::full({4}, static_cast<double>(rank), at::kDouble);
    pg.allreduce_mean_(m);
    EXPECT_TRUE(m.equal(at::full({4}, 1.0, at::kDouble)));
    at::Tensor base = at::zeros({3, 4});
    at::Tensor col = base.select(1, 1);  // strided
    col.fill_(static_cast<float>(rank));
    pg.allreduce_sum_(col);
    EXPECT_TRUE(base.select(1, 1).equal(at::full({3}, 3.0f)));
    EXPECT_EQ(base.sum().item<float>(), 9.0f);
    EXPECT_THROW(pg.allreduce_mean_(at::ones({2}, at::kLong)), DistError);
    // broadcast of mixed dtypes and shapes from rank 1
    std::vector<at::Tensor> ts = {at::full({2, 2}, static_cast<float>(rank)), at::full({3}, rank * 10, at::kLong),
                                  at::full({5}, static_cast<float>(rank) + 0.5f), at::empty({0})};
    ts[2].requires_grad_(true);  // like a parameter
    pg.broadcast_(ts, 1);
    EXPECT_TRUE(ts[0].equal(at::full({2, 2}, 1.0f)));
    EXPECT_TRUE(ts[1].equal(at::full({3}, 10, at::kLong)));
    EXPECT_TRUE(ts[2].detach().equal(at::full({5}, 1.5f)));
    // all_gather
    at::Tensor g = pg.all_gather(at::full({2, 2}, static_cast<float>(rank)));
    ASSERT_EQ(g.sizes(), (std::vector<int64_t>{6, 2}));
    for (int r = 0; r < W; ++r) EXPECT_TRUE(g.narrow(0, 2 * r, 2).equal(at::full({2, 2}, static_cast<float>(r))));
    // varsize: rank r contributes r rows (rank 0: none)
    at::Tensor rows = at::arange(rank * 2, at::kFloat).view({rank, 2}) + 100 * rank;
    auto v = pg.all_gather_varsize(rows);
    EXPECT_EQ(v.counts, (std::vector<int64_t>{0, 1, 2}));
    ASSERT_EQ(v.data.sizes(), (std::vector<int64_t>{3, 2}));
    EXPECT_TRUE(v.data[0].equal(at::tensor({100.0f, 101.0f})));
    EXPECT_TRUE(v.data[2].equal(at::tensor({202.0f, 203.0f})));
    pg.barrier();
    EXPECT_EQ(pg.allreduce_max_int(rank * 7 - 3), 11);
    pg.check_same(0xfeedULL, "config hash");
    // rank 2 differs: every rank throws the same message naming it
    try {
      pg.check_same(rank == 2 ? 2 : 1, "parameter checksum");
      ADD_FAILURE() << "check_same did not throw";
    } catch (const DistError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("parameter checksum differs"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank(s) 2 differ"), std::string::npos) << msg;
    }
    EXPECT_EQ(pg.ranks_differing_from_rank0(rank == 0 ? 5 : 6), (std::vector<int>{1, 2}));
    EXPECT_EQ(pg.ranks_differing_from_rank0(rank == 1 ? 5 : 6), (std::vector<int>{1}));
    EXPECT_TRUE(pg.ranks_differing_from_rank0(77).empty());
    // the checksum helper
    EXPECT_EQ(tensors_checksum({at::ones({3})}), tensors_checksum({at::ones({3})}));
    EXPECT_NE(tensors_checksum({at::ones({3})}), tensors_checksum({at::ones({4})}));
    pg.check_same(tensors_checksum({at::arange(10)}), "parameters");
    EXPECT_GT(pg.collectives_issued(), 10u);
  });
}

TEST(Distributed, RendezvousTimeoutNamesTheMissingRank) {
  const int port = free_port();
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ProcessGroup::init(env_for(0, 3, port), DistBackend::Gloo, false, 2s);  // ranks 1 and 2 never come
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("rank(s) 1, 2 of 3 did not join"), std::string::npos) << msg;
    EXPECT_NE(msg.find("rendezvous"), std::string::npos) << msg;
  }
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(Distributed, ClientSaysItCannotReachTheStore) {
  const int port = free_port();  // nobody listens there
  const auto t0 = std::chrono::steady_clock::now();
  try {
    ProcessGroup::init(env_for(1, 2, port), DistBackend::Gloo, false, 2s);
    FAIL() << "expected DistError";
  } catch (const DistError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("could not reach the rendezvous store at 127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << msg;
  }
  EXPECT_LT(seconds_since(t0), 15.0);
}

TEST(Distributed, CollectiveWithAnAbsentRankTimesOut) {
  std::promise<void> rank0_done;
  auto done = rank0_done.get_future().share();
  double elapsed = 0;
  std::string message;
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        if (rank == 1) {  // alive, but never joins the all-reduce
          done.wait();
          return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        try {
          at::Tensor t = at::ones({16});
          pg.allreduce_sum_(t);
          ADD_FAILURE() << "allreduce did not time out";
        } catch (const DistError& e) {
          message = e.what();
        }
        elapsed = seconds_since(t0);
        // The group is unusable afterwards, and says so at once.
        try {
          pg.barrier();
          ADD_FAILURE() << "barrier on a broken group did not throw";
        } catch (const DistError& e) {
          EXPECT_NE(std::string(e.what()).find("earlier failure"), std::string::npos) << e.what();
        }
        rank0_done.set_value();
      },
      3s);
  EXPECT_NE(message.find("allreduce"), std::string::npos) << message;
  EXPECT_NE(message.find("did not complete within 3 s"), std::string::npos) << message;
  EXPECT_NE(message.find("rank(s) 1"), std::string::npos) << message;
  EXPECT_GE(elapsed, 2.5);
  EXPECT_LT(elapsed, 8.0) << message;
}

TEST(Distributed, PeerThatLeavesIsReported) {
  std::string message;
  double elapsed = 0;
  run_ranks(
      2,
      [&](int rank, ProcessGroup& pg) {
        pg.barrier();
        if (rank == 1) return;  // its process group is destroyed: its connections close
        const auto t0 = std::chrono::steady_clock::now();
        try {
          std::this_thread::sleep_for(200ms);
          at::Tensor t = at::ones({16});
          pg.allreduce_sum_(t);
          ADD_FAILURE() << "allreduce with a departed peer succeeded";
        } catch (const DistError& e) {
          message = e.what();
        }
        elapsed = seconds_since(t0);
      },
      20s);
  EXPECT_NE(message.find("allreduce"), std::string::npos) << message;
  EXPECT_NE(message.find("rank(s) 1"), std::string::npos) << message;
  EXPECT_LT(elapsed, 15.0) << message;
}

// ---- differentiable all-gather -------------------------------------------------------
// Rank r's loss: a contrastive-style score of its own rows against all gathered rows.
at::Tensor rank_loss(const at::Tensor& gathered, int rank, int64_t rows) {
  at::Tensor mine = gathered.narrow(0, rank * rows, rows);
  at::Tensor logits = at::matmul(mine, gathered.t());
  return (at::logsumexp(logits, 1) - logits.narrow(1, rank * rows, rows).diagonal()).mean() +
         0.1 * mine.pow(2).sum();
}

TEST(Distributed, AllGatherWithGradMatchesSingleProcessGradientOfTheMeanLoss) {
  const int W = 2;
  const int64_t B = 3, Din = 5, D = 4;
  at::manual_seed(7);
  const at::Tensor theta0 = at::randn({D, Din}, at::kDouble);
  std::vector<at::Tensor> inputs = {at::randn({B, Din}, at::kDouble), at::randn({B, Din}, at::kDouble)};

  // Reference: one process, the concatenated batch, the mean of the per-rank losses.
  at::Tensor theta = theta0.clone().requires_grad_(true);
  at::Tensor all = at::matmul(at::cat(inputs, 0), theta.t());
  at::Tensor loss = (rank_loss(all, 0, B) + rank_loss(all, 1, B)) / W;
  loss.backward();
  const at::Tensor expected = theta.grad().clone();

  std::vector<at::Tensor> got(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    at::Tensor th = theta0.clone().requires_grad_(true);
    at::Tensor x = at::matmul(inputs[rank], th.t());
    at::Tensor g = all_gather_with_grad(pg, x);
    ASSERT_EQ(g.sizes(), (std::vector<int64_t>{W * B, D}));
    rank_loss(g, rank, B).backward();
    at::Tensor grad = th.grad().clone();
    pg.allreduce_mean_(grad);  // what data-parallel averaging does
    got[rank] = grad;
  });
  for (int r = 0; r < W; ++r) {
    ASSERT_TRUE(got[r].defined());
    EXPECT_TRUE(at::allclose(got[r], expected, 1e-10, 1e-12)) << "rank " << r << "\n" << got[r] << "\n" << expected;
  }
}

// ---- gradient sync -------------------------------------------------------------------
struct Mlp {
  std::vector<at::Tensor> params;  // registration order: w1 b1 w2 b2 w3 b3 extra
  static Mlp from(const std::vector<at::Tensor>& init) {
    Mlp m;
    for (const auto& p : init) m.params.push_back(p.clone().requires_grad_(true));
    return m;
  }
  // use_extra=false leaves the last parameter without a gradient.
  at::Tensor loss(const at::Tensor& x, bool use_extra = true) const {
    at::Tensor h = at::tanh(at::linear(x, params[0], params[1]));
    h = at::tanh(at::linear(h, params[2], params[3]));
    at::Tensor y = at::linear(h, params[4], params[5]);
    if (use_extra) y = y * params[6];
    return y.pow(2).mean();
  }
  std::vector<at::Tensor> grads() const {
    std::vector<at::Tensor> g;
    for (const auto& p : params) g.push_back(p.grad().defined() ? p.grad().clone() : at::zeros_like(p));
    return g;
  }
};

std::vector<at::Tensor> mlp_init() {
  at::manual_seed(3);
  return {at::randn({16, 8}), at::randn({16}), at::randn({16, 16}) * 0.3, at::randn({16}),
          at::randn({4, 16}) * 0.3, at::randn({4}), at::randn({4})};
}

// The truth for two micro-steps a rank: each rank's Mlp gradients of x[r][0] and x[r][1]
// summed, averaged over the ranks; the extra parameter is used on rank 0 only.
std::vector<at::Tensor> averaged_gradients(const std::vector<at::Tensor>& init,
                                           const std::vector<std::vector<at::Tensor>>& x) {
  const int W = int(x.size());
  std::vector<at::Tensor> want(init.size());
  for (int r = 0; r < W; ++r)
    for (const auto& micro_batch : x[r]) {
      Mlp m = Mlp::from(init);
      m.loss(micro_batch, /*use_extra=*/r == 0).backward();
      auto g = m.grads();
      for (size_t i = 0; i < g.size(); ++i) want[i] = want[i].defined() ? want[i] + g[i] : g[i];
    }
  for (auto& w : want) w = w / W;
  return want;
}

void expect_grads_near(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want, int rank) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(at::allclose(got[i], want[i], 0, 1e-6)) << "rank " << rank << " param " << i << "\n"
                                                        << (got[i] - want[i]).abs().max();
}

TEST(Distributed, GradSyncAveragesGradientsAcrossRanksWithSmallBuckets) {
  const int W = 2;
  const auto init = mlp_init();
  const std::vector<at::Tensor> x = {at::randn({5, 8}), at::randn({5, 8})};
  // Expected: the mean of the per-rank gradients, each computed alone.
  std::vector<at::Tensor> want(init.size());
  for (int r = 0; r < W; ++r) {
    Mlp m = Mlp::from(init);
    m.loss(x[r]).backward();
    auto g = m.grads();
    for (size_t i = 0; i < g.size(); ++i) want[i] = want[i].defined() ? want[i] + g[i] : g[i];
  }
  for (auto& w : want) w = w / W;

  std::vector<std::vector<at::Tensor>> got(W);
  std::vector<GradSync::StepStats> stats(W);
  std::vector<size_t> buckets(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    GradSync sync(pg, m.params, 200);  // 50 floats: w1, w2 and w3 each get their own bucket
    buckets[rank] = sync.num_buckets();
    EXPECT_FALSE(sync.buckets_are_gradient_views());  // no .grad yet: buckets of their own
    m.loss(x[rank]).backward();
    sync.finish();
    got[rank] = m.grads();
    stats[rank] = sync.last_step();
  });
  for (int r = 0; r < W; ++r) {
    expect_grads_near(got[r], want, r);
    EXPECT_GE(buckets[r], 4u);
    EXPECT_EQ(stats[r].buckets, buckets[r]);
    // Every parameter had a gradient, so backward completed (and launched) every bucket
    // before finish() was called: communication overlapped the rest of backward.
    EXPECT_GE(stats[r].launched_before_finish, 1u);
    EXPECT_EQ(stats[r].launched_before_finish, buckets[r]);
    EXPECT_EQ(stats[r].bytes, (16 * 8 + 16 + 16 * 16 + 16 + 4 * 16 + 4 + 4) * 4u);
    EXPECT_GE(stats[r].wait_ms, 0.0);
  }
}

TEST(Distributed, GradSyncAccumulationSumsMicroStepsThenAverages) {
  const int W = 2;
  const auto init = mlp_init();
  // x[r][a]: rank r, micro-step a
  const std::vector<std::vector<at::Tensor>> x = {{at::randn({4, 8}), at::randn({4, 8})},
                                                  {at::randn({4, 8}), at::randn({4, 8})}};
  std::vector<at::Tensor> want(init.size());
  for (int r = 0; r < W; ++r)
    for (int a = 0; a < 2; ++a) {
      Mlp m = Mlp::from(init);
      m.loss(x[r][a]).backward();
      auto g = m.grads();
      for (size_t i = 0; i < g.size(); ++i) want[i] = want[i].defined() ? want[i] + g[i] : g[i];
    }
  for (auto& w : want) w = w / W;

  std::vector<std::vector<at::Tensor>> got(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    auto listed = m.params;
    listed.push_back(m.params[0]);  // a tied weight listed twice is synchronized once
    GradSync sync(pg, listed, 1 << 20);  // one bucket
    EXPECT_EQ(sync.num_buckets(), 1u);
    EXPECT_EQ(sync.bucket_param_counts(), std::vector<size_t>{m.params.size()});
    for (int step = 0; step < 2; ++step) {  // twice: state resets between optimizer steps
      for (auto& p : m.params) p.mutable_grad() = at::Tensor();
      {
        const auto before = pg.collectives_issued();
        auto guard = sync.no_sync();
        EXPECT_FALSE(sync.sync_enabled());
        m.loss(x[rank][0]).backward();
        sync.finish();  // no-op while sync is off
        EXPECT_EQ(pg.collectives_issued(), before) << "no communication on a no_sync micro-step";
      }
      EXPECT_TRUE(sync.sync_enabled());
      m.loss(x[rank][1]).backward();
      sync.finish();
    }
    got[rank] = m.grads();
  });
  for (int r = 0; r < W; ++r) expect_grads_near(got[r], want, r);
}

TEST(Distributed, GradSyncParameterWithoutGradientOnOneRank) {
  const int W = 2;
  const auto init = mlp_init();
  const std::vector<at::Tensor> x = {at::randn({5, 8}), at::randn({5, 8})};
  std::vector<at::Tensor> want(init.size());
  for (int r = 0; r < W; ++r) {
    Mlp m = Mlp::from(init);
    m.loss(x[r], /*use_extra=*/r == 0).backward();
    auto g = m.grads();
    for (size_t i = 0; i < g.size(); ++i) want[i] = want[i].defined() ? want[i] + g[i] : g[i];
  }
  for (auto& w : want) w = w / W;

  std::vector<std::vector<at::Tensor>> got(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    GradSync sync(pg, m.params, 64);
    m.loss(x[rank], rank == 0).backward();
    sync.finish();
    got[rank] = m.grads();
    // The unused parameter's bucket comes first (reverse order), so on rank 1 nothing could
    // be launched before finish(); the order stays the same on both ranks anyway.
    if (rank == 1) {
      EXPECT_EQ(sync.last_step().launched_before_finish, 0u);
    }
  });
  for (int r = 0; r < W; ++r) expect_grads_near(got[r], want, r);
  EXPECT_GT(want[6].abs().sum().item<float>(), 0.0f);
}

// The trainer's layout: FlatAdamW has made every .grad a view of its group's flat buffer
// (weights and biases in two interleaved groups), so GradSync cuts its buckets from those
// buffers and all-reduces the gradients in place. Same averages as the copying layout, with
// gradient accumulation, a parameter without a gradient on one rank, and, in the second
// step, one .grad replaced by a tensor of its own (that one is copied, as before).
TEST(Distributed, GradSyncBucketsAreViewsOfTheOptimizersFlatGradients) {
  const int W = 2;
  const auto init = mlp_init();
  const std::vector<std::vector<at::Tensor>> x = {{at::randn({4, 8}), at::randn({4, 8})},
                                                  {at::randn({4, 8}), at::randn({4, 8})}};
  const std::vector<at::Tensor> want = averaged_gradients(init, x);

  std::vector<std::vector<std::vector<at::Tensor>>> got(W, std::vector<std::vector<at::Tensor>>(2));
  std::vector<size_t> buckets(W);
  std::vector<GradSync::StepStats> stats(W);
  // One element a rank, written from its thread: not vector<bool>, whose elements share bytes.
  std::vector<char> aliased(W, 0), views(W, 0);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    FlatAdamW optimizer({FlatAdamW::Group{{m.params[0], m.params[2], m.params[4]}, 0.01},
                         FlatAdamW::Group{{m.params[1], m.params[3], m.params[5], m.params[6]}, 0.0}});
    std::vector<const void*> grad_memory;
    for (const auto& p : m.params) grad_memory.push_back(p.grad().data_ptr());
    GradSync sync(pg, m.params, 200);  // 50 floats: the three weights get buckets of their own
    buckets[rank] = sync.num_buckets();
    views[rank] = sync.buckets_are_gradient_views();
    for (int step = 0; step < 2; ++step) {
      optimizer.zero_grad();
      if (step == 1) m.params[2].mutable_grad() = at::zeros_like(m.params[2]);  // no longer the buffer's
      {
        auto guard = sync.no_sync();
        m.loss(x[rank][0], rank == 0).backward();
      }
      m.loss(x[rank][1], rank == 0).backward();
      sync.finish();
      got[rank][step] = m.grads();
      if (step == 0) {
        stats[rank] = sync.last_step();
        bool same = true;
        for (size_t i = 0; i < m.params.size(); ++i) same = same && m.params[i].grad().data_ptr() == grad_memory[i];
        aliased[rank] = same;
      }
    }
  });
  for (int r = 0; r < W; ++r) {
    expect_grads_near(got[r][0], want, r);
    expect_grads_near(got[r][1], want, r);
    EXPECT_TRUE(views[r]) << "rank " << r;
    EXPECT_TRUE(aliased[r]) << "rank " << r << ": the averages must be in the optimizer's buffers";
    EXPECT_GE(buckets[r], 4u);
    EXPECT_EQ(stats[r].bytes, (16 * 8 + 16 + 16 * 16 + 16 + 4 * 16 + 4 + 4) * 4u);
  }
  EXPECT_GT(want[6].abs().sum().item<float>(), 0.0f);
}

// ZeRO-2 on 3 ranks (uneven shards; buckets of 50 floats that straddle the owners'
// boundaries): two micro-steps, each reduced into the shards as backward runs, a
// parameter without a gradient on two ranks. Each rank's shard then holds its stretch of
// the gradient averaged over the ranks and summed over the micro-steps, and no .grad
// (no whole gradient) is left anywhere.
TEST(Distributed, GradSyncZeroTwoShardsHoldTheAveragedGradients) {
  const int W = 3;
  const auto init = mlp_init();
  std::vector<std::vector<at::Tensor>> x(W);
  for (int r = 0; r < W; ++r) x[r] = {at::randn({4, 8}), at::randn({4, 8})};
  const std::vector<at::Tensor> want = averaged_gradients(init, x);
  // The two flat buffers, whole, in the groups' order.
  const std::vector<std::vector<size_t>> groups = {{0, 2, 4}, {1, 3, 5, 6}};
  std::vector<at::Tensor> want_flat;
  for (const auto& g : groups) {
    std::vector<at::Tensor> parts;
    for (size_t i : g) parts.push_back(want[i].reshape({-1}));
    want_flat.push_back(at::cat(parts));
  }

  std::vector<std::vector<at::Tensor>> shards(W);
  std::vector<char> to_shards(W, 0), grads_left(W, 1);
  std::vector<GradSync::StepStats> stats(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    FlatAdamW optimizer({FlatAdamW::Group{{m.params[0], m.params[2], m.params[4]}, 0.01},
                         FlatAdamW::Group{{m.params[1], m.params[3], m.params[5], m.params[6]}, 0.0}});
    GradSync sync(pg, m.params, 200);
    optimizer.shard(rank, W, [&pg](const std::vector<at::Tensor>& flat) { share_shards(pg, flat); });
    {
      const std::vector<at::Tensor> whole = optimizer.gradient_buffers();
      optimizer.shard_gradients([&pg](const at::Tensor& t) { pg.allreduce_sum_(t); });
      sync.reduce_into_shards(whole, optimizer.gradient_buffers());
    }
    to_shards[rank] = sync.reduces_into_shards();
    optimizer.zero_grad();
    for (int a = 0; a < 2; ++a) {
      m.loss(x[rank][a], rank == 0).backward();
      sync.finish();
    }
    stats[rank] = sync.last_step();
    bool any_grad = false;
    for (const auto& p : m.params) any_grad = any_grad || p.grad().defined();
    grads_left[rank] = any_grad;
    for (const auto& g : optimizer.gradient_buffers()) shards[rank].push_back(g.clone());
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_TRUE(to_shards[r]) << "rank " << r;
    EXPECT_FALSE(grads_left[r]) << "rank " << r << " kept a .grad";
    EXPECT_EQ(stats[r].bytes, (16 * 8 + 16 + 16 * 16 + 16 + 4 * 16 + 4 + 4) * 4u);
    ASSERT_EQ(shards[r].size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      const ShardRange own = shard_range(want_flat[k].numel(), r, W);
      ASSERT_EQ(shards[r][k].numel(), own.size) << "rank " << r << " buffer " << k;
      EXPECT_TRUE(at::allclose(shards[r][k], want_flat[k].narrow(0, own.begin, own.size), 1e-6, 1e-7))
          << "rank " << r << " buffer " << k << "\n" << shards[r][k] << "\n" << want_flat[k].narrow(0, own.begin, own.size);
    }
  }
  EXPECT_GT(want[6].abs().sum().item<float>(), 0.0f);
}

// fp16 overflow on one rank only: the averaged gradients carry its inf to every rank, so
// every rank skips the step and halves its loss scale, and the ranks stay identical.
TEST(Distributed, GradSyncAnOverflowOnOneRankMakesEveryRankSkipTheStep) {
  const int W = 2;
  const auto init = mlp_init();
  const std::vector<at::Tensor> x = {at::randn({5, 8}), at::randn({5, 8})};
  std::vector<UpdateOutcome> outcomes(W);
  std::vector<double> scales(W);
  std::vector<std::vector<at::Tensor>> after(W);
  run_ranks(W, [&](int rank, ProcessGroup& pg) {
    Mlp m = Mlp::from(init);
    FlatAdamW optimizer({FlatAdamW::Group{m.params, 0.0}});
    GradSync sync(pg, m.params, 1 << 20);
    LossScaler scaler(1024, 2000);
    at::Tensor loss = m.loss(x[rank]);
    if (rank == 1) loss = loss * std::numeric_limits<float>::infinity();  // this rank overflows
    scaler.scale_loss(loss).backward();
    sync.finish();
    outcomes[rank] = update_parameters(optimizer, scaler, 1.0, 1e-3);
    scales[rank] = scaler.scale();
    for (const auto& p : m.params) after[rank].push_back(p.detach().clone());
  });
  for (int r = 0; r < W; ++r) {
    EXPECT_FALSE(outcomes[r].applied) << "rank " << r << " stepped";
    EXPECT_EQ(scales[r], 512) << "rank " << r;
    for (size_t i = 0; i < init.size(); ++i) EXPECT_TRUE(at::equal(after[r][i], init[i])) << "rank " << r;
  }
}

TEST(Distributed, GradSyncSingleProcessIsANoOp) {
  auto pg = ProcessGroup::single();
  Mlp m = Mlp::from(mlp_init());
  GradSync sync(*pg, m.params, 1 << 20);
  at::Tensor x = at::randn({3, 8});
  m.loss(x).backward();
  auto before = m.grads();
  sync.finish();
  expect_grads_near(m.grads(), before, 0);
  EXPECT_EQ(sync.num_buckets(), 0u);
}

}  // namespace
