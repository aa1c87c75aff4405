// The LibTorch calls that need more than the public C++ API, and every difference
// between the LibTorch 2.x releases we build against (CI: the PyTorch of .venv, 2.15;
// the GPU machine: its own PyTorch, 2.11), in one place. The rest of the code calls these
// names and never tests TORCH_VERSION itself.
// Two parts: the core part below (every LibTorch TU, through the precompiled header) and
// the c10d part at the end, compiled only where a TU asks for it with
// `#define DDP_EMBED_COMPAT_C10D` before including this header (lib/parallel). Hence include
// guards per part instead of #pragma once.
#ifndef DDP_EMBED_TORCH_COMPAT_CORE
#define DDP_EMBED_TORCH_COMPAT_CORE

#include <limits>

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/version.h>

#include "compat/cuda_support.h"  // CUDA devices, from the module loaded when CUDA is used

namespace ddp_embed::compat {

// at::scaled_dot_product_attention. q, k, v: [B, heads, L, head_dim]; bias: additive,
// broadcastable to [B, heads, L, L] (0 for keys that take part, the dtype's lowest value
// for padding).
//
// The mask goes in as an additive float mask, which every SDPA backend takes: the math
// path and the memory-efficient kernel (CUDA) apply it; the flash kernel takes no mask and
// is not chosen. SDPA wants it in the query's dtype (bf16/fp16 under autocast): fp32's
// lowest value would round to -inf there (a row of padding only would then give NaN), so
// it is first clamped to the lowest finite value of that dtype.
inline at::Tensor scaled_dot_product_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                               const at::Tensor& bias, double dropout_p) {
  at::Tensor mask = bias;
  if (bias.scalar_type() != q.scalar_type()) {
    double lowest = 0;
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, q.scalar_type(), "sdpa_mask", [&] {
      lowest = static_cast<double>(std::numeric_limits<scalar_t>::lowest());
    });
    mask = bias.clamp_min(lowest).to(q.scalar_type());
  }
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p);
}

// ---- attention over packed sequences (CUDA's varlen kernels; model/attention.h) -------------
// Both ATen ops are dispatcher calls from the CPU half: their CUDA kernels come with
// libtorch_cuda (the CUDA module). Autograd is registered for both (derivatives.yaml:
// _flash_attention_backward, _efficient_attention_backward), with the dropout mask's Philox
// seed and offset taken from the CUDA generator and kept for backward.
//
// Flash attention, varlen: q [Nq, Hq, D], k and v [Nk, Hkv, D] (Hkv dividing Hq: grouped
// heads as they are), bf16 or fp16, sm80+, D a multiple of 8 up to 256; cum_q and cum_k
// int32 [B + 1] on the device; causal: bottom-right aligned (query i of a sequence with lq
// queries and lk keys sees keys j <= i + lk - lq). Returns [Nq, Hq, D].
// LibTorch 2.11 and 2.15 take the same leading arguments (2.15 adds block_table and
// num_splits after alibi_slopes, defaulted); the quantized overload differs at the 11th.
inline at::Tensor flash_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                         const at::Tensor& cum_q, const at::Tensor& cum_k, int64_t max_q,
                                         int64_t max_k, double dropout_p, bool causal, double scale) {
  return std::get<0>(at::_flash_attention_forward(q, k, v, cum_q, cum_k, max_q, max_k, dropout_p, causal,
                                                  /*return_debug_mask=*/false, std::optional<double>(scale)));
}

// The memory-efficient kernel on packed sequences: q [1, Nq, H, D], k and v [1, Nk, H, D]
// (one batch of concatenated sequences; the same head count, grouped heads repeated by the
// caller), fp32, fp16 or bf16 (sm80+); cu_q and cu_k int32 [B + 1]; max_q and max_k always
// given (the kernel's grid). causal: custom_mask_type 1, from the top left (query i sees keys
// j <= i of its sequence). compute_lse: needed for backward. Returns [1, Nq, H, D]. Same
// signature in 2.11 and 2.15.
inline at::Tensor efficient_attention_varlen(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                             const at::Tensor& cu_q, const at::Tensor& cu_k, int64_t max_q,
                                             int64_t max_k, double dropout_p, bool causal, bool compute_lse,
                                             double scale) {
  constexpr int64_t kNoMask = 0, kCausalFromTopLeft = 1;
  return std::get<0>(at::_efficient_attention_forward(q, k, v, /*bias=*/std::nullopt, cu_q, cu_k, max_q, max_k,
                                                      dropout_p, causal ? kCausalFromTopLeft : kNoMask, compute_lse,
                                                      std::optional<double>(scale)));
}

// While alive, autocast is off on every device: code in this scope runs in the dtypes
// of its inputs (e.g. the loss in fp32 inside a bf16 autocast region). The autocast
// dispatch keys are excluded for this thread.
class NoAutocast {
 public:
  NoAutocast() : guard_(c10::autocast_dispatch_keyset) {}

 private:
  c10::impl::ExcludeDispatchKeyGuard guard_;
};

// ---- autocast ---------------------------------------------------------------------------
// Whether autocast is on for a device type (CPU or CUDA), and to which dtype it casts.
struct AutocastState {
  bool enabled = false;
  at::ScalarType dtype = at::kFloat;
};

namespace detail {
inline void set_autocast(c10::DeviceType device, const AutocastState& s) {
  at::autocast::set_autocast_dtype(device, s.dtype);
  at::autocast::set_autocast_enabled(device, s.enabled);
}
}  // namespace detail

inline AutocastState autocast_state(c10::DeviceType device) {
  TORCH_CHECK(device == c10::kCPU || device == c10::kCUDA, "autocast is only used on the CPU and CUDA, not ",
              device);
  return {at::autocast::is_autocast_enabled(device), at::autocast::get_autocast_dtype(device)};
}

// torch.autocast(device, dtype, enabled) as a scope: sets the state for the device type
// while alive and restores the previous one after. Like torch.autocast it counts nesting
// and, when the outermost scope ends, drops the cache of casted weights (kept while a
// scope is open so that a weight used twice is cast once).
class AutocastGuard {
 public:
  AutocastGuard(c10::DeviceType device, const AutocastState& state)
      : device_(device), previous_(autocast_state(device)) {
    detail::set_autocast(device_, state);
    at::autocast::increment_nesting();
  }
  ~AutocastGuard() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    detail::set_autocast(device_, previous_);
  }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  c10::DeviceType device_;
  AutocastState previous_;
};

}  // namespace ddp_embed::compat
#endif  // DDP_EMBED_TORCH_COMPAT_CORE

// ---- c10d (process groups, stores): only for TUs that define DDP_EMBED_COMPAT_C10D ----
#if defined(DDP_EMBED_COMPAT_C10D) && !defined(DDP_EMBED_TORCH_COMPAT_C10D)
#define DDP_EMBED_TORCH_COMPAT_C10D

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

// Both LibTorch lines keep these headers at the same paths, but compile their contents only
// with USE_C10D_GLOO / USE_C10D_NCCL, which neither TorchConfig.cmake exports.
#ifndef USE_C10D_GLOO
#define USE_C10D_GLOO 1
#endif
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
namespace ddp_embed::compat {

// The object that runs collectives: ProcessGroupGloo/NCCL derive from c10d::Backend
// (c10d::ProcessGroup is a dispatcher over backends; calling the backend directly needs
// no dispatcher).
using CollectiveBackend = c10d::Backend;

// A TCPStore server (is_server) or client. The server does not block until the workers
// connect (our rendezvous checks that and names who is missing). listen_fd >= 0: a bound,
// listening socket for the server to adopt (e.g. one bound to the loopback interface
// only); the libuv server rejects an inherited socket in some releases, so that one
// uses the classic server.
inline c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, std::uint16_t port,
                                                      bool is_server, std::size_t world_size,
                                                      std::chrono::milliseconds timeout,
                                                      int listen_fd = -1) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = is_server;
  o.numWorkers = world_size;
  o.waitWorkers = false;
  o.timeout = timeout;
  if (is_server && listen_fd >= 0) {
    o.masterListenFd = listen_fd;
    o.useLibUV = false;
  }
  return c10::make_intrusive<c10d::TCPStore>(host, o);
}

// A store kept in a file that every rank on this machine opens (the last one to let go
// removes it). Blocking reads give up after `timeout`.
inline c10::intrusive_ptr<c10d::Store> make_file_store(const std::string& path, int world_size,
                                                       std::chrono::milliseconds timeout) {
  auto store = c10::make_intrusive<c10d::FileStore>(path, world_size);
  store->setTimeout(timeout);
  return store;
}

inline c10::intrusive_ptr<c10d::Store> make_prefix_store(const std::string& prefix,
                                                         c10::intrusive_ptr<c10d::Store> store) {
  return c10::make_intrusive<c10d::PrefixStore>(prefix, std::move(store));
}

using GlooDevice = std::shared_ptr<::gloo::transport::Device>;

inline c10::intrusive_ptr<CollectiveBackend> make_gloo(const c10::intrusive_ptr<c10d::Store>& store,
                                                       int rank, int size,
                                                       std::vector<GlooDevice> devices,
                                                       std::chrono::milliseconds timeout) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  o->devices = std::move(devices);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
}


// Blocks until the work is done; throws when it failed or (timeout > 0) did not finish in
// time. A zero timeout means "no host-side limit" (for
// NCCL: only make the current CUDA stream wait for the collective).
inline void wait_work(const c10::intrusive_ptr<c10d::Work>& work, std::chrono::milliseconds timeout) {
  if (timeout.count() > 0) {
    work->wait(timeout);
  } else {
    work->wait();
  }
}

}  // namespace ddp_embed::compat
#endif  // DDP_EMBED_COMPAT_C10D
