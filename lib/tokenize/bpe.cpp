// BPE from tokenizer.json (bpe.h). Why it looks like this: the reference is transformers 5's
// AutoTokenizer, and that does not always run the pipeline written in tokenizer.json. For a
// folder whose tokenizer_config.json names a class with its own constructor
// (Qwen2Tokenizer, GPT2Tokenizer, GemmaTokenizer) transformers rebuilds normalizer and pre-tokenizer from
// the class and keeps only vocabulary, merges, added tokens and the post-processor of the
// file; for a generic class (PreTrainedTokenizerFast, TokenizersBackend, none) it runs the
// file as it is. Any other class is refused rather than guessed at. Either way, named
// special tokens of tokenizer_config.json missing from the added tokens are added (as
// TokenizersBackend does); the file's post-processor always stands (transformers drops
// add_bos_token / add_eos_token of the config when there is a tokenizer.json).
//
// Encoding: added tokens are cut out of the raw text first; each piece between them is
// normalized and cut into words (bpe_text_steps.h); a word's symbols are its bytes mapped to
// GPT-2's printable characters (byte-level) or its characters (with byte fallback for those
// the vocabulary lacks), and they are merged: always the adjacent pair of lowest merge rank,
// leftmost among equals (a heap over a linked list, so a 100k-letter word is O(n log n): a
// Gemma text is one word). Short words are cached per thread. Words are independent, so
// encoding stops once enough ids for max_length are there.
#include "tokenize/bpe.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <queue>
#include <nlohmann/json.hpp>

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

// A byte's piece in a character-level vocabulary with byte fallback: "<0x41>", as tokenizers
// spells it (upper-case hex digits).
std::string byte_piece(unsigned char b) {
  return std::string("<0x") + "0123456789ABCDEF"[b >> 4] + "0123456789ABCDEF"[b & 15] + ">";
}

std::string type_of(const json& node) {
  const auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : "";
}

bool node_flag(const json& node, const char* key, bool fallback, const std::string& where) {
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

}  // namespace

// Named, not anonymous: BpeLoader (external linkage, a friend of BpeTokenizer) holds one.
namespace bpe_detail {

// Reads tokenizer.json without building model.vocab and model.merges as JSON (151k entries
// each in Qwen3's file, most of the load time): their well-formed entries stream into
// `vocab` and `merges`, in order; everything else, ill-formed vocab entries included,
// becomes `doc` through nlohmann's own DOM builder (so model.vocab is left {} unless
// something in it is wrong). A merge that is neither "a b" nor two strings is kept with
// `bad` set, for the loader to name by its index.
class TokenizerJsonSax {
 public:
  struct Merge {
    std::string a, b;
    bool pair = false, bad = false;
  };
  std::vector<std::pair<std::string, int32_t>> vocab;
  std::vector<Merge> merges;

  explicit TokenizerJsonSax(json& doc) : dom_(doc, /*allow_exceptions=*/true) {}

  bool null() { return value([&] { return dom_.null(); }); }
  bool boolean(bool v) { return value([&] { return dom_.boolean(v); }); }
  bool number_integer(json::number_integer_t v) { return value([&] { return dom_.number_integer(v); }); }
  bool number_unsigned(json::number_unsigned_t v) {
    if (in("vocab") && v <= INT32_MAX) return vocab.emplace_back(std::move(key_), static_cast<int32_t>(v)), true;
    return value([&] { return dom_.number_unsigned(v); });
  }
  bool number_float(json::number_float_t v, const std::string& text) { return value([&] { return dom_.number_float(v, text); }); }
  bool string(std::string& v) {
    if (skip_ == 0 && in("merges")) return merges.push_back({std::move(v), "", false, false}), true;
    if (skip_ == 0 && in_pair()) {
      if (pair_count_ >= 2) merges.back().bad = true;
      else (pair_count_ == 0 ? merges.back().a : merges.back().b) = std::move(v);
      return ++pair_count_, true;
    }
    return value([&] { return dom_.string(v); });
  }
  bool binary(json::binary_t& v) { return value([&] { return dom_.binary(v); }); }
  bool start_object(std::size_t n) { return open(true, n); }
  bool end_object() { return close(true); }
  bool start_array(std::size_t n) { return open(false, n); }
  bool end_array() { return close(false); }
  bool key(std::string& k) {
    if (skip_ > 0) return true;
    if (in("vocab")) return key_ = std::move(k), true;
    pending_ = k;
    return dom_.key(k);
  }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) {
    return dom_.parse_error(position, token, e);
  }

 private:
  // Directly inside model.vocab / model.merges (the stack holds the key of every open container).
  bool in(const char* name) const { return stack_.size() == 3 && stack_[1] == "model" && stack_[2] == name; }
  bool in_pair() const { return stack_.size() == 4 && stack_[1] == "model" && stack_[2] == "merges"; }
  template <class F>
  bool value(F forward) {
    if (skip_ > 0) return true;
    pending_.clear();
    if (in("merges")) return merges.push_back({"", "", false, true}), true;
    if (in_pair()) return merges.back().bad = true, true;
    if (in("vocab")) dom_.key(key_);  // an id that is not a 32-bit count: left for the loader to name
    return forward();
  }
  bool open(bool object, std::size_t n) {
    if (skip_ > 0) return ++skip_, true;
    if (in_pair()) return merges.back().bad = true, skip_ = 1, true;  // nothing a merge may hold
    if (in("merges")) {
      if (object) return merges.push_back({"", "", false, true}), skip_ = 1, true;
      merges.push_back({"", "", true, false});  // a ["a", "b"] pair
      pair_count_ = 0;
      stack_.emplace_back();
      return true;
    }
    if (in("vocab")) dom_.key(key_);
    stack_.push_back(std::move(pending_));
    pending_.clear();
    return object ? dom_.start_object(n) : dom_.start_array(n);
  }
  bool close(bool object) {
    if (skip_ > 0) return --skip_, true;
    pending_.clear();
    if (in_pair()) {
      if (pair_count_ != 2) merges.back().bad = true;
      stack_.pop_back();
      return true;
    }
    stack_.pop_back();
    return object ? dom_.end_object() : dom_.end_array();
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::vector<std::string> stack_;
  std::string key_;      // the vocab entry being read
  std::string pending_;  // the key of the container about to open
  int skip_ = 0, pair_count_ = 0;
};

}  // namespace bpe_detail
using bpe_detail::TokenizerJsonSax;

// BpeTokenizer::load's steps, each reading one part of the files into the tokenizer (a
// friend of it), in the order load runs them. Errors name tokenizer.json (or
// tokenizer_config.json) and the JSON path of what is wrong or not supported.
class BpeLoader {
 public:
  BpeLoader(BpeTokenizer& t, const fs::path& file, const fs::path& config_file)
      : t_(t), origin_(file.string()), config_file_(config_file) {}

  // tokenizer.json, streamed (the vocabulary and merges apart), and tokenizer_config.json.
  void read_files();
  // model: the vocabulary and merges, the ids of the bytes' characters.
  void read_model();
  // The normalizer and pre-tokenizer: the tokenizer class's, or the file's.
  void read_pre_tokenization();
  // The added tokens, and the config's special tokens missing from them.
  void read_added_tokens();
  // post_processor: the ids put before and after the pieces.
  // Its pair form too, or why there is none (a pair is refused then, a single text is not).
  void read_post_processor();
  // The special ids (cls, sep, unk, mask, pad) and model_max_length.
  void set_special_ids();

 private:
  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw TokenizerError(origin_ + ": " + where + ": " + what);
  }
  int32_t vocab_id(const std::string& token, const std::string& where) const;
  // An added token's id, else the vocabulary's; -1 if neither has it.
  int32_t token_id(const std::string& name) const;
  void read_post_processor(const json& p, const std::string& where);

  BpeTokenizer& t_;
  const std::string origin_;  // tokenizer.json's path, for errors
  const fs::path config_file_;
  json j_;                          // tokenizer.json but model.vocab and model.merges
  TokenizerJsonSax sax_{j_};        // ... which it holds
  json config_ = json::object();    // tokenizer_config.json, {} when absent
  int32_t max_id_ = -1;
  std::map<std::string, std::string> defaults_;  // the class's special tokens
  std::map<std::string, std::string> names_;     // special token key → content
};

void BpeLoader::read_files() {
  t_.json_text_ = hf_files::read_file(origin_);
  try {
    json::sax_parse(t_.json_text_, &sax_);
  } catch (const json::exception& e) {
    throw TokenizerError(origin_ + ": not valid JSON: " + e.what());
  }
  if (!j_.is_object()) throw TokenizerError(origin_ + ": not a JSON object");
  if (fs::exists(config_file_)) {
    t_.config_ = nlohmann::ordered_json::parse(hf_files::read_file(config_file_), nullptr, false);
    if (t_.config_.is_discarded() || !t_.config_.is_object())
      throw TokenizerError(config_file_.string() + ": not a JSON object");
    config_ = json::parse(t_.config_.dump());
  }
}

int32_t BpeLoader::vocab_id(const std::string& token, const std::string& where) const {
  const auto it = t_.vocab_.find(token);
  if (it == t_.vocab_.end()) fail(where, "token \"" + token + "\" is not in model.vocab");
  return it->second;
}

void BpeLoader::read_model() {
  static const json kNull;
  const json& model = j_.contains("model") ? j_["model"] : kNull;
  if (!model.is_object()) fail("model", "missing");
  if (type_of(model) != "BPE")
    fail("model.type", "\"" + type_of(model) + "\" is not BPE");
  if (model.contains("dropout") && !model["dropout"].is_null() && !(model["dropout"].is_number() && model["dropout"].get<double>() == 0))
    fail("model.dropout", "BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      fail(std::string("model.") + key, "must be empty (word-piece prefixes and suffixes are not supported)");
  t_.byte_fallback_ = node_flag(model, "byte_fallback", false, "model");
  t_.fuse_unk_ = node_flag(model, "fuse_unk", false, "model");
  t_.ignore_merges_ = node_flag(model, "ignore_merges", false, "model");
  if (!model.contains("vocab") || !model["vocab"].is_object()) fail("model.vocab", "missing or not an object");
  for (const auto& [token, id] : model["vocab"].items())  // only what the streaming parse left: bad ids
    fail("model.vocab[\"" + token + "\"]", id.dump() + " is not a non-negative 32-bit id");
  t_.vocab_.reserve(sax_.vocab.size());
  for (auto& [token, id] : sax_.vocab) {
    max_id_ = std::max(max_id_, id);
    t_.vocab_[std::move(token)] = id;
  }
  if (model.contains("unk_token") && model["unk_token"].is_string())
    t_.unk_ = vocab_id(model["unk_token"].get<std::string>(), "model.unk_token");
  if (model.contains("merges") && !model["merges"].is_array()) fail("model.merges", "not a list");
  t_.merges_.reserve(sax_.merges.size());
  for (size_t i = 0; i < sax_.merges.size(); ++i) {
    const std::string where = "model.merges[" + std::to_string(i) + "]";
    TokenizerJsonSax::Merge& m = sax_.merges[i];
    if (m.bad) fail(where, "neither \"a b\" nor [\"a\", \"b\"]");
    if (!m.pair) {  // "a b"
      const size_t space = m.a.find(' ');
      if (space == std::string::npos || m.a.find(' ', space + 1) != std::string::npos)
        fail(where, "\"" + m.a + "\" is not two tokens separated by one space");
      m.b = m.a.substr(space + 1);
      m.a.resize(space);
    }
    const uint64_t key =
        (static_cast<uint64_t>(vocab_id(m.a, where)) << 32) | static_cast<uint32_t>(vocab_id(m.b, where));
    t_.merges_[key] = {static_cast<int32_t>(i), vocab_id(m.a + m.b, where)};  // a repeated pair takes the later rank, as tokenizers
  }
}

void BpeLoader::read_pre_tokenization() {
  const std::string klass = config_.contains("tokenizer_class") && config_["tokenizer_class"].is_string()
                                ? config_["tokenizer_class"].get<std::string>() : "";
  const bool prefix_space = node_flag(config_, "add_prefix_space", false, config_file_.string());
  using Pre = BpePreStep;
  BpeTextSteps& text = t_.text_;
  const bool gemma_class = klass == "GemmaTokenizer" || klass == "GemmaTokenizerFast";  // its own BPE model too
  if (klass == "Qwen2Tokenizer" || klass == "Qwen2TokenizerFast") {
    text.normalize = {{BpeNormalizeStep::Kind::Nfc, "", ""}};
    Pre split, bytes;
    split.pattern = PretokenizePattern::Qwen2;
    bytes.kind = Pre::Kind::ByteLevel;
    bytes.add_prefix_space = prefix_space;
    bytes.use_regex = false;
    text.pre = {split, bytes};
    defaults_ = {{"unk_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}, {"pad_token", "<|endoftext|>"}};
  } else if (klass == "GPT2Tokenizer" || klass == "GPT2TokenizerFast") {
    Pre bytes;
    bytes.kind = Pre::Kind::ByteLevel;
    bytes.add_prefix_space = prefix_space;
    text.pre = {bytes};
    defaults_ = {{"unk_token", "<|endoftext|>"}, {"bos_token", "<|endoftext|>"}, {"eos_token", "<|endoftext|>"}};
  } else if (gemma_class) {
    // BPE(vocab, merges, fuse_unk=True, byte_fallback=True, unk_token), Replace(" ", "▁"),
    // Split(" ", merged_with_previous), whatever the file says.
    text.normalize = {{BpeNormalizeStep::Kind::Replace, " ", "\xE2\x96\x81"}};
    Pre split;
    split.kind = Pre::Kind::Literal;
    split.literal = " ";
    split.merged_with_previous = true;
    text.pre = {split};
    defaults_ = {{"unk_token", "<unk>"}, {"bos_token", "<bos>"}, {"eos_token", "<eos>"}, {"pad_token", "<pad>"},
                 {"mask_token", "<mask>"}};
  } else if (klass.empty() || klass == "PreTrainedTokenizerFast" || klass == "TokenizersBackend") {
    text.read_normalizer(j_.value("normalizer", json()), "normalizer", origin_);
    text.read_pre_tokenizer(j_.value("pre_tokenizer", json()), "pre_tokenizer", origin_);
  } else {
    throw TokenizerError(config_file_.string() + ": tokenizer_class \"" + klass +
                         "\" is not supported for BPE (supported: Qwen2Tokenizer, GPT2Tokenizer, GemmaTokenizer, "
                         "PreTrainedTokenizerFast, TokenizersBackend)");
  }
  if (gemma_class) {  // BPE(fuse_unk=True, byte_fallback=True, unk_token): the config's unk
    const auto unk = t_.vocab_.find(config_token(config_, "unk_token", defaults_.at("unk_token")));
    t_.unk_ = unk == t_.vocab_.end() ? -1 : unk->second;
    t_.fuse_unk_ = t_.byte_fallback_ = true;
    t_.ignore_merges_ = false;
  } else if (!defaults_.empty()) {  // the class builds its own BPE model: no unk, no ignore_merges
    t_.unk_ = -1;
    t_.fuse_unk_ = t_.ignore_merges_ = t_.byte_fallback_ = false;
  }
  t_.byte_level_ = text.byte_level();
  if (t_.byte_level_ && t_.byte_fallback_) fail("model.byte_fallback", "true with a ByteLevel pre-tokenizer (every byte is a symbol already)");
  // The symbol of each byte: its GPT-2 character (byte-level), else its "<0xHH>" piece.
  const std::array<char32_t, 256> chars = byte_chars();
  for (int b = 0; b < 256; ++b) {
    std::string c;
    if (t_.byte_level_) utf8::append(c, chars[b]);
    else c = byte_piece(static_cast<unsigned char>(b));
    const auto it = t_.vocab_.find(c);
    t_.byte_id_[b] = it == t_.vocab_.end() ? -1 : it->second;
  }
}

void BpeLoader::read_added_tokens() {
  AddedTokens added = AddedTokens::from_json(j_.value("added_tokens", json()), origin_);
  std::vector<AddedToken> tokens = added.tokens();
  for (const auto& a : tokens) max_id_ = std::max(max_id_, a.id);
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    const auto d = defaults_.find(key);
    const std::string name = config_token(config_, key, d == defaults_.end() ? "" : d->second);
    if (name.empty()) continue;
    names_[key] = name;
    if (added.id_of(name)) continue;
    AddedToken extra;
    extra.content = name;
    const auto v = t_.vocab_.find(name);
    extra.id = v != t_.vocab_.end() ? v->second : ++max_id_;
    tokens.push_back(extra);
    added = AddedTokens(tokens);
  }
  t_.added_ = AddedTokens(tokens);
  t_.vocab_size_ = max_id_ + 1;
}

void BpeLoader::read_post_processor(const json& p, const std::string& where) {
  if (p.is_null()) return;
  const std::string type = type_of(p);
  if (type == "ByteLevel") return;  // offsets only
  if (type == "Sequence" && p.contains("processors") && p["processors"].is_array()) {
    for (size_t i = 0; i < p["processors"].size(); ++i)
      read_post_processor(p["processors"][i], where + ".processors[" + std::to_string(i) + "]");
  } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].is_array()) {
    bool seen_a = false;
    for (size_t i = 0; i < p["single"].size(); ++i) {
      const json& e = p["single"][i];
      const std::string at = where + ".single[" + std::to_string(i) + "]";
      if (e.contains("Sequence")) {
        if (seen_a) fail(at, "a second sequence in the single template");
        seen_a = true;
      } else if (e.contains("SpecialToken") && e["SpecialToken"].contains("id")) {
        const json& name = e["SpecialToken"]["id"];
        const json& entry = p.contains("special_tokens") && p["special_tokens"].contains(name.get<std::string>())
                                ? p["special_tokens"][name.get<std::string>()] : json();
        if (!entry.contains("ids") || !entry["ids"].is_array()) fail(where + ".special_tokens", "no ids for " + name.dump());
        for (const auto& id : entry["ids"]) (seen_a ? t_.suffix_ : t_.prefix_).push_back(id.get<int32_t>());
      } else {
        fail(at, "neither a Sequence nor a SpecialToken");
      }
    }
  } else if ((type == "RobertaProcessing" || type == "BertProcessing") && p.contains("cls") && p.contains("sep")) {
    t_.prefix_.push_back(p["cls"][1].get<int32_t>());
    t_.suffix_.push_back(p["sep"][1].get<int32_t>());
  } else {
    fail(where, "post-processor \"" + type +
                    "\" is not supported (supported: ByteLevel, TemplateProcessing, RobertaProcessing, "
                    "BertProcessing, Sequence)");
  }
}

void BpeLoader::read_post_processor() {
  const json p = j_.value("post_processor", json());
  read_post_processor(p, "post_processor");
  try {
    t_.pair_ = pair_template_of_post_processor(p, origin_ + ": post_processor");
    t_.pair_.single_before = t_.prefix_.size();
    t_.pair_.single_after = t_.suffix_.size();
  } catch (const TokenizerError& e) {
    t_.pair_error_ = e.what();
  }
}

int32_t BpeLoader::token_id(const std::string& name) const {
  if (const auto id = t_.added_.id_of(name)) return *id;
  const auto v = t_.vocab_.find(name);
  return v != t_.vocab_.end() ? v->second : -1;
}

void BpeLoader::set_special_ids() {
  t_.special_.cls = t_.prefix_.empty() ? -1 : t_.prefix_.front();
  t_.special_.sep = t_.suffix_.empty() ? -1 : t_.suffix_.back();
  const auto named = [&](const char* key) { return names_.count(key) ? token_id(names_.at(key)) : -1; };
  t_.special_.unk = named("unk_token");
  t_.special_.mask = named("mask_token");
  t_.special_.pad = named("pad_token") >= 0 ? named("pad_token") : named("eos_token") >= 0 ? named("eos_token") : 0;
  t_.model_max_length_ = hf_files::max_length_setting(config_, 512);
}

std::unique_ptr<Tokenizer> BpeTokenizer::load(const std::string& path) {
  const fs::path file = fs::is_directory(path) ? fs::path(path) / "tokenizer.json" : fs::path(path);
  auto t = std::make_unique<BpeTokenizer>();
  static std::atomic<uint64_t> instances{0};
  t->instance_ = ++instances;
  BpeLoader loader(*t, file, file.parent_path() / "tokenizer_config.json");
  loader.read_files();
  loader.read_model();
  loader.read_pre_tokenization();
  loader.read_added_tokens();
  loader.read_post_processor();
  loader.set_special_ids();
  return t;
}

void BpeTokenizer::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  if (byte_level_) {
    for (unsigned char b : word) {
      const int32_t id = byte_id_[b];
      if (id >= 0) ids.push_back(id);
      else if (unk_ >= 0 && !(fuse_unk_ && !ids.empty() && ids.back() == unk_)) ids.push_back(unk_);
    }
    return;
  }
  // tokenizers' BPE::merge_word: an unknown character's unk waits until the next known
  // character (or the end) to be written, fused with the unknowns after it if fuse_unk;
  // byte-fallback pieces are written at once, past a waiting unk.
  bool unk_waiting = false;
  const auto flush_unk = [&] {
    if (unk_waiting) ids.push_back(unk_);
    unk_waiting = false;
  };
  for (const char* at = word.data(); at < word.data() + word.size();) {
    const char* begin = at;
    utf8::decode(at, word.data() + word.size());  // the text is well-formed: encode() made it so
    const std::string_view c(begin, static_cast<size_t>(at - begin));
    if (const auto it = vocab_.find(std::string(c)); it != vocab_.end()) {
      flush_unk();
      ids.push_back(it->second);
      continue;
    }
    if (byte_fallback_ && std::all_of(c.begin(), c.end(), [&](char b) { return byte_id_[static_cast<unsigned char>(b)] >= 0; })) {
      for (char b : c) ids.push_back(byte_id_[static_cast<unsigned char>(b)]);
      continue;
    }
    if (unk_ < 0) continue;
    if (!fuse_unk_) flush_unk();
    unk_waiting = true;
  }
  flush_unk();
}

void BpeTokenizer::bpe_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    const auto it = vocab_.find(byte_level_ ? byte_mapped(word) : std::string(word));
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
  };
  std::vector<int32_t> ids;
  ids.reserve(word.size());
  initial_symbols(word, ids);
  std::vector<Symbol> s;
  s.reserve(ids.size());
  for (const int32_t id : ids) {
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

void BpeTokenizer::bpe(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > 48) return bpe_uncached(word, out);
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> ids;
  };
  thread_local Cache cache;
  if (cache.owner != instance_ || cache.ids.size() > 200000) {
    cache.ids.clear();
    cache.owner = instance_;
  }
  auto [it, fresh] = cache.ids.try_emplace(std::string(word));
  if (fresh) bpe_uncached(word, it->second);
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
  std::vector<std::string> words;
  for (const auto& segment : added_.split(input)) {
    if (ids.size() >= budget) break;
    if (segment.id >= 0) {
      ids.push_back(segment.id);
      continue;
    }
    text_.words(segment.text, segment.text.data() == input.data(), words);
    for (const std::string& w : words) {
      if (ids.size() >= budget) break;
      bpe(w, ids);
    }
  }
  if (ids.size() > budget) ids.resize(budget);
  ids.insert(ids.begin(), prefix_.begin(), prefix_.end());
  ids.insert(ids.end(), suffix_.begin(), suffix_.end());
  return ids;
}

PairTemplate BpeTokenizer::pair_template() const {
  if (!pair_error_.empty()) throw TokenizerError(pair_error_ + " (two texts cannot be joined with this tokenizer)");
  return pair_;
}

void BpeTokenizer::save(const std::string& dir) const {
  hf_files::make_dir(dir);
  hf_files::write_file(fs::path(dir) / "tokenizer.json", json_text_);
  nlohmann::ordered_json config = config_.is_object() ? config_ : nlohmann::ordered_json{{"tokenizer_class", "PreTrainedTokenizerFast"}};
  config["model_max_length"] = model_max_length_;
  hf_files::write_json(fs::path(dir) / "tokenizer_config.json", config);
}

}  // namespace ddp_embed
