// Finds and loads libddp_embed_spm.so, the module that holds sentencepiece (see
// spm_shim/spm_api.h for why it is kept apart), once per process, into a link namespace
// of its own (dlmopen). Where it looks, in order:
//   1. $DDP_EMBED_SPM_LIBRARY, the module's path (then nowhere else);
//   2. where util/module_search.h looks: the program's folder and its parent, then the
//      build and install folders that CMake compiled in.
#pragma once

#include <string>

#include "tokenize/spm_shim/spm_api.h"

namespace ddp_embed::spm {

// The module's functions, resolved once: calling them costs an indirect call, no lookup.
struct Library {
  decltype(&ddp_embed_spm_load) load = nullptr;
  decltype(&ddp_embed_spm_free) free = nullptr;
  decltype(&ddp_embed_spm_vocab_size) vocab_size = nullptr;
  decltype(&ddp_embed_spm_special_ids) special_ids = nullptr;
  decltype(&ddp_embed_spm_piece_to_id) piece_to_id = nullptr;
  decltype(&ddp_embed_spm_id_to_piece) id_to_piece = nullptr;
  decltype(&ddp_embed_spm_encode) encode = nullptr;
  decltype(&ddp_embed_spm_serialized) serialized = nullptr;
  decltype(&ddp_embed_spm_train) train = nullptr;
  std::string path;  // the file loaded
};

// Loads the module on the first call (thread-safe); later calls return the same. Throws
// TokenizerError, naming where it looked and why each candidate failed, if it cannot be
// loaded (the same error on every call).
const Library& library();

}  // namespace ddp_embed::spm
