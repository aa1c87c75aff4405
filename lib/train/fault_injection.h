// Faults that the tests inject into a real training run, so that a real multi-process
// job can be made to fail at a chosen point. Chosen by environment variables, read once
// (step numbers 1-based, as the log says them):
//   DDP_EMBED_TEST_DIE_AT_STEP=R:S   rank R kills itself (SIGKILL) after S steps (before
//                                    step S+1 begins), in the first attempt only
//                                    (RESTART_COUNT 0);
//   DDP_EMBED_TEST_NAN_STEPS=S1,S2   the loss of steps S1, S2, ... becomes NaN;
//   DDP_EMBED_TEST_SAMPLE_LOG=FILE   each rank R appends "step rank index..." per
//                                    micro-batch to FILE.rankR.
// (DDP_EMBED_TEST_CHECKPOINT_PAUSE_MS, a pause inside a checkpoint write, lives with the
// writer in train/checkpoint.cpp; DDP_EMBED_TEST_DIE_BETWEEN_BEST_RENAMES, a kill inside
// output.keep_best's replacement of best/, in train/best_model.cpp.)
//
// They are a decorator around the run's step, installed once before the loop: neither
// train_step nor the loop knows of them, and a normal run (none set) calls train_step
// itself.
#pragma once

#include "train/step.h"

namespace ddp_embed {

// `step` with the faults the environment chooses around it: SIGKILL and the sample log
// before the chosen steps, and context.loss_share wrapped to turn the chosen steps'
// losses into NaN. Without DDP_EMBED_TEST_* set, `step` itself, and `context` untouched.
// `context` must outlive the returned function.
StepFunction with_test_faults(StepFunction step, StepContext& context, int restart_count);

}  // namespace ddp_embed
