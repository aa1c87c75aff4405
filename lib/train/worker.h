// The worker process a training run starts in: its place in the job, its log files, its
// threads and device, its precision and its process group.
#pragma once

#include <memory>

#include <nlohmann/json_fwd.hpp>

#include <c10/core/Device.h>

#include "config/config.h"
#include "parallel/process_group.h"
#include "parallel/worker_env.h"
#include "train/precision.h"

namespace ddp_embed {

struct Worker {
  WorkerEnv env;  // rank, world size, node: from ddp-launch, torchrun, SLURM or alone
  int threads = 1;
  c10::Device device{c10::kCPU};
  Precision precision = Precision::Fp32;
  std::unique_ptr<ProcessGroup> pg;
  // Each rank's accumulation steps at this world size: train.grad_accum_steps, except in
  // an elastic job, where they follow the world size so that every micro-batch keeps the
  // size it has at the most nodes (for_this_world()).
  int grad_accum_steps = 1;
  bool main_rank() const { return pg->rank() == 0; }
};

// The config as this world runs it: train.grad_accum_steps = w.grad_accum_steps.
Config for_this_world(const Config& cfg, const Worker& w);

// An elastic job's membership change, when this round's nodes differ from the previous
// round's (DDP_LAUNCH_MEMBERSHIP): rank 0 logs "continuing on 2 of 3 nodes from step 10
// (lost: node 2, 10.0.0.3)" and returns the metrics.jsonl line that records it (with its
// "event" key); null when nothing changed or on other ranks.
nlohmann::json note_membership_change(const Worker& w, int64_t step);

// The intra-op threads of a worker: OMP_NUM_THREADS when set, else this node's cores
// shared among its workers (each taking every core would oversubscribe them).
int choose_threads(const WorkerEnv& env);

// The console log (rank 0) and this rank's log file in output.dir, the intra-op threads,
// the device (train.device) and precision, then the rendezvous and process group; checks
// that every rank runs the same config and that the batch divides over the world (in an
// elastic job: over every world size it may run at, refused at start-up otherwise).
Worker set_up_worker(const Config& cfg);

}  // namespace ddp_embed
