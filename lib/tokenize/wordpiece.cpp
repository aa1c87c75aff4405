#include "tokenize/wordpiece.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <utility>
#include <nlohmann/json.hpp>

#include "tokenize/hf_files.h"
#include "tokenize/unicode.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace fs = std::filesystem;
using unicode::CharClass;

namespace {

constexpr std::string_view kContinuation = "##";

}  // namespace

std::vector<std::string> parse_vocab(std::string_view text, const std::string& source) {
  std::vector<std::string> lines;
  size_t begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') continue;
    lines.emplace_back(text.substr(begin, i - begin));
    if (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
    begin = i + 1;
  }
  if (begin < text.size()) lines.emplace_back(text.substr(begin));
  if (lines.empty()) throw TokenizerError(source + ": empty vocabulary");
  return lines;
}

// One encode() call: BERT's basic tokenization streamed character by character into
// WordPiece, so that nothing is allocated per character and a truncated encoding stops
// reading the text as soon as it has enough pieces. Each method returns false once the
// output is full.
class WordPieceEncoder {
 public:
  WordPieceEncoder(const WordPieceTokenizer& tok, std::vector<int32_t>& ids, size_t room)
      : tok_(tok), opt_(tok.options_), ids_(ids), room_(room) {
    subword_.reserve(4 * kMaxChars);
    held_.reserve(tok.max_special_chars_);
  }

  // Step 1: cut the special tokens' text out, tokenize what lies between.
  void run(std::string_view text) {
    const char* begin = text.data();
    const char* end = begin + text.size();
    const char* segment = begin;
    for (const char* p = begin; p < end;) {
      const WordPieceTokenizer::SpecialToken* match = nullptr;
      if (tok_.special_first_byte_[static_cast<unsigned char>(*p)]) {
        for (const auto& special : tok_.specials_) {
          const size_t n = special.text.size();
          if (static_cast<size_t>(end - p) >= n && text.compare(p - begin, n, special.text) == 0 &&
              (match == nullptr || n > match->text.size()))
            match = &special;
        }
      }
      if (match == nullptr) {
        ++p;
        continue;
      }
      if (!basic(segment, p) || !emit(match->id)) return;
      p += match->text.size();
      segment = p;
    }
    basic(segment, end);
  }

 private:
  static constexpr int kMaxChars = 100;  // WordpieceTokenizer.max_input_chars_per_word

  // Steps 2 and 3: lower-case, clean, split on whitespace and around CJK ideographs.
  bool basic(const char* p, const char* end) {
    while (p < end) {
      const char32_t cp = utf8::decode(p, end);
      char32_t lowered[3];
      int n = 1;
      if (opt_.lower_case)
        n = unicode::to_lower(cp, lowered);
      else
        lowered[0] = cp;
      for (int i = 0; i < n; ++i) {
        const char32_t c = lowered[i];
        switch (unicode::char_class(c)) {
          case CharClass::Control:
            break;
          case CharClass::Space:
            if (!end_word()) return false;
            break;
          case CharClass::Cjk:
            if (opt_.tokenize_chinese_chars) {
              if (!end_word() || !word_char(c) || !end_word()) return false;
            } else if (!word_char(c)) {
              return false;
            }
            break;
          default:
            if (!word_char(c)) return false;
        }
      }
    }
    return end_word();
  }

  // Step 4. The first characters of a word wait in held_ until the word is known not to
  // be a special token's text (those stay whole); then they flow on.
  bool word_char(char32_t c) {
    if (!streaming_) {
      if (held_.size() < tok_.max_special_chars_) {
        held_.push_back(c);
        return true;
      }
      streaming_ = true;
      if (!release_held()) return false;
    }
    return split_char(c);
  }

  bool end_word() {
    if (!streaming_ && !held_.empty()) {
      for (const auto& special : tok_.specials_) {
        if (held_ == special.chars) {
          held_.clear();
          return emit(special.id);
        }
      }
      if (!release_held()) return false;
    }
    held_.clear();
    streaming_ = false;
    return end_subword();
  }

  bool release_held() {
    for (char32_t c : held_)
      if (!split_char(c)) return false;
    held_.clear();
    return true;
  }

  // Accent stripping, then punctuation becomes a word of its own.
  bool split_char(char32_t c) {
    char32_t stripped[3];
    int n = 1;
    if (tok_.strip_accents_)
      n = unicode::strip_accents(c, stripped);
    else
      stripped[0] = c;
    for (int i = 0; i < n; ++i) {
      const char32_t s = stripped[i];
      if (unicode::char_class(s) == CharClass::Punct) {
        if (!end_subword()) return false;
        add_to_subword(s);
        if (!end_subword()) return false;
      } else {
        add_to_subword(s);
      }
    }
    return true;
  }

  void add_to_subword(char32_t c) {
    // Past the limit the word is [UNK] whatever follows: keep counting, stop storing.
    if (subword_chars_ < kMaxChars) {
      utf8::append(subword_, c);
      offsets_[subword_chars_ + 1] = static_cast<uint32_t>(subword_.size());
    }
    if (subword_chars_ <= kMaxChars) ++subword_chars_;
  }

  // Step 5: greedy longest-match-first WordPiece over the word in subword_.
  bool end_subword() {
    if (subword_chars_ == 0) return true;
    const bool ok = wordpiece();
    subword_.clear();
    subword_chars_ = 0;
    return ok;
  }

  bool wordpiece() {
    const int n = subword_chars_;
    if (n > kMaxChars) return emit(tok_.special_.unk);
    int32_t pieces[kMaxChars];
    int count = 0;
    const std::string_view word = subword_;
    for (int start = 0; start < n;) {
      const bool first = start == 0;
      const auto& table = first ? tok_.word_start_ : tok_.continuation_;
      const size_t longest = first ? tok_.max_start_bytes_ : tok_.max_continuation_bytes_;
      int32_t found = -1;
      int stop = n;
      for (; stop > start; --stop) {
        const size_t len = offsets_[stop] - offsets_[start];
        if (len > longest) continue;  // no vocabulary entry is that long
        auto it = table.find(word.substr(offsets_[start], len));
        if (it != table.end()) {
          found = it->second;
          break;
        }
      }
      if (found < 0) return emit(tok_.special_.unk);
      pieces[count++] = found;
      start = stop;
    }
    for (int i = 0; i < count; ++i)
      if (!emit(pieces[i])) return false;
    return true;
  }

  bool emit(int32_t id) {
    if (room_ == 0) return false;
    ids_.push_back(id);
    return --room_ > 0;
  }

  const WordPieceTokenizer& tok_;
  const WordPieceOptions& opt_;
  std::vector<int32_t>& ids_;
  size_t room_;  // pieces still allowed

  std::u32string held_;
  bool streaming_ = false;
  std::string subword_;                   // UTF-8 of the current word (first 100 chars)
  uint32_t offsets_[kMaxChars + 1] = {};  // byte offset of each character boundary
  int subword_chars_ = 0;
};

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options,
                                       std::string source)
    : vocab_(std::move(vocab)), options_(std::move(options)) {
  strip_accents_ = options_.strip_accents.value_or(options_.lower_case);
  if (vocab_.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw TokenizerError(source + ": vocabulary too large");
  word_start_.reserve(vocab_.size());
  continuation_.reserve(vocab_.size());
  for (size_t i = 0; i < vocab_.size(); ++i) {
    const std::string_view piece = vocab_[i];
    const auto id = static_cast<int32_t>(i);
    word_start_[piece] = id;
    max_start_bytes_ = std::max(max_start_bytes_, piece.size());
    if (piece.size() > kContinuation.size() &&
        piece.substr(0, kContinuation.size()) == kContinuation) {
      continuation_[piece.substr(kContinuation.size())] = id;
      max_continuation_bytes_ =
          std::max(max_continuation_bytes_, piece.size() - kContinuation.size());
    }
  }

  auto lookup = [&](const std::string& name) -> int32_t {
    auto it = word_start_.find(name);
    return it == word_start_.end() ? -1 : it->second;
  };
  auto require = [&](const std::string& name) {
    const int32_t id = lookup(name);
    if (id < 0) throw TokenizerError(source + ": the vocabulary has no " + name + " token");
    return id;
  };
  special_.unk = require(options_.unk_token);
  special_.cls = require(options_.cls_token);
  special_.sep = require(options_.sep_token);
  special_.pad = lookup(options_.pad_token);
  if (special_.pad < 0) special_.pad = 0;  // only ever masked out
  special_.mask = lookup(options_.mask_token);
  if (special_.mask < 0) special_.mask = special_.unk;

  std::vector<const std::string*> names = {&options_.unk_token, &options_.sep_token, &options_.pad_token,
                                           &options_.cls_token, &options_.mask_token};
  for (const std::string& more : options_.more_specials) names.push_back(&more);
  for (const std::string* name : names) {
    const int32_t id = lookup(*name);
    if (id < 0 || name->empty()) continue;
    if (std::any_of(specials_.begin(), specials_.end(), [&](const SpecialToken& s) { return s.text == *name; }))
      continue;
    SpecialToken special{{}, *name, id};
    for (const char *p = name->data(), *end = p + name->size(); p < end;)
      special.chars.push_back(utf8::decode(p, end));
    max_special_chars_ = std::max(max_special_chars_, special.chars.size());
    special_first_byte_[static_cast<unsigned char>((*name)[0])] = true;
    specials_.push_back(std::move(special));
  }
}

std::vector<int32_t> WordPieceTokenizer::encode(std::string_view text, int max_length) const {
  // [CLS] and [SEP] always fit: a max_length below 2 still gives both.
  const size_t room = max_length > 0 ? static_cast<size_t>(std::max(max_length, 2) - 2)
                                     : std::numeric_limits<size_t>::max();
  std::vector<int32_t> ids;
  ids.reserve(std::min<size_t>({room, text.size() + 1, 512}) + 2);
  ids.push_back(special_.cls);
  if (room > 0) WordPieceEncoder(*this, ids, room).run(text);
  ids.push_back(special_.sep);
  return ids;
}

const std::string& WordPieceTokenizer::token(int32_t id) const {
  static const std::string kNone;
  return (id >= 0 && static_cast<size_t>(id) < vocab_.size()) ? vocab_[id] : kNone;
}

namespace {

// tokenizer.json's model.vocab of a WordPiece model, ordered by id; every id from 0 up once.
std::vector<std::string> vocab_of_tokenizer_json(const fs::path& file) {
  const auto json = hf_files::read_json_if_exists(file);
  const std::string where = file.string();
  if (!json || !json->contains("model") || !(*json)["model"].is_object() || !(*json)["model"].contains("vocab") ||
      !(*json)["model"]["vocab"].is_object())
    throw TokenizerError(where + ": no model.vocab object (a WordPiece tokenizer.json has one), and no vocab.txt beside it");
  const auto& entries = (*json)["model"]["vocab"];
  std::vector<std::string> vocab(entries.size());
  std::vector<bool> seen(entries.size(), false);
  for (const auto& item : entries.items()) {
    const auto& id = item.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= int64_t(entries.size()) ||
        seen[size_t(id.get<int64_t>())])
      throw TokenizerError(where + ": model.vocab." + item.key() + " has id " + id.dump() +
                           ": the ids must be 0 to " + std::to_string(entries.size() - 1) + ", each once");
    seen[size_t(id.get<int64_t>())] = true;
    vocab[size_t(id.get<int64_t>())] = item.key();
  }
  return vocab;
}

}  // namespace

std::unique_ptr<WordPieceTokenizer> WordPieceTokenizer::load(const std::string& path,
                                                             bool lower_case) {
  fs::path vocab_path = path;
  std::error_code ec;
  std::vector<std::string> vocab;
  if (fs::is_directory(vocab_path, ec) && !fs::exists(vocab_path / "vocab.txt", ec) &&
      fs::exists(vocab_path / "tokenizer.json", ec)) {
    // transformers 5 saves a BERT's tokenizer as tokenizer.json alone: its WordPiece
    // model's vocab (piece -> id) is vocab.txt's lines.
    vocab_path /= "tokenizer.json";
    vocab = vocab_of_tokenizer_json(vocab_path);
  } else {
    if (fs::is_directory(vocab_path, ec)) {
      vocab_path /= "vocab.txt";
      if (!fs::exists(vocab_path, ec)) throw TokenizerError(path + ": no vocab.txt in this folder");
    }
    vocab = parse_vocab(hf_files::read_file(vocab_path), vocab_path.string());
  }

  WordPieceOptions options;
  options.lower_case = lower_case;
  int max_length = 512;
  const fs::path dir = vocab_path.parent_path();
  nlohmann::json names = nlohmann::json::object();
  if (auto map = hf_files::read_json_if_exists(dir / "special_tokens_map.json")) names = *map;
  const fs::path config_path = dir / "tokenizer_config.json";
  if (auto config = hf_files::read_json_if_exists(config_path)) {
    const std::string where = config_path.string();
    options.lower_case = hf_files::bool_setting(*config, "do_lower_case", lower_case, where);
    auto strip = config->find("strip_accents");
    if (strip != config->end() && !strip->is_null())
      options.strip_accents = hf_files::bool_setting(*config, "strip_accents", true, where);
    options.tokenize_chinese_chars =
        hf_files::bool_setting(*config, "tokenize_chinese_chars", true, where);
    max_length = hf_files::max_length_setting(*config, max_length);
    if (const auto cls = config->find("tokenizer_class"); cls != config->end() && cls->is_string())
      options.tokenizer_class = cls->get<std::string>();
    names.update(*config);  // the config's token names win, as in from_pretrained
  }
  // transformers 5 reads tokenizer.json where there is one: its special added tokens and
  // its pair form are the tokenizer's.
  options.roberta_pair = options.tokenizer_class.rfind("MPNetTokenizer", 0) == 0;
  if (const auto file = hf_files::read_json_if_exists(dir / "tokenizer.json")) {
    if (const auto added = file->find("added_tokens"); added != file->end() && added->is_array())
      for (const auto& token : *added)
        if (token.is_object() && token.value("special", false) && token.contains("content") &&
            token["content"].is_string())
          options.more_specials.push_back(token["content"].get<std::string>());
    if (const auto post = file->find("post_processor"); post != file->end() && post->is_object())
      options.roberta_pair = post->value("type", "") == "RobertaProcessing";
  }
  options.unk_token = hf_files::token_name(names, "unk_token", options.unk_token);
  options.cls_token = hf_files::token_name(names, "cls_token", options.cls_token);
  options.sep_token = hf_files::token_name(names, "sep_token", options.sep_token);
  options.pad_token = hf_files::token_name(names, "pad_token", options.pad_token);
  options.mask_token = hf_files::token_name(names, "mask_token", options.mask_token);

  auto tokenizer = std::make_unique<WordPieceTokenizer>(std::move(vocab), std::move(options),
                                                        vocab_path.string());
  tokenizer->set_model_max_length(max_length);
  return tokenizer;
}

void WordPieceTokenizer::save(const std::string& dir) const {
  const fs::path folder = dir;
  hf_files::make_dir(folder);
  std::string text;
  for (const auto& piece : vocab_) {
    text += piece;
    text += '\n';
  }
  hf_files::write_file(folder / "vocab.txt", text);

  nlohmann::ordered_json tokens;
  tokens["unk_token"] = options_.unk_token;
  tokens["sep_token"] = options_.sep_token;
  tokens["pad_token"] = options_.pad_token;
  tokens["cls_token"] = options_.cls_token;
  tokens["mask_token"] = options_.mask_token;

  nlohmann::ordered_json config;
  config["tokenizer_class"] = options_.tokenizer_class;
  config["do_lower_case"] = options_.lower_case;
  config["strip_accents"] = options_.strip_accents ? nlohmann::ordered_json(*options_.strip_accents)
                                                   : nlohmann::ordered_json(nullptr);
  config["tokenize_chinese_chars"] = options_.tokenize_chinese_chars;
  hf_files::write_tokenizer_config(folder, std::move(config), model_max_length_, tokens);
}

PairTemplate WordPieceTokenizer::pair_template() const {
  PairTemplate t = Tokenizer::pair_template();  // [CLS] a [SEP] b [SEP], types 0 and 1
  if (!options_.roberta_pair) return t;
  t.between = {special_.sep, special_.sep};
  t.second_type = 0;  // RobertaProcessing: every token type 0
  return t;
}

}  // namespace ddp_embed
