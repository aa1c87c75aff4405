// A one-off look at where a step's time goes (output.profile_steps, `embed-train --profile N`):
// LibTorch's profiler (Kineto) records every op of N steps on rank 0, writes them as a
// Chrome trace (chrome://tracing, https://ui.perfetto.dev) and logs the ops that took the
// most time, by self time (an op's time minus the ops it called), as PyTorch's
// key_averages() table sorts them (on a GPU, then its kernels by device time), after a line saying which attention path ran how often
// (model/attention.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>

#include "model/attention.h"  // kAttentionPaths

namespace ddp_embed {

class StepProfiler {
 public:
  // Records `steps` steps after `skip` (warm-up) steps; inactive when steps == 0. `cuda`:
  // the GPU's kernels too (the step runs on a CUDA device).
  StepProfiler(int64_t steps, int64_t skip, std::string trace_path, bool cuda);
  ~StepProfiler();

  // Call before and after each step, with the count of steps done; after the last
  // recorded step, writes the trace and logs the top ops.
  void before_step(int64_t steps_done);
  void after_step(int64_t steps_done);

 private:
  int64_t steps_, skip_;
  std::string trace_path_;
  bool cuda_;
  bool recording_ = false;
  std::array<int64_t, kAttentionPaths> attention_paths_before_{};  // attention_path_counts() when recording began
};

}  // namespace ddp_embed
