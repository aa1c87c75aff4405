// ddp-launch: starts one worker process per device, supervises them, and stops them
// all together (docs/cli.md, "ddp-launch": the options, the environment the workers get,
// restarts; docs/distributed.md: several machines, elastic jobs; `ddp-launch --help` is
// the full manual).
//
// What this header offers:
//   - run_launcher(): the whole program behind `ddp-launch ARGS...` (apps/ddp_launch
//     is a thin main around it): a job of fixed membership (supervisor.h), an elastic
//     one, --nnodes MIN:MAX (elastic_agent.h), or the elastic rendezvous alone,
//     --serve-rendezvous (rendezvous_server.h).
//   - The pure pieces it is built from, each testable without starting a process:
//     command-line parsing, the job layout (SLURM and GPU discovery folded in; SLURM's
//     host lists are expanded by util/slurm_nodelist.h), the worker environment, the
//     PROGRAM lookup, and the port probe.
//
// The launcher never includes LibTorch or CUDA: it must start in milliseconds and run
// any program.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace ddp_embed::launch {

// Keep in step with project(VERSION) in the top CMakeLists.txt.
inline constexpr const char* kLaunchVersion = "0.1.0";

// Exit statuses of the launcher itself (a worker's failure exits with its own code).
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  // port in use, fork failed, ...
inline constexpr int kExitUsage = 2;         // bad option, PROGRAM not found

// An elastic job's defaults (--nnodes MIN:MAX; docs/distributed.md).
inline constexpr double kDefaultJoinTimeoutSeconds = 30;
inline constexpr int kDefaultMaxMembershipChanges = 20;

// ---- command line ----------------------------------------------------------------------

// What the command line said. Unset optionals mean "not given": the layout step fills
// them from SLURM or the defaults.
struct LaunchOptions {
  std::optional<int> nproc;          // --nproc N
  bool nproc_per_gpu = false;        // --nproc gpu
  std::optional<int> nnodes;         // --nnodes N (also N:N)
  // --nnodes MIN:MAX with --rdzv-endpoint: an elastic job (both set, MIN <= MAX).
  std::optional<int> min_nnodes, max_nnodes;
  std::optional<int> node_rank;      // --node-rank R (elastic: a preference)
  std::optional<std::string> master_addr;
  std::optional<int> master_port;    // 0 = pick a free port
  // --rdzv-endpoint HOST[:PORT]: the master's address and port for a job of fixed
  // membership (when --master-addr/--master-port do not say otherwise); for an elastic
  // job, the rendezvous server's.
  std::optional<std::string> rdzv_host;
  std::optional<int> rdzv_port;
  double join_timeout_s = kDefaultJoinTimeoutSeconds;        // --join-timeout S
  int max_membership_changes = kDefaultMaxMembershipChanges;  // --max-membership-changes K
  std::optional<std::string> local_addr;  // --local-addr: how other nodes reach this one
  std::optional<int> serve_rendezvous;    // --serve-rendezvous PORT: the server alone, no PROGRAM
  // --rdzv-secret-file FILE (else $DDP_LAUNCH_SECRET_FILE): the elastic job's secret
  // (job_secret.h), the same file on every node and on the server.
  std::optional<std::string> rdzv_secret_file;
  int max_restarts = 0;
  std::string log_dir;               // empty = no log files
  std::vector<std::string> devices;  // --devices 0,2,3 (empty = not given)
  double grace_seconds = 10.0;
  std::optional<std::string> run_id;
  bool standalone = false;           // torchrun's --standalone: one node, free port

  std::string program;               // PROGRAM as typed ("" with --serve-rendezvous)
  std::vector<std::string> program_args;

  bool elastic() const { return min_nnodes.has_value(); }
};

enum class ParseOutcome { run, help, version, error };

struct ParseResult {
  ParseOutcome outcome = ParseOutcome::error;
  LaunchOptions options;
  std::string error;  // one line, without the "ddp-launch: " prefix
};

// Parses the arguments after argv[0]. Options stop at the first argument that is not
// an option (PROGRAM) or after "--"; everything from PROGRAM on belongs to PROGRAM.
ParseResult parse_command_line(const std::vector<std::string>& args);

// The --help text, written like a man page.
std::string help_text();

// ---- job layout --------------------------------------------------------------------------

using Environment = std::map<std::string, std::string>;

// Every concrete number the workers need: what the command line said, else what SLURM
// says, else the defaults.
struct JobLayout {
  int nproc = 1;         // workers on this node
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;  // 0 until the launcher picks a free one
  std::vector<std::string> devices;  // one per local rank when --devices was given
  int max_restarts = 0;
  double grace_seconds = 10.0;
  std::string log_dir;
  std::string run_id;
  std::vector<std::string> notes;  // one-line remarks for stderr (e.g. "from SLURM")

  int world_size() const { return nnodes * nproc; }
  int global_rank(int local_rank) const { return node_rank * nproc + local_rank; }
  // The node that hosts the rendezvous store, and so must have the port free.
  bool is_master_node() const { return nnodes == 1 || node_rank == 0; }
};

struct LayoutResult {
  bool ok = false;
  JobLayout layout;
  std::string error;  // one line, without the "ddp-launch: " prefix
};

// Folds the options, the environment (SLURM_*, CUDA_VISIBLE_DEVICES) and the GPU count
// into a layout. `count_gpus` is only called for `--nproc gpu` without --devices.
LayoutResult resolve_layout(const LaunchOptions& options, const Environment& env,
                            const std::function<int()>& count_gpus);

// GPUs this process may use, without linking CUDA: the entries of CUDA_VISIBLE_DEVICES
// when it is set, else the entries of /proc/driver/nvidia/gpus (`proc_gpus_dir`).
int count_visible_gpus(const Environment& env,
                       const std::string& proc_gpus_dir = "/proc/driver/nvidia/gpus");

// ---- worker environment ----------------------------------------------------------------

// OMP_NUM_THREADS to give each worker: 0 (leave it alone) when the user set it or there
// is one worker, else max(1, cores / nproc).
int default_omp_threads(const Environment& env, int nproc, int cores);

// CPUs this process may run on (its affinity mask), at least 1.
int usable_cores();

// The environment of local worker `local_rank`: `base` plus RANK, LOCAL_RANK,
// WORLD_SIZE, ... (see --help, ENVIRONMENT). `omp_threads` > 0 sets OMP_NUM_THREADS.
// A non-empty `store_file` is given as DDP_LAUNCH_STORE_FILE: the file that a
// single-node job's workers may rendezvous through instead of a TCP port.
// Returned as "NAME=value" strings, sorted by name.
std::vector<std::string> build_worker_env(const Environment& base, const JobLayout& layout,
                                          int local_rank, int restart_count,
                                          int omp_threads, const std::string& store_file = "");

// A directory only this user can enter (mode 0700), made under $TMPDIR (else /tmp) and
// removed with everything in it when the object goes away. It holds the rendezvous
// files of a single-node job, so that no port is opened and no other user can join.
class PrivateDir {
 public:
  PrivateDir() = default;
  PrivateDir(const PrivateDir&) = delete;
  PrivateDir& operator=(const PrivateDir&) = delete;
  ~PrivateDir();
  // Makes the directory; false (with *error) when that fails.
  bool create(const Environment& env, std::string* error);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

Environment environment_from(char** envp);

// ---- PROGRAM lookup --------------------------------------------------------------------

// The file to execute for `program`: a name with a '/' is used as it is; otherwise the
// first executable match in `path_env` (PATH's directories), then in `self_dir` (where
// ddp-launch itself lives). Empty when nothing executable is found.
std::string find_program(const std::string& program, const std::string& path_env,
                         const std::string& self_dir);

// The directory holding the running executable (/proc/self/exe), or "".
std::string self_exe_dir();

// ---- rendezvous address and port --------------------------------------------------------

// Whether `host` resolves on this node (getaddrinfo); else `error` says why.
bool address_resolves(const std::string& host, std::string* error);

enum class PortState { free, in_use, error };

// Whether a TCP listener could bind `port` on all addresses right now. Binds with
// SO_REUSEADDR, as c10d's TCPStore does, so that connections left in TIME_WAIT by a
// previous run do not count as "in use" (they would not stop the store either), and
// closes at once without listening, so the probe itself leaves nothing behind.
PortState probe_port(int port, std::string* error = nullptr);

// A port that was free a moment ago (bind port 0, read it back, close), or 0 on error.
int pick_free_port(std::string* error = nullptr);

// A socket listening on every interface at `port` (IPv6 dual-stack, else IPv4), as rank
// 0's store listens; close-on-exec. -1 with errno set (EADDRINUSE: someone serves it).
int listen_on_port(int port);

// ---- the program -----------------------------------------------------------------------

// Runs `ddp-launch args...` (args exclude argv[0]); returns the exit status. Writes the
// workers' output and its own messages to stdout/stderr.
int run_launcher(const std::vector<std::string>& args, char** envp);

}  // namespace ddp_embed::launch
