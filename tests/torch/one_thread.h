// One intra-op thread while it lives, for comparisons in this process that must be bit for
// bit. Why: two runs of the same model on one CPU add each sum in the same order only when
// every kernel splits its work the same way, and with several threads MKL's GEMMs may not
// (a checkpointed step against the plain one, 2 threads on a loaded 2-core machine: 2 runs
// in 50 differed in the last bits; 0 in 30 on one thread). The multi-process runs get the
// same rule from OMP_NUM_THREADS=1 (e2e::kThreads).
#pragma once

#include <ATen/Parallel.h>

struct OneIntraOpThread {
  OneIntraOpThread() : before_(at::get_num_threads()) { at::set_num_threads(1); }
  ~OneIntraOpThread() { at::set_num_threads(before_); }
  OneIntraOpThread(const OneIntraOpThread&) = delete;
  OneIntraOpThread& operator=(const OneIntraOpThread&) = delete;

 private:
  int before_;
};
