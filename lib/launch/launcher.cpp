// run_launcher(): parse, lay out the job, find PROGRAM, check the master address and port, then hand over
// to the supervisor (or, for --nnodes MIN:MAX, to the elastic agent; for --serve-rendezvous, to the
// rendezvous server alone). Every early error is one line on stderr.
#include <fcntl.h>
#include <unistd.h>

#include <climits>

#include "launch/elastic_agent.h"
#include "launch/job_secret.h"
#include "launch/launcher.h"
#include "launch/output_mux.h"
#include "launch/rendezvous_server.h"
#include "launch/signal_relay.h"
#include "launch/supervisor.h"

namespace ddp_embed::launch {
namespace {

int fail(int status, const std::string& message) {
  write_whole(2, "ddp-launch: " + message + "\n");
  return status;
}

// A launcher started with stdin/stdout/stderr closed would otherwise hand those
// numbers to its pipes, and dup2() onto them in the worker would misbehave.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace

int run_launcher(const std::vector<std::string>& args, char** envp) {
  ensure_standard_fds();
  ParseResult parsed = parse_command_line(args);
  switch (parsed.outcome) {
    case ParseOutcome::help:
      write_whole(1, help_text());
      return kExitOk;
    case ParseOutcome::version:
      write_whole(1, std::string("ddp-launch ") + kLaunchVersion + "\n");
      return kExitOk;
    case ParseOutcome::error:
      return fail(kExitUsage, parsed.error);
    case ParseOutcome::run:
      break;
  }
  const LaunchOptions& options = parsed.options;
  LaunchPlan plan;
  plan.base_env = environment_from(envp);
  std::string secret, error;
  if ((options.serve_rendezvous || options.elastic()) && !job_secret_of(options, plan.base_env, &secret, &error))
    return fail(kExitUsage, error);
  if (options.serve_rendezvous) return serve_rendezvous_alone(options, secret);

  LayoutResult layout = resolve_layout(options, plan.base_env,
                                       [&] { return count_visible_gpus(plan.base_env); });
  if (!layout.ok) return fail(kExitUsage, layout.error);
  plan.layout = layout.layout;

  auto path = plan.base_env.find("PATH");
  std::string self_dir = self_exe_dir();
  plan.program_path = find_program(options.program,
                                   path != plan.base_env.end() ? path->second : "/usr/local/bin:/usr/bin:/bin",
                                   self_dir);
  if (plan.program_path.empty()) {
    if (options.program.find('/') != std::string::npos)
      return fail(kExitUsage, options.program + ": no such executable file");
    return fail(kExitUsage, options.program + ": program not found on PATH or beside ddp-launch (" +
                                (self_dir.empty() ? "?" : self_dir) + ")");
  }
  plan.argv.push_back(options.program);
  plan.argv.insert(plan.argv.end(), options.program_args.begin(), options.program_args.end());

  JobLayout& job = plan.layout;
  if (options.elastic()) {
    // The master is assigned at each rendezvous round; the endpoint is what must resolve.
    if (!address_resolves(*options.rdzv_host, &error))
      return fail(kExitRuntimeError, "the rendezvous endpoint " + *options.rdzv_host + " does not resolve on this node (" +
                                         error + "); check --rdzv-endpoint");
    for (const auto& note : job.notes) write_whole(2, "ddp-launch: " + note + "\n");
    plan.omp_threads = default_omp_threads(plan.base_env, job.nproc, usable_cores());
    plan.host = host_name();
    if (!SignalRelay::install(&error)) return fail(kExitRuntimeError, error);
    ElasticSettings settings = elastic_settings(options, job, plan.base_env);
    settings.secret = secret;
    return supervise_elastic(plan, settings);
  }

  // The master's address must resolve on every node (else each worker would retry its
  // store connection for the whole timeout before saying so).
  if (!address_resolves(job.master_addr, &error))
    return fail(kExitRuntimeError, "the master address " + job.master_addr + " does not resolve on this node (" +
                                       error + "); check --master-addr" +
                                       (plan.base_env.count("SLURM_JOB_ID") ? " or the SLURM node list" : ""));

  // The rendezvous port. Rank 0's store binds it, so the launcher only probes and lets go.
  if (job.master_port == 0) {
    job.master_port = pick_free_port(&error);
    if (job.master_port == 0) return fail(kExitRuntimeError, "cannot pick a free port: " + error);
  } else if (job.is_master_node()) {
    switch (probe_port(job.master_port, &error)) {
      case PortState::free:
        break;
      case PortState::in_use:
        return fail(kExitRuntimeError, "address " + job.master_addr + ":" +
                                           std::to_string(job.master_port) + " already in use");
      case PortState::error:
        return fail(kExitRuntimeError, "cannot bind port " + std::to_string(job.master_port) + ": " + error);
    }
  }

  for (const auto& note : job.notes) write_whole(2, "ddp-launch: " + note + "\n");
  plan.omp_threads = default_omp_threads(plan.base_env, job.nproc, usable_cores());
  if (plan.omp_threads > 0)
    write_whole(2, "ddp-launch: OMP_NUM_THREADS is not set; each of the " + std::to_string(job.nproc) +
                       " workers gets OMP_NUM_THREADS=" + std::to_string(plan.omp_threads) +
                       " (cores / workers); set it to choose\n");
  plan.host = host_name();

  if (!SignalRelay::install(&error)) return fail(kExitRuntimeError, error);
  return supervise(plan);
}

}  // namespace ddp_embed::launch
