// The added tokens of a Hugging Face tokenizer (tokenizer.json's "added_tokens": <s>,
// <mask>, <|endoftext|>, <think> ...): strings matched in the raw text before anything else
// runs, each becoming its one id, the text between them going through the tokenizer's
// pipeline. Matching follows tokenizers' AddedVocabulary: at each position the longest
// token that starts there wins, scanning left to right (leftmost-longest); lstrip / rstrip
// also swallow the whitespace before / after a match; single_word matches only a token
// not inside a word. Tokens marked "normalized" are matched on the raw text too (the
// tokenizers embed-train reads have none whose normalization changes them).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddp_embed {

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = true;
};

class AddedTokens {
 public:
  AddedTokens() = default;
  explicit AddedTokens(std::vector<AddedToken> tokens);
  // tokenizer.json's "added_tokens" array; errors name `origin` and the entry.
  static AddedTokens from_json(const nlohmann::json& array, const std::string& origin);

  // A piece of the input: an added token (id >= 0, text = what it matched, whitespace
  // swallowed by lstrip/rstrip included) or plain text between them (id -1).
  struct Segment {
    std::string_view text;
    int32_t id = -1;
  };
  // The text cut at every match, in order; empty text gives no segment, and plain
  // segments are never empty.
  std::vector<Segment> split(std::string_view text) const;

  std::optional<int32_t> id_of(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  std::vector<AddedToken> tokens_;  // longest content first: the first match at a position wins
  bool first_byte_[256] = {};       // some token starts with this byte
};

}  // namespace ddp_embed
