#include "util/module_search.h"

#include <algorithm>
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

}  // namespace ddp_embed
