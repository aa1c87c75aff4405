// What the data tests share: the golden BERT vocabulary's WordPiece tokenizer and a
// temporary folder that cleans up after itself.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tokenize/wordpiece.h"
#include "temp_dir.h"

namespace ddp_embed::testing {

namespace fs = std::filesystem;

inline const fs::path kVocab = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden/vocab.txt";

// Lower-casing, as bert-base-uncased.
inline const Tokenizer& bert() {
  static const auto tokenizer = WordPieceTokenizer::load(kVocab.string(), true);
  return *tokenizer;
}

}  // namespace ddp_embed::testing
