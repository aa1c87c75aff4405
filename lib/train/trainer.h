// The training run of one worker, from a resolved config to a model folder:
//
//   worker env → process group → tokenizer → data → model → [step → log → eval →
//   checkpoint]* → final model folder
//
// Every rank runs this; rank 0 writes the files. Returns the process exit code.
#pragma once

#include "config/config.h"

namespace ddp_embed {

int run_training(const Config& config);

}  // namespace ddp_embed
