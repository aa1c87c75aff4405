// The Precompiled normalizer of Hugging Face tokenizers (normalizers/precompiled.rs and
// the spm_precompiled crate), byte for byte: the same trie walk (first, i.e. shortest,
// prefix match), the same grapheme rule. The reason to follow tokenizers and not
// sentencepiece (longest match over the whole string) is that transformers' XLM-R
// tokenizer, the reference for ids, runs this one; the two differ on combining marks after
// a mapped character.
#include "tokenize/precompiled_charsmap.h"

#include <cstring>

#include "tokenize/grapheme.h"
#include "tokenize/tokenizer.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
bool has_leaf(uint32_t u) { return (u >> 8) & 1u; }
uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }

}  // namespace

std::string base64_decode(std::string_view text, const std::string& origin) {
  auto digit = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t i = 0;
  for (; i < text.size() && text[i] != '='; ++i) {
    const int d = digit(text[i]);
    if (d < 0) throw TokenizerError(origin + ": not base64 (character at offset " + std::to_string(i) + ")");
    acc = (acc << 6) | uint32_t(d);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xFF));
    }
  }
  for (; i < text.size(); ++i)
    if (text[i] != '=') throw TokenizerError(origin + ": not base64 (data after '=' padding)");
  return out;
}

PrecompiledCharsmap::PrecompiledCharsmap(std::string_view blob, const std::string& origin) {
  if (blob.empty()) return;
  uint32_t trie_bytes = 0;
  if (blob.size() < 4) throw TokenizerError(origin + ": precompiled_charsmap is shorter than its 4-byte header");
  std::memcpy(&trie_bytes, blob.data(), 4);  // little-endian, as x86 and ARM are
  if (trie_bytes % 4 != 0 || trie_bytes == 0 || trie_bytes > blob.size() - 4)
    throw TokenizerError(origin + ": precompiled_charsmap's trie size " + std::to_string(trie_bytes) +
                         " does not fit its " + std::to_string(blob.size()) + " bytes");
  units_.resize(trie_bytes / 4);
  std::memcpy(units_.data(), blob.data() + 4, trie_bytes);
  replacements_.assign(blob.substr(4 + trie_bytes));
  replacements_.push_back('\0');
}

const char* PrecompiledCharsmap::first_match(const char* p, size_t n) const {
  size_t pos = offset(units_[0]);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(p[i]);
    if (c == 0) break;
    pos ^= c;
    if (pos >= units_.size()) return nullptr;
    const uint32_t u = units_[pos];
    if (label(u) != c) return nullptr;
    pos ^= offset(u);
    if (pos >= units_.size()) return nullptr;
    if (has_leaf(u)) {
      const size_t at = value(units_[pos]);
      return at < replacements_.size() ? replacements_.data() + at : nullptr;
    }
  }
  return nullptr;
}

void PrecompiledCharsmap::normalize(std::string_view text, std::string& out) const {
  if (units_.empty()) {
    out.append(text);
    return;
  }
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const size_t g = grapheme::cluster_length(p, end);
    if (g < 6) {
      if (const char* r = first_match(p, g)) {
        out.append(r);
        p += g;
        continue;
      }
    }
    const char* const g_end = p + g;
    while (p < g_end) {
      const char* q = p;
      utf8::decode(q, g_end);
      if (const char* r = first_match(p, size_t(q - p)))
        out.append(r);
      else
        out.append(p, size_t(q - p));
      p = q;
    }
  }
}

}  // namespace ddp_embed
