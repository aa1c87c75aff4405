// The pre-tokenizer regexes of byte-level BPE tokenizers, matched by hand instead of by a
// regex engine (std::regex has no \p{L} and other semantics). tokenizers runs these
// patterns with Oniguruma: at each position the first alternative that matches wins,
// quantifiers greedy with backtracking; the matchers below are those semantics written
// out per pattern. A tokenizer.json naming another pattern is refused (identify_pattern).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ddp_embed {

enum class PretokenizePattern {
  Qwen2,   // Qwen2/Qwen3: contractions (?i), letters with one leading non-letter, single digits
  Cl100k,  // GPT-4 / Llama-3: the same with \p{N}{1,3}
  Gpt2,    // GPT-2, RoBERTa: ByteLevel(use_regex) 's|'t|... ?\p{L}+| ?\p{N}+|...
};

// The pattern whose regex source is exactly `regex`, or nothing.
std::optional<PretokenizePattern> identify_pattern(std::string_view regex);
// The supported regex sources, one a line, for error messages.
std::string supported_patterns();

// Appends to `pieces` the byte ranges [begin, end) of the matches of `pattern` in the
// well-formed UTF-8 `text`, in order; they cover the text without gaps (no match is empty).
void split_pattern(PretokenizePattern pattern, std::string_view text,
                   std::vector<std::pair<size_t, size_t>>& pieces);

}  // namespace ddp_embed
