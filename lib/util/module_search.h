// Where a module of ours (a shared library loaded at run time: sentencepiece's,
// libddp_embed_spm.so, and CUDA's, libddp_embed_cuda.so) is looked for, in order:
//   1. the running program's folder, and that folder's parent (tests live in build/tests);
//   2. the build folder and the install lib folder that CMake compiled in.
// (An environment variable naming the file, checked by the caller, comes before all.)
#pragma once

#include <string>
#include <vector>

namespace ddp_embed {

// The candidate paths of `file_name`, without duplicates, in the order above. Empty
// folders are skipped.
std::vector<std::string> module_candidates(const std::string& file_name, const std::string& build_dir,
                                           const std::string& install_dir);

}  // namespace ddp_embed
