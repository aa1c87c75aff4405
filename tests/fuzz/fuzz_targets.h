// Fuzz targets for the readers of untrusted input: one plain function per reader, taking
// arbitrary bytes.
//
// A target feeds the bytes to the reader. The reader's own error (SafetensorsError,
// DataError, ...) is a correct answer; on success the target checks properties of what
// came back and throws CheckFailure when one does not hold. Any other exception, a
// failed check or a sanitizer report is a bug.
//
// The same functions run in two places, so that they cannot rot:
//  - libFuzzer, one executable per target (libfuzzer_main.cpp, built with -DDDP_EMBED_FUZZ=ON
//    by scripts/fuzz.sh);
//  - the unit tests, which replay every seed in tests/fuzz/corpus/<target>/ and every
//    crash input kept in tests/fuzz/regressions/<target>/ (tests/core/test_fuzz_replay.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {
class WordPieceTokenizer;
struct WordPieceOptions;
}

namespace ddp_embed::fuzz {

// A property of a reader's result that does not hold.
struct CheckFailure : std::logic_error {
  using std::logic_error::logic_error;
};

// Throws CheckFailure("fuzz check failed: WHAT").
[[noreturn]] void fail(const std::string& what);
// fail(what) when `ok` is false; `what` is a literal, so a passing check costs nothing.
inline void check(bool ok, const char* what) {
  if (!ok) fail(what);
}

// The entries of tests/fixtures/golden/vocab.txt (BERT's uncased vocabulary), read once.
const std::vector<std::string>& bert_vocab();

// WordPieceOptions from the bits of a byte: bit 0 lower_case, bit 1 "strip_accents is
// set", bit 2 its value, bit 3 tokenize_chinese_chars.
WordPieceOptions wordpiece_options(uint8_t bits);

// The properties of tokenizer.encode(text, max_length): [CLS] ids... [SEP], every id in
// the vocabulary, and the encoding is the unlimited one cut short (max_length <= 0: none).
void check_encoding(const WordPieceTokenizer& tokenizer, std::string_view text, int max_length);

// io/safetensors.h: parse_safetensors() of the bytes.
int fuzz_safetensors(const uint8_t* data, size_t size);
// data/pairs.h: the bytes as a JSONL pair file, tokenized with BERT's vocabulary.
int fuzz_pairs(const uint8_t* data, size_t size);
// config/config.h: the bytes as a config file; its lines that start with "--set " are
// taken out and applied as `--set KEY=VALUE` overrides instead.
int fuzz_config(const uint8_t* data, size_t size);
// tokenize/wordpiece.h: byte 0 picks the options, byte 1 max_length, the rest is text.
int fuzz_wordpiece(const uint8_t* data, size_t size);
// tokenize/wordpiece.h: byte 0 picks the options (bit 4: the special tokens are the
// vocabulary's first five entries), then a vocab.txt up to the first NUL byte, then a
// text to encode.
int fuzz_vocab(const uint8_t* data, size_t size);
// io/manifest.h: the bytes as a checkpoint's manifest.json.
int fuzz_manifest(const uint8_t* data, size_t size);
// data/prepared.h: the bytes as a prepared folder (manifest.json, NUL, the arrays), opened
// and verified; fuzz_prepared.cpp says how the arrays are cut and when the checksums are
// made to match.
int fuzz_prepared(const uint8_t* data, size_t size);
// tokenize/tokenizer.h: the bytes as a model folder's tokenizer.json (BPE, Unigram or
// WordPiece), loaded and used.
int fuzz_tokenizer_json(const uint8_t* data, size_t size);
// launch/rendezvous_protocol.h and rendezvous_rounds.h: the bytes as lines a rendezvous
// server reads from its launchers ("N T JSON" or "N T lost"), fed to its decisions.
int fuzz_rendezvous(const uint8_t* data, size_t size);

}  // namespace ddp_embed::fuzz
