// Loading libddp_embed_cuda.so (cuda_support.h).
#include "compat/cuda_support.h"

#include <dlfcn.h>

#include <filesystem>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>  // the complete types behind make_nccl's pointers
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "util/module_search.h"

#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
#include "compat/cuda_module/cuda_module_api.h"
#endif

// Set by CMake for this file: the module's file name, the build folder it is written to,
// and the lib folder it is installed to.
#ifndef DDP_EMBED_CUDA_FILE
#define DDP_EMBED_CUDA_FILE "libddp_embed_cuda.so"
#endif
#ifndef DDP_EMBED_CUDA_BUILD_DIR
#define DDP_EMBED_CUDA_BUILD_DIR ""
#endif
#ifndef DDP_EMBED_CUDA_INSTALL_DIR
#define DDP_EMBED_CUDA_INSTALL_DIR ""
#endif

namespace ddp_embed::compat {

namespace fs = std::filesystem;

bool nvidia_driver_present() {
  std::error_code ec;
  for (const char* path : {"/proc/driver/nvidia/version", "/dev/nvidiactl", "/dev/dxg"})
    if (fs::exists(path, ec)) return true;
  return false;
}

#if defined(DDP_EMBED_WITH_CUDA) && DDP_EMBED_WITH_CUDA
namespace {

struct Module {
  decltype(&ddp_embed_cuda_versions) versions = nullptr;
  decltype(&ddp_embed_cuda_device_count) device_count = nullptr;
  decltype(&ddp_embed_cuda_set_device) set_device = nullptr;
  decltype(&ddp_embed_cuda_peak_allocated_mb) peak_allocated_mb = nullptr;
  decltype(&ddp_embed_cuda_capability) capability = nullptr;
  decltype(&ddp_embed_cuda_make_nccl) make_nccl = nullptr;
  std::string path;   // the file loaded
  std::string error;  // empty: loaded
};

// RTLD_GLOBAL: libtorch_cuda and the nvidia-* libraries join the program's namespace as
// if linked, so that what they dlopen() themselves later (cuDNN's sublibraries, NCCL's
// plugins) finds them. Never closed: what libtorch_cuda registered as it loaded stays for
// the life of the process. "" when loaded, else why not.
std::string open_one(const std::string& file, const std::string& what, Module& m) {
  dlerror();
  void* handle = dlopen(file.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* message = dlerror();
    return message != nullptr ? message : "dlopen failed";
  }
  std::string error = check_api_version(handle, what, "ddp_embed_cuda_api_version", DDP_EMBED_CUDA_API_VERSION);
  decltype(&ddp_embed_cuda_check) check = nullptr;
  if (error.empty())
    error = resolve_symbols(handle, what,
                            {{"ddp_embed_cuda_check", check},
                             {"ddp_embed_cuda_versions", m.versions},
                             {"ddp_embed_cuda_device_count", m.device_count},
                             {"ddp_embed_cuda_set_device", m.set_device},
                             {"ddp_embed_cuda_peak_allocated_mb", m.peak_allocated_mb},
                             {"ddp_embed_cuda_capability", m.capability},
                             {"ddp_embed_cuda_make_nccl", m.make_nccl}});
  if (error.empty()) error = check();
  return error;
}

Module open_module() {
  Module m;
  const ModuleSpec spec{"the CUDA module", DDP_EMBED_CUDA_FILE, "ddp_embed_cuda", "DDP_EMBED_CUDA_LIBRARY",
                        DDP_EMBED_CUDA_BUILD_DIR, DDP_EMBED_CUDA_INSTALL_DIR};
  const ModuleFound found = find_and_load_module(spec, [&](const std::string& file) {
    std::string error = open_one(file, spec.what, m);
    if (!error.empty()) m = Module{};
    return error;
  });
  m.path = found.path;
  m.error = found.error;
  return m;
}

std::once_flag g_once;
Module g_module;
std::atomic<bool> g_loaded{false};

const Module& module() {
  std::call_once(g_once, [] {
    g_module = open_module();
    g_loaded = g_module.error.empty();
  });
  if (!g_loaded) throw std::runtime_error(g_module.error);
  return g_module;
}

}  // namespace

void load_cuda_support() { module(); }
bool cuda_support_loaded() { return g_loaded; }
int cuda_device_count() { return nvidia_driver_present() ? module().device_count() : 0; }
void set_cuda_device(int index) { module().set_device(index); }
double cuda_peak_allocated_mb(int index) { return module().peak_allocated_mb(index); }
int cuda_capability(int index) { return module().capability(index); }
std::string cuda_versions() {
  const Module& m = module();
  return std::string(m.versions()) + " (" + m.path + ")";
}

c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                            std::chrono::milliseconds timeout) {
  c10::intrusive_ptr<c10d::Backend> out;
  module().make_nccl(store, rank, size, timeout.count(), out);
  if (!out) throw std::runtime_error("the CUDA module was built without NCCL");
  return out;
}

#else  // a LibTorch without CUDA: no module

namespace {
[[noreturn]] void no_cuda() { throw std::runtime_error("this build's LibTorch has no CUDA"); }
}  // namespace

void load_cuda_support() { no_cuda(); }
bool cuda_support_loaded() { return false; }
int cuda_device_count() { return 0; }
void set_cuda_device(int) { no_cuda(); }
double cuda_peak_allocated_mb(int) { return 0; }
int cuda_capability(int) { return 0; }
std::string cuda_versions() { no_cuda(); }
c10::intrusive_ptr<c10d::Backend> make_nccl(const c10::intrusive_ptr<c10d::Store>&, int, int,
                                            std::chrono::milliseconds) {
  no_cuda();
}
#endif

void prepare_device(const c10::Device& device) {
  if (!device.is_cuda()) return;
  try {
    load_cuda_support();
  } catch (const std::exception& e) {
    throw std::runtime_error("device " + device.str() + ": " + e.what());
  }
  const int visible = cuda_device_count();
  const int index = device.has_index() ? device.index() : 0;
  if (index >= visible)
    throw std::runtime_error("device " + device.str() + ": " +
                             (visible == 0 ? std::string("no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)")
                                           : std::to_string(visible) + " CUDA device(s) visible"));
  set_cuda_device(index);
}

}  // namespace ddp_embed::compat
