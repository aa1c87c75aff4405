// The workers' communication: rendezvous through a TCP key-value store hosted by rank 0
// (c10d::TCPStore), then a Gloo (CPU) or NCCL (CUDA) process group, and the collectives
// the trainer needs. Every collective has a timeout and fails with a DistError that names
// the collective (and, when it can tell, the missing rank) instead of hanging.
//
// World size 1 needs no store and no process group: every collective is then the identity,
// so single-process code paths call the same functions. Under a launcher with the backend
// named (dist.backend gloo or nccl) a single process makes a group of one instead, and
// every collective runs: one GPU checks the NCCL path that way.
//
// All ranks must call the same collectives in the same order (that is what matches them
// up); ProcessGroup numbers them so that error messages can say which one failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

#include "config/choices.h"  // DistBackend
#include "parallel/worker_env.h"

namespace c10d {
class Work;
}

namespace ddp_embed {

class ProcessGroup;

// A collective that is still running (ProcessGroup::allreduce_sum_async). wait() blocks
// until it is done (on NCCL: until the current CUDA stream is ordered after it) and throws
// DistError on failure or timeout. An empty handle's wait() does nothing.
class PendingCollective {
 public:
  PendingCollective();
  ~PendingCollective();
  PendingCollective(PendingCollective&&) noexcept;
  PendingCollective& operator=(PendingCollective&&) noexcept;
  void wait();
  // Whether wait() would return at once (waited, or finished on the network).
  bool done() const;

 private:
  friend class ProcessGroup;
  struct State;
  std::unique_ptr<State> state_;
};

class ProcessGroup {
 public:
  // Rendezvous and process group creation.
  //  backend: Auto (NCCL when cuda_available and this build has NCCL, else Gloo), Gloo
  //           or Nccl (dist.backend).
  //  timeout: for the rendezvous and for every collective.
  // Rank 0 hosts the store at MASTER_ADDR:MASTER_PORT (unless the launcher's agent store is
  // used), the others connect; after a restart they find the new attempt's store by
  // themselves (rendezvous.h, "Why seal"). A rank that does not join within the timeout
  // is named in the error, with its node. Across nodes the collectives use the interface
  // that routes to MASTER_ADDR (GLOO_SOCKET_IFNAME / NCCL_SOCKET_IFNAME override it). With
  // NCCL, collective tensors live on cuda:<local_rank % visible devices>; the caller makes
  // that device current.
  static std::unique_ptr<ProcessGroup> init(const WorkerEnv& env, DistBackend backend, bool cuda_available,
                                            std::chrono::seconds timeout);
  // The world-size-1 group without a process group (what init returns for a single
  // process that asks for no group of one).
  static std::unique_ptr<ProcessGroup> single();

  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  int rank() const;
  int world_size() const;
  const std::string& backend() const;  // "gloo", "nccl" or "none" (no process group)
  // Whether collectives go over a process group: world size > 1, or a group of one. When
  // not, every collective is the identity and callers may skip their sync work.
  bool communicates() const;
  // Whether waiting for a collective blocks the host until it is done (Gloo, or no group).
  // Over NCCL the wait only orders the GPU's stream after it (wait_limit in the .cpp).
  bool host_waits_for_collectives() const;
  // How the ranks talk, for the log: "gloo over eth0 (10.0.0.2)"; empty without a group.
  const std::string& network() const;
  c10::Device device() const;          // where collective tensors must live

  // In place, over all ranks. mean: floating tensors only.
  void allreduce_sum_(const at::Tensor& t);
  void allreduce_mean_(const at::Tensor& t);
  // In place SUM that returns at once; t must be contiguous and stay alive until wait().
  PendingCollective allreduce_sum_async(const at::Tensor& t, const std::string& what);
  // SUM into root's t only (the other ranks' t is left undefined), returns at once: the
  // owner-bound half of a reduce-scatter (ZeRO-2's gradient shards).
  PendingCollective reduce_sum_async(const at::Tensor& t, int root, const std::string& what);
  // Copies root's values into every rank's tensors (e.g. the initial parameters). One
  // collective per (device, dtype) group, whatever the number of tensors.
  void broadcast_(std::vector<at::Tensor>& tensors, int root = 0);
  // [B, ...] on every rank (same shape everywhere) -> [W*B, ...], rank r's rows at r*B.
  at::Tensor all_gather(const at::Tensor& t);
  // Row counts may differ between ranks (trailing dims may not): rows of rank 0, then 1...
  struct VarsizeGather {
    at::Tensor data;              // [sum(counts), ...]
    std::vector<int64_t> counts;  // rows contributed by each rank
  };
  VarsizeGather all_gather_varsize(const at::Tensor& t);
  // The same when every rank already knows every rank's row count (`rows`, in rank
  // order; this rank's must be t's): no counts are exchanged. Empty `rows`: all_gather.
  at::Tensor all_gather_rows(const at::Tensor& t, const std::vector<int64_t>& rows);
  void barrier();
  // The ranks whose value differs from rank 0's, the same answer on every rank (empty:
  // all agree). One all-gather of 8 bytes a rank.
  std::vector<int> ranks_differing_from_rank0(std::uint64_t value);
  // Throws DistError naming every rank whose value differs from rank 0's (all ranks throw
  // the same message). For the config hash and the parameter checksum.
  void check_same(std::uint64_t value, const std::string& what);
  std::int64_t allreduce_max_int(std::int64_t value);

  // Number of collectives issued so far (the same on every rank when in step).
  std::uint64_t collectives_issued() const;

  struct Impl;

 private:
  explicit ProcessGroup(std::unique_ptr<Impl> impl);
  // Every collective goes through here: numbers it, launches it (`launch` returns its
  // work) and returns the handle whose wait() finishes it; a failure or timeout, at launch
  // or in wait(), is a DistError naming `what`. host_reads_result: with NCCL, wait() blocks
  // the host too, not only the current CUDA stream.
  PendingCollective issue(const std::string& what, bool host_reads_result,
                          const std::function<c10::intrusive_ptr<c10d::Work>()>& launch);
  std::unique_ptr<Impl> impl_;
};

// Differentiable all-gather: [B, D] on each rank -> [W*B, D] (or, with `rows`, every
// rank's row count known to all, [sum of rows, D]). Backward all-reduces (SUM) the
// incoming gradient and returns this rank's slice, so gradients of every rank's loss
// reach the rank that produced the rows. Every rank must run the backward through it (its
// loss must depend on the result). autograd_gather.cpp says why that backward is right.
at::Tensor all_gather_with_grad(ProcessGroup& pg, const at::Tensor& x, const std::vector<int64_t>& rows = {});

// A 64-bit hash of the tensors' bytes (values, dtypes, shapes), e.g. to check with
// check_same() that every rank starts from the same parameters.
std::uint64_t tensors_checksum(const std::vector<at::Tensor>& tensors);

}  // namespace ddp_embed
