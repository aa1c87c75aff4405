// A vocab.txt from arbitrary bytes: parse_vocab() and the WordPieceTokenizer built on it
// give a TokenizerError (no [UNK], [CLS] or [SEP]) or a tokenizer whose encodings keep
// the properties that fuzz_wordpiece checks. Byte 0 picks the options; with bit 4 set the
// special tokens are the vocabulary's first five entries, whatever they are (a
// tokenizer_config.json may name any text), so that odd special tokens meet odd text.
#include <memory>
#include <string>

#include "fuzz_targets.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed::fuzz {
namespace {

constexpr uint8_t kSpecialsFromVocab = 16;

WordPieceOptions options_for(uint8_t bits, const std::vector<std::string>& vocab) {
  WordPieceOptions options = wordpiece_options(bits);
  if ((bits & kSpecialsFromVocab) && vocab.size() >= 5) {
    options.unk_token = vocab[0];
    options.cls_token = vocab[1];
    options.sep_token = vocab[2];
    options.pad_token = vocab[3];
    options.mask_token = vocab[4];
  }
  return options;
}

}  // namespace

int fuzz_vocab(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t nul = input.find('\0');
  const std::string_view vocab_text = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? "" : input.substr(nul + 1);
  std::unique_ptr<WordPieceTokenizer> tokenizer;
  try {
    std::vector<std::string> vocab = parse_vocab(vocab_text, "fuzz/vocab.txt");
    const size_t entries = vocab.size();
    WordPieceOptions options = options_for(data[0], vocab);
    tokenizer = std::make_unique<WordPieceTokenizer>(std::move(vocab), std::move(options), "fuzz/vocab.txt");
    check(static_cast<size_t>(tokenizer->vocab_size()) == entries, "vocab_size() != lines");
  } catch (const TokenizerError&) {
    return 0;
  }
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id)
    check(tokenizer->token(id).find_first_of("\r\n") == std::string::npos, "an entry holds a line break");
  check_encoding(*tokenizer, text, 0);
  check_encoding(*tokenizer, text, 5);
  return 0;
}

}  // namespace ddp_embed::fuzz
