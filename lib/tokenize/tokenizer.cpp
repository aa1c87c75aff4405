#include "tokenize/tokenizer.h"

#include <filesystem>

#include "tokenize/hf_files.h"
#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/unigram.h"
#include "tokenize/wordpiece.h"

namespace ddp_embed {

namespace fs = std::filesystem;

std::string detect_tokenizer_type(const std::string& dir) {
  const fs::path folder(dir);
  if (fs::exists(folder / "spiece.model")) return "sentencepiece";
  if (const auto json = hf_files::read_json_if_exists(folder / "tokenizer.json")) {
    const auto model = json->find("model");
    const std::string kind =
        (model != json->end() && model->is_object() && model->contains("type") && (*model)["type"].is_string())
            ? (*model)["type"].get<std::string>()
            : "";
    if (kind == "Unigram") return "unigram";
    if (kind == "BPE") return "bpe";
    if (kind == "WordPiece") return "wordpiece";
    throw TokenizerError((folder / "tokenizer.json").string() + ": model type \"" + kind +
                         "\" is not implemented (embed-train reads Unigram, BPE and WordPiece tokenizers)");
  }
  if (fs::exists(folder / "sentencepiece.bpe.model")) return "unigram";
  if (fs::exists(folder / "vocab.txt")) return "wordpiece";
  throw TokenizerError(dir + ": no tokenizer files (spiece.model, tokenizer.json, sentencepiece.bpe.model or vocab.txt)");
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& type, const std::string& path,
                                          bool lower_case) {
  if (type == "auto") return load_tokenizer(detect_tokenizer_type(path), path, lower_case);
  if (type == "wordpiece") return WordPieceTokenizer::load(path, lower_case);
  if (type == "sentencepiece") return SentencePieceTokenizer::load(path);
  if (type == "unigram") return UnigramTokenizer::load(path);
  // "bpe": tokenize/bpe.h.
  throw TokenizerError("unknown tokenizer type \"" + type + "\" for " + path +
                       " (expected wordpiece, sentencepiece, unigram, bpe or auto)");
}

}  // namespace ddp_embed
