// What this embed-train was built with (LibTorch, CUDA, NCCL) and what it finds at run
// time (CUDA devices): the text of `embed-train --version`.
#pragma once

#include <string>

namespace ddp_embed {

std::string build_info();

}  // namespace ddp_embed
