// Training checkpoints: OUTPUT_DIR/checkpoints/step-<N>/
//
//   model.safetensors      every parameter of the SentenceEmbedder (bert.*, projection.*)
//   optimizer.safetensors  AdamW moments (flat, one pair per parameter group)
//   state.json             step, epoch, position in the epoch, optimizer steps, loss
//                          scale and its count of finite steps (fp16), the world size
//                          and resolved config of the run
//   manifest.json          size and FNV-1a 64 checksum of each file above, written last
//
// A checkpoint is written into step-<N>.tmp-<pid>, every file fsynced, then renamed: a
// folder named step-<N> is always complete. Loading verifies the manifest; `latest`
// skips (and names) a checkpoint that fails verification and falls back to the previous.
// Dropout randomness is derived from (seed, rank, step), so no RNG state is needed to
// resume bit for bit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "io/manifest.h"
#include "model/embedder.h"
#include "optim/flat_adamw.h"

namespace ddp_embed {

struct CheckpointError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct TrainPosition {
  int64_t step = 0;           // optimizer steps done
  int64_t epoch = 0;          // the epoch and global batch the next step trains on
  int64_t step_in_epoch = 0;
  double loss_scale = 1.0;    // fp16 dynamic loss scale (train/precision.h)
  int64_t loss_scale_good_steps = 0;  // ... and its finite steps since it last changed
};

// Writes step-<position.step> under checkpoints_dir atomically, then removes all but the
// newest keep_last complete checkpoints. Returns the folder's path. optimizer_state: the
// whole moments (FlatAdamW::state()), so that any world size and ZeRO stage resumes.
std::string save_checkpoint(const std::string& checkpoints_dir, SentenceEmbedder& model,
                            const FlatAdamW::NamedTensors& optimizer_state, int64_t optimizer_steps,
                            const TrainPosition& position,
                            const nlohmann::json& run_info, int keep_last);

// Complete checkpoints under checkpoints_dir, newest first.
std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir);

// Verifies the manifest, then loads the model and optimizer state. Throws CheckpointError
// naming the file that is missing, truncated or corrupt.
TrainPosition load_checkpoint(const std::string& dir, SentenceEmbedder& model, FlatAdamW& optimizer,
                              nlohmann::json* run_info = nullptr);

// Checks the manifest only (sizes and checksums, io/manifest.h). Throws CheckpointError.
void verify_checkpoint(const std::string& dir);

}  // namespace ddp_embed
