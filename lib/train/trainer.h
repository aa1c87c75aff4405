// The training run of one worker, from a resolved config to a model folder:
//
//   worker env → process group → tokenizer → data → model → [step → log → eval →
//   checkpoint]* → final model folder
//
// Every rank runs this; rank 0 writes the files. Returns the process exit code: 0, or
// kExitMembershipChange.
#pragma once

#include "config/config.h"

namespace ddp_embed {

// The exit status of a run stopped by SIGUSR2 (ddp-launch, an elastic job whose nodes
// change): every rank finished the same step and rank 0 wrote its checkpoint; the next
// rendezvous round resumes from it. 75 is sysexits.h's EX_TEMPFAIL: try again.
inline constexpr int kExitMembershipChange = 75;

int run_training(const Config& config);

}  // namespace ddp_embed
