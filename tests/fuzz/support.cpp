// What the fuzz targets share: the checks, BERT's vocabulary, WordPiece options from a
// byte and the properties of an encoding (fuzz_targets.h).
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "fuzz_targets.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed::fuzz {

void fail(const std::string& what) { throw CheckFailure("fuzz check failed: " + what); }

const std::vector<std::string>& bert_vocab() {
  static const std::vector<std::string> vocab = [] {
    const auto path = std::filesystem::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden/vocab.txt";
    std::ifstream in(path, std::ios::binary);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return parse_vocab(text, path.string());
  }();
  return vocab;
}

WordPieceOptions wordpiece_options(uint8_t bits) {
  WordPieceOptions options;
  options.lower_case = bits & 1;
  if (bits & 2) options.strip_accents = (bits & 4) != 0;
  options.tokenize_chinese_chars = bits & 8;
  return options;
}

void check_encoding(const WordPieceTokenizer& tokenizer, std::string_view text, int max_length) {
  const std::vector<int32_t> full = tokenizer.encode(text, 0);
  const std::vector<int32_t> cut = tokenizer.encode(text, max_length);
  const SpecialIds special = tokenizer.special();
  check(full.size() >= 2 && full.front() == special.cls && full.back() == special.sep,
        "an encoding does not run from [CLS] to [SEP]");
  for (int32_t id : full) check(id >= 0 && id < tokenizer.vocab_size(), "token id out of range");

  // Truncation keeps [CLS], the first pieces and [SEP]: max(max_length, 2) ids at most.
  const size_t room = static_cast<size_t>(std::max(max_length, 2) - 2);
  const size_t kept = std::min(room, full.size() - 2);
  std::vector<int32_t> expected(full.begin(), full.begin() + 1 + static_cast<long>(kept));
  expected.push_back(special.sep);
  if (max_length <= 0) expected = full;
  check(cut == expected, "a truncated encoding is not the full one cut short");
}

}  // namespace ddp_embed::fuzz
