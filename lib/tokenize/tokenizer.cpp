#include "tokenize/tokenizer.h"

#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed {

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& type, const std::string& path,
                                          bool lower_case) {
  if (type == "wordpiece") return WordPieceTokenizer::load(path, lower_case);
  if (type == "sentencepiece") return SentencePieceTokenizer::load(path);
  throw TokenizerError("unknown tokenizer type \"" + type + "\" for " + path +
                       " (expected wordpiece or sentencepiece)");
}

}  // namespace ddp_embed
