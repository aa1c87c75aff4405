#include "util/malloc_tuning.h"

#include <cstdlib>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace ddp_embed {

bool tune_malloc_for_tensors() {
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
