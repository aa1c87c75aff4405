#include "util/file_check.h"

#include <sys/stat.h>

#include <filesystem>
#include <system_error>

namespace ddp_embed {

namespace fs = std::filesystem;

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path x = fs::weakly_canonical(a, ec), y = fs::weakly_canonical(b, ec);
  return x == y;
}

std::string folder_not_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "";
  return path + " is a folder, not " + what;
}

}  // namespace ddp_embed
