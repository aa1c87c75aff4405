// Test inputs that a Python script of the project makes (tokenizer folders and the ids
// transformers gives for them, small models of each architecture): made once per build
// folder and made again when the script or its inputs change. ctest runs test processes
// side by side, so the first one takes a lock and makes the folder into a temporary one
// renamed into place; the others wait for the lock and find its stamp.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace python_fixtures {

namespace fs = std::filesystem;

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// A shell command's exit status; its output (stdout and stderr) in `output`.
inline int run_command(const std::string& command, std::string& output) {
  FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, n);
  return ::pclose(pipe);
}

// `target`, made by `command` followed by the folder to write (quoted) unless
// target/stamp holds `stamp` (the script and the inputs it reads, as text). Throws
// std::runtime_error with the command's output when it fails.
inline fs::path made_once(const fs::path& target, const std::string& command, const std::string& stamp) {
  fs::create_directories(target.parent_path());
  const std::string lock_path = target.string() + ".lock";
  const int lock = ::open(lock_path.c_str(), O_CREAT | O_RDWR, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX) != 0) {
    if (lock >= 0) ::close(lock);
    throw std::runtime_error("cannot lock " + lock_path);
  }
  struct Unlock {
    int fd;
    ~Unlock() { ::close(fd); }  // closing the descriptor releases the lock
  } unlock{lock};
  if (read_text(target / "stamp") == stamp) return target;
  std::string tmp = target.string() + ".tmp-XXXXXX";
  if (!::mkdtemp(tmp.data())) throw std::runtime_error("mkdtemp " + tmp);
  std::string output;
  const int rc = run_command("HF_HUB_OFFLINE=1 " + command + " " + shell_quote(tmp), output);
  if (rc != 0) {
    fs::remove_all(tmp);
    throw std::runtime_error(command + " failed (status " + std::to_string(rc) + "):\n" + output);
  }
  std::ofstream(fs::path(tmp) / "stamp", std::ios::binary) << stamp;
  fs::remove_all(target);
  fs::rename(tmp, target);
  return target;
}

#if defined(DDP_EMBED_SOURCE_DIR) && defined(DDP_EMBED_BINARY_DIR) && defined(DDP_EMBED_PYTHON)
// build/test-fixtures/<folder>, made by `python scripts/python/<script> <args> FOLDER` once
// for the script's contents (and those of `more_scripts`, which it imports).
inline fs::path made_by_script(const std::string& script, const std::string& folder, const std::string& args = "",
                               const std::vector<std::string>& more_scripts = {}) {
  const fs::path scripts = fs::path(DDP_EMBED_SOURCE_DIR) / "scripts/python";
  std::string stamp = read_text(scripts / script);
  for (const auto& more : more_scripts) stamp += read_text(scripts / more);
  return made_once(fs::path(DDP_EMBED_BINARY_DIR) / "test-fixtures" / folder,
                   shell_quote(DDP_EMBED_PYTHON) + " " + shell_quote((scripts / script).string()) +
                       (args.empty() ? "" : " " + args),
                   stamp + args);
}
#endif

}  // namespace python_fixtures
