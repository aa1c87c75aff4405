// What a training run reads and what it trains, built the same on every rank:
//
//   load_inputs                 the init folder (a pretrained model), the tokenizer, the
//                               training pairs and evaluation sets, tokenized
//   build_model_under_training  the model, AdamW over its flat parameter groups, data
//                               parallelism applied (parallel/data_parallel.h), the fp16
//                               loss scaler, the peak lr
//   resume                      the checkpoint to continue from (output.resume), or step 0
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "config/config.h"
#include "data/batch_plan.h"
#include "data/pairs.h"
#include "model/embedder.h"
#include "model/model_folder.h"
#include "optim/flat_adamw.h"
#include "parallel/data_parallel.h"
#include "tokenize/tokenizer.h"
#include "train/checkpoint.h"
#include "train/evaluate.h"
#include "train/precision.h"
#include "train/worker.h"

namespace ddp_embed {

struct Inputs {
  std::optional<ModelFolderLayout> init_folder;  // model.init, read before anything is loaded
  std::map<std::string, std::string> prompts;     // the init folder's and model.prompts
  std::unique_ptr<Tokenizer> tokenizer;
  PairDataset train;
  std::vector<EvalSet> eval;  // data.eval's sets, in its order (train/evaluate.h)
};

Inputs load_inputs(const Config& cfg, const Worker& w);

// The part of load_inputs that `embed-train prepare` shares: the init folder, the
// tokenizer (trained first when tokenizer.path names none), the prompts, and data.train's
// sources with their prompts resolved to texts.
struct SourceSetup {
  std::optional<ModelFolderLayout> init_folder;
  std::map<std::string, std::string> prompts;
  std::unique_ptr<Tokenizer> tokenizer;
  std::vector<SourceInput> sources;
};
SourceSetup set_up_sources(const Config& cfg, ProcessGroup& pg);

// The batch plan of the training pairs (data.train's sources, data.mixing,
// data.dedupe_batches, the global batch): every step's source and pairs.
BatchPlan make_batch_plan(const Config& cfg, const PairDataset& train, int world_size);
// Hard negatives per query for each source: its own negatives_per_query, else data's.
std::vector<int> negatives_per_source(const Config& cfg, size_t sources);

// The model being trained and what updates it (AdamW, data parallelism, the fp16 loss
// scaler, the peak learning rate), identical on every rank.
struct ModelUnderTraining {
  SentenceEmbedder model;
  FlatAdamW optimizer;
  std::unique_ptr<DataParallel> data_parallel;
  LossScaler loss_scaler;
  double peak_lr = 0;  // train.lr, scaled by train.lr_scaling
};

// AdamW's two groups: weight decay for the rest, none for biases and norm parameters
// (LayerNorm, RMSNorm, Qwen3's *_layernorm, q_norm, k_norm, norm), as transformers' Trainer.
std::vector<FlatAdamW::Group> optimizer_groups(SentenceEmbedder& model, double weight_decay);

// total_steps and micro_batch only go into the log line that describes the run.
ModelUnderTraining build_model_under_training(const Config& cfg, const Worker& w, const Inputs& in,
                                              int64_t total_steps, int64_t micro_batch);

// output.resume: "auto" takes the newest checkpoint that loads (skipping broken ones with
// a warning), a path takes that one, "never" starts at step 0. Every rank must land on
// the same step.
TrainPosition resume(const Config& cfg, ProcessGroup& pg, ModelUnderTraining& t);

// What the written model folder says beyond the weights (model/model_folder.h).
ModelFolderOptions output_folder_options(const Config& cfg, const Inputs& in);

}  // namespace ddp_embed
