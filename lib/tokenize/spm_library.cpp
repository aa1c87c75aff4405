#include "tokenize/spm_library.h"

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1  // dlmopen, LM_ID_NEWLM
#endif
#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "tokenize/tokenizer.h"
#include "util/module_search.h"

// Set by CMake for this file: the module's file name, the build folder it is written to,
// and the lib folder it is installed to.
#ifndef DDP_EMBED_SPM_FILE
#define DDP_EMBED_SPM_FILE "libddp_embed_spm.so"
#endif
#ifndef DDP_EMBED_SPM_BUILD_DIR
#define DDP_EMBED_SPM_BUILD_DIR ""
#endif
#ifndef DDP_EMBED_SPM_INSTALL_DIR
#define DDP_EMBED_SPM_INSTALL_DIR ""
#endif

namespace ddp_embed::spm {

namespace {

// Why dlmopen(LM_ID_NEWLM) and not dlopen(RTLD_LOCAL | RTLD_DEEPBIND): both keep
// sentencepiece's protobuf away from LibTorch's libprotobuf, but DEEPBIND also binds
// sentencepiece to libstdc++'s own std::cerr/std::cout, which are never constructed when
// the program (embed-train is one) holds copy-relocated ones: sentencepiece's first log
// line then crashes. DEEPBIND is also refused by AddressSanitizer. A namespace of its own
// has its own libstdc++ and libc (its own heap: hence the C API copying into our buffers).
void* open_module(const std::string& path, std::string& error) {
  dlerror();
  void* handle = dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* message = dlerror();
    error = message != nullptr ? message : "dlmopen failed";
  }
  return handle;
}

// "" when the module is of this build's API and exports every function of Library.
std::string resolve_all(void* handle, const std::string& what, Library& lib) {
  std::string error = check_api_version(handle, what, "ddp_embed_spm_api_version", DDP_EMBED_SPM_API_VERSION);
  if (error.empty())
    error = resolve_symbols(handle, what,
                            {{"ddp_embed_spm_load", lib.load},
                             {"ddp_embed_spm_free", lib.free},
                             {"ddp_embed_spm_vocab_size", lib.vocab_size},
                             {"ddp_embed_spm_special_ids", lib.special_ids},
                             {"ddp_embed_spm_piece_to_id", lib.piece_to_id},
                             {"ddp_embed_spm_id_to_piece", lib.id_to_piece},
                             {"ddp_embed_spm_encode", lib.encode},
                             {"ddp_embed_spm_serialized", lib.serialized},
                             {"ddp_embed_spm_train", lib.train}});
  return error;
}

struct Loaded {
  Library library;
  std::string error;  // empty: loaded
};

Loaded load() {
  Loaded result;
  const ModuleSpec spec{"sentencepiece's module", DDP_EMBED_SPM_FILE, "ddp_embed_spm", "DDP_EMBED_SPM_LIBRARY",
                        DDP_EMBED_SPM_BUILD_DIR, DDP_EMBED_SPM_INSTALL_DIR};
  const ModuleFound found = load_module(spec, open_module, [&](void* handle) {
    result.library = Library{};  // nothing of a module that did not resolve
    return resolve_all(handle, spec.what, result.library);
  });
  result.library.path = found.path;
  result.error = found.error;
  return result;
}

}  // namespace

const Library& library() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) throw TokenizerError(loaded.error);
  return loaded.library;
}

}  // namespace ddp_embed::spm
