// CUDA, loaded only when a run uses it.
//
// PyTorch's CUDA LibTorch comes in two halves: libtorch_cpu, and libtorch_cuda with cuBLAS,
// cuDNN, NCCL and the rest of the nvidia-* libraries. A program linked to both pays for the
// second half on every run, CPU runs too: ~370 MB more resident memory per worker and
// ~0.2 s more before main() (a program that adds two tensors: 117 MB and 0.23 s linked to
// libtorch_cpu alone, 486 MB and 0.39 s linked to both; /usr/bin/time -f "%e s %M KB").
// So embed-train links libtorch_cpu only, and what needs CUDA lives in a module,
// libddp_embed_cuda.so (compat/cuda_module/), loaded with dlopen() the first time CUDA
// is asked for. Loading it loads libtorch_cuda, whose static initializers register the CUDA
// kernels, allocator, device guard and ATen's CUDA hooks; from then on CUDA tensors work
// through the dispatcher as in any LibTorch program.
//
// When it is loaded: for train.device "cuda" and encode/eval --device cuda, and for
// train.device "auto" on a machine with an NVIDIA driver. Without a driver no CUDA device
// can be visible, so "auto" means the CPU there and nothing is loaded. It must be loaded
// before anything asks LibTorch about CUDA (ATen looks its CUDA hooks up once and keeps
// them): the trainer and the tools decide the device first; the module checks it and
// refuses to run late rather than leave CUDA silently off.
//
// Where the module is looked for: $DDP_EMBED_CUDA_LIBRARY (its path), else
// util/module_search.h's places.
#pragma once

#include <chrono>
#include <string>

#include <c10/core/Device.h>
#include <c10/util/intrusive_ptr.h>

namespace c10d {
class Store;
class Backend;
}  // namespace c10d

namespace ddp_embed::compat {

// DDP_EMBED_WITH_CUDA: set by CMakeLists.txt when LibTorch has CUDA, and the module is built.
#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
constexpr bool kHasCuda = true;
#else
constexpr bool kHasCuda = false;
#endif
// DDP_EMBED_WITH_NCCL: set when the module has the NCCL process group (nccl.h was found).
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
constexpr bool kHasNccl = true;
#else
constexpr bool kHasNccl = false;
#endif

// An NVIDIA driver is present (/proc/driver/nvidia, /dev/nvidiactl; /dev/dxg under WSL).
// Loads nothing.
bool nvidia_driver_present();

// Loads the module once (thread-safe). Throws std::runtime_error saying why it cannot:
// a build without CUDA, the module not found (and where it looked), or loaded too late.
void load_cuda_support();
// Whether load_cuda_support() has succeeded in this process.
bool cuda_support_loaded();

// Visible CUDA devices. 0, with nothing loaded, in a build without CUDA or on a machine
// without a driver; otherwise loads the module and asks the driver.
int cuda_device_count();
// Makes `index` this thread's current device (kernels, NCCL communicators, the caching
// allocator's default). Loads the module.
void set_cuda_device(int index);
// The most memory the caching allocator has handed out on the device since the start, MiB.
double cuda_peak_allocated_mb(int index);
// The device's compute capability as major * 10 + minor (80: Ampere, 90: Hopper); 0 in a
// build without CUDA. Loads the module.
int cuda_capability(int index);
// "CUDA 13.0, NCCL 2.27.7 (/path/libddp_embed_cuda.so)": what the module was compiled
// with, and the file. Loads the module.
std::string cuda_versions();

// For a device the user named (encode/eval --device, a resolved train.device): loads the
// module for a CUDA device, checks that it is visible and makes it current. Nothing for the
// CPU. Throws std::runtime_error that names the device.
void prepare_device(const c10::Device& device);

// A ProcessGroupNCCL (the module's); collectives time out after `timeout` (the NCCL
// watchdog aborts the communicator instead of letting the job hang).
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout);

}  // namespace ddp_embed::compat
