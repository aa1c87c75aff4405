// The CUDA module (lib/compat/cuda_support.h): a CPU run loads no CUDA library, and
// loading the module makes LibTorch's CUDA half live (its kernels registered, ATen's CUDA
// hooks CUDA's own), or fails loudly when LibTorch was asked about CUDA before it.
//
// Each check runs in a fresh copy of this test program (a "threadsafe" death test
// re-executes it), because loading is once per process and cannot be undone.
#include <gtest/gtest.h>
#include <link.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <typeinfo>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "compat/cuda_support.h"

namespace {

// Whether a shared object whose file name contains `name` is mapped in this process.
bool library_loaded(const char* name) {
  struct Query {
    const char* name;
    bool found;
  } q{name, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* data) {
        auto* q = static_cast<Query*>(data);
        if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, q->name) != nullptr) q->found = true;
        return 0;
      },
      &q);
  return q.found;
}

bool has_cuda_kernel(const char* op, const char* overload) {
  auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
  return handle.has_value() && handle->hasKernelForDispatchKey(c10::DispatchKey::CUDA);
}

#define CHILD_CHECK(cond)                                              \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "failed: %s (line %d)\n", #cond, __LINE__); \
      std::exit(1);                                                    \
    }                                                                  \
  } while (0)

// With an NVIDIA driver this test program loads CUDA before main(), as embed-train does
// before its first tensor: the CUDA tests in other files run after CPU tests that have
// already made LibTorch answer "no CUDA" (autograd asks).
[[maybe_unused]] const bool kCudaLoadedAtStart = [] {
  if (ddp_embed::compat::kHasCuda && ddp_embed::compat::nvidia_driver_present()) ddp_embed::compat::load_cuda_support();
  return true;
}();

class CudaModule : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!ddp_embed::compat::kHasCuda) GTEST_SKIP() << "a LibTorch without CUDA: there is no module";
    GTEST_FLAG_SET(death_test_style, "threadsafe");
  }
};

TEST_F(CudaModule, CpuWorkLoadsNoCudaLibrary) {
  if (ddp_embed::compat::nvidia_driver_present()) GTEST_SKIP() << "an NVIDIA driver: this program loads CUDA at start";
  EXPECT_EXIT(
      {
        // What a CPU run does: a device decision, tensors, autograd.
        CHILD_CHECK(ddp_embed::compat::cuda_device_count() == 0);
        auto x = at::ones({4, 4}).requires_grad_();
        (x * x).sum().backward();
        CHILD_CHECK(x.grad().sum().item<float>() == 32.0f);
        CHILD_CHECK(!ddp_embed::compat::cuda_support_loaded());
        CHILD_CHECK(!library_loaded("libtorch_cuda"));
        CHILD_CHECK(!library_loaded("libnccl"));  // (libcudart is libtorch_cpu's own need: 1 MB)
        CHILD_CHECK(!library_loaded("libcublas"));
        CHILD_CHECK(!library_loaded("libcudnn"));
        CHILD_CHECK(!has_cuda_kernel("aten::add", "Tensor"));
        std::fprintf(stderr, "no CUDA library\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "no CUDA library");
}

TEST_F(CudaModule, LoadingRegistersLibTorchsCudaHalf) {
  EXPECT_EXIT(
      {
        ddp_embed::compat::load_cuda_support();
        CHILD_CHECK(ddp_embed::compat::cuda_support_loaded());
        CHILD_CHECK(library_loaded("libtorch_cuda"));
        CHILD_CHECK(has_cuda_kernel("aten::add", "Tensor"));
        CHILD_CHECK(has_cuda_kernel("aten::mm", ""));
        CHILD_CHECK(typeid(at::detail::getCUDAHooks()) != typeid(at::CUDAHooksInterface));  // not the stub
        const std::string versions = ddp_embed::compat::cuda_versions();
        CHILD_CHECK(versions.rfind("CUDA ", 0) == 0);
        CHILD_CHECK(ddp_embed::compat::kHasNccl == (versions.find("NCCL ") != std::string::npos));
        // CPU work goes on as before.
        auto x = at::ones({4, 4}).requires_grad_();
        (x * x).sum().backward();
        CHILD_CHECK(x.grad().sum().item<float>() == 32.0f);
        std::fprintf(stderr, "loaded: %s\n", versions.c_str());
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "loaded: CUDA [0-9]+\\.[0-9]+");
}

TEST_F(CudaModule, RefusesToLoadAfterLibTorchAnsweredNoCuda) {
  if (ddp_embed::compat::nvidia_driver_present()) GTEST_SKIP() << "an NVIDIA driver: this program loads CUDA at start";
  EXPECT_EXIT(
      {
        // Asking ATen about CUDA creates its CUDA hooks: with the module not loaded yet they
        // are the stub, kept for the life of the process.
        CHILD_CHECK(!at::hasCUDA());
        try {
          ddp_embed::compat::load_cuda_support();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3), "before the CUDA module was loaded");
}

// A module that is not where $DDP_EMBED_CUDA_LIBRARY says: the error names the variable and
// the file, and what to build.
TEST_F(CudaModule, AMissingModuleIsNamed) {
  if (ddp_embed::compat::nvidia_driver_present()) GTEST_SKIP() << "an NVIDIA driver: this program loads CUDA at start";
  EXPECT_EXIT(
      {
        setenv("DDP_EMBED_CUDA_LIBRARY", "/nonexistent/libddp_embed_cuda.so", 1);
        try {
          ddp_embed::compat::load_cuda_support();
        } catch (const std::exception& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::exit(3);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(3),
      "cannot load the CUDA module libddp_embed_cuda.so \\(build the CMake target ddp_embed_cuda.*"
      "DDP_EMBED_CUDA_LIBRARY is set:\n  /nonexistent/libddp_embed_cuda.so: ");
}

}  // namespace
