// What the data tests share: the golden BERT vocabulary's WordPiece tokenizer and a
// temporary folder that cleans up after itself.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenize/wordpiece.h"

namespace ddp_embed::testing {

namespace fs = std::filesystem;

inline const fs::path kVocab = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden/vocab.txt";

// Lower-casing, as bert-base-uncased.
inline const Tokenizer& bert() {
  static const auto tokenizer = WordPieceTokenizer::load(kVocab.string(), true);
  return *tokenizer;
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("ddp_embed_data_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  fs::path operator/(const std::string& name) const { return path / name; }
  // Writes `content` to the file `name` in the folder; returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    std::ofstream(path / name, std::ios::binary) << content;
    return (path / name).string();
  }
};

}  // namespace ddp_embed::testing
