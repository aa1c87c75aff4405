// BPE from a Hugging Face tokenizer.json, giving the ids transformers 5's AutoTokenizer gives:
// byte-level files (Qwen2/Qwen3, Qwen3-Embedding, GPT-2, RoBERTa-style, Llama-3-style,
// ModernBERT) and sentencepiece-style ones that merge characters with byte fallback (Gemma's
// and mmBERT's tokenizer.json, Llama-2-style Metaspace files). tokenize/bpe_text_steps.h
// has their normalizers and pre-tokenizers.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenize/added_tokens.h"
#include "tokenize/bpe_text_steps.h"
#include "tokenize/pair_template.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

class BpeTokenizer : public Tokenizer {
 public:
  // path: a folder with tokenizer.json (and usually tokenizer_config.json), or the
  // tokenizer.json itself. Throws TokenizerError naming the file and the JSON path of what
  // is wrong or not supported.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, int max_length) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  SpecialIds special() const override { return special_; }
  std::string type() const override { return "bpe"; }
  // tokenizer.json as it was read, and tokenizer_config.json as it was read with
  // model_max_length set (a minimal generic one where there was none).
  void save(const std::string& dir) const override;
  // tokenizer.json's post_processor's pair form (tokenize/pair_template.h); throws
  // TokenizerError naming the file and key when it has none that is supported.
  PairTemplate pair_template() const override;

 private:
  friend class BpeLoader;  // load()'s steps (bpe.cpp)

  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
  // The ids a word's merging starts from: a byte-level word's bytes' characters, else its
  // characters, a character the vocabulary lacks as its "<0xHH>" byte pieces (byte fallback)
  // or unk (fused if asked); what has neither is dropped, as tokenizers drops it.
  void initial_symbols(std::string_view word, std::vector<int32_t>& ids) const;

  BpeTextSteps text_;  // normalizer and pre-tokenizer
  std::unordered_map<std::string, int32_t> vocab_;                      // byte-mapped strings in a byte-level file
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges_;    // (left << 32 | right) → (rank, merged id)
  int32_t byte_id_[256] = {};      // byte-level: the id of each byte's character; else of its "<0xHH>" piece; -1 if none
  bool byte_level_ = true;         // text_ has a ByteLevel step
  bool byte_fallback_ = false;     // character-level: a missing character as its bytes' pieces
  int32_t unk_ = -1;
  bool fuse_unk_ = false, ignore_merges_ = false;
  AddedTokens added_;
  std::vector<int32_t> prefix_, suffix_;  // what the post-processor puts around the pieces
  PairTemplate pair_;                     // ... and around two texts' pieces
  std::string pair_error_;                // why there is no pair_, when there is none
  SpecialIds special_;
  int32_t vocab_size_ = 0;
  uint64_t instance_ = 0;  // keys the per-thread cache
  std::string json_text_;
  nlohmann::ordered_json config_;  // tokenizer_config.json, null when absent
};

}  // namespace ddp_embed
