// XLM-RoBERTa's tokenizer (BGE-M3, multilingual-E5): a sentencepiece Unigram model run as
// transformers 5 runs it, ids equal to AutoTokenizer's. Read from a folder's
// tokenizer.json (model "Unigram") or, without one, its sentencepiece.bpe.model with
// fairseq's id layout (<s> 0, <pad> 1, </s> 2, <unk> 3, spm piece i >= 3 at i + 1, <mask>
// last).
//
// Pipeline (XLMRobertaTokenizer class, whatever tokenizer.json's own normalizer and
// pre-tokenizer say): added tokens cut from the raw text; the precompiled charsmap per
// grapheme cluster (precompiled_charsmap.h); split on Unicode White_Space; "▁" before each
// word; Viterbi over the pieces (unknown characters fused into one <unk>); <s> ... </s>.
// A Unigram tokenizer.json under the generic class (PreTrainedTokenizerFast) runs the
// file's own pipeline instead, as far as it is made of Precompiled, Replace, Strip,
// WhitespaceSplit, Metaspace and a template post-processor; anything else is refused.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenize/added_tokens.h"
#include "tokenize/hf_files.h"
#include "tokenize/pair_template.h"
#include "tokenize/precompiled_charsmap.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

class UnigramTokenizer : public Tokenizer {
 public:
  // path: a folder (tokenizer.json when present, else sentencepiece.bpe.model), or one of
  // those two files. Throws TokenizerError naming the file (and the JSON key or proto
  // field) for anything it cannot read or does not implement.
  static std::unique_ptr<Tokenizer> load(const std::string& path);

  std::vector<int32_t> encode(std::string_view text, int max_length) const override;
  // The pieces, and added tokens whose ids lie beyond them (len(tokenizer) in transformers).
  int32_t vocab_size() const override { return vocab_size_; }
  SpecialIds special() const override { return special_; }
  std::string type() const override { return "unigram"; }
  // The source tokenizer.json or sentencepiece.bpe.model as it was read, plus
  // tokenizer_config.json and special_tokens_map.json.
  void save(const std::string& dir) const override;
  // XLMRobertaTokenizer's <s> a </s> </s> b </s> (all type 0), or a generic file's
  // post_processor's pair form (tokenize/pair_template.h); throws TokenizerError naming the
  // file and key when that has none that is supported.
  PairTemplate pair_template() const override;

  struct Impl;  // loading helpers (unigram_load.cpp)

 private:
  UnigramTokenizer() = default;

  // One text between added tokens (at_start: it begins the input): normalized,
  // pre-tokenized, each word's piece ids appended to out until it holds `limit` ids.
  void encode_plain(std::string_view text, bool at_start, size_t limit, std::vector<int32_t>& out) const;
  // The normalizers' result for `text` (replacing out).
  void normalize(std::string_view text, std::string& out) const;
  // Pre-tokenizers and model over normalized text (no added token in it).
  void encode_normalized(std::string_view text, bool at_start, size_t limit, std::vector<int32_t>& out) const;
  // The Viterbi pieces of one pre-token (no spaces unless the pipeline keeps them).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t exact_id(std::string_view piece) const;  // -1 when not a piece

  // The vocabulary and its trie: children of node n are edge_label_/edge_child_ in
  // [edge_begin_[n], edge_begin_[n + 1]), sorted by label; node 0 is the root.
  std::vector<std::string> pieces_;
  std::vector<double> scores_;
  std::vector<uint32_t> edge_begin_;
  std::vector<uint8_t> edge_label_;
  std::vector<int32_t> edge_child_;
  std::vector<int32_t> node_piece_;  // the piece a node spells, or -1
  int32_t unk_id_ = 0;
  double unk_score_ = 0;  // min score - 10, tokenizers' kUnkPenalty
  bool byte_fallback_ = false;
  std::array<int32_t, 256> byte_ids_{};  // <0xXX> pieces for byte_fallback, -1 if absent

  // The pipeline.
  static constexpr std::string_view kMetaspace = "\xE2\x96\x81";  // U+2581 ▁, what Metaspace puts for a space
  struct NormStep {
    enum Kind { Charsmap, CollapseSpaces, Replace, Strip } kind;  // CollapseSpaces: Replace(" {2,}" → " ")
    std::string from, to;                                       // Replace
    bool left = false, right = false;                           // Strip
    explicit NormStep(Kind k, std::string f = {}, std::string t = {}, bool l = false, bool r = false)
        : kind(k), from(std::move(f)), to(std::move(t)), left(l), right(r) {}
  };
  std::vector<NormStep> normalizers_;
  PrecompiledCharsmap charsmap_;
  bool whitespace_split_ = true;
  bool metaspace_ = true;
  hf_files::MetaspacePrepend prepend_ = hf_files::MetaspacePrepend::Always;
  bool metaspace_split_ = true;
  int32_t vocab_size_ = 0;
  std::vector<AddedToken> added_all_;
  AddedTokens added_;             // matched on the raw text
  AddedTokens added_normalized_;  // "normalized": true, matched on the normalized text
  std::vector<int32_t> prefix_, suffix_;  // the post-processor's ids around the pieces
  PairTemplate pair_;                     // ... and around two texts' pieces
  std::string pair_error_;                // why there is no pair_, when there is none
  SpecialIds special_;

  // What save() writes back.
  std::string source_name_;  // "tokenizer.json" | "sentencepiece.bpe.model"
  std::string source_bytes_;
  std::string tokenizer_class_;
  bool add_prefix_space_ = true;
};

}  // namespace ddp_embed
