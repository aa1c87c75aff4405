// train.* and dist.*: the optimizer, the schedule, precision and memory, and how workers
// share the work (docs/config.md). The types only; config/config.h reads and validates them.
#pragma once

#include <cstdint>

#include "config/choices.h"

namespace ddp_embed {

struct TrainConfig {
  int64_t batch_size = 64;  // global pairs per optimizer step
  int grad_accum_steps = 1;
  double lr = 1e-4;
  LrScaling lr_scaling = LrScaling::None;
  int64_t warmup_steps = 50;
  Schedule schedule = Schedule::Linear;
  double weight_decay = 0.01;
  double max_grad_norm = 1.0;  // <= 0: no clipping
  int epochs = 1;
  int64_t max_steps = -1;  // > 0 overrides epochs
  TrainDevice device = TrainDevice::Auto;  // Auto: CUDA when available, else the CPU
  Precision precision = Precision::Fp32;   // Fp16 needs CUDA
  double loss_scale_init = 65536;           // fp16: the first dynamic loss scale
  int64_t loss_scale_growth_interval = 2000;  // fp16: finite steps before the scale doubles
  bool activation_checkpointing = false;
  OptimizerOffload optimizer_offload = OptimizerOffload::None;  // Cpu: AdamW's moments and update in host memory
  int64_t gradcache_chunk = 0;  // > 0: GradCache, this many sequences per forward (train/gradcache.h)
  uint64_t seed = 42;
  int max_bad_steps = 5;  // non-finite steps in a row before the run stops
};

struct DistConfig {
  DistBackend backend = DistBackend::Auto;
  double bucket_mb = 25;
  int timeout_s = 600;
  int zero_stage = 0;  // 0: replicated; 1: AdamW state sharded; 2: gradients too (parallel/data_parallel.h)
};

}  // namespace ddp_embed
