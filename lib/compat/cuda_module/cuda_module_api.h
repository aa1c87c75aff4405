// The functions of libddp_embed_cuda.so, the module that holds everything CUDA
// (compat/cuda_support.h says why it is a module). embed-train finds them with dlsym().
// The module is loaded into the program's own link namespace (it shares libtorch_cpu and
// libc10 with it), so C++ types and exceptions cross the boundary as in any shared library;
// the names are extern "C" only so that dlsym() can find them.
#pragma once

#include <cstdint>

#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
class Backend;
}  // namespace c10d

// Bumped whenever a signature below changes: a stale module is refused, not called.
#define DDP_EMBED_CUDA_API_VERSION 2

extern "C" {
int ddp_embed_cuda_api_version();
// Empty when ATen's CUDA hooks are CUDA's own; otherwise why not (ATen looked them up
// before the module was loaded, and keeps the stub it found then).
const char* ddp_embed_cuda_check();
// The toolkit and NCCL the module was compiled with, e.g. "CUDA 13.0, NCCL 2.27.7".
const char* ddp_embed_cuda_versions();
// Visible CUDA devices (0 when the driver is missing or none is visible).
int ddp_embed_cuda_device_count();
// Makes `index` this thread's current device (kernels, NCCL communicators, the caching
// allocator's default).
void ddp_embed_cuda_set_device(int index);
// The most memory the caching allocator has handed out on the device since the start, MiB.
double ddp_embed_cuda_peak_allocated_mb(int index);
// The device's compute capability as major * 10 + minor (80: an A100, 90: an H100).
int ddp_embed_cuda_capability(int index);
// A ProcessGroupNCCL over `store`; collectives time out (the NCCL watchdog aborts the
// communicator) after timeout_ms. Throws what its constructor throws.
void ddp_embed_cuda_make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                              std::int64_t timeout_ms, c10::intrusive_ptr<c10d::Backend>& out);
}
