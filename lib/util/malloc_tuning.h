// Which malloc serves the process's tensors, and glibc's settings where it is glibc's.
//
// LibTorch's CPU tensors come from malloc. A training step allocates and frees the same
// few hundred multi-megabyte activations every step; how malloc serves them sets both the
// step's page faults and the peak RSS. embed-train is linked with tcmalloc (gperftools'
// libtcmalloc_minimal, CMakeLists.txt) where the build machine has it: it keeps freed spans
// for reuse without glibc's heap fragmentation. Measured (MiniLM, 32 pairs of 64 tokens,
// one process, one thread, 5 steps, /usr/bin/time): peak RSS 1287 MB with glibc as tuned
// below, 1035 MB with tcmalloc, the same CPU time; STS-B pairs 768 → 705 MB.
//
// glibc, where tcmalloc is absent: by default it serves each allocation above its adaptive
// mmap threshold with a fresh mmap and gives freed memory at the top of the heap back to
// the OS, so each activation page-faults its memory in anew. Measured on BERT-small (256
// hidden, 4 layers, batch 32 × 64 tokens, 1 thread): the forward pass takes 250 ms of CPU
// by default and 150 ms with the settings below; a training step 1.8 s → 1.1 s. The price:
// the process keeps its peak heap, fragmentation included.
#pragma once

#include <string>

namespace ddp_embed {

// "tcmalloc 2.10 (gperftools)" where tcmalloc serves malloc, else "glibc malloc".
std::string memory_allocator();

// Where glibc's malloc serves the process: serves allocations up to 32 MB from the heap and
// keeps up to 1 GB of free heap for reuse (mallopt M_MMAP_THRESHOLD / M_TRIM_THRESHOLD); the
// MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_ environment variables, when set, win.
// Call once at start-up, before other threads start. Returns false where tcmalloc serves
// (nothing to tune), this is not glibc, or mallopt refused.
bool tune_malloc_for_tensors();

}  // namespace ddp_embed
