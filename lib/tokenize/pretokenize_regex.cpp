// Hand-written matchers for the three pre-tokenizer regexes (pretokenize_regex.h). Each
// match() returns where the match that starts at code point i ends; every alternative is
// commented with the part of the pattern it implements and how backtracking resolves it.
#include "tokenize/pretokenize_regex.h"

#include <cstdint>

#include "tokenize/unicode_bpe.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

constexpr std::string_view kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kCl100k =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

enum Kind : uint8_t { kOther, kLetter, kNumber, kSpace };

struct Text {
  std::vector<char32_t> cp;
  std::vector<uint8_t> kind;
  std::vector<size_t> offset;  // byte offset of each code point, and the text's size last
  size_t n = 0;

  bool is(size_t i, Kind k) const { return i < n && kind[i] == k; }
  bool is_cr_lf(size_t i) const { return i < n && (cp[i] == '\r' || cp[i] == '\n'); }
  size_t run(size_t i, Kind k) const {  // end of the run of k that starts at i
    while (i < n && kind[i] == k) ++i;
    return i;
  }
};

// (?i:x) for the contraction letters: Unicode simple case folding, where only s has a third
// member (U+017F LONG S, probed from tokenizers).
char32_t fold(char32_t c, bool ignore_case) {
  if (!ignore_case) return c;
  if (c >= 'A' && c <= 'Z') return c + 32;
  return c == 0x17F ? U's' : c;
}

// 's|'t|'re|'ve|'m|'ll|'d: the alternatives differ in their first letter, so at most one
// can match.
size_t contraction(const Text& t, size_t i, bool ignore_case) {
  if (t.cp[i] != '\'' || i + 1 >= t.n) return 0;
  const char32_t a = fold(t.cp[i + 1], ignore_case);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 >= t.n) return 0;
  const char32_t b = fold(t.cp[i + 2], ignore_case);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  return 0;
}

// \s+(?!\S)|\s+ at a space: the whole run if it ends the text or is one character long,
// else the run less its last space (which then leads the next piece).
size_t spaces(const Text& t, size_t i) {
  const size_t end = t.run(i, kSpace);
  return end == t.n || end - i == 1 ? end : end - 1;
}

size_t match_qwen(const Text& t, size_t i, size_t max_digits) {
  if (const size_t end = contraction(t, i, true)) return end;
  // [^\r\n\p{L}\p{N}]?\p{L}+: one leading non-letter (space included) if a letter follows.
  if (!t.is(i, kLetter) && !t.is(i, kNumber) && !t.is_cr_lf(i) && t.is(i + 1, kLetter)) return t.run(i + 1, kLetter);
  if (t.is(i, kLetter)) return t.run(i, kLetter);
  // \p{N} or \p{N}{1,3}
  if (t.is(i, kNumber)) {
    size_t end = i;
    while (end < t.n && end - i < max_digits && t.kind[end] == kNumber) ++end;
    return end;
  }
  // ` ?[^\s\p{L}\p{N}]+[\r\n]*`
  const size_t from = t.cp[i] == ' ' && t.is(i + 1, kOther) ? i + 1 : i;
  if (t.is(from, kOther)) {
    size_t end = t.run(from, kOther);
    while (t.is_cr_lf(end)) ++end;
    return end;
  }
  // Here t.cp[i] is a space. \s*[\r\n]+: \s* gives back up to the run's last \r or \n.
  const size_t run_end = t.run(i, kSpace);
  for (size_t j = run_end; j > i; --j)
    if (t.is_cr_lf(j - 1)) return j;
  return spaces(t, i);
}

size_t match_gpt2(const Text& t, size_t i) {
  if (const size_t end = contraction(t, i, false)) return end;
  // ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`: an optional leading U+0020, then a run of one kind.
  const size_t from = t.cp[i] == ' ' && i + 1 < t.n && t.kind[i + 1] != kSpace ? i + 1 : i;
  if (t.kind[from] != kSpace) return t.run(from, static_cast<Kind>(t.kind[from]));
  return spaces(t, i);
}

}  // namespace

std::optional<PretokenizePattern> identify_pattern(std::string_view regex) {
  if (regex == kQwen2) return PretokenizePattern::Qwen2;
  if (regex == kCl100k) return PretokenizePattern::Cl100k;
  if (regex == kGpt2) return PretokenizePattern::Gpt2;
  return std::nullopt;
}

std::string supported_patterns() {
  return "  " + std::string(kQwen2) + "\n  " + std::string(kCl100k) + "\n  " + std::string(kGpt2);
}

void split_pattern(PretokenizePattern pattern, std::string_view text,
                   std::vector<std::pair<size_t, size_t>>& pieces) {
  thread_local Text t;
  t.cp.clear();
  t.kind.clear();
  t.offset.clear();
  for (const char *p = text.data(), *end = p + text.size(); p < end;) {
    t.offset.push_back(static_cast<size_t>(p - text.data()));
    const char32_t c = utf8::decode(p, end);
    t.cp.push_back(c);
    t.kind.push_back(unicode::is_regex_space(c) ? uint8_t{kSpace} : static_cast<uint8_t>(unicode::regex_class(c)));
  }
  t.n = t.cp.size();
  t.offset.push_back(text.size());
  for (size_t i = 0; i < t.n;) {
    const size_t end = pattern == PretokenizePattern::Gpt2 ? match_gpt2(t, i)
                       : match_qwen(t, i, pattern == PretokenizePattern::Qwen2 ? 1 : 3);
    pieces.emplace_back(t.offset[i], t.offset[end]);
    i = end;
  }
}

}  // namespace ddp_embed
