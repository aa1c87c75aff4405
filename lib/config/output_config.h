// output.*: checkpoints, logs, evaluation cadence, resuming (docs/config.md). The types
// only; config/config.h reads and validates them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/choices.h"

namespace ddp_embed {

// output.resume: "auto" | "never" | a checkpoint path.
struct ResumeFrom {
  ResumeMode mode = ResumeMode::Auto;
  std::string path;  // mode Path: the checkpoint folder
};

struct OutputConfig {
  std::string dir = "runs/demo";
  int64_t save_every = 200;  // 0 = no checkpoints (final/ is still written)
  int keep_last = 2;
  int64_t log_every = 10;
  int64_t eval_every = 200;  // 0 = only before the first step and at the end
  // An evaluation metric as metrics.jsonl names it ("eval/scifact/ndcg@10"); "" = off.
  // The model of the evaluation that scored it highest is kept in OUTPUT_DIR/best and
  // written as final/ (train/run_record.h: BestModel).
  std::string keep_best;
  // Where the metrics go besides metrics.jsonl: ["tensorboard"] = event files in
  // OUTPUT_DIR/tensorboard (rank 0; report/tensorboard.h); [] = nowhere else.
  std::vector<ReportTo> report_to;
  ResumeFrom resume;
  bool checkpoint_on_signal = true;
  int64_t profile_steps = 0;  // > 0: rank 0 records this many steps with LibTorch's profiler
};

}  // namespace ddp_embed
