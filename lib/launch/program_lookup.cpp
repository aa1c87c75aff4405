// Finding PROGRAM: on PATH like a shell would, then beside ddp-launch itself, so that
// `ddp-launch embed-train` works from a build or install folder that is not on PATH.
#include <sys/stat.h>
#include <unistd.h>

#include <climits>

#include "launch/launcher.h"

namespace ddp_embed::launch {
namespace {

bool is_executable_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

}  // namespace

std::string find_program(const std::string& program, const std::string& path_env,
                         const std::string& self_dir) {
  if (program.empty()) return "";
  if (program.find('/') != std::string::npos)
    return is_executable_file(program) ? program : "";

  size_t start = 0;
  while (start <= path_env.size()) {
    size_t colon = path_env.find(':', start);
    std::string dir = path_env.substr(start, colon == std::string::npos ? colon : colon - start);
    // An empty PATH entry means the current directory, as in POSIX shells.
    std::string candidate = join(dir.empty() ? "." : dir, program);
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (!self_dir.empty()) {
    std::string candidate = join(self_dir, program);
    if (is_executable_file(candidate)) return candidate;
  }
  return "";
}

std::string self_exe_dir() {
  char buffer[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof buffer - 1);
  if (n <= 0) return "";
  std::string path(buffer, static_cast<size_t>(n));
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash == 0 ? 1 : slash);
}

}  // namespace ddp_embed::launch
