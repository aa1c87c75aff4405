#include "train/fault_injection.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace ddp_embed {

std::unique_ptr<FaultInjection> FaultInjection::from_env(int restart_count) {
  const char* die = std::getenv("DDP_EMBED_TEST_DIE_AT_STEP");
  const char* nan = std::getenv("DDP_EMBED_TEST_NAN_STEPS");
  const char* log = std::getenv("DDP_EMBED_TEST_SAMPLE_LOG");
  if (!die && !nan && !log) return nullptr;
  auto f = std::make_unique<FaultInjection>();
  if (die && restart_count == 0) std::sscanf(die, "%d:%ld", &f->die_rank_, &f->die_step_);
  if (log) f->sample_log_ = log;
  for (const char* at = nan; at && *at;) {
    f->nan_steps_.push_back(std::atoll(at));
    at = std::strchr(at, ',');
    if (at) ++at;
  }
  return f;
}

void FaultInjection::before_step(int rank, int64_t step) const {
  if (rank == die_rank_ && step == die_step_) std::raise(SIGKILL);
}

void FaultInjection::on_micro_batch(int64_t step, int rank, const std::vector<int64_t>& indices) const {
  if (sample_log_.empty()) return;
  std::ofstream log(sample_log_ + ".rank" + std::to_string(rank), std::ios::app);
  log << step << " " << rank;
  for (auto i : indices) log << " " << i;
  log << "\n";
}

at::Tensor FaultInjection::on_loss(int64_t step, const at::Tensor& loss) const {
  if (std::find(nan_steps_.begin(), nan_steps_.end(), step) == nan_steps_.end()) return loss;
  return loss.mul(std::nan(""));
}

}  // namespace ddp_embed
