// Pairs of texts joined as transformers joins them (tokenize/pair_template.h). The
// truncation follows the tokenizers library's LongestFirst step by step, so that its tie
// rules (equal lengths, odd budgets) come out the same; encode_pair tokenizes each text
// only as far as that rule can look, so a long document costs no more than its kept part.
#include "tokenize/pair_template.h"

#include <algorithm>
#include <climits>
#include <utility>

#include <nlohmann/json.hpp>

namespace ddp_embed {

using json = nlohmann::json;

PairTemplate Tokenizer::pair_template() const {
  const SpecialIds ids = special();
  PairTemplate t;
  if (ids.cls >= 0) t.before_first = {ids.cls};
  if (ids.sep >= 0) t.between = t.after_second = {ids.sep};
  t.first_type = 0;
  t.second_type = 1;
  t.single_before = ids.cls >= 0 ? 1 : 0;
  t.single_after = ids.sep >= 0 ? 1 : 0;
  return t;
}

PairTemplate pair_template(const Tokenizer& tokenizer) { return tokenizer.pair_template(); }

namespace {

std::string pair_type_name(const json& p) {
  return p.is_object() && p.contains("type") && p["type"].is_string() ? p["type"].get<std::string>() : "";
}

// One special token's ids from a TemplateProcessing's special_tokens.
const json& pair_special_ids(const json& p, const json& item, const std::string& at) {
  const json& name = item.contains("id") ? item["id"] : json();
  if (!name.is_string()) throw TokenizerError(at + ": a SpecialToken without an \"id\" string");
  const std::string key = name.get<std::string>();
  if (!p.contains("special_tokens") || !p["special_tokens"].contains(key) ||
      !p["special_tokens"][key].contains("ids") || !p["special_tokens"][key]["ids"].is_array())
    throw TokenizerError(at + ": special_tokens has no ids for \"" + key + "\"");
  return p["special_tokens"][key]["ids"];
}

int32_t pair_type_id(const json& item) {
  return item.contains("type_id") && item["type_id"].is_number_integer() ? item["type_id"].get<int32_t>() : 0;
}

// TemplateProcessing's "pair": specials, $A, specials, $B, specials, where everything up to
// $B has $A's type and the rest $B's.
PairTemplate pair_of_template(const json& p, const std::string& where) {
  if (!p.contains("pair") || !p["pair"].is_array())
    throw TokenizerError(where + ".pair: missing: the template has no form for two texts");
  const json& pair = p["pair"];
  PairTemplate t;
  size_t a_at = pair.size(), b_at = pair.size();  // where $A and $B stand
  for (size_t i = 0; i < pair.size(); ++i) {
    const std::string at = where + ".pair[" + std::to_string(i) + "]";
    if (pair[i].contains("Sequence")) {
      const std::string id = pair[i]["Sequence"].value("id", "");
      const bool a_next = a_at == pair.size();
      if (b_at != pair.size() || id != (a_next ? "A" : "B"))
        throw TokenizerError(at + ": sequence \"" + id + "\" where " + (a_next ? "$A" : "nothing or $B") +
                             " was expected (only $A then $B, once each, is supported)");
      (a_next ? a_at : b_at) = i;
      (a_next ? t.first_type : t.second_type) = pair_type_id(pair[i]["Sequence"]);
    } else if (!pair[i].contains("SpecialToken")) {
      throw TokenizerError(at + ": neither a Sequence nor a SpecialToken");
    }
  }
  if (b_at == pair.size()) throw TokenizerError(where + ".pair: does not hold both $A and $B");
  for (size_t i = 0; i < pair.size(); ++i) {
    if (i == a_at || i == b_at) continue;
    const std::string at = where + ".pair[" + std::to_string(i) + "]";
    const json& special = pair[i]["SpecialToken"];
    const int32_t want = i < b_at ? t.first_type : t.second_type;
    if (pair_type_id(special) != want)
      throw TokenizerError(at + ": a special token with type_id " + std::to_string(pair_type_id(special)) +
                           ", not the " + (i < b_at ? "$A" : "$B") + " type " + std::to_string(want) +
                           " of its side (not supported)");
    auto& part = i < a_at ? t.before_first : i < b_at ? t.between : t.after_second;
    for (const auto& id : pair_special_ids(p, special, at)) part.push_back(id.get<int32_t>());
  }
  return t;
}

}  // namespace

PairTemplate pair_template_of_post_processor(const json& p, const std::string& where) {
  PairTemplate joined;  // the tokenizers library's default: the texts as they are, types 0 and 1
  if (p.is_null()) return joined;
  const std::string type = pair_type_name(p);
  if (type == "ByteLevel") return joined;
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    bool found = false;
    for (size_t i = 0; i < p["processors"].size(); ++i) {
      const std::string at = where + ".processors[" + std::to_string(i) + "]";
      const json& step = p["processors"][i];
      if (pair_type_name(step) == "ByteLevel") continue;
      if (found) throw TokenizerError(at + ": a second template in one Sequence is not supported");
      joined = pair_template_of_post_processor(step, at);
      found = true;
    }
    return joined;
  }
  if (type == "TemplateProcessing") return pair_of_template(p, where);
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const auto token_id = [&](const char* key) {  // "cls": ["<s>", 0]
      if (!p.contains(key) || !p[key].is_array() || p[key].size() != 2 || !p[key][1].is_number_integer())
        throw TokenizerError(where + "." + key + ": not a [token, id] pair");
      return p[key][1].get<int32_t>();
    };
    const int32_t cls = token_id("cls"), sep = token_id("sep");
    PairTemplate t;
    t.before_first = {cls};
    t.between = type == "RobertaProcessing" ? std::vector<int32_t>{sep, sep} : std::vector<int32_t>{sep};
    t.after_second = {sep};
    t.second_type = type == "RobertaProcessing" ? 0 : 1;  // RoBERTa's pair is all type 0
    return t;
  }
  throw TokenizerError(where + ": post-processor \"" + type +
                       "\" has no pair form here (supported: TemplateProcessing, RobertaProcessing, "
                       "BertProcessing, ByteLevel, Sequence)");
}

namespace {

PieceRange pair_pieces_of_single(const PairTemplate& t, size_t n) {
  PieceRange r;
  r.begin = std::min(t.single_before, n);
  r.end = std::max(r.begin, n >= t.single_after ? n - t.single_after : size_t{0});
  return r;
}

}  // namespace

PieceRange piece_range(const Tokenizer& tokenizer, const int32_t*, size_t n) {
  return pair_pieces_of_single(tokenizer.pair_template(), n);
}

PairLengths longest_first(size_t na, size_t nb, size_t budget) {
  if (na + nb <= budget) return {na, nb};
  // The tokenizers library's steps: n1 the shorter (the first when equal).
  const bool swap = na > nb;
  size_t n1 = swap ? nb : na, n2;
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swap) std::swap(n1, n2);
  return {std::min(n1, na), std::min(n2, nb)};
}

PairIds join_pair(const PairTemplate& tmpl, const int32_t* a, size_t na, const int32_t* b, size_t nb,
                  int max_length) {
  const size_t specials = tmpl.specials();
  if (max_length < 0 || size_t(max_length) < specials + 2)
    throw TokenizerError("join_pair: max_length " + std::to_string(max_length) + " leaves no room for a piece of " +
                         "each text after the pair template's " + std::to_string(specials) +
                         " special ids (give a max_length of at least " + std::to_string(specials + 2) + ")");
  const PairLengths keep = longest_first(na, nb, size_t(max_length) - specials);
  PairIds out;
  const size_t first_part = tmpl.before_first.size() + keep.first + tmpl.between.size();
  out.ids.reserve(first_part + keep.second + tmpl.after_second.size());
  out.ids.insert(out.ids.end(), tmpl.before_first.begin(), tmpl.before_first.end());
  out.ids.insert(out.ids.end(), a, a + keep.first);
  out.ids.insert(out.ids.end(), tmpl.between.begin(), tmpl.between.end());
  out.ids.insert(out.ids.end(), b, b + keep.second);
  out.ids.insert(out.ids.end(), tmpl.after_second.begin(), tmpl.after_second.end());
  out.types.assign(out.ids.size(), tmpl.second_type);
  std::fill(out.types.begin(), out.types.begin() + first_part, tmpl.first_type);
  return out;
}

PairIds encode_pair(const Tokenizer& tokenizer, std::string_view a, std::string_view b, int max_length) {
  const PairTemplate tmpl = tokenizer.pair_template();
  const size_t specials = tmpl.specials();
  if (max_length < 0 || size_t(max_length) < specials + 2)  // join_pair's message, before any tokenizing
    return join_pair(tmpl, nullptr, 0, nullptr, 0, max_length);
  // LongestFirst looks at a length only as far as budget + 1, except to tell which of two
  // longer texts is the longer, which matters only for an odd budget.
  const size_t budget = size_t(max_length) - specials;
  const size_t single = tmpl.single_before + tmpl.single_after;
  const auto pieces = [&](std::string_view text, size_t cap) {
    const size_t limit = std::min<size_t>(cap + single, INT_MAX);
    std::vector<int32_t> ids = tokenizer.encode(text, int(limit));
    const PieceRange r = pair_pieces_of_single(tmpl, ids.size());
    return std::vector<int32_t>(ids.begin() + r.begin, ids.begin() + r.end);
  };
  std::vector<int32_t> pa = pieces(a, budget + 1), pb = pieces(b, budget + 1);
  if (pa.size() > budget && pb.size() > budget && budget % 2 == 1) {
    pa = pieces(a, INT_MAX);
    pb = pieces(b, INT_MAX);
  }
  return join_pair(tmpl, pa.data(), pa.size(), pb.data(), pb.size(), max_length);
}

}  // namespace ddp_embed
