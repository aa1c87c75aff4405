// The worker process a training run starts in: its place in the job, its log files, its
// threads and device, its precision and its process group.
#pragma once

#include <memory>

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
  bool main_rank() const { return pg->rank() == 0; }
};

// The intra-op threads of a worker: OMP_NUM_THREADS when set, else this node's cores
// shared among its workers (each taking every core would oversubscribe them).
int choose_threads(const WorkerEnv& env);

// The console log (rank 0) and this rank's log file in output.dir, the intra-op threads,
// the device (train.device) and precision, then the rendezvous and process group; checks
// that every rank runs the same config and that the batch divides over the world.
Worker set_up_worker(const Config& cfg);

}  // namespace ddp_embed
