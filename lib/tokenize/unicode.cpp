#include "tokenize/unicode.h"

#include <algorithm>
#include <iterator>

namespace ddp_embed {
namespace unicode {
namespace {

struct LowerRun {
  uint32_t first, last, stride;
  int32_t delta;
};

struct MultiMapping {
  uint32_t cp;
  uint32_t count;
  uint32_t out[3];
};

#include "tokenize/unicode_tables.inc"

// Hangul syllables decompose by arithmetic (Unicode chapter 3.12) rather than by table.
constexpr char32_t kHangulFirst = 0xAC00, kHangulLast = 0xD7A3;
constexpr char32_t kLeadBase = 0x1100, kVowelBase = 0x1161, kTrailBase = 0x11A7;
constexpr char32_t kVowelCount = 21, kTrailCount = 28;

template <typename Table, typename Key>
const auto* find_exact(const Table& table, char32_t cp, Key key) {
  auto it = std::lower_bound(std::begin(table), std::end(table), cp,
                             [&](const auto& entry, char32_t c) { return key(entry) < c; });
  return (it != std::end(table) && key(*it) == cp) ? &*it : nullptr;
}

}  // namespace

CharClass char_class(char32_t cp) {
  if (cp < 128) return static_cast<CharClass>(kAsciiClass[cp]);
  if (cp > 0x10FFFF) return CharClass::Control;
  // The last run starting at or before cp.
  const uint32_t key = (static_cast<uint32_t>(cp) << 3) | 7u;
  auto it = std::upper_bound(std::begin(kClassRuns), std::end(kClassRuns), key);
  return static_cast<CharClass>(*(it - 1) & 7u);
}

int to_lower(char32_t cp, char32_t out[3]) {
  if (cp < 128) {
    out[0] = (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
    return 1;
  }
  if (const auto* m = find_exact(kLowerMulti, cp, [](const MultiMapping& e) { return e.cp; })) {
    for (uint32_t i = 0; i < m->count; ++i) out[i] = m->out[i];
    return static_cast<int>(m->count);
  }
  auto it = std::upper_bound(std::begin(kLowerRuns), std::end(kLowerRuns), cp,
                             [](char32_t c, const LowerRun& r) { return c < r.first; });
  out[0] = cp;
  if (it != std::begin(kLowerRuns)) {
    const LowerRun& run = *(it - 1);
    if (cp <= run.last && (cp - run.first) % run.stride == 0)
      out[0] = static_cast<char32_t>(static_cast<int64_t>(cp) + run.delta);
  }
  return 1;
}

int strip_accents(char32_t cp, char32_t out[3]) {
  if (cp < 128) {
    out[0] = cp;
    return 1;
  }
  if (cp >= kHangulFirst && cp <= kHangulLast) {
    const char32_t index = cp - kHangulFirst;
    out[0] = kLeadBase + index / (kVowelCount * kTrailCount);
    out[1] = kVowelBase + (index % (kVowelCount * kTrailCount)) / kTrailCount;
    const char32_t trail = index % kTrailCount;
    if (trail == 0) return 2;
    out[2] = kTrailBase + trail;
    return 3;
  }
  if (const auto* s = find_exact(kStripSingle, cp, [](const uint32_t(&e)[2]) { return e[0]; })) {
    out[0] = (*s)[1];
    return 1;
  }
  if (const auto* m = find_exact(kStripMulti, cp, [](const MultiMapping& e) { return e.cp; })) {
    for (uint32_t i = 0; i < m->count; ++i) out[i] = m->out[i];
    return static_cast<int>(m->count);
  }
  if (char_class(cp) == CharClass::Mark) return 0;
  out[0] = cp;
  return 1;
}

}  // namespace unicode
}  // namespace ddp_embed
