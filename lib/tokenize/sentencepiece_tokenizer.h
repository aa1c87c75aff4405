// A sentencepiece model behind the Tokenizer interface: [CLS] + the model's pieces +
// [SEP]. Models trained by train_sentencepiece() have [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3
// [MASK]=4; for other models the special ids are looked up by piece ([CLS], <s>, ...)
// and fall back to the model's own pad/unk/bos/eos ids.
//
// sentencepiece itself runs in a module of its own, loaded at run time
// (tokenize/spm_library.h, and tokenize/spm_shim/spm_api.h for why).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenize/tokenizer.h"

extern "C" {
struct ddp_embed_spm_model;
}

namespace ddp_embed {

namespace spm {
struct Library;
}

class SentencePieceTokenizer final : public Tokenizer {
 public:
  // A .model file, or a folder holding spiece.model (or else one *.model file).
  static std::unique_ptr<SentencePieceTokenizer> load(const std::string& path);
  // A model held in memory (the bytes of a .model file); `source` names it in errors.
  static std::unique_ptr<SentencePieceTokenizer> from_serialized(const std::string& model,
                                                                 const std::string& source);
  ~SentencePieceTokenizer() override;

  std::vector<int32_t> encode(std::string_view text, int max_length) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  SpecialIds special() const override { return special_; }
  std::string type() const override { return choice_name(TokenizerType::SentencePiece); }
  // spiece.model, tokenizer_config.json (AlbertTokenizer), special_tokens_map.json; for a
  // model read from a Hugging Face folder's tokenizer.model with tokenizer.json beside it
  // (Gemma's), that folder's tokenizer files as they were read, model_max_length set.
  void save(const std::string& dir) const override;

  // The piece of an id, for tests and debugging.
  std::string piece(int32_t id) const;

 private:
  struct ModelDeleter {
    const spm::Library* library;
    void operator()(ddp_embed_spm_model* model) const;
  };
  using ModelPtr = std::unique_ptr<ddp_embed_spm_model, ModelDeleter>;

  SentencePieceTokenizer(const spm::Library& library, ModelPtr model, const std::string& source);

  // sentencepiece's ids for text without special tokens' text in it, appended to ids.
  void encode_plain(std::string_view text, std::vector<int32_t>& ids) const;

  const spm::Library& lib_;
  ModelPtr model_;
  std::string source_;
  // The special pieces' text ([CLS], ...), which stands for their ids wherever it
  // appears in the text, as in Hugging Face's tokenizers.
  std::vector<std::pair<std::string, int32_t>> special_texts_;
  std::string special_starts_;  // their first bytes
  SpecialIds special_;
  int32_t vocab_size_ = 0;
  // The Hugging Face folder's tokenizer files (name, bytes) that save() writes back; empty
  // for a model not read from such a folder.
  std::vector<std::pair<std::string, std::string>> folder_files_;
};

}  // namespace ddp_embed
