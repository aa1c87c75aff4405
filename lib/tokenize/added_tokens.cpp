#include "tokenize/added_tokens.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>

#include "tokenize/tokenizer.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace {

// Rust's char::is_whitespace (Unicode White_Space), what str::trim_start/trim_end strip.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// A byte that belongs to a word, for single_word tokens: ASCII letters, digits and '_',
// and every byte of a non-ASCII character (letters in most scripts).
bool is_word_byte(unsigned char b) { return b >= 0x80 || std::isalnum(b) || b == '_'; }

// The start of the whitespace that ends text[0, end).
size_t trim_end(std::string_view text, size_t begin, size_t end) {
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    const char* p = text.data() + start;
    if (!is_white_space(utf8::decode(p, text.data() + end))) break;
    end = start;
  }
  return end;
}

// The end of the whitespace that starts text[begin, ...).
size_t trim_start(std::string_view text, size_t begin) {
  while (begin < text.size()) {
    const char* p = text.data() + begin;
    if (!is_white_space(utf8::decode(p, text.data() + text.size()))) break;
    begin = static_cast<size_t>(p - text.data());
  }
  return begin;
}

bool flag(const nlohmann::json& entry, const char* key, bool fallback, const std::string& where) {
  const auto it = entry.find(key);
  if (it == entry.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw TokenizerError(where + ": \"" + key + "\" must be true or false");
  return it->get<bool>();
}

}  // namespace

AddedTokens::AddedTokens(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  tokens_.erase(std::remove_if(tokens_.begin(), tokens_.end(), [](const AddedToken& t) { return t.content.empty(); }),
                tokens_.end());
  std::stable_sort(tokens_.begin(), tokens_.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  for (const auto& t : tokens_) first_byte_[static_cast<unsigned char>(t.content[0])] = true;
}

AddedTokens AddedTokens::from_json(const nlohmann::json& array, const std::string& origin) {
  if (array.is_null()) return AddedTokens();
  if (!array.is_array()) throw TokenizerError(origin + ": \"added_tokens\" must be a list");
  std::vector<AddedToken> tokens;
  for (size_t i = 0; i < array.size(); ++i) {
    const auto& entry = array[i];
    const std::string where = origin + ": added_tokens[" + std::to_string(i) + "]";
    if (!entry.is_object() || !entry.contains("id") || !entry["id"].is_number_integer() ||
        !entry.contains("content") || !entry["content"].is_string())
      throw TokenizerError(where + " needs an integer \"id\" and a string \"content\"");
    AddedToken t;
    t.id = entry["id"].get<int32_t>();
    t.content = entry["content"].get<std::string>();
    t.single_word = flag(entry, "single_word", false, where);
    t.lstrip = flag(entry, "lstrip", false, where);
    t.rstrip = flag(entry, "rstrip", false, where);
    t.normalized = flag(entry, "normalized", false, where);
    t.special = flag(entry, "special", false, where);
    if (t.id < 0) throw TokenizerError(where + ": id " + std::to_string(t.id) + " is negative");
    tokens.push_back(std::move(t));
  }
  return AddedTokens(std::move(tokens));
}

std::optional<int32_t> AddedTokens::id_of(std::string_view content) const {
  for (const auto& t : tokens_)
    if (t.content == content) return t.id;
  return std::nullopt;
}

std::vector<AddedTokens::Segment> AddedTokens::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t plain_from = 0;  // start of the plain text not yet emitted
  size_t at = 0;
  while (at < text.size()) {
    const AddedToken* match = nullptr;
    if (first_byte_[static_cast<unsigned char>(text[at])]) {
      for (const auto& t : tokens_)
        if (text.compare(at, t.content.size(), t.content) == 0) {
          match = &t;
          break;
        }
    }
    if (!match) {
      ++at;
      continue;
    }
    size_t start = at, stop = at + match->content.size();
    at = stop;  // a match that is not used still consumes its text, as tokenizers' find_iter does
    if (match->single_word) {
      const bool word_before = start > 0 && is_word_byte(static_cast<unsigned char>(text[start - 1]));
      const bool word_after = stop < text.size() && is_word_byte(static_cast<unsigned char>(text[stop]));
      if (word_before || word_after) continue;
    }
    if (match->lstrip) start = trim_end(text, plain_from, start);
    if (match->rstrip) stop = trim_start(text, stop);
    if (start > plain_from) out.push_back({text.substr(plain_from, start - plain_from), -1});
    out.push_back({text.substr(start, stop - start), match->id});
    plain_from = at = stop;
  }
  if (plain_from < text.size()) out.push_back({text.substr(plain_from), -1});
  return out;
}

}  // namespace ddp_embed
