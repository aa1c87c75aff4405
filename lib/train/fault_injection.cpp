#include "train/fault_injection.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace ddp_embed {
namespace {

struct Faults {
  int die_rank = -1;
  int64_t die_after_steps = -1;
  std::vector<int64_t> nan_steps;
  std::string sample_log;
  bool nan_now = false;  // the running step's loss becomes NaN

  bool is_nan_step(int64_t step) const {
    return std::find(nan_steps.begin(), nan_steps.end(), step) != nan_steps.end();
  }
  void log_samples(int64_t step, int rank, const StepBatches& batches) const {
    if (sample_log.empty()) return;
    std::ofstream log(sample_log + ".rank" + std::to_string(rank), std::ios::app);
    for (const PairBatch& micro : batches.micro) {
      log << step << " " << rank;
      for (auto i : micro.indices) log << " " << i;
      log << "\n";
    }
  }
};

}  // namespace

StepFunction with_test_faults(StepFunction step, StepContext& context, int restart_count) {
  const char* die = std::getenv("DDP_EMBED_TEST_DIE_AT_STEP");
  const char* nan = std::getenv("DDP_EMBED_TEST_NAN_STEPS");
  const char* log = std::getenv("DDP_EMBED_TEST_SAMPLE_LOG");
  if (!die && !nan && !log) return step;
  auto faults = std::make_shared<Faults>();
  if (die && restart_count == 0) std::sscanf(die, "%d:%ld", &faults->die_rank, &faults->die_after_steps);
  if (log) faults->sample_log = log;
  for (const char* at = nan; at && *at;) {
    faults->nan_steps.push_back(std::atoll(at));
    at = std::strchr(at, ',');
    if (at) ++at;
  }
  context.loss_share = [faults, share = std::move(context.loss_share)](const at::Tensor& micro_batch_loss) {
    const at::Tensor loss = share(micro_batch_loss);
    return faults->nan_now ? loss.mul(std::nan("")) : loss;
  };
  const int rank = context.worker.pg->rank();
  return [faults, rank, step = std::move(step)](StepBatches& batches, int64_t number, double lr) {
    if (rank == faults->die_rank && number == faults->die_after_steps + 1) std::raise(SIGKILL);
    faults->nan_now = faults->is_nan_step(number);
    faults->log_samples(number, rank, batches);
    return step(batches, number, lr);
  };
}

}  // namespace ddp_embed
