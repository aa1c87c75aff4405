// WordPieceTokenizer::encode() of arbitrary bytes (valid UTF-8 or not) with BERT's
// vocabulary: [CLS] ids... [SEP], every id in the vocabulary, at most max_length ids,
// and a truncated encoding is the full one cut short.
#include <map>
#include <memory>
#include <string>

#include "fuzz_targets.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed::fuzz {
namespace {

// One tokenizer per option set, built on first use.
const WordPieceTokenizer& bert(uint8_t bits) {
  static std::map<uint8_t, std::unique_ptr<WordPieceTokenizer>> tokenizers;
  auto& slot = tokenizers[bits & 15];
  if (!slot) slot = std::make_unique<WordPieceTokenizer>(bert_vocab(), wordpiece_options(bits));
  return *slot;
}

}  // namespace

int fuzz_wordpiece(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const WordPieceTokenizer& tokenizer = bert(data[0]);
  const int max_length = data[1];  // 0: no limit
  check_encoding(tokenizer, std::string_view(reinterpret_cast<const char*>(data) + 2, size - 2), max_length);
  return 0;
}

}  // namespace ddp_embed::fuzz
