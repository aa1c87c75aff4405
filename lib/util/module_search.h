// The modules of ours, shared libraries loaded at run time (sentencepiece's,
// libddp_embed_spm.so, and CUDA's, libddp_embed_cuda.so): where they are looked for, and
// how their functions are found once one is loaded. Looked for, in order:
//   1. the running program's folder, and that folder's parent (tests live in build/tests);
//   2. the build folder and the install lib folder that CMake compiled in.
// (An environment variable naming the file, checked by the caller, comes before all.)
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

namespace ddp_embed {

// The candidate paths of `file_name`, without duplicates, in the order above. Empty
// folders are skipped.
std::vector<std::string> module_candidates(const std::string& file_name, const std::string& build_dir,
                                           const std::string& install_dir);

struct ModuleSpec {
  std::string what;       // for the error: "sentencepiece's module", "the CUDA module"
  std::string file_name;  // libddp_embed_spm.so
  std::string target;     // the CMake target that builds it
  std::string env_var;    // names the module's path; when set, nowhere else is looked
  std::string build_dir, install_dir;
};

struct ModuleFound {
  std::string path;   // the file that loaded; empty when none did
  std::string error;  // then: why, naming every place tried
};

// Tries $env_var's file, else module_candidates(), in order: `open(file)` loads it and
// returns "" on success, or why it could not. Stops at the first that loads.
ModuleFound find_and_load_module(const ModuleSpec& spec, const std::function<std::string(const std::string&)>& open);

// find_and_load_module() for a module whose loading is two steps: `open_file` loads the
// file (dlopen or dlmopen: the handle, or null with `error` set), `resolve` checks its API
// version and takes its functions ("" or why not). A file that loads but does not resolve
// is closed and the next candidate tried; the one that resolves is never closed (what the
// program holds points into it).
ModuleFound load_module(const ModuleSpec& spec,
                        const std::function<void*(const std::string& file, std::string& error)>& open_file,
                        const std::function<std::string(void* handle)>& resolve);

// One function a module must export: its name, and the function pointer to set to it.
struct ModuleSymbol {
  template <typename F>
  ModuleSymbol(const char* name, F*& slot)
      : name(name), slot(&slot), set([](void* s, void* address) { *static_cast<F**>(s) = reinterpret_cast<F*>(address); }) {}
  const char* name;
  void* slot;
  void (*set)(void* slot, void* address);
};

// Sets every slot of `symbols` from `handle` (dlopen's or dlmopen's), in order: "" when
// all are there, else "<module> has no symbol <name>" for the first that is not.
std::string resolve_symbols(void* handle, const std::string& module, std::initializer_list<ModuleSymbol> symbols);

// Calls the module's `int <version_symbol>()`: "" when it returns `expected`, else why
// not. Checked before resolve_symbols(), so that a stale module is named as one rather
// than by a function it lacks.
std::string check_api_version(void* handle, const std::string& module, const char* version_symbol, int expected);

}  // namespace ddp_embed
