// AdamW over flat parameter groups.
//
// At construction every parameter of a group is moved into one contiguous buffer (the
// module keeps its parameters; they become views of the buffer), and so is its
// gradient. A step is then one fused kernel over each whole buffer (ATen's fused AdamW)
// instead of ~10 small kernels per tensor, the gradient norm is one reduction, and
// the optimizer state is two tensors per group (easy to checkpoint). This is what the
// "multi-tensor" (foreach / fused) optimizers of PyTorch achieve on GPUs: ~10 kernels per
// group (2 groups here) per step whatever the number of parameter tensors (~200 for
// BERT-base), instead of thousands of small launches.
//
// The buffers live where the parameters are (move the model to its device first, CPU or
// CUDA) and are float32 whatever the training precision: they are the master weights
// that autocast casts per operation, and the moments stay fp32 too.
//
// Decoupled weight decay as in torch.optim.AdamW: p ← p·(1 − lr·wd) − lr·m̂/(√v̂ + eps).
//
// Offloaded (offload_to_host; DeepSpeed's "offload_optimizer": {"device": "cpu"}), the
// moments live in host memory and the update runs on the host: what a device then holds
// for the optimizer is the parameters and their gradients, 8 bytes a parameter instead
// of 16. It is what lets a model whose fp32 state would fill the device fine-tune on it
// (4B parameters: 64 GB of state, 32 GB offloaded).
//
// The optimizer knows nothing of processes. ZeRO (parallel/zero.h) partitions it: shard()
// and shard_gradients() say which stretch of each buffer this rank updates and how the
// ranks exchange what they computed; the data-parallel seam (parallel/data_parallel.h)
// decides whether to.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "optim/shard_range.h"

namespace ddp_embed {

class FlatAdamW {
 public:
  struct Group {
    std::vector<torch::Tensor> params;
    double weight_decay = 0;
  };
  FlatAdamW(std::vector<Group> groups, double beta1 = 0.9, double beta2 = 0.999,
            double eps = 1e-8);

  void zero_grad();
  // The L2 norm of all gradients together. Reads one number from the device.
  double grad_norm() const;
  // Multiplies every gradient by `factor` (clipping, loss-scale unscaling).
  void scale_grads(double factor);
  void step(double lr);

  // From now on the moments live in host memory and step() updates on the host, a stretch
  // of `chunk_values` (rounded up to a multiple of 64) at a time: the stretch's gradient and parameters are copied into
  // host staging buffers (pinned when the parameters are on a GPU), updated there by the
  // same fused kernel, and the parameters copied back. Each chunk is the plain update of
  // its elements, so the weights are those of the plain step (bit for bit on the CPU).
  // Before the first step or state load; with shard(), each rank offloads its shard.
  void offload_to_host(int64_t chunk_values = int64_t(1) << 24);
  bool offloaded() const { return offload_chunk_ > 0; }

  int64_t steps_taken() const { return steps_; }
  int64_t num_parameters() const;

  // ZeRO-1: from now on this rank keeps the moments of, and step()
  // updates, only shard `rank` of `world` of each flat buffer, then gives every rank the
  // others' shards through `share` (share_shards over the process group: every rank must
  // step, and read state(), together). Before the first step or state load.
  using ShareShards = std::function<void(const std::vector<torch::Tensor>& flat_buffers)>;
  void shard(int rank, int world, ShareShards share);
  bool sharded() const { return bool(share_); }
  // The bytes of AdamW state (the two moments) this rank holds, allocated or not yet
  // (in host memory when offloaded).
  int64_t state_bytes() const;

  // ZeRO-2, after shard(): the gradients too. The flat gradient buffers become this
  // rank's shards (GradSync::reduce_into_shards adds the averaged gradients into them);
  // the whole buffers are let go, and so is every .grad, which backward then only fills
  // until GradSync has taken it. grad_norm() adds the shards' squares up over the ranks
  // through `sum` (an in-place all-reduce SUM of a tensor on the buffers' device).
  using SumOverRanks = std::function<void(const torch::Tensor&)>;
  void shard_gradients(SumOverRanks sum);
  bool gradients_sharded() const { return bool(sum_over_ranks_); }
  // The flat gradient buffers, one per group: whole, or this rank's shards.
  const std::vector<torch::Tensor>& gradient_buffers() const { return grads_; }
  int64_t gradient_bytes() const;

  // Optimizer state as named tensors ("adamw.<g>.exp_avg", ...) and back, for checkpoints:
  // the whole moments whatever the sharding, so that any world size and stage resumes.
  // Sharded, each moment is assembled in a buffer on the parameters' device, one at a
  // time, with the other ranks (a collective: every rank calls it), and copied to host
  // memory; `keep` false (the ranks that do not write the checkpoint) drops each as soon
  // as it is assembled and returns nothing.
  using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;
  NamedTensors state(bool keep = true) const;
  // From whole moments (a checkpoint of any world size and stage): this rank's part.
  void load_state(const NamedTensors& named, int64_t steps);

 private:
  // The moments are allocated by the first step (or a state load), as PyTorch's AdamW
  // does: start-up does not zero-fill two model-sized buffers.
  void allocate_moments() const;

  // step()'s update of flat buffer i's stretch `own` on the host, chunk by chunk.
  void step_on_host(size_t i, ShardRange own, double lr);

  // This rank's stretch of flat buffer i: all of it unless sharded.
  ShardRange own_range(size_t i) const;
  // The gradient of that stretch.
  torch::Tensor own_grad(size_t i) const;

  std::vector<double> weight_decay_;
  int rank_ = 0, world_ = 1;
  ShareShards share_;
  SumOverRanks sum_over_ranks_;
  std::vector<torch::Tensor> members_;  // the groups' parameters, whose .grad views grads_
  std::vector<torch::Tensor> params_, grads_;
  mutable std::vector<torch::Tensor> exp_avg_, exp_avg_sq_;
  int64_t offload_chunk_ = 0;               // > 0: offloaded, the staging buffers' size
  torch::Tensor host_params_, host_grads_;  // offloaded: the staging buffers, made by the first step
  double beta1_, beta2_, eps_;
  int64_t steps_ = 0;
};

}  // namespace ddp_embed
