// Regex classes and NFC for the BPE tokenizer (unicode_bpe.h). NFC is the textbook
// algorithm (UAX #15): decompose every code point fully (tables, Hangul by arithmetic),
// sort each run of non-starters stably by combining class, then compose left to right,
// a mark joining the last starter unless a mark of the same or higher class (or a starter)
// stands between them. Tables: unicode_bpe_tables.inc.
#include "tokenize/unicode_bpe.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "util/utf8.h"

namespace ddp_embed::unicode {
namespace {

struct CccRun {
  uint32_t first, last, ccc;
};
struct Decomp {
  uint32_t cp, offset, length;
};
struct Compose {
  uint32_t first, second, composite;
};

#include "tokenize/unicode_bpe_tables.inc"

constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr int kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

int ccc(char32_t cp) {
  if (cp < 0x300) return 0;
  const auto it = std::upper_bound(std::begin(kCccRuns), std::end(kCccRuns), cp,
                                   [](char32_t c, const CccRun& r) { return c < r.first; });
  if (it == std::begin(kCccRuns)) return 0;
  const CccRun& r = *std::prev(it);
  return cp <= r.last ? static_cast<int>(r.ccc) : 0;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V (T)
    const char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto it = std::lower_bound(std::begin(kDecomp), std::end(kDecomp), cp,
                                   [](const Decomp& d, char32_t c) { return d.cp < c; });
  if (it == std::end(kDecomp) || it->cp != cp) {
    out.push_back(cp);
    return;
  }
  for (uint32_t i = 0; i < it->length; ++i) out.push_back(kDecompData[it->offset + i]);
}

// The primary composite of (a, b), or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase && b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto it = std::lower_bound(std::begin(kCompose), std::end(kCompose), std::make_pair(a, b),
                                   [](const Compose& c, const std::pair<char32_t, char32_t>& k) {
                                     return c.first != k.first ? c.first < k.first : c.second < k.second;
                                   });
  return it != std::end(kCompose) && it->first == a && it->second == b ? it->composite : 0;
}

}  // namespace

RegexClass regex_class(char32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    return cp >= '0' && cp <= '9' ? kNumber : kOther;
  }
  const auto it = std::upper_bound(std::begin(kRegexRuns), std::end(kRegexRuns), cp,
                                   [](char32_t c, uint32_t run) { return c < (run >> 2); });
  return it == std::begin(kRegexRuns) ? kOther : static_cast<RegexClass>(*std::prev(it) & 3);
}

bool is_regex_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string nfc(std::string_view text) {
  // 0xCC 0x80 is U+0300: a text whose bytes are all below 0xCC holds nothing from U+0300 up.
  if (std::all_of(text.begin(), text.end(), [](char b) { return static_cast<unsigned char>(b) < 0xCC; }))
    return std::string(text);
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (const char *p = text.data(), *end = p + text.size(); p < end;) decompose(utf8::decode(p, end), cps);
  // Canonical order: stable sort of each run of non-starters by combining class.
  for (size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + i, cps.begin() + j, [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // Composition.
  std::vector<char32_t> out;
  out.reserve(cps.size());
  size_t starter = SIZE_MAX;  // index in out of the last starter
  int last_ccc = -1;          // class of the last character kept after that starter
  for (char32_t c : cps) {
    const int cc = ccc(c);
    if (starter != SIZE_MAX && (last_ccc < cc || (last_ccc == 0 && out.size() == starter + 1))) {
      if (const char32_t composite = compose(out[starter], c)) {
        out[starter] = composite;
        continue;
      }
    }
    if (cc == 0) {
      starter = out.size();
      last_ccc = 0;
    } else {
      last_ccc = cc;
    }
    out.push_back(c);
  }
  std::string result;
  result.reserve(text.size());
  for (char32_t c : out) utf8::append(result, c);
  return result;
}

}  // namespace ddp_embed::unicode
