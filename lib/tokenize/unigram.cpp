// The Unigram tokenizer of transformers 5 for XLM-R folders, ported from what it runs:
// tokenizers' AddedVocabulary, Precompiled normalizer, WhitespaceSplit + Metaspace
// pre-tokenizers and Unigram::encode_optimized (sentencepiece's Viterbi with tokenizers'
// tie rules and fused unknowns). Why not the sentencepiece library: transformers does not
// tokenize like it (grapheme rule of the normalizer, literal special tokens), and the ids
// to match are transformers'. This file encodes and saves; unigram_load.cpp reads the
// files.
#include "tokenize/unigram.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenize/hf_files.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

// Rust's char::is_whitespace (Unicode White_Space): what WhitespaceSplit and Strip split on.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Per-thread buffers, so that encode() allocates only when a text is longer than any before.
struct Lattice {
  struct Node {
    double score;
    int32_t start;  // -1: not reached
    int32_t id;
  };
  std::vector<Node> best;
  std::string normalized, scratch, word;
};
thread_local Lattice tls;

}  // namespace

std::vector<int32_t> UnigramTokenizer::encode(std::string_view text, int max_length) const {
  std::string fixed;
  if (!utf8::is_valid(text.data(), text.data() + text.size())) {
    fixed = utf8::replace_ill_formed(text.data(), text.data() + text.size());
    text = fixed;
  }
  const size_t specials = prefix_.size() + suffix_.size();
  const size_t limit = max_length > int(specials) ? size_t(max_length) - specials : 0;
  std::vector<int32_t> ids;
  ids.reserve(std::min<size_t>(limit, text.size() / 2 + 8) + specials);
  ids.insert(ids.end(), prefix_.begin(), prefix_.end());
  const size_t base = ids.size();
  for (const auto& segment : added_.split(text)) {
    if (ids.size() - base >= limit) break;
    if (segment.id >= 0)
      ids.push_back(segment.id);
    else
      encode_plain(segment.text, segment.text.data() == text.data(), base + limit, ids);
  }
  if (ids.size() - base > limit) ids.resize(base + limit);
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  if (max_length >= 0 && ids.size() > size_t(max_length)) ids.resize(size_t(max_length));
  return ids;
}
void UnigramTokenizer::encode_plain(std::string_view text, bool at_start, size_t limit,
                                    std::vector<int32_t>& out) const {
  std::string& norm = tls.normalized;
  normalize(text, norm);
  if (added_normalized_.empty()) {
    encode_normalized(norm, at_start, limit, out);
    return;
  }
  for (const auto& segment : added_normalized_.split(norm)) {
    if (out.size() >= limit) return;
    if (segment.id >= 0)
      out.push_back(segment.id);
    else
      encode_normalized(segment.text, at_start && segment.text.data() == norm.data(), limit, out);
  }
}
void UnigramTokenizer::normalize(std::string_view text, std::string& out) const {
  std::string& s = tls.scratch;
  out.assign(text);
  for (const auto& step : normalizers_) {
    s.clear();
    const std::string& norm = out;
    switch (step.kind) {
      case NormStep::Charsmap: charsmap_.normalize(norm, s); break;
      case NormStep::CollapseSpaces:  // Replace(Regex " {2,}", " "): a space after a space goes
        for (size_t i = 0; i < norm.size(); ++i)
          if (!(norm[i] == ' ' && i > 0 && norm[i - 1] == ' ')) s.push_back(norm[i]);
        break;
      case NormStep::Replace: {
        size_t i = 0;
        for (size_t j; (j = norm.find(step.from, i)) != std::string::npos; i = j + step.from.size())
          s.append(norm, i, j - i).append(step.to);
        s.append(norm, i, std::string::npos);
        break;
      }
      case NormStep::Strip: {
        size_t begin = 0, end = norm.size();
        if (step.left)
          while (begin < end) {
            const char* p = norm.data() + begin;
            if (!is_white_space(utf8::decode(p, norm.data() + end))) break;
            begin = size_t(p - norm.data());
          }
        if (step.right)
          while (end > begin) {
            size_t j = end - 1;
            while (j > begin && (static_cast<unsigned char>(norm[j]) & 0xC0) == 0x80) --j;
            const char* p = norm.data() + j;
            if (!is_white_space(utf8::decode(p, norm.data() + end))) break;
            end = j;
          }
        s.assign(norm, begin, end - begin);
        break;
      }
    }
    out.swap(s);
  }
}
void UnigramTokenizer::encode_normalized(std::string_view rest, bool at_start, size_t limit,
                                         std::vector<int32_t>& out) const {
  // Pre-tokenizers: WhitespaceSplit, then Metaspace on each word.
  auto metaspace = [&](std::string_view w, bool starts_input) {
    if (!metaspace_) {
      encode_word(w, out);
      return;
    }
    std::string& word = tls.word;
    word.clear();
    const bool starts_with_meta = w.substr(0, kMetaspace.size()) == kMetaspace || (!w.empty() && w[0] == ' ');
    if (!starts_with_meta && (prepend_ == hf_files::MetaspacePrepend::Always || (prepend_ == hf_files::MetaspacePrepend::First && starts_input)))
      word = kMetaspace;
    for (char c : w) {
      if (c == ' ') word += kMetaspace;
      else word.push_back(c);
    }
    if (!metaspace_split_) {
      encode_word(word, out);
      return;
    }
    // Cut before every ▁ (MergedWithNext).
    size_t from = 0;
    for (size_t i = 1; i + kMetaspace.size() <= word.size(); ++i) {
      if (out.size() >= limit) return;
      if (word.compare(i, kMetaspace.size(), kMetaspace) == 0) {
        encode_word(std::string_view(word).substr(from, i - from), out);
        from = i;
      }
    }
    encode_word(std::string_view(word).substr(from), out);
  };
  if (!whitespace_split_) {
    if (!rest.empty()) metaspace(rest, at_start);
    return;
  }
  size_t i = 0;
  while (i < rest.size() && out.size() < limit) {
    // Skip whitespace, then take the word up to the next.
    const char* p = rest.data() + i;
    const char* const end = rest.data() + rest.size();
    while (p < end) {
      const char* q = p;
      if (!is_white_space(utf8::decode(q, end))) break;
      p = q;
    }
    const size_t word_begin = size_t(p - rest.data());
    const char* q = p;
    while (q < end) {
      const char* r = q;
      if (is_white_space(utf8::decode(r, end))) break;
      q = r;
    }
    const size_t word_end = size_t(q - rest.data());
    if (word_end > word_begin)
      metaspace(rest.substr(word_begin, word_end - word_begin), at_start && word_begin == 0);
    i = word_end;
  }
}
void UnigramTokenizer::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  auto& best = tls.best;
  const size_t n = word.size();
  best.assign(n + 1, {0.0, -1, -1});
  best[0].start = 0;
  size_t s = 0;
  while (s < n) {
    const char* q = word.data() + s;
    utf8::decode(q, word.data() + n);
    const size_t char_len = size_t(q - (word.data() + s));
    const double here = best[s].score;
    bool has_single = false;
    int32_t node = 0;
    for (size_t i = s; i < n; ++i) {
      const auto c = static_cast<unsigned char>(word[i]);
      const auto* begin = edge_label_.data() + edge_begin_[size_t(node)];
      const auto* end = edge_label_.data() + edge_begin_[size_t(node) + 1];
      const auto* it = std::lower_bound(begin, end, c);
      if (it == end || *it != c) break;
      node = edge_child_[size_t(it - edge_label_.data())];
      const int32_t id = node_piece_[size_t(node)];
      if (id < 0) continue;
      auto& target = best[i + 1];
      const double candidate = here + scores_[size_t(id)];
      if (target.start < 0 || candidate > target.score) target = {candidate, int32_t(s), id};
      if (i + 1 - s == char_len) has_single = true;
    }
    if (!has_single) {
      auto& target = best[s + char_len];
      const double candidate = here + unk_score_;
      if (target.start < 0 || candidate > target.score) target = {candidate, int32_t(s), unk_id_};
    }
    s += char_len;
  }
  // Backtrack; runs of unknown pieces fuse into one, looked up as a whole (tokenizers'
  // fuse_unk), then byte fallback or <unk>.
  const size_t first = out.size();
  size_t at = n, unk_end = 0;
  bool in_unk = false;
  auto flush_unk = [&](size_t begin) {
    const std::string_view text = word.substr(begin, unk_end - begin);
    int32_t id = exact_id(text);
    if (id >= 0) {
      out.push_back(id);
      return;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : text) all = all && byte_ids_[c] >= 0;
      if (all) {
        for (auto it = text.rbegin(); it != text.rend(); ++it) out.push_back(byte_ids_[static_cast<unsigned char>(*it)]);
        return;
      }
    }
    out.push_back(unk_id_);
  };
  size_t unk_begin = 0;
  while (at > 0) {
    const auto& node = best[at];
    const size_t start = size_t(node.start);
    if (node.id == unk_id_) {
      if (!in_unk) unk_end = at, in_unk = true;
      unk_begin = start;
    } else {
      if (in_unk) flush_unk(unk_begin), in_unk = false;
      out.push_back(node.id);
    }
    at = start;
  }
  if (in_unk) flush_unk(unk_begin);
  std::reverse(out.begin() + std::ptrdiff_t(first), out.end());
}
int32_t UnigramTokenizer::exact_id(std::string_view piece) const {
  if (piece.empty()) return -1;
  int32_t node = 0;
  for (unsigned char c : piece) {
    const auto* begin = edge_label_.data() + edge_begin_[size_t(node)];
    const auto* end = edge_label_.data() + edge_begin_[size_t(node) + 1];
    const auto* it = std::lower_bound(begin, end, c);
    if (it == end || *it != c) return -1;
    node = edge_child_[size_t(it - edge_label_.data())];
  }
  return node_piece_[size_t(node)];
}
void UnigramTokenizer::save(const std::string& dir) const {
  const fs::path folder = dir;
  hf_files::make_dir(folder);
  hf_files::write_file(folder / source_name_, source_bytes_);
  auto name = [&](int32_t id, const char* fallback) {
    return id >= 0 && size_t(id) < pieces_.size() ? pieces_[size_t(id)] : std::string(fallback);
  };
  nlohmann::ordered_json tokens;
  tokens["bos_token"] = name(special_.cls, "<s>");
  tokens["eos_token"] = name(special_.sep, "</s>");
  tokens["unk_token"] = name(special_.unk, "<unk>");
  tokens["sep_token"] = name(special_.sep, "</s>");
  tokens["pad_token"] = name(special_.pad, "<pad>");
  tokens["cls_token"] = name(special_.cls, "<s>");
  tokens["mask_token"] = name(special_.mask, "<mask>");
  nlohmann::ordered_json config;
  config["tokenizer_class"] = tokenizer_class_;
  if (tokenizer_class_ == "XLMRobertaTokenizer") config["add_prefix_space"] = add_prefix_space_;
  if (source_name_ != "tokenizer.json") {
    // The flags of the added tokens (lstrip on <mask> ...), which a .model cannot hold.
    nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
    std::vector<AddedToken> sorted = added_all_;
    std::sort(sorted.begin(), sorted.end(), [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
    for (const auto& a : sorted)
      decoder[std::to_string(a.id)] = {{"content", a.content}, {"lstrip", a.lstrip},   {"normalized", a.normalized},
                                       {"rstrip", a.rstrip},   {"single_word", a.single_word}, {"special", a.special}};
    config["added_tokens_decoder"] = decoder;
  }
  hf_files::write_tokenizer_config(folder, std::move(config), model_max_length_, tokens);
}

}  // namespace ddp_embed
