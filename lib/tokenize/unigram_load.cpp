// Loading the Unigram tokenizer (unigram.h): the vocabulary and its trie, the added
// tokens, and the pipeline, from tokenizer.json or sentencepiece.bpe.model.
//
// Loading follows transformers' choice of pipeline: for the XLMRobertaTokenizer class
// (tokenizer_config.json's tokenizer_class, or config.json's model_type "xlm-roberta", or a
// folder with only sentencepiece.bpe.model) only the vocabulary, the charsmap and the added
// tokens come from the files, the rest is the class's; for the generic class the file's
// normalizer, pre-tokenizer and post-processor are run. The helpers come first, as
// UnigramTokenizer::Impl; the entry, load(), last: it picks the class, then reads
// tokenizer.json (from_json_file) or sentencepiece.bpe.model (from_model_file).
#include "tokenize/unigram.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "tokenize/hf_files.h"
#include "tokenize/spm_model_file.h"

namespace ddp_embed {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr double kUnkPenalty = 10.0;

// The double that Rust's serde_json (without its float_roundtrip feature, as tokenizers is
// built) reads for the JSON number that `value` was written as (its shortest form, which
// Python and tokenizers both write): the decimal digits as an integer, then one multiply
// or divide by a power of ten — off by an ulp from the correctly rounded value for about a
// third of a vocabulary's scores, which decides some Viterbi ties. A tokenizer.json that
// tokenizers reads itself (the generic class) has these scores; transformers' XLM-R class
// reads the file with Python's json, correctly rounded.
double serde_json_f64(double value) {
  static const std::vector<double> pow10 = [] {
    std::vector<double> p;
    for (int i = 0; i <= 308; ++i) p.push_back(std::strtod(("1e" + std::to_string(i)).c_str(), nullptr));
    return p;
  }();
  if (!std::isfinite(value)) return value;
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof buf, value);
  const char* p = buf;
  const char* const end = res.ptr;
  const bool negative = p < end && *p == '-';
  if (negative) ++p;
  uint64_t significand = 0;
  int exponent = 0, digits = 0;
  bool fraction = false;
  for (; p < end && *p != 'e'; ++p) {
    if (*p == '.') {
      fraction = true;
      continue;
    }
    if (++digits > 19) return value;  // not a shortest form: cannot happen
    significand = significand * 10 + uint64_t(*p - '0');
    if (fraction) --exponent;
  }
  if (p < end && *p == 'e') exponent += std::atoi(p + 1);
  double f = double(significand);
  while (true) {
    const int e = exponent < 0 ? -exponent : exponent;
    if (e < int(pow10.size())) {
      f = exponent >= 0 ? f * pow10[size_t(e)] : f / pow10[size_t(e)];
      break;
    }
    if (f == 0.0 || exponent >= 0) break;
    f /= 1e308;
    exponent += 308;
  }
  return negative ? -f : f;
}

}  // namespace

// Loading helpers, with access to the tokenizer's members.
struct UnigramTokenizer::Impl {
  // The vocabulary, the trie, unk and byte-fallback ids.
  static void set_vocab(UnigramTokenizer& t, std::vector<std::pair<std::string, double>> vocab, int32_t unk_id,
                        bool byte_fallback, const std::string& where) {
    if (vocab.empty()) throw TokenizerError(where + ": the vocabulary is empty");
    if (unk_id < 0 || size_t(unk_id) >= vocab.size())
      throw TokenizerError(where + ": unk_id " + std::to_string(unk_id) + " is outside the vocabulary of " +
                           std::to_string(vocab.size()));
    t.pieces_.clear();
    t.scores_.clear();
    double min_score = std::numeric_limits<double>::infinity();
    for (auto& [piece, score] : vocab) {
      min_score = std::min(min_score, score);
      t.pieces_.push_back(std::move(piece));
      t.scores_.push_back(score);
    }
    // The trie, breadth first over the pieces in byte order: a node is a run of sorted
    // pieces sharing `depth` bytes; its children (one per next byte) are numbered as they
    // are made, so each node's edges are contiguous and in label order.
    std::vector<int32_t> order(t.pieces_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return t.pieces_[size_t(a)] < t.pieces_[size_t(b)]; });
    struct Run {
      size_t lo, hi, depth;
    };
    std::vector<Run> runs = {{0, order.size(), 0}};  // runs[n] is node n
    t.node_piece_.clear();
    t.edge_begin_.clear();
    t.edge_label_.clear();
    t.edge_child_.clear();
    for (size_t n = 0; n < runs.size(); ++n) {
      auto [lo, hi, depth] = runs[n];
      int32_t piece = -1;
      while (lo < hi && t.pieces_[size_t(order[lo])].size() == depth) piece = order[lo++];  // a repeat: the last id, as tokenizers
      t.node_piece_.push_back(n == 0 ? -1 : piece);
      t.edge_begin_.push_back(uint32_t(t.edge_label_.size()));
      while (lo < hi) {
        const auto c = static_cast<unsigned char>(t.pieces_[size_t(order[lo])][depth]);
        size_t end = lo + 1;
        while (end < hi && static_cast<unsigned char>(t.pieces_[size_t(order[end])][depth]) == c) ++end;
        t.edge_label_.push_back(c);
        t.edge_child_.push_back(int32_t(runs.size()));
        runs.push_back({lo, end, depth + 1});
        lo = end;
      }
    }
    t.edge_begin_.push_back(uint32_t(t.edge_label_.size()));
    t.unk_id_ = unk_id;
    t.unk_score_ = min_score - kUnkPenalty;
    t.byte_fallback_ = byte_fallback;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      t.byte_ids_[size_t(b)] = t.exact_id(name);
    }
  }

  // Tokens matched on the raw text, and those ("normalized": true) matched on the
  // normalized text, as their normalized content (tokenizers' AddedVocabulary).
  static void set_added(UnigramTokenizer& t, std::vector<AddedToken> tokens) {
    std::vector<AddedToken> raw, normalized;
    for (auto& a : tokens) {
      if (a.normalized) {
        std::string content;
        t.normalize(a.content, content);
        normalized.push_back(a);
        normalized.back().content = std::move(content);
      } else {
        raw.push_back(a);
      }
    }
    t.vocab_size_ = int32_t(t.pieces_.size());
    for (const auto& a : tokens) t.vocab_size_ = std::max(t.vocab_size_, a.id + 1);
    t.added_all_ = std::move(tokens);
    t.added_ = AddedTokens(std::move(raw));
    t.added_normalized_ = AddedTokens(std::move(normalized));
  }

  static int32_t required_id(const UnigramTokenizer& t, const std::string& piece, const std::string& where) {
    const int32_t id = t.exact_id(piece);
    if (id < 0) throw TokenizerError(where + ": the special token \"" + piece + "\" is not in the vocabulary");
    return id;
  }

  // The XLMRobertaTokenizer class's pipeline and specials.
  static void xlmr_pipeline(UnigramTokenizer& t, const json& config, const std::string& where) {
    t.tokenizer_class_ = "XLMRobertaTokenizer";
    t.add_prefix_space_ = hf_files::bool_setting(config, "add_prefix_space", true, where);
    t.whitespace_split_ = true;
    t.metaspace_ = true;
    t.metaspace_split_ = true;
    t.prepend_ = t.add_prefix_space_ ? hf_files::MetaspacePrepend::Always : hf_files::MetaspacePrepend::Never;
    const std::string bos = hf_files::token_name(config, "bos_token", "<s>");
    const std::string eos = hf_files::token_name(config, "eos_token", "</s>");
    t.special_.cls = required_id(t, bos, where);
    t.special_.sep = required_id(t, eos, where);
    t.special_.pad = t.exact_id(hf_files::token_name(config, "pad_token", "<pad>"));
    t.special_.unk = t.unk_id_;
    t.special_.mask = t.exact_id(hf_files::token_name(config, "mask_token", "<mask>"));
    t.prefix_ = {t.special_.cls};
    t.suffix_ = {t.special_.sep};
    t.pair_ = PairTemplate{{t.special_.cls}, {t.special_.sep, t.special_.sep}, {t.special_.sep}, 0, 0, 1, 1};
  }

  // tokenizer.json's normalizer, as far as it is implemented.
  static void file_normalizer(UnigramTokenizer& t, const json& n, const std::string& where) {
    if (n.is_null()) return;
    const std::string type = n.value("type", "");
    if (type == "Sequence") {
      const auto& list = n.at("normalizers");
      for (size_t i = 0; i < list.size(); ++i)
        file_normalizer(t, list[i], where + ".normalizers[" + std::to_string(i) + "]");
    } else if (type == "Precompiled") {
      if (!t.charsmap_.empty()) throw TokenizerError(where + ": a second Precompiled normalizer is not implemented");
      t.charsmap_ = PrecompiledCharsmap(base64_decode(n.value("precompiled_charsmap", ""), where), where);
      if (!t.charsmap_.empty()) t.normalizers_.emplace_back(NormStep::Charsmap);
    } else if (type == "Replace") {
      const auto& pattern = n.at("pattern");
      const std::string content = n.value("content", "");
      if (pattern.contains("Regex") && pattern["Regex"] == " {2,}" && content == " ") {
        t.normalizers_.emplace_back(NormStep::CollapseSpaces);
      } else if (pattern.contains("String") && pattern["String"].is_string() &&
                 !pattern["String"].get<std::string>().empty()) {
        t.normalizers_.emplace_back(NormStep::Replace, pattern["String"].get<std::string>(), content);
      } else {
        throw TokenizerError(where + ": Replace " + pattern.dump() +
                             " is not implemented (a literal string, or the Regex \" {2,}\" by \" \")");
      }
    } else if (type == "Strip") {
      t.normalizers_.emplace_back(NormStep::Strip, "", "", n.value("strip_left", true), n.value("strip_right", true));
    } else {
      throw TokenizerError(where + ": normalizer \"" + type +
                           "\" is not implemented for Unigram tokenizers (Precompiled, Replace, Strip, Sequence)");
    }
  }

  static void file_pre_tokenizer(UnigramTokenizer& t, const json& p, const std::string& where, int depth) {
    if (p.is_null()) return;
    const std::string type = p.value("type", "");
    if (type == "Sequence" && depth == 0) {
      const auto& list = p.at("pretokenizers");
      for (size_t i = 0; i < list.size(); ++i)
        file_pre_tokenizer(t, list[i], where + ".pretokenizers[" + std::to_string(i) + "]", 1);
    } else if (type == "WhitespaceSplit" && !t.metaspace_) {
      t.whitespace_split_ = true;
    } else if (type == "Metaspace" && !t.metaspace_) {
      t.metaspace_ = true;
      const std::string replacement = p.value("replacement", std::string(kMetaspace));
      if (replacement != kMetaspace)
        throw TokenizerError(where + ": Metaspace replacement \"" + replacement + "\" is not implemented (only \"▁\")");
      t.metaspace_split_ = p.value("split", true);
      t.prepend_ = hf_files::metaspace_prepend(p, where);
    } else {
      throw TokenizerError(where + ": pre-tokenizer \"" + type +
                           "\" is not implemented here for Unigram tokenizers (WhitespaceSplit, then Metaspace)");
    }
  }

  // The ids a TemplateProcessing / RobertaProcessing / BertProcessing puts around one text,
  // and around two.
  static void file_post_processor(UnigramTokenizer& t, const json& p, const std::string& where) {
    single_post_processor(t, p, where);
    try {  // a pair form that is not supported refuses pairs, not the tokenizer
      t.pair_ = pair_template_of_post_processor(p, where);
      t.pair_.single_before = t.prefix_.size();
      t.pair_.single_after = t.suffix_.size();
    } catch (const TokenizerError& e) {
      t.pair_error_ = e.what();
    }
  }

  static void single_post_processor(UnigramTokenizer& t, const json& p, const std::string& where) {
    t.prefix_.clear();
    t.suffix_.clear();
    if (p.is_null()) return;
    const std::string type = p.value("type", "");
    if (type == "TemplateProcessing") {
      bool seen_a = false;
      const auto& single = p.at("single");
      for (size_t i = 0; i < single.size(); ++i) {
        const auto& item = single[i];
        if (item.contains("Sequence")) {
          if (seen_a) throw TokenizerError(where + ".single: two sequences in a one-text template");
          seen_a = true;
        } else if (item.contains("SpecialToken")) {
          const std::string name = item["SpecialToken"].at("id").get<std::string>();
          const auto& ids = p.at("special_tokens").at(name).at("ids");
          for (const auto& id : ids) (seen_a ? t.suffix_ : t.prefix_).push_back(id.get<int32_t>());
        } else {
          throw TokenizerError(where + ".single[" + std::to_string(i) + "]: neither Sequence nor SpecialToken");
        }
      }
    } else if (type == "RobertaProcessing" || type == "BertProcessing") {
      t.prefix_ = {p.at("cls").at(1).get<int32_t>()};
      t.suffix_ = {p.at("sep").at(1).get<int32_t>()};
    } else {
      throw TokenizerError(where + ": post-processor \"" + type +
                           "\" is not implemented (TemplateProcessing, RobertaProcessing, BertProcessing)");
    }
  }

  static std::unique_ptr<UnigramTokenizer> from_json_file(const fs::path& file, const json& config,
                                                           bool xlmr_class) {
    auto t = std::unique_ptr<UnigramTokenizer>(new UnigramTokenizer());
    const std::string src = file.string();
    t->source_name_ = "tokenizer.json";
    t->source_bytes_ = hf_files::read_file(file);
    json tj;
    try {
      tj = json::parse(t->source_bytes_);
      const json& model = tj.at("model");
      if (model.value("type", "") != "Unigram")
        throw TokenizerError(src + ": model.type is \"" + model.value("type", "") + "\", not \"Unigram\"");
      std::vector<std::pair<std::string, double>> vocab;
      const json& list = model.at("vocab");
      vocab.reserve(list.size());
      if (!list.is_array()) throw TokenizerError(src + ": model.vocab is not a list");
      for (size_t i = 0; i < list.size(); ++i) {
        const json& entry = list[i];
        if (!entry.is_array() || entry.size() != 2 || !entry[0].is_string() || !entry[1].is_number())
          throw TokenizerError(src + ": model.vocab[" + std::to_string(i) + "] is not a [piece, score] pair");
        const double score = entry[1].get<double>();
        vocab.emplace_back(entry[0].get<std::string>(), xlmr_class ? score : serde_json_f64(score));
      }
      const bool byte_fallback = model.value("byte_fallback", false);
      if (xlmr_class) {
        // The class: Unigram(vocab, unk_id=3, byte_fallback=False), the file's charsmap only.
        set_vocab(*t, std::move(vocab), 3, false, src + ": model.vocab");
        const json& n = tj.contains("normalizer") ? tj["normalizer"] : json();
        if (n.is_object()) {
          const json* found = nullptr;
          if (n.value("type", "") == "Sequence") {
            for (const auto& item : n.at("normalizers"))
              if (item.value("type", "") == "Precompiled" && item.contains("precompiled_charsmap")) {
                found = &item;
                break;
              }
          } else if (n.value("type", "") == "Precompiled" && n.contains("precompiled_charsmap")) {
            found = &n;
          }
          if (found && (*found)["precompiled_charsmap"].is_string())
            t->charsmap_ = PrecompiledCharsmap(base64_decode((*found)["precompiled_charsmap"].get<std::string>(),
                                                             src + ": normalizer.precompiled_charsmap"),
                                               src + ": normalizer.precompiled_charsmap");
        }
        if (!t->charsmap_.empty()) t->normalizers_.emplace_back(NormStep::Charsmap);
        xlmr_pipeline(*t, config, src);
      } else {
        const json& unk = model.contains("unk_id") ? model["unk_id"] : json();
        if (!unk.is_number_integer())
          throw TokenizerError(src + ": model.unk_id is missing (a Unigram model without <unk> is not implemented)");
        set_vocab(*t, std::move(vocab), unk.get<int32_t>(), byte_fallback, src + ": model.vocab");
        t->tokenizer_class_ = config.value("tokenizer_class", "PreTrainedTokenizerFast");
        t->whitespace_split_ = t->metaspace_ = false;
        file_normalizer(*t, tj.contains("normalizer") ? tj["normalizer"] : json(), src + ": normalizer");
        file_pre_tokenizer(*t, tj.contains("pre_tokenizer") ? tj["pre_tokenizer"] : json(), src + ": pre_tokenizer",
                           0);
        file_post_processor(*t, tj.contains("post_processor") ? tj["post_processor"] : json(),
                            src + ": post_processor");
        t->special_.cls = t->prefix_.empty() ? -1 : t->prefix_.front();
        t->special_.sep = t->suffix_.empty() ? -1 : t->suffix_.back();
        t->special_.unk = t->unk_id_;
        t->special_.pad = t->exact_id(hf_files::token_name(config, "pad_token", "<pad>"));
        t->special_.mask = t->exact_id(hf_files::token_name(config, "mask_token", "<mask>"));
      }
      set_added(*t, AddedTokens::from_json(tj.contains("added_tokens") ? tj["added_tokens"] : json(), src).tokens());
    } catch (const json::exception& e) {
      throw TokenizerError(src + ": " + e.what());
    }
    return t;
  }

  static std::unique_ptr<UnigramTokenizer> from_model_file(const fs::path& file, const json& config) {
    auto t = std::unique_ptr<UnigramTokenizer>(new UnigramTokenizer());
    const std::string src = file.string();
    t->source_name_ = "sentencepiece.bpe.model";
    t->source_bytes_ = hf_files::read_file(file);
    const SpmModelFile model = parse_spm_model(t->source_bytes_, src);
    if (model.model_type != 1)
      throw TokenizerError(src + ": trainer_spec.model_type is " + std::to_string(model.model_type) +
                           ", not 1 (Unigram); XLM-R's sentencepiece.bpe.model is a Unigram model");
    if (model.unk_id != 0 || model.bos_id != 1 || model.eos_id != 2 || model.pieces.size() < 3)
      throw TokenizerError(src + ": special ids unk " + std::to_string(model.unk_id) + ", bos " +
                           std::to_string(model.bos_id) + ", eos " + std::to_string(model.eos_id) +
                           " are not XLM-R's layout (unk 0, bos 1, eos 2) that fairseq's id mapping assumes");
    // XLMRobertaConverter.convert_from_spm: the four fairseq specials, spm pieces 3.. at +1, <mask> last.
    const std::string bos = hf_files::token_name(config, "bos_token", "<s>");
    const std::string pad = hf_files::token_name(config, "pad_token", "<pad>");
    const std::string eos = hf_files::token_name(config, "eos_token", "</s>");
    const std::string unk = hf_files::token_name(config, "unk_token", "<unk>");
    const std::string mask = hf_files::token_name(config, "mask_token", "<mask>");
    std::vector<std::pair<std::string, double>> vocab = {{bos, 0.0}, {pad, 0.0}, {eos, 0.0}, {unk, 0.0}};
    for (size_t i = 3; i < model.pieces.size(); ++i) vocab.emplace_back(model.pieces[i].text, model.pieces[i].score);
    vocab.emplace_back(mask, 0.0);
    set_vocab(*t, std::move(vocab), 3, false, src);
    t->charsmap_ = PrecompiledCharsmap(model.precompiled_charsmap, src + ": normalizer_spec.precompiled_charsmap");
    if (!t->charsmap_.empty()) t->normalizers_.emplace_back(NormStep::Charsmap);
    xlmr_pipeline(*t, config, hf_files::read_json_if_exists(file.parent_path() / "tokenizer_config.json")
                                  ? (file.parent_path() / "tokenizer_config.json").string()
                                  : src);
    // Added tokens: the specials (flags from tokenizer_config.json's added_tokens_decoder
    // when it has them) and the model's control / user-defined pieces.
    std::vector<AddedToken> added;
    const json* decoder = config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object()
                              ? &config["added_tokens_decoder"]
                              : nullptr;
    auto add = [&](const std::string& content, bool special) {
      AddedToken a;
      a.content = content;
      a.id = t->exact_id(content);
      a.special = special;
      if (decoder && decoder->contains(std::to_string(a.id))) {
        const json& e = (*decoder)[std::to_string(a.id)];
        if (e.is_object() && e.value("content", "") == content) {
          a.lstrip = e.value("lstrip", false);
          a.rstrip = e.value("rstrip", false);
          a.single_word = e.value("single_word", false);
          a.normalized = e.value("normalized", false);
        }
      }
      if (a.id >= 0) added.push_back(a);
    };
    for (const auto& s : {bos, pad, eos, unk, mask}) add(s, true);
    for (size_t i = 3; i < model.pieces.size(); ++i)
      if (model.pieces[i].type == SpmModelFile::kControl || model.pieces[i].type == SpmModelFile::kUserDefined)
        add(model.pieces[i].text, model.pieces[i].type == SpmModelFile::kControl);
    set_added(*t, std::move(added));
    return t;
  }
};

std::unique_ptr<Tokenizer> UnigramTokenizer::load(const std::string& path) {
  fs::path folder = path, file;
  if (fs::is_directory(folder)) {
    if (fs::exists(folder / "tokenizer.json")) file = folder / "tokenizer.json";
    else if (fs::exists(folder / "sentencepiece.bpe.model")) file = folder / "sentencepiece.bpe.model";
    else throw TokenizerError(path + ": neither tokenizer.json nor sentencepiece.bpe.model");
  } else {
    file = folder;
    folder = folder.parent_path();
    if (folder.empty()) folder = ".";
  }
  const fs::path config_path = folder / "tokenizer_config.json";
  json config = json::object();
  if (auto c = hf_files::read_json_if_exists(config_path)) config = std::move(*c);
  std::unique_ptr<UnigramTokenizer> t;
  if (file.extension() == ".json") {
    // transformers picks the class from tokenizer_config.json, else from config.json's model_type.
    std::string cls = config.contains("tokenizer_class") && config["tokenizer_class"].is_string()
                          ? config["tokenizer_class"].get<std::string>()
                          : "";
    if (cls.empty()) {
      if (auto model_config = hf_files::read_json_if_exists(folder / "config.json"))
        if (model_config->value("model_type", "") == "xlm-roberta") cls = "XLMRobertaTokenizer";
    }
    const bool xlmr = cls == "XLMRobertaTokenizer" || cls == "XLMRobertaTokenizerFast";
    if (!xlmr && !cls.empty() && cls != "PreTrainedTokenizerFast" && cls != "TokenizersBackend")
      throw TokenizerError(config_path.string() + ": tokenizer_class \"" + cls +
                           "\" with a Unigram tokenizer.json is not implemented (XLMRobertaTokenizer, or "
                           "PreTrainedTokenizerFast for the file's own pipeline)");
    t = Impl::from_json_file(file, config, xlmr);
  } else {
    t = Impl::from_model_file(file, config);
  }
  t->set_model_max_length(hf_files::max_length_setting(config, 512));
  return t;
}

PairTemplate UnigramTokenizer::pair_template() const {
  if (!pair_error_.empty()) throw TokenizerError(pair_error_ + " (two texts cannot be joined with this tokenizer)");
  return pair_;
}

}  // namespace ddp_embed
