// libFuzzer's entry point for one target, picked at compile time: the fuzz build compiles
// this file once per target with -DDDP_EMBED_FUZZ_TARGET=fuzz_<name>.
#include "fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return ddp_embed::fuzz::DDP_EMBED_FUZZ_TARGET(data, size);
}
