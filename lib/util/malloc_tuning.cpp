#include "util/malloc_tuning.h"

#include <dlfcn.h>

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp_embed {
namespace {

// gperftools' version function where tcmalloc serves the process's malloc: loaded, and
// `malloc` resolving to its tc_malloc (gperftools defines malloc as an alias of it; linked
// before libc, CMakeLists.txt, it comes first). Else null.
using TcVersion = const char* (*)(int*, int*, const char**);
TcVersion tcmalloc_version() {
  void* const tc_malloc = ::dlsym(RTLD_DEFAULT, "tc_malloc");
  if (!tc_malloc || ::dlsym(RTLD_DEFAULT, "malloc") != tc_malloc) return nullptr;
  return reinterpret_cast<TcVersion>(::dlsym(RTLD_DEFAULT, "tc_version"));
}

}  // namespace

std::string memory_allocator() {
  if (const TcVersion version = tcmalloc_version()) {
    int major = 0, minor = 0;
    const char* patch = nullptr;
    version(&major, &minor, &patch);
    return "tcmalloc " + std::to_string(major) + "." + std::to_string(minor) + (patch ? patch : "") + " (gperftools)";
  }
  return "glibc malloc";
}

bool tune_malloc_for_tensors() {
  if (tcmalloc_version()) return false;
#if defined(__GLIBC__)
  bool ok = true;
  // 32 MB is the largest threshold glibc accepts on 64-bit; bigger tensors stay mmapped.
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) ok = mallopt(M_MMAP_THRESHOLD, 32 << 20) == 1 && ok;
  if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) ok = mallopt(M_TRIM_THRESHOLD, 1 << 30) == 1 && ok;
  return ok;
#else
  return false;
#endif
}

}  // namespace ddp_embed
