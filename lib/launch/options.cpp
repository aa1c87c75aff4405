// Command-line parsing for ddp-launch: options (with torchrun's spellings as aliases),
// then PROGRAM and its arguments, untouched. Hand-written rather than CLI11 so that
// options stop at PROGRAM, torchrun's underscores and `--opt=value` both work, and every
// error is one line naming the option.
#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <set>

#include "launch/launcher.h"

namespace ddp_embed::launch {
namespace {

enum class Opt {
  nproc, nnodes, node_rank, master_addr, master_port, max_restarts, log_dir, devices,
  grace, run_id, rdzv_endpoint, standalone, join_timeout, max_membership_changes, local_addr,
  serve_rendezvous, rdzv_secret_file, help, version
};

struct OptionName {
  const char* name;
  Opt opt;
  bool takes_value;
};

// Every accepted spelling. The first spelling of each option is the one --help shows.
constexpr OptionName kOptionNames[] = {
    {"--nproc", Opt::nproc, true},
    {"--nproc-per-node", Opt::nproc, true},
    {"--nproc_per_node", Opt::nproc, true},
    {"--nnodes", Opt::nnodes, true},
    {"--node-rank", Opt::node_rank, true},
    {"--node_rank", Opt::node_rank, true},
    {"--master-addr", Opt::master_addr, true},
    {"--master_addr", Opt::master_addr, true},
    {"--master-port", Opt::master_port, true},
    {"--master_port", Opt::master_port, true},
    {"--max-restarts", Opt::max_restarts, true},
    {"--max_restarts", Opt::max_restarts, true},
    {"--log-dir", Opt::log_dir, true},
    {"--log_dir", Opt::log_dir, true},
    {"--devices", Opt::devices, true},
    {"--grace", Opt::grace, true},
    {"--run-id", Opt::run_id, true},
    {"--run_id", Opt::run_id, true},
    {"--rdzv-id", Opt::run_id, true},
    {"--rdzv_id", Opt::run_id, true},
    {"--rdzv-endpoint", Opt::rdzv_endpoint, true},
    {"--rdzv_endpoint", Opt::rdzv_endpoint, true},
    {"--standalone", Opt::standalone, false},
    {"--join-timeout", Opt::join_timeout, true},
    {"--join_timeout", Opt::join_timeout, true},
    {"--max-membership-changes", Opt::max_membership_changes, true},
    {"--max_membership_changes", Opt::max_membership_changes, true},
    {"--local-addr", Opt::local_addr, true},
    {"--local_addr", Opt::local_addr, true},
    {"--serve-rendezvous", Opt::serve_rendezvous, true},
    {"--rdzv-secret-file", Opt::rdzv_secret_file, true},
    {"--rdzv_secret_file", Opt::rdzv_secret_file, true},
    {"--help", Opt::help, false},
    {"-h", Opt::help, false},
    {"--version", Opt::version, false},
};

const OptionName* find_option(const std::string& name) {
  for (const auto& o : kOptionNames)
    if (name == o.name) return &o;
  return nullptr;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The accepted spelling closest to a mistyped one, if it is close enough to be a typo.
std::string closest_option(const std::string& typed) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& o : kOptionNames) {
    if (std::string(o.name).size() <= 2) continue;  // "-h" is no useful guess for "-n"
    size_t d = edit_distance(typed, o.name);
    if (d < best_distance) best_distance = d, best = o.name;
  }
  size_t limit = typed.size() > 10 ? 3 : 2;
  return best_distance <= limit ? best : std::string();
}

// Strict integer parsing: digits only, no sign, no spaces, no overflow.
bool parse_int(const std::string& text, long min_value, long max_value, int* out) {
  if (text.empty() || text.size() > 10) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  long value = std::strtol(text.c_str(), nullptr, 10);
  if (value < min_value || value > max_value) return false;
  *out = static_cast<int>(value);
  return true;
}

bool parse_seconds(const std::string& text, double* out) {
  if (text.empty()) return false;
  for (char c : text)
    if (!((c >= '0' && c <= '9') || c == '.')) return false;
  char* end = nullptr;
  errno = 0;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size() || value < 0 || value > 1e7)
    return false;
  *out = value;
  return true;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    parts.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// Applies one option's value; returns an error line or "".
std::string apply_option(Opt opt, const std::string& spelled, const std::string& value,
                         LaunchOptions& o) {
  auto got = [&](const char* expected) {
    return spelled + ": expected " + expected + ", got '" + value + "'";
  };
  int number = 0;
  switch (opt) {
    case Opt::nproc:
      if (value == "gpu") {
        o.nproc_per_gpu = true;
        o.nproc.reset();
        return "";
      }
      if (!parse_int(value, 1, 65536, &number))
        return got("a positive integer or 'gpu'");
      o.nproc = number;
      o.nproc_per_gpu = false;
      return "";
    case Opt::nnodes: {
      // N, or torchrun's MIN:MAX (an elastic job with --rdzv-endpoint; N:N alone means N).
      size_t colon = value.find(':');
      if (colon == std::string::npos) {
        if (!parse_int(value, 1, 1 << 20, &number)) return got("a positive integer or MIN:MAX");
        o.nnodes = number;
        o.min_nnodes.reset();
        o.max_nnodes.reset();
        return "";
      }
      int low = 0, high = 0;
      if (!parse_int(value.substr(0, colon), 1, 1 << 20, &low) ||
          !parse_int(value.substr(colon + 1), 1, 1 << 20, &high))
        return got("a positive integer or MIN:MAX");
      if (low > high) return spelled + ": MIN must not exceed MAX, got '" + value + "'";
      o.nnodes.reset();
      o.min_nnodes = low;
      o.max_nnodes = high;
      return "";
    }
    case Opt::node_rank:
      if (!parse_int(value, 0, 1 << 20, &number)) return got("a non-negative integer");
      o.node_rank = number;
      return "";
    case Opt::master_addr:
      if (value.empty()) return got("a host name or address");
      o.master_addr = value;
      return "";
    case Opt::master_port:
      if (!parse_int(value, 0, 65535, &number)) return got("a port number 0-65535");
      o.master_port = number;
      return "";
    case Opt::max_restarts:
      if (!parse_int(value, 0, 1000000, &number)) return got("a non-negative integer");
      o.max_restarts = number;
      return "";
    case Opt::log_dir:
      if (value.empty()) return got("a directory");
      o.log_dir = value;
      return "";
    case Opt::devices: {
      std::vector<std::string> devices = split_commas(value);
      std::set<std::string> seen;
      for (const auto& d : devices)
        if (d.empty() || d.find_first_of(" \t=") != std::string::npos || !seen.insert(d).second)
          return got("a comma-separated list of distinct device ids like 0,2,3");
      o.devices = devices;
      return "";
    }
    case Opt::grace:
      if (!parse_seconds(value, &o.grace_seconds))
        return got("a non-negative number of seconds");
      return "";
    case Opt::run_id:
      if (value.empty()) return got("a non-empty id");
      o.run_id = value;
      return "";
    case Opt::rdzv_endpoint: {
      // HOST[:PORT], as torchrun writes it.
      size_t colon = value.rfind(':');
      std::string host = colon == std::string::npos ? value : value.substr(0, colon);
      if (host.size() > 2 && host.front() == '[' && host.back() == ']')  // [::1]:29500
        host = host.substr(1, host.size() - 2);
      else if (colon != std::string::npos && host.find(':') != std::string::npos)
        return got("HOST[:PORT], with an IPv6 address in brackets");
      if (host.empty()) return got("HOST[:PORT]");
      o.rdzv_port.reset();
      if (colon != std::string::npos) {
        if (!parse_int(value.substr(colon + 1), 0, 65535, &number)) return got("HOST[:PORT]");
        o.rdzv_port = number;
      }
      o.rdzv_host = host;
      return "";
    }
    case Opt::join_timeout:
      if (!parse_seconds(value, &o.join_timeout_s)) return got("a non-negative number of seconds");
      return "";
    case Opt::max_membership_changes:
      if (!parse_int(value, 0, 1000000, &number)) return got("a non-negative integer");
      o.max_membership_changes = number;
      return "";
    case Opt::local_addr:
      if (value.empty()) return got("a host name or address");
      o.local_addr = value;
      return "";
    case Opt::serve_rendezvous:
      if (!parse_int(value, 1, 65535, &number)) return got("a port number 1-65535");
      o.serve_rendezvous = number;
      return "";
    case Opt::rdzv_secret_file:
      if (value.empty()) return got("a file name");
      o.rdzv_secret_file = value;
      return "";
    case Opt::standalone:
    case Opt::help:
    case Opt::version:
      break;
  }
  return "";
}

}  // namespace

ParseResult parse_command_line(const std::vector<std::string>& args) {
  ParseResult result;
  LaunchOptions& o = result.options;
  auto fail = [&](std::string message) {
    result.outcome = ParseOutcome::error;
    result.error = std::move(message);
    return result;
  };

  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // PROGRAM: options end here

    size_t eq = arg.find('=');
    std::string name = arg.substr(0, eq);
    const OptionName* option = find_option(name);
    if (!option) {
      std::string hint = closest_option(name);
      return fail("unknown option " + name +
                  (hint.empty() ? std::string(" (see ddp-launch --help)")
                                : " (did you mean " + hint + "?)"));
    }
    if (!option->takes_value) {
      if (eq != std::string::npos) return fail(name + " takes no value");
      if (option->opt == Opt::help) {
        result.outcome = ParseOutcome::help;
        return result;
      }
      if (option->opt == Opt::version) {
        result.outcome = ParseOutcome::version;
        return result;
      }
      o.standalone = true;
      continue;
    }
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) return fail(name + ": missing value");
      value = args[++i];
    }
    std::string error = apply_option(option->opt, name, value, o);
    if (!error.empty()) return fail(error);
  }

  if (o.serve_rendezvous) {
    if (i < args.size())
      return fail("--serve-rendezvous runs the rendezvous server alone and takes no PROGRAM (got '" + args[i] +
                  "'); start the training nodes with --rdzv-endpoint THIS_HOST:" + std::to_string(*o.serve_rendezvous));
    // The job's settings are the server's own, never a joining node's.
    if (o.nnodes) o.min_nnodes = o.max_nnodes = o.nnodes;
    if (!o.min_nnodes)
      return fail("--serve-rendezvous needs the job's --nnodes MIN:MAX (with its --join-timeout, "
                  "--max-membership-changes, --run-id and --grace if the nodes give them): the server takes the "
                  "job's settings from its own command line, never from a node that joins");
    result.outcome = ParseOutcome::run;
    return result;
  }
  // The elastic form's parts that only make sense together.
  if (o.min_nnodes && *o.min_nnodes < *o.max_nnodes && !o.rdzv_host)
    return fail("--nnodes " + std::to_string(*o.min_nnodes) + ":" + std::to_string(*o.max_nnodes) +
                " (an elastic job) needs --rdzv-endpoint HOST:PORT, the rendezvous server every node reaches");
  if (o.min_nnodes && (!o.rdzv_host || (*o.min_nnodes == *o.max_nnodes && !o.rdzv_port))) {  // N:N: N, as before
    o.nnodes = o.min_nnodes;
    o.min_nnodes.reset();
    o.max_nnodes.reset();
  }
  if (o.elastic()) {
    if (!o.rdzv_port || *o.rdzv_port == 0)
      return fail("--rdzv-endpoint " + *o.rdzv_host + ": an elastic job needs the port too (HOST:PORT, 1-65535)");
    if (o.master_addr)
      return fail("--master-addr: in an elastic job the rendezvous assigns node 0, whose address the workers "
                  "use; leave it out (--local-addr says how other nodes reach this one)");
    if (o.standalone) return fail("--standalone: one node alone cannot be an elastic job (--nnodes MIN:MAX)");
  }
  if (i >= args.size())
    return fail("missing PROGRAM (usage: ddp-launch [options] [--] PROGRAM [ARGS...]; "
                "see ddp-launch --help)");
  o.program = args[i];
  if (o.program.empty()) return fail("PROGRAM is an empty string");
  o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  result.outcome = ParseOutcome::run;
  return result;
}

namespace {

// The manual, in two parts (a raw string each): what ddp-launch does, then its options,
// environment, exit statuses and examples.
constexpr const char kHelpDescription[] = R"(NAME
    ddp-launch - start and supervise the workers of a data-parallel job

SYNOPSIS
    ddp-launch [options] [--] PROGRAM [ARGS...]
    ddp-launch --nnodes MIN:MAX --rdzv-endpoint HOST:PORT [options] PROGRAM [ARGS...]
    ddp-launch --serve-rendezvous PORT --nnodes MIN:MAX [--rdzv-secret-file FILE]

DESCRIPTION
    Starts --nproc copies of PROGRAM on this node, each with the environment of one
    rank of the job (see ENVIRONMENT), and supervises them:

    - Every line a worker prints is shown prefixed with "[rank R] " (stdout lines on
      stdout, stderr lines on stderr); lines are never split or interleaved. With
      --log-dir each worker's raw output also goes to DIR/attempt<A>/rank<R>.log.
    - Fail fast: when a worker exits non-zero or is killed by a signal, the others get
      SIGTERM (to their whole process group), then SIGKILL after --grace seconds. A
      report names the failed rank, its exit code or signal and its last 20 lines;
      with --log-dir also DIR/attempt<A>/failure.json. With restarts left, the whole
      group is started again instead, with RESTART_COUNT one higher. Restarts are
      per node: on several nodes each launcher restarts its own group (a failure on
      one node makes the others' collectives fail too, so they follow).
    - SIGINT, SIGTERM and SIGHUP reach every worker's process group, and no restart
      follows; the launcher waits up to --grace seconds, then sends SIGKILL. A second
      SIGINT (Ctrl-C) or SIGTERM kills at once. SIGUSR1 and SIGUSR2 are forwarded as
      they are. SIGINT and SIGHUP stay ignored when ddp-launch starts with them
      ignored (a background job of a script, nohup).
    - Workers die with the launcher, even when it is killed with SIGKILL: each worker
      has PR_SET_PDEATHSIG, and a small guard process kills the workers' process
      groups (their children included) when the launcher is gone.
    - Workers read stdin from /dev/null.

    Options end at the first argument that is not an option, so ARGS (for example
    "--config cfg.json") always belong to PROGRAM. PROGRAM is looked up on PATH, then
    beside ddp-launch itself.

ELASTIC JOBS
    With --nnodes MIN:MAX and --rdzv-endpoint HOST:PORT, machines may come and go.
    The launcher on the machine HOST names (the one whose bind of PORT on every
    interface succeeds) serves a rendezvous there; every launcher keeps a connection
    to it, with a heartbeat a second. The job runs in rounds: a round starts when MAX
    nodes have joined, or MIN and --join-timeout seconds have passed; node ranks are
    assigned there (--node-rank is a preference), node 0's launcher picks the port of
    the workers' store, and RESTART_COUNT is the round.
    - A node lost (its connection closes, or is silent for 5 s): the others stop
      their workers at once (SIGTERM, SIGKILL after --grace) and start the next round
      without it; the workers resume from the last checkpoint at the new world size.
    - A node arriving while a round runs: the workers get SIGUSR2 (finish the step,
      checkpoint, exit 75) and the next round includes it (at MAX it waits).
    - SIGINT/SIGTERM/SIGHUP: this node leaves the same way; a second one kills.
      A launcher that serves the rendezvous stays, serving, until the job ends.
    - Fewer than MIN nodes after --join-timeout, or more than
      --max-membership-changes changes: every launcher says who is there and who
      is missing, and exits 1. The rendezvous' machine lost: every launcher says
      the server is gone and exits 1 (ddp-launch --serve-rendezvous PORT on a
      machine that trains nothing avoids that).
    - --max-restarts counts the failures charged to this node (a worker crashed
      here, no node lost); a node out of restarts leaves, the others go on.

)";

constexpr const char kHelpReference[] = R"(OPTIONS
    --nproc N|gpu          workers on this node; "gpu" = one per visible GPU
                           (CUDA_VISIBLE_DEVICES, else /proc/driver/nvidia/gpus).
                           Also --nproc-per-node, --nproc_per_node. Default 1.
    --nnodes N             nodes in the job. Default 1, or SLURM's node count.
    --nnodes MIN:MAX       an elastic job (with --rdzv-endpoint HOST:PORT); N:N
                           without an endpoint means N.
    --node-rank R          this node's index, 0..N-1. Default 0, or SLURM_NODEID.
                           Elastic: the rank it prefers.
    --master-addr HOST     host of rank 0's rendezvous store. Default 127.0.0.1, or
                           the first host of SLURM_JOB_NODELIST.
    --master-port P        rendezvous port; 0 picks a free one (single node only).
                           Default 29500. On the master node the port must be free.
                           Elastic: the workers' store port on node 0 (default: a
                           free one, picked at each round).
    --max-restarts K       restart the whole worker group up to K times. Default 0.
                           Elastic: the failures charged to this node.
    --log-dir DIR          also write each worker's output to
                           DIR/attempt<A>/rank<R>.log (elastic: A is the round).
    --devices LIST         CUDA devices this node may use, e.g. 0,2,3: local rank i
                           gets CUDA_VISIBLE_DEVICES=LIST[i] (so it sees one GPU, as
                           cuda:0). With --nproc gpu, one worker per entry.
    --grace S              seconds between SIGTERM and SIGKILL. Default 10.
    --run-id ID            RUN_ID for the workers. Default: slurm-JOBID inside SLURM,
                           else a fresh id. Also --rdzv-id.
    --rdzv-endpoint H[:P]  fixed membership: torchrun's spelling of --master-addr H
                           --master-port P. Elastic: the rendezvous server.
    --join-timeout S       elastic: how long a round waits for MAX nodes once it
                           has MIN (and for the server to answer). Default 30.
    --max-membership-changes K
                           elastic: end the job after K rounds whose nodes changed.
                           Default 20.
    --local-addr A         elastic: the address other nodes reach this one at
                           (default: the one the rendezvous server sees).
    --serve-rendezvous P   serve an elastic job's rendezvous on port P and nothing
                           else, until the job ends (a machine that trains nothing).
                           The job's --nnodes (and --join-timeout, --grace,
                           --max-membership-changes, --run-id) are the server's own.
    --rdzv-secret-file F   elastic: the job secret (at least 16 bytes, mode 600, the
                           same file on every node and the server); a launcher joins
                           only by proving it. Without one, anyone who reaches the
                           port can join. Also DDP_LAUNCH_SECRET_FILE.
    --standalone           one node on its own: --nnodes 1, 127.0.0.1, a free port
                           unless --master-port is given.
    -h, --help             show this text.
    --version              show the version.
    torchrun spellings with underscores (--nproc_per_node, --master_addr,
    --master_port, --node_rank, --max_restarts, --log_dir, --rdzv_id) and the
    --option=value form are accepted.

ENVIRONMENT
    Given to every worker (the names torchrun uses, so torchrun-style programs run
    unchanged):
    RANK, LOCAL_RANK        global rank (node_rank*nproc + local rank), local index
    WORLD_SIZE              nnodes*nproc
    LOCAL_WORLD_SIZE        nproc
    NODE_RANK, GROUP_RANK   this node's index
    GROUP_WORLD_SIZE        nnodes
    ROLE_RANK, ROLE_WORLD_SIZE, ROLE_NAME=default
    MASTER_ADDR, MASTER_PORT
    RESTART_COUNT, MAX_RESTARTS, RUN_ID  and their TORCHELASTIC_ twins
    TORCHELASTIC_USE_AGENT_STORE=False  (rank 0 hosts the store)
    CUDA_VISIBLE_DEVICES    only with --devices: the worker's one device
    OMP_NUM_THREADS         when unset and nproc > 1: max(1, cores / nproc)
    DDP_LAUNCH_STORE_FILE   single node only: a file in a private directory (mode
                            0700, removed at exit) that workers may rendezvous
                            through instead of a TCP port (embed-train does)
    DDP_LAUNCH_MIN_NNODES, DDP_LAUNCH_MAX_NNODES
                            elastic only: MIN and MAX of --nnodes
    DDP_LAUNCH_MEMBERSHIP   elastic only, after a change: JSON {"round", "nodes",
                            "previous_nodes", "text", "detail", "lost", "left",
                            "joined"}

    Read by ddp-launch inside a SLURM allocation (SLURM_JOB_ID set), unless the
    command line says otherwise: SLURM_STEP_NUM_NODES, SLURM_JOB_NUM_NODES or
    SLURM_NNODES (nodes), SLURM_NODEID (node rank), SLURM_STEP_NODELIST,
    SLURM_JOB_NODELIST or SLURM_NODELIST (first host = master).
    Also read: DDP_LAUNCH_SECRET_FILE (elastic: --rdzv-secret-file when not given).

EXIT STATUS
    0      every worker exited 0 (also after a forwarded SIGTERM they obeyed).
           After SIGINT/SIGTERM/SIGHUP: the first non-zero worker status, if any.
    N      the failed worker's exit code; 128+N when signal N killed it.
    1      the launcher could not run the job (port in use, fork failed, ...); an
           elastic job ended (fewer than MIN nodes, the rendezvous gone, ...).
    2      bad command line, or PROGRAM not found.

EXAMPLES
    ddp-launch --nproc 4 embed-train --config cfg.json
    ddp-launch --nproc gpu --max-restarts 3 --log-dir runs/logs embed-train --config cfg.json
    ddp-launch --devices 0,2 --nproc gpu embed-train --config cfg.json

    Two nodes by hand (run one line on each):
    ddp-launch --nnodes 2 --node-rank 0 --master-addr node0 --nproc 8 embed-train ...
    ddp-launch --nnodes 2 --node-rank 1 --master-addr node0 --nproc 8 embed-train ...

    SLURM, one launcher per node (nodes, node rank and master come from SLURM):
    #SBATCH --nodes=4 --ntasks-per-node=1 --gpus-per-node=8
    srun ddp-launch --nproc gpu embed-train --config cfg.json

    Elastic, 2 to 4 nodes (the same line on each; node0's launcher serves):
    ddp-launch --nnodes 2:4 --rdzv-endpoint node0:29400 --nproc gpu embed-train ...
)";

}  // namespace

std::string help_text() { return std::string(kHelpDescription) + kHelpReference; }

}  // namespace ddp_embed::launch
