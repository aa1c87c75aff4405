#include "util/module_search.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace ddp_embed {

namespace fs = std::filesystem;

std::vector<std::string> module_candidates(const std::string& file_name, const std::string& build_dir,
                                           const std::string& install_dir) {
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec && exe.has_parent_path()) {
    dirs.push_back(exe.parent_path().string());
    if (exe.parent_path().has_parent_path()) dirs.push_back(exe.parent_path().parent_path().string());
  }
  for (const auto& dir : {build_dir, install_dir})
    if (!dir.empty()) dirs.push_back(dir);
  std::vector<std::string> out;
  for (const auto& dir : dirs) {
    std::string file = (fs::path(dir) / file_name).lexically_normal().string();
    if (std::find(out.begin(), out.end(), file) == out.end()) out.push_back(std::move(file));
  }
  return out;
}

ModuleFound find_and_load_module(const ModuleSpec& spec, const std::function<std::string(const std::string&)>& open) {
  const char* env = std::getenv(spec.env_var.c_str());
  const bool from_env = env != nullptr && *env != '\0';
  const std::vector<std::string> files =
      from_env ? std::vector<std::string>{env} : module_candidates(spec.file_name, spec.build_dir, spec.install_dir);
  std::string tried;
  for (const auto& file : files) {
    std::error_code ec;
    if (!from_env && !fs::exists(file, ec)) {
      tried += "\n  " + file + ": not there";
      continue;
    }
    const std::string why = open(file);
    if (why.empty()) return {file, ""};
    tried += "\n  " + file + ": " + why;
  }
  return {"", "cannot load " + spec.what + " " + spec.file_name + " (build the CMake target " + spec.target +
                  ", or set " + spec.env_var + " to its path)" +
                  (from_env ? "; " + spec.env_var + " is set:" : std::string("; looked for it at:")) + tried};
}

ModuleFound load_module(const ModuleSpec& spec,
                        const std::function<void*(const std::string& file, std::string& error)>& open_file,
                        const std::function<std::string(void* handle)>& resolve) {
  return find_and_load_module(spec, [&](const std::string& file) {
    std::string error;
    void* handle = open_file(file, error);
    if (handle == nullptr) return error;
    error = resolve(handle);
    if (!error.empty()) dlclose(handle);
    return error;
  });
}

std::string resolve_symbols(void* handle, const std::string& module, std::initializer_list<ModuleSymbol> symbols) {
  for (const ModuleSymbol& symbol : symbols) {
    void* address = dlsym(handle, symbol.name);
    if (address == nullptr) return module + " has no symbol " + symbol.name;
    symbol.set(symbol.slot, address);
  }
  return "";
}

std::string check_api_version(void* handle, const std::string& module, const char* version_symbol, int expected) {
  int (*version)() = nullptr;
  std::string error = resolve_symbols(handle, module, {{version_symbol, version}});
  if (!error.empty()) return error;
  const int found = version();
  if (found == expected) return "";
  return module + " has API version " + std::to_string(found) + ", expected " + std::to_string(expected) +
         " (a stale build?)";
}

}  // namespace ddp_embed
