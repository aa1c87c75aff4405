// The text side of a tokenizer.json BPE: its normalizer and pre-tokenizer, read once into
// closed steps and run on each piece of text between added tokens, giving the words the
// BPE model merges (tokenize/bpe.h).
//
// Two families write these files, and both end up here:
//   - byte-level (GPT-2, RoBERTa, Qwen, Llama 3, ModernBERT): NFC at most, Split by one of the
//     regexes of pretokenize_regex.h, then ByteLevel, which maps each byte of a word to a
//     printable character; the model then merges those characters;
//   - sentencepiece-style (Gemma, mmBERT, Llama 2, Mistral): spaces become "▁" (a Replace
//     normalizer, or the Metaspace pre-tokenizer, sometimes with "▁" put before the text),
//     words are cut at "▁" or not at all, and the model merges Unicode characters, spelling
//     a character it lacks as its UTF-8 bytes ("<0x41>" pieces: byte fallback).
// What is not one of the steps below is refused by name (file, JSON path), never guessed.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenize/hf_files.h"
#include "tokenize/pretokenize_regex.h"

namespace ddp_embed {

struct BpeNormalizeStep {
  enum class Kind { Nfc, Replace, Prepend } kind = Kind::Nfc;
  std::string from, to;  // Replace: every `from` becomes `to`; Prepend: `to` before a non-empty text
};

struct BpePreStep {
  enum class Kind {
    ByteLevel,  // words by GPT-2's regex (use_regex) or whole; the bytes mapped later, by the model
    Regex,      // Split(Regex, Isolated): each match of `pattern` a word
    Literal,    // Split(String): cut after (MergedWithPrevious) or around (Isolated) each `literal`
    Metaspace,  // ' ' → `literal`, `literal` put first (prepend), cut before each `literal` (split)
  } kind = Kind::Regex;
  bool add_prefix_space = false, use_regex = true;        // ByteLevel
  PretokenizePattern pattern = PretokenizePattern::Gpt2;  // Regex
  std::string literal;                                    // Literal, Metaspace
  bool merged_with_previous = false;                      // Literal: else Isolated
  hf_files::MetaspacePrepend prepend = hf_files::MetaspacePrepend::Always;    // Metaspace
  bool split = true;                                      // Metaspace
};

struct BpeTextSteps {
  std::vector<BpeNormalizeStep> normalize;
  std::vector<BpePreStep> pre;

  // A ByteLevel step: the model's symbols are the bytes of a word, not its characters.
  bool byte_level() const;
  // tokenizer.json's "normalizer" / "pre_tokenizer" node (null: none), appended to the steps.
  // Throws TokenizerError "origin: where: what" for a step that is not supported.
  void read_normalizer(const nlohmann::json& node, const std::string& where, const std::string& origin);
  void read_pre_tokenizer(const nlohmann::json& node, const std::string& where, const std::string& origin);
  // The words of `segment`, well-formed UTF-8 text between two added tokens, replacing `words`.
  // at_start: the segment begins the text (Metaspace's prepend "first" puts "▁" there only).
  void words(std::string_view segment, bool at_start, std::vector<std::string>& words) const;
};

}  // namespace ddp_embed
