#include "data/arrow_library.h"

#include <dlfcn.h>

#include <mutex>

#include "data/pairs.h"
#include "util/module_search.h"

// Set by CMake for embed_core: the module's file name, the build folder it is written to,
// the lib folder it is installed to, and whether this build has Arrow to build it with.
#ifndef DDP_EMBED_ARROW_FILE
#define DDP_EMBED_ARROW_FILE "libddp_embed_arrow.so"
#endif
#ifndef DDP_EMBED_ARROW_BUILD_DIR
#define DDP_EMBED_ARROW_BUILD_DIR ""
#endif
#ifndef DDP_EMBED_ARROW_INSTALL_DIR
#define DDP_EMBED_ARROW_INSTALL_DIR ""
#endif
#ifndef DDP_EMBED_ARROW_CONFIGURED
#define DDP_EMBED_ARROW_CONFIGURED 0
#endif

namespace ddp_embed::arrow_module {

namespace {

// RTLD_LOCAL: the module's and Arrow's symbols serve only the module. A namespace of its
// own (dlmopen, as sentencepiece's module takes) is not needed: Arrow's libraries define
// none of the symbols the program's other libraries do (docs/data.md, "Parquet").
void* open_module(const std::string& path, std::string& error) {
  dlerror();
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* message = dlerror();
    error = message != nullptr ? message : "dlopen failed";
  }
  return handle;
}

std::string resolve_all(void* handle, const std::string& what, Library& lib) {
  std::string error = check_api_version(handle, what, "ddp_embed_arrow_api_version", DDP_EMBED_ARROW_API_VERSION);
  if (error.empty())
    error = resolve_symbols(handle, what,
                            {{"ddp_embed_arrow_version", lib.version},
                             {"ddp_embed_arrow_open", lib.open},
                             {"ddp_embed_arrow_close", lib.close},
                             {"ddp_embed_arrow_num_rows", lib.num_rows},
                             {"ddp_embed_arrow_num_row_groups", lib.num_row_groups},
                             {"ddp_embed_arrow_row_group_rows", lib.row_group_rows},
                             {"ddp_embed_arrow_num_columns", lib.num_columns},
                             {"ddp_embed_arrow_column_name", lib.column_name},
                             {"ddp_embed_arrow_column_kind", lib.column_kind},
                             {"ddp_embed_arrow_column_type", lib.column_type},
                             {"ddp_embed_arrow_select", lib.select},
                             {"ddp_embed_arrow_next_batch", lib.next_batch},
                             {"ddp_embed_arrow_text", lib.text},
                             {"ddp_embed_arrow_number", lib.number},
                             {"ddp_embed_arrow_list_size", lib.list_size},
                             {"ddp_embed_arrow_list_text", lib.list_text},
                             {"ddp_embed_arrow_list_number", lib.list_number}});
  return error;
}

struct Loaded {
  Library library;
  std::string error;  // empty: loaded
};

Loaded load() {
  Loaded result;
  const ModuleSpec spec{"Apache Arrow's module", DDP_EMBED_ARROW_FILE, "ddp_embed_arrow", "DDP_EMBED_ARROW_LIBRARY",
                        DDP_EMBED_ARROW_BUILD_DIR, DDP_EMBED_ARROW_INSTALL_DIR};
  const ModuleFound found = load_module(spec, open_module, [&](void* handle) {
    result.library = Library{};  // nothing of a module that did not resolve
    return resolve_all(handle, spec.what, result.library);
  });
  result.library.path = found.path;
  result.error = found.error;
  if (!result.error.empty() && !DDP_EMBED_ARROW_CONFIGURED)
    result.error += "\nThis build has no Apache Arrow to build the module with: configure it with scripts/build.sh "
                    "(it takes Arrow from the pyarrow of .venv, which scripts/setup.sh makes) or with -DArrow_DIR= a "
                    "folder holding ArrowConfig.cmake";
  return result;
}

}  // namespace

const Library& library() {
  static std::once_flag once;
  static Loaded loaded;
  std::call_once(once, [] { loaded = load(); });
  if (!loaded.error.empty()) throw DataError("reading Parquet, Arrow or CSV files: " + loaded.error);
  return loaded.library;
}

}  // namespace ddp_embed::arrow_module
