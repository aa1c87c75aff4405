// Byte-level BPE (bpe.h). Why it looks like this: the reference is transformers 5's
// AutoTokenizer, and that does not always run the pipeline written in tokenizer.json. For a
// folder whose tokenizer_config.json names a class with its own constructor
// (Qwen2Tokenizer, GPT2Tokenizer) transformers rebuilds normalizer and pre-tokenizer from
// the class and keeps only vocabulary, merges, added tokens and the post-processor of the
// file; for a generic class (PreTrainedTokenizerFast, TokenizersBackend, none) it runs the
// file as it is. Any other class is refused rather than guessed at. Either way, named
// special tokens of tokenizer_config.json missing from the added tokens are added (as
// TokenizersBackend does); the file's post-processor always stands (transformers drops
// add_bos_token / add_eos_token of the config when there is a tokenizer.json).
//
// Encoding: added tokens are cut out of the raw text first; each piece between them is
// normalized (NFC), split by the pre-tokenizer regex (pretokenize_regex.h), mapped byte by
// byte to GPT-2's printable characters, and merged: always the adjacent pair of lowest
// merge rank, leftmost among equals (a heap over a linked list, so a 100k-letter word is
// O(n log n)). Short pieces are cached per thread. Pieces are independent, so encoding
// stops once enough ids for max_length are there.
#include "tokenize/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <queue>

#include "tokenize/hf_files.h"
#include "tokenize/unicode_bpe.h"
#include "util/utf8.h"

namespace ddp_embed {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// GPT-2's bytes_to_unicode: printable bytes stand for themselves, the other 68 (controls,
// space, 0x7F-0xA0, 0xAD) for U+0100, U+0101, ... in byte order.
std::array<char32_t, 256> byte_chars() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    map[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

std::string byte_mapped(std::string_view bytes) {
  static const std::array<char32_t, 256> map = byte_chars();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) utf8::append(out, map[b]);
  return out;
}

std::string type_of(const json& node) {
  const auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "";
}

bool flag(const json& node, const char* key, bool fallback, const std::string& where) {
  const auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw TokenizerError(where + "." + key + " must be true or false");
  return it->get<bool>();
}

// A special token's content in tokenizer_config.json: absent → `fallback`, null → "".
std::string config_token(const json& config, const char* key, const std::string& fallback) {
  const auto it = config.find(key);
  if (it == config.end()) return fallback;
  if (it->is_null()) return "";
  return hf_files::token_name(config, key, "");
}

struct Loader {
  std::string origin;  // tokenizer.json's path, for errors
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw TokenizerError(origin + ": " + where + ": " + what);
  }
};

}  // namespace

std::unique_ptr<Tokenizer> BpeTokenizer::load(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  const fs::path config_file = file.parent_path() / "tokenizer_config.json";
  const Loader L{file.string()};
  auto t = std::make_unique<BpeTokenizer>();
  static std::atomic<uint64_t> instances{0};
  t->instance_ = ++instances;
  t->json_text_ = hf_files::read_file(file);
  json j = json::parse(t->json_text_, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) throw TokenizerError(L.origin + ": not a JSON object");
  json config = json::object();
  if (fs::exists(config_file)) {
    t->config_ = nlohmann::ordered_json::parse(hf_files::read_file(config_file), nullptr, false);
    if (t->config_.is_discarded() || !t->config_.is_object())
      throw TokenizerError(config_file.string() + ": not a JSON object");
    config = json::parse(t->config_.dump());
  }

  // ---- model: vocabulary and merges ----
  const json& model = j.contains("model") ? j["model"] : json();
  if (!model.is_object()) L.fail("model", "missing");
  if (type_of(model) != "BPE")
    L.fail("model.type", "\"" + type_of(model) + "\" is not BPE (this reader takes byte-level BPE only)");
  if (model.contains("dropout") && !model["dropout"].is_null() && !(model["dropout"].is_number() && model["dropout"].get<double>() == 0))
    L.fail("model.dropout", "BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      L.fail(std::string("model.") + key, "must be empty for a byte-level BPE");
  if (flag(model, "byte_fallback", false, "model")) L.fail("model.byte_fallback", "is not supported");
  t->fuse_unk_ = flag(model, "fuse_unk", false, "model");
  t->ignore_merges_ = flag(model, "ignore_merges", false, "model");
  if (!model.contains("vocab") || !model["vocab"].is_object()) L.fail("model.vocab", "missing or not an object");
  t->vocab_.reserve(model["vocab"].size());
  int32_t max_id = -1;
  for (const auto& [token, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      L.fail("model.vocab[\"" + token + "\"]", "not a non-negative 32-bit id");
    t->vocab_[token] = id.get<int32_t>();
    max_id = std::max(max_id, id.get<int32_t>());
  }
  const auto id_of = [&](const std::string& token, const std::string& where) {
    const auto it = t->vocab_.find(token);
    if (it == t->vocab_.end()) L.fail(where, "token \"" + token + "\" is not in model.vocab");
    return it->second;
  };
  if (model.contains("unk_token") && model["unk_token"].is_string())
    t->unk_ = id_of(model["unk_token"].get<std::string>(), "model.unk_token");
  const json& merges = model.contains("merges") ? model["merges"] : json::array();
  if (!merges.is_array()) L.fail("model.merges", "not a list");
  t->merges_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    const json& m = merges[i];
    std::string a, b;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        L.fail(where, "\"" + s + "\" is not two tokens separated by one space");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
      a = m[0].get<std::string>(), b = m[1].get<std::string>();
    } else {
      L.fail(where, "neither \"a b\" nor [\"a\", \"b\"]");
    }
    const uint64_t key = (static_cast<uint64_t>(id_of(a, where)) << 32) | static_cast<uint32_t>(id_of(b, where));
    t->merges_[key] = {static_cast<int32_t>(i), id_of(a + b, where)};  // a repeated pair takes the later rank, as tokenizers
  }
  const std::array<char32_t, 256> chars = byte_chars();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    utf8::append(c, chars[b]);
    const auto it = t->vocab_.find(c);
    t->byte_id_[b] = it == t->vocab_.end() ? -1 : it->second;
  }

  // ---- normalizer and pre-tokenizer: the class's, or the file's ----
  const std::string klass = config.contains("tokenizer_class") && config["tokenizer_class"].is_string()
                                ? config["tokenizer_class"].get<std::string>() : "";
  const bool prefix_space = flag(config, "add_prefix_space", false, config_file.string());
  std::map<std::string, std::string> defaults;  // the class's special tokens
  if (klass == "Qwen2Tokenizer" || klass == "Qwen2TokenizerFast") {
    t->nfc_ = true;
    t->pre_ = {{false, false, false, PretokenizePattern::Qwen2}, {true, prefix_space, false}};
    defaults = {{"unk_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"}};
  } else if (klass == "GPT2Tokenizer" || klass == "GPT2TokenizerFast") {
    t->pre_ = {{true, prefix_space, true}};
    defaults = {{"unk_token", "<|endoftext|>"}, {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
  } else if (klass.empty() || klass == "PreTrainedTokenizerFast" || klass == "TokenizersBackend") {
    std::function<void(const json&, const std::string&)> normalizer = [&](const json& n, const std::string& where) {
      if (n.is_null()) return;
      const std::string type = type_of(n);
      if (type == "NFC") {
        t->nfc_ = true;
      } else if (type == "Sequence" && n.contains("normalizers") && n["normalizers"].is_array()) {
        for (size_t i = 0; i < n["normalizers"].size(); ++i)
          normalizer(n["normalizers"][i], where + ".normalizers[" + std::to_string(i) + "]");
      } else {
        L.fail(where, "normalizer \"" + type + "\" is not supported (supported: NFC, Sequence)");
      }
    };
    std::function<void(const json&, const std::string&)> pre = [&](const json& p, const std::string& where) {
      if (p.is_null()) return;
      const std::string type = type_of(p);
      if (type == "ByteLevel") {
        t->pre_.push_back({true, flag(p, "add_prefix_space", true, where), flag(p, "use_regex", true, where)});
      } else if (type == "Split") {
        const json& pattern = p.contains("pattern") ? p["pattern"] : json();
        if (!pattern.is_object() || !pattern.contains("Regex") || !pattern["Regex"].is_string())
          L.fail(where + ".pattern", "must be {\"Regex\": ...}");
        const auto known = identify_pattern(pattern["Regex"].get<std::string>());
        if (!known)
          L.fail(where + ".pattern.Regex", "unsupported pre-tokenizer regex " + pattern["Regex"].dump() +
                                               "; supported are:\n" + supported_patterns());
        if (!p.contains("behavior") || p["behavior"] != "Isolated")
          L.fail(where + ".behavior", "only \"Isolated\" is supported");
        if (flag(p, "invert", false, where)) L.fail(where + ".invert", "only false is supported");
        t->pre_.push_back({false, false, false, *known});
      } else if (type == "Sequence" && p.contains("pretokenizers") && p["pretokenizers"].is_array()) {
        for (size_t i = 0; i < p["pretokenizers"].size(); ++i)
          pre(p["pretokenizers"][i], where + ".pretokenizers[" + std::to_string(i) + "]");
      } else {
        L.fail(where, "pre-tokenizer \"" + type + "\" is not supported (supported: ByteLevel, Split, Sequence)");
      }
    };
    normalizer(j.value("normalizer", json()), "normalizer");
    pre(j.value("pre_tokenizer", json()), "pre_tokenizer");
    if (std::none_of(t->pre_.begin(), t->pre_.end(), [](const PreStep& s) { return s.byte_level; }))
      L.fail("pre_tokenizer", "has no ByteLevel step: not a byte-level BPE");
  } else {
    throw TokenizerError(config_file.string() + ": tokenizer_class \"" + klass +
                         "\" is not supported for BPE (supported: Qwen2Tokenizer, GPT2Tokenizer, "
                         "PreTrainedTokenizerFast, TokenizersBackend)");
  }
  if (!defaults.empty()) {  // the class builds its own BPE model: no unk, no ignore_merges
    t->unk_ = -1;
    t->fuse_unk_ = t->ignore_merges_ = false;
  }

  // ---- added tokens, and the config's special tokens missing from them ----
  AddedTokens added = AddedTokens::from_json(j.value("added_tokens", json()), L.origin);
  std::vector<AddedToken> tokens = added.tokens();
  for (const auto& a : tokens) max_id = std::max(max_id, a.id);
  std::map<std::string, std::string> names;  // key → content
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto d = defaults.find(key);
    const std::string name = config_token(config, key, d == defaults.end() ? "" : d->second);
    if (name.empty()) continue;
    names[key] = name;
    if (added.id_of(name)) continue;
    AddedToken extra;
    extra.content = name;
    const auto v = t->vocab_.find(name);
    extra.id = v != t->vocab_.end() ? v->second : ++max_id;
    tokens.push_back(extra);
    added = AddedTokens(tokens);
  }
  t->added_ = AddedTokens(tokens);
  t->vocab_size_ = max_id + 1;
  const auto token_id = [&](const std::string& name) -> int32_t {
    if (const auto id = t->added_.id_of(name)) return *id;
    const auto v = t->vocab_.find(name);
    return v != t->vocab_.end() ? v->second : -1;
  };

  // ---- post-processor: ids before and after the pieces ----
  std::function<void(const json&, const std::string&)> post = [&](const json& p, const std::string& where) {
    if (p.is_null()) return;
    const std::string type = type_of(p);
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
      for (size_t i = 0; i < p["processors"].size(); ++i)
        post(p["processors"][i], where + ".processors[" + std::to_string(i) + "]");
    } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array()) {
      bool seen_a = false;
      for (size_t i = 0; i < p["single"].size(); ++i) {
        const json& e = p["single"][i];
        const std::string at = where + ".single[" + std::to_string(i) + "]";
        if (e.contains("Sequence")) {
          if (seen_a) L.fail(at, "a second sequence in the single template");
          seen_a = true;
        } else if (e.contains("SpecialToken") && e["SpecialToken"].contains("id")) {
          const json& name = e["SpecialToken"]["id"];
          const json& entry = p.contains("special_tokens") && p["special_tokens"].contains(name.get<std::string>())
                                  ? p["special_tokens"][name.get<std::string>()] : json();
          if (!entry.contains("ids") || !entry["ids"].is_array())
            L.fail(where + ".special_tokens", "no ids for " + name.dump());
          for (const auto& id : entry["ids"]) (seen_a ? t->suffix_ : t->prefix_).push_back(id.get<int32_t>());
        } else {
          L.fail(at, "neither a Sequence nor a SpecialToken");
        }
      }
    } else if ((type == "RobertaProcessing" || type == "BertProcessing") && p.contains("cls") && p.contains("sep")) {
      t->prefix_.push_back(p["cls"][1].get<int32_t>());
      t->suffix_.push_back(p["sep"][1].get<int32_t>());
    } else {
      L.fail(where, "post-processor \"" + type +
                        "\" is not supported (supported: ByteLevel, TemplateProcessing, RobertaProcessing, "
                        "BertProcessing, Sequence)");
    }
  };
  post(j.value("post_processor", json()), "post_processor");

  t->special_.cls = t->prefix_.empty() ? -1 : t->prefix_.front();
  t->special_.sep = t->suffix_.empty() ? -1 : t->suffix_.back();
  const auto named = [&](const char* key) { return names.count(key) ? token_id(names[key]) : -1; };
  t->special_.unk = named("unk_token");
  t->special_.mask = named("mask_token");
  t->special_.pad = named("pad_token") >= 0 ? named("pad_token") : named("eos_token") >= 0 ? named("eos_token") : 0;
  t->model_max_length_ = hf_files::max_length_setting(config, 512);
  return t;
}

void BpeTokenizer::bpe_uncached(std::string_view piece, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto it = vocab_.find(byte_mapped(piece));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<Symbol> s;
  s.reserve(piece.size());
  for (unsigned char b : piece) {
    int32_t id = byte_id_[b];
    if (id < 0) {  // a byte without a token: unk (fused if asked), else dropped, as tokenizers
      if (unk_ < 0 || (fuse_unk_ && !s.empty() && s.back().id == unk_)) continue;
      id = unk_;
    }
    const auto n = static_cast<int32_t>(s.size());
    s.push_back({id, n - 1, n + 1});
  }
  if (s.empty()) return;
  s.back().next = -1;
  using Entry = std::pair<int32_t, int32_t>;  // (rank, position): lowest rank, then leftmost
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  const auto rank_at = [&](int32_t i) -> const std::pair<int32_t, int32_t>* {
    if (i < 0 || s[i].next < 0) return nullptr;
    const auto it = merges_.find((static_cast<uint64_t>(s[i].id) << 32) | static_cast<uint32_t>(s[s[i].next].id));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(s.size()); ++i)
    if (const auto* m = rank_at(i)) heap.push({m->first, i});
  while (!heap.empty()) {
    const auto [rank, i] = heap.top();
    heap.pop();
    const auto* m = s[i].id < 0 ? nullptr : rank_at(i);  // stale entries: merged away or changed
    if (!m || m->first != rank) continue;
    const int32_t j = s[i].next;
    s[i].id = m->second;
    s[i].next = s[j].next;
    if (s[j].next >= 0) s[s[j].next].prev = i;
    s[j].id = -1;
    if (const auto* left = rank_at(s[i].prev)) heap.push({left->first, s[i].prev});
    if (const auto* right = rank_at(i)) heap.push({right->first, i});
  }
  for (int32_t i = 0; i >= 0; i = s[i].next) out.push_back(s[i].id);
}

void BpeTokenizer::bpe(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() > 48) return bpe_uncached(piece, out);
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> ids;
  };
  thread_local Cache cache;
  if (cache.owner != instance_ || cache.ids.size() > 200000) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  auto [it, fresh] = cache.ids.try_emplace(std::string(piece));
  if (fresh) bpe_uncached(piece, it->second);
  out.insert(out.end(), it->second.begin(), it->second.end());
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view input, int max_length) const {
  std::string valid;
  if (!utf8::is_valid(input.data(), input.data() + input.size())) {
    valid = utf8::replace_ill_formed(input.data(), input.data() + input.size());
    input = valid;
  }
  const size_t budget = static_cast<size_t>(
      std::max<int64_t>(0, int64_t{max_length} - static_cast<int64_t>(prefix_.size() + suffix_.size())));
  std::vector<int32_t> ids;
  std::vector<std::string> pieces, next;
  std::vector<std::pair<size_t, size_t>> ranges;
  for (const auto& segment : added_.split(input)) {
    if (ids.size() >= budget) break;
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    pieces.assign(1, nfc_ ? unicode::nfc(segment.text) : std::string(segment.text));
    for (const PreStep& step : pre_) {
      next.clear();
      for (std::string& p : pieces) {
        if (step.byte_level && step.add_prefix_space && p[0] != ' ') p.insert(p.begin(), ' ');
        if (step.byte_level && !step.use_regex) {
          next.push_back(std::move(p));
          continue;
        }
        ranges.clear();
        split_pattern(step.byte_level ? PretokenizePattern::Gpt2 : step.pattern, p, ranges);
        for (const auto& [a, b] : ranges) next.emplace_back(p, a, b - a);
      }
      pieces.swap(next);
    }
    for (const std::string& p : pieces) {
      if (ids.size() >= budget) break;
      bpe(p, ids);
    }
  }
  if (ids.size() > budget) ids.resize(budget);
  ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

void BpeTokenizer::save(const std::string& dir) const {
  hf_files::make_dir(dir);
  hf_files::write_file(fs::path(dir) / "tokenizer.json", json_text_);
  nlohmann::ordered_json config = config_.is_object() ? config_ : nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"}};
  config["model_max_length"] = model_max_length_;
  hf_files::write_json(fs::path(dir) / "tokenizer_config.json", config);
}

}  // namespace ddp_embed
