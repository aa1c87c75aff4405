#include "train/build_info.h"

#include <ATen/Version.h>
#include <torch/version.h>

#include "compat/torch_compat.h"
#include "util/malloc_tuning.h"

namespace ddp_embed {

std::string build_info() {
  std::string text = "embed-train 0.1.0\nLibTorch " TORCH_VERSION "\n";
  if (compat::kHasCuda) {
    // Loads the CUDA module (runs load it only when they use CUDA): a broken module shows
    // here, not in the middle of a GPU job.
    try {
      text += "CUDA: compiled in, a module loaded only by runs that use CUDA: " + compat::cuda_versions() + "\n";
    } catch (const std::exception& e) {
      text += std::string("CUDA: compiled in, but its module does not load: ") + e.what() + "\n";
    }
  } else {
    text += "CUDA: not compiled in (a CPU-only LibTorch)\n";
  }
  text += compat::kHasNccl ? "NCCL: compiled in\n" : "NCCL: not compiled in\n";
  text += compat::kHasNccl ? "process group backends: gloo, nccl" : "process group backends: gloo";
  text += "\nmemory allocator: " + memory_allocator();
  // The vector extensions ATen's CPU kernels use: this CPU's best, or the one
  // ATEN_CPU_CAPABILITY names. Results computed in another order round otherwise, so a
  // report of a numeric difference carries it.
  text += "\nCPU kernels: " + at::get_cpu_capability();
  // Asks the driver: 0 where there is none, which is no error (training runs on the CPU).
  text += "\nCUDA devices visible: " + std::to_string(compat::cuda_device_count());
  return text;
}

}  // namespace ddp_embed
