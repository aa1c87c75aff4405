#include "util/utf8.h"

namespace ddp_embed::utf8 {

char32_t decode(const char*& p, const char* end) {
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

bool is_valid(const char* p, const char* end) {
  while (p < end) {
    if (static_cast<unsigned char>(*p) < 0x80) {
      ++p;
      continue;
    }
    if (decode(p, end) == kInvalid) return false;
  }
  return true;
}

std::string replace_ill_formed(const char* p, const char* end) {
  std::string out;
  out.reserve(static_cast<size_t>(end - p) + 8);
  while (p < end) {
    const char* start = p;
    if (decode(p, end) == kInvalid)
      append(out, kReplacementCharacter);
    else
      out.append(start, p);
  }
  return out;
}

void append(std::string& out, char32_t cp) {
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

}  // namespace ddp_embed::utf8
