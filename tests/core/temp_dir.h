// The tests' one scratch folder: fresh under the temp dir when made, removed with
// everything in it when it goes out of scope. The process id keeps parallel test
// processes apart; `name` keeps a test's folders apart.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ddp_embed::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& name = "scratch")
      : path(std::filesystem::temp_directory_path() / ("ddp_embed_" + name + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ignored;  // a test that failed half-way may leave it in any state
    std::filesystem::remove_all(path, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
  // Writes `content` to the file `name` in the folder; returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
};

}  // namespace ddp_embed::testing
