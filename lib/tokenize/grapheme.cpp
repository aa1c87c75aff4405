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
  uint8_t value;  // Gcb | InCB << 4
};
#include "tokenize/grapheme_table.inc"

}  // namespace

Properties properties(char32_t cp) {
  if (cp < 0x20) return {cp == '\r' ? Gcb::CR : cp == '\n' ? Gcb::LF : Gcb::Control, InCB::None};
  if (cp < 0x7F) return {Gcb::Other, InCB::None};
  const auto* end = std::end(kGraphemeRuns);
  const auto* it = std::upper_bound(std::begin(kGraphemeRuns), end, cp,
                                    [](char32_t c, const GraphemeRun& r) { return c < r.first; });
  if (it == std::begin(kGraphemeRuns) || cp > (--it)->last) return {Gcb::Other, InCB::None};
  return {static_cast<Gcb>(it->value & 0xF), static_cast<InCB>(it->value >> 4)};
}

size_t cluster_length(const char* p, const char* end) {
  const char* const start = p;
  const Properties first = properties(utf8::decode(p, end));
  Gcb prev = first.gcb;
  bool emoji = prev == Gcb::ExtPict;          // GB11: ExtPict Extend* so far
  bool emoji_zwj = false;                      // ... followed by ZWJ
  int regional = prev == Gcb::RegionalIndicator ? 1 : 0;  // RIs in a row so far
  // GB9c: 1 after an InCB Consonant (Extend* since), 2 once a Linker followed it.
  int conjunct = first.incb == InCB::Consonant ? 1 : 0;
  while (p < end) {
    const char* next = p;
    const Properties props = properties(utf8::decode(next, end));
    const Gcb cur = props.gcb;
    bool join;
    if (prev == Gcb::CR && cur == Gcb::LF) join = true;                                  // GB3
    else if (prev == Gcb::CR || prev == Gcb::LF || prev == Gcb::Control) join = false;   // GB4
    else if (cur == Gcb::CR || cur == Gcb::LF || cur == Gcb::Control) join = false;      // GB5
    else if (prev == Gcb::L && (cur == Gcb::L || cur == Gcb::V || cur == Gcb::LV || cur == Gcb::LVT)) join = true;
    else if ((prev == Gcb::LV || prev == Gcb::V) && (cur == Gcb::V || cur == Gcb::T)) join = true;   // GB7
    else if ((prev == Gcb::LVT || prev == Gcb::T) && cur == Gcb::T) join = true;                     // GB8
    else if (cur == Gcb::Extend || cur == Gcb::ZWJ || cur == Gcb::SpacingMark) join = true;  // GB9, GB9a
    else if (prev == Gcb::Prepend) join = true;                                                  // GB9b
    else if (conjunct == 2 && props.incb == InCB::Consonant) join = true;                        // GB9c
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
    if (props.incb == InCB::Consonant) conjunct = 1;
    else if (props.incb == InCB::Linker && conjunct) conjunct = 2;
    else if (props.incb != InCB::Extend) conjunct = 0;
    prev = cur;
    p = next;
  }
  return static_cast<size_t>(p - start);
}

}  // namespace grapheme
}  // namespace ddp_embed
