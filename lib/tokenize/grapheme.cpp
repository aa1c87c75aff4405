// UAX #29's extended grapheme cluster rules over the generated property table. Only what
// tokenizers' Precompiled normalizer needs: where the next cluster ends.
#include "tokenize/grapheme.h"

#include <algorithm>
#include <iterator>

#include "util/utf8.h"

namespace ddp_embed {
namespace grapheme {
namespace {

struct GraphemeRun {
  char32_t first, last;
  uint8_t gcb;
};
#include "tokenize/grapheme_table.inc"

}  // namespace

Gcb property(char32_t cp) {
  if (cp < 0x20) return cp == '\r' ? Gcb::CR : cp == '\n' ? Gcb::LF : Gcb::Control;
  if (cp < 0x7F) return Gcb::Other;
  const auto* end = std::end(kGraphemeRuns);
  const auto* it = std::upper_bound(std::begin(kGraphemeRuns), end, cp,
                                    [](char32_t c, const GraphemeRun& r) { return c < r.first; });
  if (it == std::begin(kGraphemeRuns)) return Gcb::Other;
  --it;
  return cp <= it->last ? static_cast<Gcb>(it->gcb) : Gcb::Other;
}

size_t cluster_length(const char* p, const char* end) {
  const char* const start = p;
  Gcb prev = property(utf8::decode(p, end));
  bool emoji = prev == Gcb::ExtPict;          // GB11: ExtPict Extend* so far
  bool emoji_zwj = false;                      // ... followed by ZWJ
  int regional = prev == Gcb::RegionalIndicator ? 1 : 0;  // RIs in a row so far
  while (p < end) {
    const char* next = p;
    const Gcb cur = property(utf8::decode(next, end));
    bool join;
    if (prev == Gcb::CR && cur == Gcb::LF) join = true;                                  // GB3
    else if (prev == Gcb::CR || prev == Gcb::LF || prev == Gcb::Control) join = false;   // GB4
    else if (cur == Gcb::CR || cur == Gcb::LF || cur == Gcb::Control) join = false;      // GB5
    else if (prev == Gcb::L && (cur == Gcb::L || cur == Gcb::V || cur == Gcb::LV || cur == Gcb::LVT)) join = true;
    else if ((prev == Gcb::LV || prev == Gcb::V) && (cur == Gcb::V || cur == Gcb::T)) join = true;   // GB7
    else if ((prev == Gcb::LVT || prev == Gcb::T) && cur == Gcb::T) join = true;                     // GB8
    else if (cur == Gcb::Extend || cur == Gcb::ZWJ || cur == Gcb::SpacingMark) join = true;  // GB9, GB9a
    else if (prev == Gcb::Prepend) join = true;                                                  // GB9b
    else if (emoji_zwj && cur == Gcb::ExtPict) join = true;                                      // GB11
    else if (prev == Gcb::RegionalIndicator && cur == Gcb::RegionalIndicator) join = regional % 2 == 1;  // GB12/13
    else join = false;
    if (!join) break;
    // The GB11 and GB12/13 state after cur.
    if (cur == Gcb::ExtPict) emoji = true, emoji_zwj = false;
    else if (cur == Gcb::Extend) emoji_zwj = false;
    else if (cur == Gcb::ZWJ) emoji_zwj = emoji, emoji = false;
    else emoji = emoji_zwj = false;
    regional = cur == Gcb::RegionalIndicator ? regional + 1 : 0;
    prev = cur;
    p = next;
  }
  return static_cast<size_t>(p - start);
}

}  // namespace grapheme
}  // namespace ddp_embed
