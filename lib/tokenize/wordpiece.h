// WordPiece with BERT's basic tokenization: the same ids as Hugging Face's BertTokenizer
// (transformers 4.29, the Python one) for any text, valid UTF-8 or not.
//
// The steps, in BertTokenizer's order:
//  1. the special tokens' text ([CLS], [SEP], [PAD], [UNK], [MASK]) anywhere in the text
//     stands for their ids (PreTrainedTokenizer.tokenize's split on no-split tokens);
//  2. with lower-casing, every character is lower-cased on its own (Python's
//     str.lower(), so "İ" becomes "i̇");
//  3. NUL, U+FFFD, control and format characters (and ill-formed UTF-8) are dropped,
//     whitespace separates words, CJK ideographs become words of their own;
//  4. a word that is a special token's text stays whole; else, when stripping accents
//     (by default exactly when lower-casing), NFD without the Mn marks; punctuation
//     characters are split off as words of their own;
//  5. greedy longest-match-first WordPiece ("##" marks a continuation); a word longer
//     than 100 characters, or one the vocabulary cannot cover, is [UNK].
// The special tokens are the folder's (special_tokens_map.json, tokenizer_config.json, and
// a tokenizer.json's special added_tokens): BERT's [CLS] a [SEP], or MPNet's <s> a </s>
// with RobertaProcessing's pair form <s> a </s></s> b </s> (tokenizer.json's
// post_processor, else tokenizer_class MPNetTokenizer).
// Known difference: NFD's canonical reordering is not done for the 25 spacing (Mc)
// marks that have a non-zero combining class; it only matters when two of them follow
// each other out of canonical order.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenize/pair_template.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct WordPieceOptions {
  bool lower_case = true;
  std::optional<bool> strip_accents;  // unset: follows lower_case, as in BERT
  bool tokenize_chinese_chars = true;
  std::string unk_token = "[UNK]", cls_token = "[CLS]", sep_token = "[SEP]", pad_token = "[PAD]",
              mask_token = "[MASK]";
  // Further special tokens' text (a tokenizer.json's special added_tokens, MPNet's <unk>):
  // each, where the vocabulary has it, stands for its id as the five above do.
  std::vector<std::string> more_specials;
  // How two texts are joined: BERT's [CLS] a [SEP] b [SEP] (types 0, 1), or RoBERTa's
  // cls a sep sep b sep (all type 0), what MPNet's tokenizer does.
  bool roberta_pair = false;
  std::string tokenizer_class = "BertTokenizer";  // tokenizer_config.json's, written back
};

// The entries of a vocab.txt's text, id = line number. Lines end at \n, \r\n or \r, as
// Python's readlines() in text mode splits them. Throws TokenizerError "SOURCE: empty
// vocabulary" when there is none.
std::vector<std::string> parse_vocab(std::string_view text, const std::string& source);

class WordPieceTokenizer final : public Tokenizer {
 public:
  // vocab: the lines of vocab.txt (id = line number). `source` names the vocabulary in
  // errors. Throws TokenizerError when [UNK], [CLS] or [SEP] are missing.
  WordPieceTokenizer(std::vector<std::string> vocab, WordPieceOptions options,
                     std::string source = "vocabulary");
  // The lookup tables view into the vocabulary's strings: not copyable.
  WordPieceTokenizer(const WordPieceTokenizer&) = delete;
  WordPieceTokenizer& operator=(const WordPieceTokenizer&) = delete;

  // A vocab.txt, or a folder holding one; tokenizer_config.json beside it (when present)
  // decides do_lower_case, strip_accents, tokenize_chinese_chars, model_max_length,
  // tokenizer_class and the special tokens' names; a tokenizer.json beside it the further
  // special tokens and the pair form (its post_processor: RobertaProcessing is RoBERTa's;
  // without the file, tokenizer_class MPNetTokenizer is).
  static std::unique_ptr<WordPieceTokenizer> load(const std::string& path, bool lower_case);

  std::vector<int32_t> encode(std::string_view text, int max_length) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(vocab_.size()); }
  SpecialIds special() const override { return special_; }
  std::string type() const override { return choice_name(TokenizerType::WordPiece); }
  // vocab.txt, tokenizer_config.json (its tokenizer_class, BertTokenizer by default),
  // special_tokens_map.json.
  void save(const std::string& dir) const override;
  PairTemplate pair_template() const override;

  const WordPieceOptions& options() const { return options_; }
  // The vocabulary entry of an id ("" when out of range).
  const std::string& token(int32_t id) const;

 private:
  friend class WordPieceEncoder;
  struct SpecialToken {
    std::u32string chars;  // its text, as code points
    std::string text;
    int32_t id;
  };

  std::vector<std::string> vocab_;
  WordPieceOptions options_;
  bool strip_accents_ = true;
  SpecialIds special_;
  // Pieces that may start a word (every entry) and continuation pieces (entries after
  // "##", keyed without it). Keys view into vocab_; later duplicates win, like the
  // Python dict that BertTokenizer builds.
  std::unordered_map<std::string_view, int32_t> word_start_, continuation_;
  size_t max_start_bytes_ = 0, max_continuation_bytes_ = 0;
  std::vector<SpecialToken> specials_;  // those present in the vocabulary
  size_t max_special_chars_ = 0;
  bool special_first_byte_[256] = {};
};

}  // namespace ddp_embed
