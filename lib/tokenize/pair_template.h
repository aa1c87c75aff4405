// Two texts as one input, as transformers' tokenizer(text, text_pair, truncation=True,
// max_length=N) gives them: what a cross-encoder reads (model/cross_encoder.h).
//
//   BERT (WordPiece, and our sentencepiece models, which take BERT's specials):
//       [CLS] a [SEP] b [SEP]          token types 0 … 0 1 … 1 (b and its [SEP] are 1)
//   XLM-RoBERTa (Unigram):  <s> a </s> </s> b </s>          token types all 0
//   byte-level BPE: the tokenizer.json post_processor's pair form. Qwen3's tokenizer.json
//       has only ByteLevel there, and the tokenizers library then joins the texts as they
//       are: a b, types 0 … 0 1 … 1, no special id (what transformers gives for
//       tokenizer(a, b) with Qwen3's tokenizer); Qwen3-Embedding's template gives
//       a <|endoftext|> b <|endoftext|>, types 0 … 0 1 … 1.
//
// Truncation is transformers' "longest_first" (the tokenizers library's LongestFirst):
// with budget M = max_length − the template's special ids, the shorter text keeps its
// pieces when it fits in half, the longer gets the rest; when both are longer than half,
// the first gets M / 2 and the second M / 2 + M % 2 if the first is the shorter or they are
// equal, else the other way round. Each text loses its tail.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "tokenize/tokenizer.h"

namespace ddp_embed {

struct PairTemplate {
  std::vector<int32_t> before_first;  // [CLS] / <s>
  std::vector<int32_t> between;       // [SEP] / </s> </s>
  std::vector<int32_t> after_second;  // [SEP] / </s>
  // Token types: before_first, the first text and `between` take first_type; the second
  // text and after_second take second_type.
  int32_t first_type = 0, second_type = 1;
  // How many ids encode() puts before one text's pieces and after them (its single-text
  // form): what piece_range() leaves out.
  size_t single_before = 0, single_after = 0;
  size_t specials() const { return before_first.size() + between.size() + after_second.size(); }
};

// The pair template of `tokenizer` (see above; Tokenizer::pair_template()). Throws
// TokenizerError naming the tokenizer's files when it has none (a tokenizer.json whose
// post_processor's pair form is not one of the above).
PairTemplate pair_template(const Tokenizer& tokenizer);

// The pair form of a tokenizer.json "post_processor" (TemplateProcessing's "pair",
// RobertaProcessing, BertProcessing, a Sequence of one of them and ByteLevel; null or
// ByteLevel alone: the texts joined as they are, types 0 and 1). single_before and
// single_after are left 0. Throws TokenizerError "where: …" naming the JSON key of what is
// not supported (a pair template with B before A, or types that change inside a part).
PairTemplate pair_template_of_post_processor(const nlohmann::json& post_processor, const std::string& where);

// One joined input: ids and token types of one length.
struct PairIds {
  std::vector<int32_t> ids, types;
};

// The pieces of one encode() output, its special ids (cls first, sep last, where the
// tokenizer has them: PairTemplate's single_before and single_after) left out: [begin, end)
// into `ids`.
struct PieceRange {
  size_t begin = 0, end = 0;
};
PieceRange piece_range(const Tokenizer& tokenizer, const int32_t* ids, size_t n);

// How many pieces of each text LongestFirst keeps for a budget of `budget` pieces in all
// (the header's rule; both kept whole when na + nb <= budget).
struct PairLengths {
  size_t first = 0, second = 0;
};
PairLengths longest_first(size_t na, size_t nb, size_t budget);

// a and b (pieces, without special ids) joined by `tmpl`, truncated longest-first to at most
// max_length ids in all. Throws TokenizerError when max_length leaves no room for a piece
// of each (max_length < specials + 2). On the pieces of texts encode()d one at a time it
// equals encode_pair whenever neither text was cut by that encode(); when both were, which
// was the longer is lost, and with an odd budget the odd piece may go to the other text.
PairIds join_pair(const PairTemplate& tmpl, const int32_t* a, size_t na, const int32_t* b, size_t nb, int max_length);

// transformers' tokenizer(a, b, truncation=True, max_length=max_length)'s input_ids and
// token_type_ids. Throws as join_pair and pair_template do.
PairIds encode_pair(const Tokenizer& tokenizer, std::string_view a, std::string_view b, int max_length);

}  // namespace ddp_embed
