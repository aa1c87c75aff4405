// sentencepiece's precompiled_charsmap (the nmt_nfkc normalization rules a .model or a
// tokenizer.json "Precompiled" normalizer carries), applied as Hugging Face tokenizers
// applies it — which is not how sentencepiece does: per extended grapheme cluster, a
// cluster shorter than 6 bytes whose bytes start with a key is replaced by that key's
// mapping as a whole ("ｗ" + U+033D → "w"), longer clusters character by character.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {

class PrecompiledCharsmap {
 public:
  PrecompiledCharsmap() = default;  // maps nothing
  // The charsmap bytes (u32 trie size, Darts double-array units, NUL-terminated
  // replacements); throws TokenizerError naming `origin` when they are malformed.
  PrecompiledCharsmap(std::string_view blob, const std::string& origin);

  bool empty() const { return units_.empty(); }
  // Appends the normalized `text` (well-formed UTF-8) to out.
  void normalize(std::string_view text, std::string& out) const;

 private:
  // The replacement of the shortest key that is a prefix of [p, p+n), or nullptr.
  const char* first_match(const char* p, size_t n) const;

  std::vector<uint32_t> units_;
  std::string replacements_;  // NUL-terminated strings (a NUL appended at the end)
};

// Standard base64 (the charsmap in tokenizer.json); throws TokenizerError naming `origin`.
std::string base64_decode(std::string_view text, const std::string& origin);

}  // namespace ddp_embed
