#include "tokenize/tokenizer.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenize/bpe.h"
#include "tokenize/hf_files.h"
#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/unigram.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

// tokenizer.json's model.type and model.byte_fallback, read without building the document
// (Qwen3's file is 11 MB: a whole parse costs 0.35 s, and the tokenizer parses the file
// again): reading stops at the model's vocabulary, which Hugging Face writes after both.
// type "" when absent.
class ModelTypeReader : public nlohmann::json_sax<nlohmann::json> {
 public:
  std::string type;
  bool byte_fallback = false;
  bool null() override { return true; }
  bool boolean(bool value) override {
    if (depth_ == 2 && in_model_ && key_ == "byte_fallback") byte_fallback = value;
    return true;
  }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t& value) override {
    if (depth_ == 2 && in_model_ && key_ == "type") type = value;
    return true;
  }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override {
    in_model_ = (depth_ == 1 && key_ == "model") || (in_model_ && depth_ >= 2);
    ++depth_;
    key_.clear();
    return true;
  }
  bool end_object() override {
    const bool model_ends = in_model_ && depth_ == 2;
    if (--depth_ <= 1) in_model_ = false;
    return !(model_ends && !type.empty());  // the model read: stop
  }
  bool start_array(std::size_t) override {
    ++depth_;
    return true;
  }
  bool end_array() override {
    --depth_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return !(depth_ == 2 && in_model_ && k == "vocab" && !type.empty());  // past what is read: stop
  }
  bool parse_error(std::size_t byte, const std::string&, const nlohmann::detail::exception&) override {
    error = "not valid JSON (at byte " + std::to_string(byte) + ")";
    return false;
  }
  std::string error;  // why the file could not be read, when it could not

 private:
  int depth_ = 0;
  bool in_model_ = false;
  std::string key_;
};

}  // namespace

std::string detect_tokenizer_type(const std::string& dir) {
  const fs::path folder(dir);
  if (fs::exists(folder / "spiece.model")) return choice_name(TokenizerType::SentencePiece);
  if (fs::exists(folder / "tokenizer.json")) {
    ModelTypeReader reader;
    nlohmann::json::sax_parse(hf_files::read_file(folder / "tokenizer.json"), &reader);
    const std::string& kind = reader.type;
    const std::string file = (folder / "tokenizer.json").string();
    if (kind.empty())
      throw TokenizerError(file + ": " + (reader.error.empty() ? "has no model.type" : reader.error));
    if (kind == "Unigram") return "unigram";
    // Gemma's and Llama's folders: tokenizer.json is the conversion of the sentencepiece
    // model beside it, with byte fallback, which sentencepiece itself runs.
    if (kind == "BPE" && reader.byte_fallback && fs::exists(folder / "tokenizer.model"))
      return choice_name(TokenizerType::SentencePiece);
    if (kind == "BPE") return "bpe";
    if (kind == "WordPiece") return choice_name(TokenizerType::WordPiece);
    throw TokenizerError((folder / "tokenizer.json").string() + ": model type \"" + kind +
                         "\" is not implemented (embed-train reads Unigram, BPE and WordPiece tokenizers)");
  }
  if (fs::exists(folder / "sentencepiece.bpe.model")) return "unigram";
  if (fs::exists(folder / "vocab.txt")) return choice_name(TokenizerType::WordPiece);
  throw TokenizerError(dir + ": no tokenizer files (spiece.model, tokenizer.json, sentencepiece.bpe.model or vocab.txt)");
}

std::unique_ptr<Tokenizer> load_tokenizer(TokenizerType type, const std::string& path, bool lower_case) {
  switch (type) {
    case TokenizerType::WordPiece: return WordPieceTokenizer::load(path, lower_case);
    case TokenizerType::SentencePiece: return SentencePieceTokenizer::load(path);
  }
  throw std::logic_error("load_tokenizer: an unknown TokenizerType");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& type, const std::string& path,
                                          bool lower_case) {
  // "auto": this function's own word for "as the folder's files say"; not a config choice.
  if (type == "auto") return load_tokenizer(detect_tokenizer_type(path), path, lower_case);
  if (const auto config_type = find_choice<TokenizerType>(type)) return load_tokenizer(*config_type, path, lower_case);
  if (type == "unigram") return UnigramTokenizer::load(path);
  if (type == "bpe") return BpeTokenizer::load(path);
  throw TokenizerError("unknown tokenizer type \"" + type + "\" for " + path +
                       " (expected wordpiece, sentencepiece, unigram, bpe or auto)");
}

int tokens_left_after_prompt(const Tokenizer& tokenizer, std::string_view prompt, int max_length) {
  if (prompt.empty()) return max_length;
  // Uncut: a prompt as long as the whole input or longer must show as no room left.
  const int limit = std::max(max_length, 0) + 2 * int(prompt.size()) + 8;
  return max_length - int(tokenizer.encode(prompt, limit).size());
}

}  // namespace ddp_embed
