#include "train/build_info.h"

#include <torch/version.h>

#include "compat/torch_compat.h"

#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
#include <cuda_runtime_api.h>  // CUDART_VERSION: the toolkit the CUDA code was compiled with
#endif
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
#include <nccl.h>  // NCCL_MAJOR/MINOR/PATCH: the headers the NCCL process group was compiled with
#endif

namespace ddp_embed {

std::string build_info() {
  std::string text = "embed-train 0.1.0\nLibTorch " TORCH_VERSION "\n";
#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
  text += "CUDA: compiled in (CUDA " + std::to_string(CUDART_VERSION / 1000) + "." +
          std::to_string(CUDART_VERSION % 1000 / 10) + ")\n";
#else
  text += "CUDA: not compiled in (a CPU-only LibTorch)\n";
#endif
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
  text += "NCCL: compiled in (NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
          std::to_string(NCCL_PATCH) + ")\n";
#else
  text += "NCCL: not compiled in\n";
#endif
  text += "process group backends: gloo";
#if defined(DDP_EMBED_WITH_NCCL) && DDP_EMBED_WITH_NCCL
  text += ", nccl";
#endif
  // Asks the driver: 0 where there is none, which is no error (training runs on the CPU).
  text += "\nCUDA devices visible: " + std::to_string(compat::cuda_device_count());
  return text;
}

}  // namespace ddp_embed
