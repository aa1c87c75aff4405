// libddp_embed_cuda.so: the CUDA half of embed-train (compat/cuda_support.h says why it is
// a module). Linking it pulls in libtorch_cuda, whose static initializers register the CUDA
// kernels, allocator, device guard and ATen's CUDA hooks as the module loads; the functions
// below are the few calls that the CPU half cannot make through the dispatcher.
#include "compat/cuda_module/cuda_module_api.h"

#include <chrono>
#include <string>
#include <typeinfo>

#include <ATen/cuda/CUDAContext.h>  // getDeviceProperties
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>  // CUDART_VERSION: the toolkit this module was compiled with

#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL 1  // ProcessGroupNCCL.hpp compiles its contents only with it
#endif
#include <nccl.h>  // NCCL_MAJOR/MINOR/PATCH: the headers the NCCL process group was compiled with
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

extern "C" {

__attribute__((visibility("default"))) int ddp_embed_cuda_api_version() { return DDP_EMBED_CUDA_API_VERSION; }

__attribute__((visibility("default"))) const char* ddp_embed_cuda_check() {
  // ATen creates its CUDA hooks on first use and keeps them. Created before this module was
  // loaded, they are the stub (CUDAHooksInterface itself), which says "no CUDA" for ever.
  if (typeid(at::detail::getCUDAHooks()) == typeid(at::CUDAHooksInterface))
    return "LibTorch had looked for CUDA before the CUDA module was loaded, and keeps the answer "
           "\"no CUDA\" (a bug in embed-train: the module must be loaded before any CUDA call)";
  return "";
}

__attribute__((visibility("default"))) const char* ddp_embed_cuda_versions() {
  static const std::string text = [] {
    std::string t = "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
    t += ", NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#endif
    return t;
  }();
  return text.c_str();
}

__attribute__((visibility("default"))) int ddp_embed_cuda_device_count() {
  return static_cast<int>(c10::cuda::device_count());
}

__attribute__((visibility("default"))) void ddp_embed_cuda_set_device(int index) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
}

__attribute__((visibility("default"))) double ddp_embed_cuda_peak_allocated_mb(int index) {
  // allocated_bytes[0]: the aggregate over the allocator's pools (StatType::AGGREGATE).
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);
}

__attribute__((visibility("default"))) int ddp_embed_cuda_capability(int index) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index));
  return p->major * 10 + p->minor;
}

__attribute__((visibility("default"))) void ddp_embed_cuda_make_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                                      int rank, int size, std::int64_t timeout_ms,
                                                                      c10::intrusive_ptr<c10d::Backend>& out) {
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = std::chrono::milliseconds(timeout_ms);
  out = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
#else
  (void)store, (void)rank, (void)size, (void)timeout_ms;
  out.reset();
#endif
}

}  // extern "C"
