// The normalizer and pre-tokenizer steps of a tokenizer.json BPE (bpe_text_steps.h), read as
// tokenizers writes them and run as tokenizers runs them: every normalizer on the whole
// segment, then each pre-tokenizer step on every word the previous step left.
#include "tokenize/bpe_text_steps.h"

#include <algorithm>

#include "tokenize/hf_files.h"
#include "tokenize/tokenizer.h"
#include "tokenize/unicode_bpe.h"

namespace ddp_embed {
using nlohmann::json;

// Named, not anonymous: the unity build puts this file beside bpe.cpp, which has helpers of
// the same names.
namespace bpe_text_detail {

std::string node_type_name(const json& node) {
  const auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "";
}

[[noreturn]] void refuse_step(const std::string& origin, const std::string& where, const std::string& what) {
  throw TokenizerError(origin + ": " + where + ": " + what);
}

// A node's string field, which must be there and not be empty.
std::string nonempty_string_field(const json& node, const char* key, const std::string& where, const std::string& origin) {
  const auto it = node.find(key);
  if (it == node.end() || !it->is_string() || it->get<std::string>().empty())
    refuse_step(origin, where + "." + key, "must be a non-empty string");
  return it->get<std::string>();
}

// Split's and Replace's {"String": s} pattern: s ({"Regex": ...} is Split's other form).
std::string literal_pattern(const json& node, const std::string& where, const std::string& origin) {
  const json& pattern = node.contains("pattern") ? node["pattern"] : json();
  if (!pattern.is_object() || !pattern.contains("String")) refuse_step(origin, where + ".pattern", "must be {\"String\": ...}");
  return nonempty_string_field(pattern, "String", where + ".pattern", origin);
}

void replace_every(std::string& text, const std::string& from, const std::string& to) {
  for (size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
}

// Cuts `word` at each `literal`: kept at the end of the word before it (merged_with_previous),
// or as a word of its own (isolated), or at the start of the word after it (merged_with_next).
enum class CutKeep { WithPrevious, Isolated, WithNext };
void cut_at(const std::string& word, const std::string& literal, CutKeep keep, std::vector<std::string>& out) {
  size_t begin = 0;
  for (size_t at = word.find(literal); at != std::string::npos; at = word.find(literal, at + literal.size())) {
    const size_t end = at + literal.size();
    if (keep == CutKeep::WithPrevious) {
      out.emplace_back(word, begin, end - begin);
      begin = end;
    } else if (keep == CutKeep::Isolated) {
      if (at > begin) out.emplace_back(word, begin, at - begin);
      out.emplace_back(literal);
      begin = end;
    } else {  // WithNext: the literal opens the next word
      if (at > begin) out.emplace_back(word, begin, at - begin);
      begin = at;
    }
  }
  if (begin < word.size()) out.emplace_back(word, begin, word.size() - begin);
}

}  // namespace bpe_text_detail
using namespace bpe_text_detail;

bool BpeTextSteps::byte_level() const {
  return std::any_of(pre.begin(), pre.end(), [](const BpePreStep& s) { return s.kind == BpePreStep::Kind::ByteLevel; });
}

void BpeTextSteps::read_normalizer(const json& n, const std::string& where, const std::string& origin) {
  if (n.is_null()) return;
  const std::string type = node_type_name(n);
  if (type == "NFC") {
    normalize.push_back({BpeNormalizeStep::Kind::Nfc, "", ""});
  } else if (type == "Replace") {
    const auto content = n.find("content");
    if (content == n.end() || !content->is_string()) refuse_step(origin, where + ".content", "must be a string");
    normalize.push_back({BpeNormalizeStep::Kind::Replace, literal_pattern(n, where, origin), content->get<std::string>()});
  } else if (type == "Prepend") {
    normalize.push_back({BpeNormalizeStep::Kind::Prepend, "", nonempty_string_field(n, "prepend", where, origin)});
  } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
    for (size_t i = 0; i < n["normalizers"].size(); ++i)
      read_normalizer(n["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]", origin);
  } else {
    refuse_step(origin, where, "normalizer \"" + type + "\" is not supported (supported: NFC, Replace, Prepend, Sequence)");
  }
}

void BpeTextSteps::read_pre_tokenizer(const json& p, const std::string& where, const std::string& origin) {
  if (p.is_null()) return;
  const std::string type = node_type_name(p);
  const std::string source = origin + ": " + where;
  BpePreStep step;
  if (type == "ByteLevel") {
    step.kind = BpePreStep::Kind::ByteLevel;
    step.add_prefix_space = hf_files::bool_setting(p, "add_prefix_space", true, source);
    step.use_regex = hf_files::bool_setting(p, "use_regex", true, source);
  } else if (type == "Split") {
    if (hf_files::bool_setting(p, "invert", false, source)) refuse_step(origin, where + ".invert", "only false is supported");
    const json& pattern = p.contains("pattern") ? p["pattern"] : json();
    const std::string behavior = p.contains("behavior") && p["behavior"].is_string() ? p["behavior"].get<std::string>() : "";
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      const auto known = identify_pattern(pattern["Regex"].get<std::string>());
      if (!known)
        refuse_step(origin, where + ".pattern.Regex", "unsupported pre-tokenizer regex " + pattern["Regex"].dump() +
                                                    "; supported are:\n" + supported_patterns());
      if (behavior != "Isolated") refuse_step(origin, where + ".behavior", "only \"Isolated\" is supported with a Regex");
      step.kind = BpePreStep::Kind::Regex;
      step.pattern = *known;
    } else {
      step.kind = BpePreStep::Kind::Literal;
      step.literal = literal_pattern(p, where, origin);
      if (behavior != "MergedWithPrevious" && behavior != "Isolated")
        refuse_step(origin, where + ".behavior", "only \"MergedWithPrevious\" and \"Isolated\" are supported with a String");
      step.merged_with_previous = behavior == "MergedWithPrevious";
    }
  } else if (type == "Metaspace") {
    step.kind = BpePreStep::Kind::Metaspace;
    step.literal = nonempty_string_field(p, "replacement", where, origin);
    step.split = hf_files::bool_setting(p, "split", true, source);
    step.prepend = hf_files::metaspace_prepend(p, source);
  } else if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
    for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
      read_pre_tokenizer(p["pretokenizers"][i], where + ".pretokenizers[" + std::to_string(i) + "]", origin);
    return;
  } else {
    refuse_step(origin, where, "pre-tokenizer \"" + type + "\" is not supported (supported: ByteLevel, Split, Metaspace, Sequence)");
  }
  pre.push_back(std::move(step));
}

void BpeTextSteps::words(std::string_view segment, bool at_start, std::vector<std::string>& words) const {
  std::string text(segment);
  for (const BpeNormalizeStep& n : normalize) {
    if (n.kind == BpeNormalizeStep::Kind::Nfc) text = unicode::nfc(text);
    else if (n.kind == BpeNormalizeStep::Kind::Replace) replace_every(text, n.from, n.to);
    else if (!text.empty()) text.insert(0, n.to);
  }
  words.assign(1, std::move(text));
  std::vector<std::string> next;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const BpePreStep& step : pre) {
    next.clear();
    for (std::string& w : words) {
      switch (step.kind) {
        case BpePreStep::Kind::ByteLevel:
          if (step.add_prefix_space && (w.empty() || w[0] != ' ')) w.insert(w.begin(), ' ');
          if (!step.use_regex) {
            next.push_back(std::move(w));
            break;
          }
          [[fallthrough]];
        case BpePreStep::Kind::Regex:
          ranges.clear();
          split_pattern(step.kind == BpePreStep::Kind::ByteLevel ? PretokenizePattern::Gpt2 : step.pattern, w, ranges);
          for (const auto& [a, b] : ranges) next.emplace_back(w, a, b - a);
          break;
        case BpePreStep::Kind::Literal:
          cut_at(w, step.literal, step.merged_with_previous ? CutKeep::WithPrevious : CutKeep::Isolated, next);
          break;
        case BpePreStep::Kind::Metaspace: {
          replace_every(w, " ", step.literal);
          const bool first = step.prepend == hf_files::MetaspacePrepend::First && at_start && &w == &words.front();
          if ((step.prepend == hf_files::MetaspacePrepend::Always || first) && w.compare(0, step.literal.size(), step.literal) != 0)
            w.insert(0, step.literal);
          if (step.split) cut_at(w, step.literal, CutKeep::WithNext, next);
          else next.push_back(std::move(w));
          break;
        }
      }
    }
    words.swap(next);
  }
  words.erase(std::remove_if(words.begin(), words.end(), [](const std::string& w) { return w.empty(); }), words.end());
}

}  // namespace ddp_embed
