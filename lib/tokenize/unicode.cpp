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

const char* unicode_version() { return kUnicodeVersion; }

CharClass char_class(char32_t cp) {
  if (cp < 128) return static_cast<CharClass>(kAsciiClass[cp]);
  if (cp > 0x10FFFF) return CharClass::Control;
  // The last run starting at or before cp.
  const uint32_t key = (static_cast<uint32_t>(cp) << 3) | 7u;
  auto it = std::upper_bound(std::begin(kClassRuns), std::end(kClassRuns), key);
  return static_cast<CharClass>(*(it - 1) & 7u);
}

char32_t decode_utf8(const char*& p, const char* end) {
  const auto* s = reinterpret_cast<const unsigned char*>(p);
  const auto* e = reinterpret_cast<const unsigned char*>(end);
  const unsigned char b0 = s[0];
  if (b0 < 0x80) {
    p += 1;
    return b0;
  }
  int need;  // continuation bytes after the lead
  char32_t cp;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the first continuation byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    p += 1;  // stray continuation byte, C0, C1, F5..FF
    return kInvalid;
  }
  const unsigned char* q = s + 1;
  for (int i = 0; i < need; ++i, ++q) {
    if (q >= e || *q < lo || *q > hi) {
      p = reinterpret_cast<const char*>(q);  // drop the lead and the valid part only
      return kInvalid;
    }
    cp = (cp << 6) | (*q & 0x3F);
    lo = 0x80;
    hi = 0xBF;
  }
  p = reinterpret_cast<const char*>(q);
  return cp;
}

bool is_valid_utf8(const char* p, const char* end) {
  while (p < end) {
    if (static_cast<unsigned char>(*p) < 0x80) {
      ++p;
      continue;
    }
    if (decode_utf8(p, end) == kInvalid) return false;
  }
  return true;
}

std::string replace_ill_formed(const char* p, const char* end) {
  std::string out;
  out.reserve(static_cast<size_t>(end - p) + 8);
  while (p < end) {
    const char* start = p;
    if (decode_utf8(p, end) == kInvalid)
      append_utf8(out, kReplacementCharacter);
    else
      out.append(start, p);
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
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
