// The pure parts behind a launch: SLURM node lists, the job layout, the worker
// environment, GPU counting and PROGRAM lookup.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>

#include "launch/launcher.h"
#include "launch_test_support.h"
#include "util/slurm_nodelist.h"

namespace ddp_embed::launch {
namespace {

using testing::TempDir;

LaunchOptions options_of(std::vector<std::string> args) {
  args.push_back("prog");
  ParseResult r = parse_command_line(args);
  EXPECT_EQ(r.outcome, ParseOutcome::run) << r.error;
  return r.options;
}

LayoutResult layout_of(std::vector<std::string> args, const Environment& env = {}, int gpus = 0) {
  return resolve_layout(options_of(std::move(args)), env, [gpus] { return gpus; });
}

std::map<std::string, std::string> as_map(const std::vector<std::string>& entries) {
  std::map<std::string, std::string> m;
  for (const auto& e : entries) m[e.substr(0, e.find('='))] = e.substr(e.find('=') + 1);
  return m;
}

// ---- SLURM node lists ----

TEST(LaunchLayout, ExpandsSlurmNodeLists) {
  using V = std::vector<std::string>;
  EXPECT_EQ(slurm::expand_nodelist("node1"), V{"node1"});
  EXPECT_EQ(slurm::expand_nodelist("a,b,c"), (V{"a", "b", "c"}));
  EXPECT_EQ(slurm::expand_nodelist("gpu[01-04,07]"), (V{"gpu01", "gpu02", "gpu03", "gpu04", "gpu07"}));
  EXPECT_EQ(slurm::expand_nodelist("n[8-11]"), (V{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(slurm::expand_nodelist("n[098-101]"), (V{"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(slurm::expand_nodelist("login1,gpu[1-2],cpu[3]"), (V{"login1", "gpu1", "gpu2", "cpu3"}));
  EXPECT_EQ(slurm::expand_nodelist("r[1-2]n[3-4]"), (V{"r1n3", "r1n4", "r2n3", "r2n4"}));
  EXPECT_EQ(slurm::expand_nodelist("a-[1-2].ib"), (V{"a-1.ib", "a-2.ib"}));
  EXPECT_EQ(slurm::expand_nodelist("x[5,1-2]"), (V{"x5", "x1", "x2"}));
}

TEST(LaunchLayout, RejectsMalformedSlurmNodeLists) {
  for (const char* bad : {"", "gpu[01-04", "gpu01-04]", "a,,b", "gpu[]", "gpu[4-1]", "gpu[a-b]",
                          "gpu[1-2,]", "n[[1]]", "n[0-99999999999]", "a b"})
    EXPECT_THROW(slurm::expand_nodelist(bad), std::invalid_argument) << bad;
}

TEST(LaunchLayout, ComesFromSlurmInsideAnAllocation) {
  Environment env{{"SLURM_JOB_ID", "777"},
                  {"SLURM_JOB_NUM_NODES", "4"},
                  {"SLURM_NODEID", "2"},
                  {"SLURM_JOB_NODELIST", "gpu[07-10]"}};
  LayoutResult r = layout_of({"--nproc", "8"}, env);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nnodes, 4);
  EXPECT_EQ(r.layout.node_rank, 2);
  EXPECT_EQ(r.layout.master_addr, "gpu07");
  EXPECT_EQ(r.layout.master_port, 29500);
  EXPECT_EQ(r.layout.world_size(), 32);
  EXPECT_EQ(r.layout.global_rank(3), 19);
  EXPECT_EQ(r.layout.run_id, "slurm-777");
  ASSERT_EQ(r.layout.notes.size(), 1u);
  EXPECT_NE(r.layout.notes[0].find("SLURM job 777"), std::string::npos);
  EXPECT_NE(r.layout.notes[0].find("gpu07"), std::string::npos);
}

TEST(LaunchLayout, SlurmNnodesAndStepVariablesAreRead) {
  Environment env{{"SLURM_JOB_ID", "5"}, {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"},
                  {"SLURM_NODELIST", "b,a"}};
  LayoutResult r = layout_of({}, env);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nnodes, 2);
  EXPECT_EQ(r.layout.node_rank, 1);
  EXPECT_EQ(r.layout.master_addr, "b");

  // Inside srun, the step's nodes win over the job's.
  env = {{"SLURM_JOB_ID", "5"}, {"SLURM_JOB_NUM_NODES", "8"}, {"SLURM_STEP_NUM_NODES", "2"},
         {"SLURM_NODEID", "0"}, {"SLURM_JOB_NODELIST", "n[1-8]"}, {"SLURM_STEP_NODELIST", "n[3-4]"},
         {"SLURM_STEP_ID", "0"}};
  r = layout_of({}, env);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nnodes, 2);
  EXPECT_EQ(r.layout.master_addr, "n3");
  EXPECT_EQ(r.layout.run_id, "slurm-5.0");
}

TEST(LaunchLayout, CommandLineOverridesSlurm) {
  Environment env{{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NUM_NODES", "4"}, {"SLURM_NODEID", "3"},
                  {"SLURM_JOB_NODELIST", "gpu[1-4]"}};
  LayoutResult r = layout_of({"--nnodes", "2", "--node-rank", "0", "--master-addr", "me"}, env);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nnodes, 2);
  EXPECT_EQ(r.layout.node_rank, 0);
  EXPECT_EQ(r.layout.master_addr, "me");
  EXPECT_TRUE(r.layout.notes.empty());

  // --standalone ignores the allocation altogether.
  r = layout_of({"--standalone"}, env);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nnodes, 1);
  EXPECT_EQ(r.layout.master_addr, "127.0.0.1");
  EXPECT_EQ(r.layout.master_port, 0);
}

// What `srun --ntasks-per-node=1 ddp-launch --nproc gpu ...` (scripts/slurm/train.sbatch)
// gives the launcher on the second node of a two-node allocation with 4 GPUs a node.
TEST(LaunchLayout, SecondNodeOfATwoNodeSlurmAllocationUnderSrun) {
  const Environment env{{"SLURM_JOB_ID", "4242"},        {"SLURM_JOB_NODELIST", "node[01-02]"},
                        {"SLURM_NNODES", "2"},           {"SLURM_JOB_NUM_NODES", "2"},
                        {"SLURM_NODEID", "1"},           {"SLURM_PROCID", "1"},
                        {"SLURM_NTASKS", "2"},           {"SLURM_LOCALID", "0"},
                        {"SLURM_NTASKS_PER_NODE", "1"},  {"SLURM_STEP_ID", "0"},
                        {"SLURM_STEP_NUM_NODES", "2"},   {"SLURM_STEP_NODELIST", "node[01-02]"},
                        {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  LayoutResult r = layout_of({"--nproc", "gpu", "--master-port", "14242"}, env, /*gpus=*/4);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nproc, 4);
  EXPECT_EQ(r.layout.nnodes, 2);
  EXPECT_EQ(r.layout.node_rank, 1);
  EXPECT_EQ(r.layout.master_addr, "node01");
  EXPECT_EQ(r.layout.master_port, 14242);
  EXPECT_EQ(r.layout.world_size(), 8);
  EXPECT_EQ(r.layout.run_id, "slurm-4242.0");  // the same on both nodes
  ASSERT_EQ(r.layout.notes.size(), 1u);
  EXPECT_EQ(r.layout.notes[0],
            "SLURM job 4242: 2 nodes (SLURM_STEP_NUM_NODES), node rank 1 (SLURM_NODEID), "
            "master node01 (first host of SLURM_STEP_NODELIST)");

  // The workers: global ranks 4..7, the master of node 0, SLURM's variables passed on.
  for (int local = 0; local < 4; ++local) {
    auto worker = as_map(build_worker_env(env, r.layout, local, 0, 0));
    EXPECT_EQ(worker["RANK"], std::to_string(4 + local));
    EXPECT_EQ(worker["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(worker["WORLD_SIZE"], "8");
    EXPECT_EQ(worker["LOCAL_WORLD_SIZE"], "4");
    EXPECT_EQ(worker["NODE_RANK"], "1");
    EXPECT_EQ(worker["MASTER_ADDR"], "node01");
    EXPECT_EQ(worker["MASTER_PORT"], "14242");
    EXPECT_EQ(worker["SLURM_PROCID"], "1");
  }

  // The first node derives the same job and is the master node.
  Environment first = env;
  first["SLURM_NODEID"] = "0";
  first["SLURM_PROCID"] = "0";
  LayoutResult r0 = layout_of({"--nproc", "gpu", "--master-port", "14242"}, first, 4);
  ASSERT_TRUE(r0.ok) << r0.error;
  EXPECT_EQ(r0.layout.node_rank, 0);
  EXPECT_TRUE(r0.layout.is_master_node());
  EXPECT_FALSE(r.layout.is_master_node());
  EXPECT_EQ(r0.layout.master_addr, r.layout.master_addr);
  EXPECT_EQ(r0.layout.run_id, r.layout.run_id);
}

TEST(LaunchLayout, ErrorsInsideSlurm) {
  LayoutResult r = layout_of({}, {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NUM_NODES", "2"}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("SLURM_NODEID is unset"), std::string::npos) << r.error;

  r = layout_of({}, {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "gpu[1-"}});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("malformed SLURM node list 'gpu[1-'"), std::string::npos) << r.error;
}

// ---- layout ----

TEST(LaunchLayout, DefaultsOutsideSlurm) {
  LayoutResult r = layout_of({});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nproc, 1);
  EXPECT_EQ(r.layout.nnodes, 1);
  EXPECT_EQ(r.layout.node_rank, 0);
  EXPECT_EQ(r.layout.master_addr, "127.0.0.1");
  EXPECT_EQ(r.layout.master_port, 29500);
  EXPECT_FALSE(r.layout.run_id.empty());
  EXPECT_TRUE(r.layout.is_master_node());
}

TEST(LaunchLayout, StaticRanksAcrossNodes) {
  LayoutResult r = layout_of({"--nproc", "4", "--nnodes", "3", "--node-rank", "2"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.world_size(), 12);
  EXPECT_EQ(r.layout.global_rank(0), 8);
  EXPECT_EQ(r.layout.global_rank(3), 11);
  EXPECT_FALSE(r.layout.is_master_node());
}

TEST(LaunchLayout, RejectsImpossibleLayouts) {
  LayoutResult r = layout_of({"--nnodes", "2", "--node-rank", "2"});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "--node-rank 2 must be less than --nnodes 2");

  r = layout_of({"--nnodes", "2", "--master-port", "0"});
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("--master-port 0 (pick a free port) needs a single node"), std::string::npos);

  r = layout_of({"--nproc", "3", "--devices", "0,1"});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "--nproc 3 needs 3 devices but --devices lists 2");

  r = layout_of({"--nproc", "gpu"}, {}, 0);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.error.find("--nproc gpu: no GPU is visible"), std::string::npos);
}

TEST(LaunchLayout, NprocGpuAndDevices) {
  LayoutResult r = layout_of({"--nproc", "gpu"}, {}, 3);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nproc, 3);
  EXPECT_TRUE(r.layout.devices.empty());

  r = layout_of({"--nproc", "gpu", "--devices", "2,5"}, {}, 8);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.nproc, 2);
  EXPECT_EQ(r.layout.devices, (std::vector<std::string>{"2", "5"}));

  // Fewer workers than devices: the first ones are used.
  r = layout_of({"--nproc", "1", "--devices", "4,6"});
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.layout.devices, (std::vector<std::string>{"4"}));
}

TEST(LaunchLayout, CountsVisibleGpusWithoutCuda) {
  TempDir dir;
  std::string gpus = dir / "gpus";
  mkdir(gpus.c_str(), 0755);
  EXPECT_EQ(count_visible_gpus({}, gpus), 0);
  for (const char* bus : {"0000:01:00.0", "0000:41:00.0"}) mkdir((gpus + "/" + bus).c_str(), 0755);
  EXPECT_EQ(count_visible_gpus({}, gpus), 2);
  EXPECT_EQ(count_visible_gpus({}, dir / "missing"), 0);
  // CUDA_VISIBLE_DEVICES wins when set, read as CUDA reads it.
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "0,3,5"}}, gpus), 3);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", ""}}, gpus), 0);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "-1"}}, gpus), 0);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "1,-1,2"}}, gpus), 1);
  EXPECT_EQ(count_visible_gpus({{"CUDA_VISIBLE_DEVICES", "GPU-8f3a,GPU-11aa"}}, gpus), 2);
}

// ---- worker environment ----

TEST(LaunchLayout, WorkerEnvironmentHasTorchrunNames) {
  LayoutResult r = layout_of({"--nproc", "4", "--nnodes", "2", "--node-rank", "1", "--master-addr", "n0",
                              "--master-port", "4242", "--max-restarts", "3", "--run-id", "job7"});
  ASSERT_TRUE(r.ok) << r.error;
  auto env = as_map(build_worker_env({{"PATH", "/bin"}, {"RANK", "99"}}, r.layout, 2, 1, 0));
  std::map<std::string, std::string> expected{
      {"PATH", "/bin"}, {"RANK", "6"}, {"LOCAL_RANK", "2"}, {"WORLD_SIZE", "8"}, {"LOCAL_WORLD_SIZE", "4"},
      {"NODE_RANK", "1"}, {"GROUP_RANK", "1"}, {"GROUP_WORLD_SIZE", "2"}, {"ROLE_RANK", "6"},
      {"ROLE_WORLD_SIZE", "8"}, {"ROLE_NAME", "default"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "4242"},
      {"RESTART_COUNT", "1"}, {"MAX_RESTARTS", "3"}, {"RUN_ID", "job7"},
      {"TORCHELASTIC_RESTART_COUNT", "1"}, {"TORCHELASTIC_MAX_RESTARTS", "3"},
      {"TORCHELASTIC_RUN_ID", "job7"}, {"TORCHELASTIC_USE_AGENT_STORE", "False"}};
  EXPECT_EQ(env, expected);
}

TEST(LaunchLayout, WorkerEnvironmentHasDevicesAndThreads) {
  LayoutResult r = layout_of({"--nproc", "2", "--devices", "3,7"});
  ASSERT_TRUE(r.ok) << r.error;
  auto env = as_map(build_worker_env({{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7"}}, r.layout, 1, 0, 4));
  EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "7");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["OMP_NUM_THREADS"], "4");

  EXPECT_EQ(default_omp_threads({}, 1, 16), 0);                           // one worker: leave it
  EXPECT_EQ(default_omp_threads({{"OMP_NUM_THREADS", "3"}}, 4, 16), 0);  // the user's choice
  EXPECT_EQ(default_omp_threads({}, 4, 16), 4);
  EXPECT_EQ(default_omp_threads({}, 3, 16), 5);
  EXPECT_EQ(default_omp_threads({}, 8, 2), 1);
  EXPECT_GE(usable_cores(), 1);
}

// A single-node job's store file: one name per attempt, inside a directory only this
// user can enter, which disappears with everything in it.
TEST(LaunchLayout, StoreFileIsPrivateAndPerAttempt) {
  LayoutResult r = layout_of({"--nproc", "2"});
  ASSERT_TRUE(r.ok) << r.error;
  std::string dir;
  {
    PrivateDir store;
    std::string error;
    ASSERT_TRUE(store.create({{"TMPDIR", DDP_EMBED_BINARY_DIR}}, &error)) << error;
    dir = store.path();
    EXPECT_EQ(dir.rfind(std::string(DDP_EMBED_BINARY_DIR) + "/ddp-launch-", 0), 0u) << dir;
    struct stat st {};
    ASSERT_EQ(stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);

    auto first = as_map(build_worker_env({}, r.layout, 0, 0, 0, dir + "/store"));
    auto second = as_map(build_worker_env({}, r.layout, 1, 1, 0, dir + "/store"));
    EXPECT_EQ(first["DDP_LAUNCH_STORE_FILE"], dir + "/store.attempt0");
    EXPECT_EQ(second["DDP_LAUNCH_STORE_FILE"], dir + "/store.attempt1");
    std::ofstream(dir + "/store.attempt0") << "keys";
  }
  struct stat st {};
  EXPECT_NE(stat(dir.c_str(), &st), 0) << dir << " is still there";
  // Without a store file (several nodes) the variable is not set at all.
  EXPECT_EQ(as_map(build_worker_env({}, r.layout, 0, 0, 0)).count("DDP_LAUNCH_STORE_FILE"), 0u);
}

TEST(LaunchLayout, WorkerEnvironmentFromEnvp) {
  char a[] = "A=1", b[] = "B=x=y", c[] = "A=2", d[] = "junk";
  char* envp[] = {a, b, c, d, nullptr};
  Environment env = environment_from(envp);
  EXPECT_EQ(env.size(), 2u);
  EXPECT_EQ(env["A"], "1");
  EXPECT_EQ(env["B"], "x=y");
}

// ---- PROGRAM lookup ----

TEST(LaunchLayout, ProgramLookupTriesPathThenBesideTheLauncher) {
  TempDir dir;
  std::string first = dir / "first", second = dir / "second", beside = dir / "beside";
  for (const auto& d : {first, second, beside}) mkdir(d.c_str(), 0755);
  auto make_tool = [](const std::string& path, mode_t mode) {
    testing::write_file(path, "#!/bin/sh\n");
    chmod(path.c_str(), mode);
  };
  make_tool(second + "/tool", 0755);
  make_tool(first + "/tool", 0644);  // not executable: skipped
  make_tool(beside + "/tool", 0755);
  make_tool(beside + "/only-beside", 0755);
  std::string path = first + ":" + second;

  EXPECT_EQ(find_program("tool", path, beside), second + "/tool");
  EXPECT_EQ(find_program("only-beside", path, beside), beside + "/only-beside");
  EXPECT_EQ(find_program("nowhere", path, beside), "");
  EXPECT_EQ(find_program(second + "/tool", "", ""), second + "/tool");
  EXPECT_EQ(find_program(first + "/tool", "", ""), "");  // a path is used as it is
  EXPECT_EQ(find_program("second", dir.path(), ""), "");  // directories do not count
  EXPECT_FALSE(self_exe_dir().empty());
}

// ---- port ----

TEST(LaunchLayout, PortProbeSeesAListenerAndPickFindsAFreePort) {
  int port = pick_free_port();
  ASSERT_GT(port, 0);
  EXPECT_EQ(probe_port(port), PortState::free);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_EQ(probe_port(port), PortState::in_use);
  close(fd);
  EXPECT_EQ(probe_port(port), PortState::free);
}

}  // namespace
}  // namespace ddp_embed::launch
