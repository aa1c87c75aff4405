// A Hugging Face tokenizer.json of arbitrary bytes, loaded as a model folder's tokenizer
// is (load_tokenizer "auto": the file's model type picks BPE, Unigram or WordPiece): a
// TokenizerError, or a tokenizer whose encodings of a few texts hold ids of its
// vocabulary, at most max_length of them.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "fuzz_targets.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed::fuzz {
namespace {

namespace fs = std::filesystem;

const fs::path& folder() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("ddp-embed-fuzz-tokenizer-" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

}  // namespace

int fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  {
    std::ofstream out(folder() / "tokenizer.json", std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  std::unique_ptr<Tokenizer> tokenizer;
  try {
    tokenizer = load_tokenizer("auto", folder().string(), /*lower_case=*/true);
  } catch (const TokenizerError&) {
    return 0;
  }
  check(tokenizer->vocab_size() > 0, "a tokenizer without a vocabulary loaded");
  for (const char* text : {"Hello, World! It's 2024.", "Ünïcödé café naïve 東京", "", "   \t\n", "a-b_c d.e"}) {
    for (int max_length : {0, 3, 16}) {
      const std::vector<int32_t> ids = tokenizer->encode(text, max_length);
      if (max_length > 0) check(ids.size() <= size_t(max_length), "an encoding longer than max_length");
      for (int32_t id : ids) check(id >= 0 && id < tokenizer->vocab_size(), "a token id outside the vocabulary");
    }
  }
  return 0;
}

}  // namespace ddp_embed::fuzz
