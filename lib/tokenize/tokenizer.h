// Text → token ids, exactly as transformers' tokenizer of the same folder gives them.
// Four implementations behind one interface:
//  - "wordpiece": a Hugging Face vocab.txt (BERT's basic tokenization + greedy
//    longest-match WordPiece), BertTokenizer's ids;
//  - "sentencepiece": spiece.model files, including ones `embed-train tokenizer` trains;
//  - "unigram": XLM-RoBERTa's tokenizer (BGE-M3, multilingual-E5), from tokenizer.json or
//    sentencepiece.bpe.model with fairseq's id offsets (tokenize/unigram.h);
//  - "bpe": byte-level BPE from tokenizer.json (Qwen3, GPT-2 style) (tokenize/bpe.h).
// encode() is const and thread-safe: the data loader tokenizes on several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "config/choices.h"  // TokenizerType

namespace ddp_embed {

struct PairTemplate;  // tokenize/pair_template.h

struct TokenizerError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// cls is the id encode() puts first and sep the one it puts last (BERT's [CLS]/[SEP],
// XLM-R's <s>/</s>, Qwen3's <|endoftext|> last and nothing first); -1 where there is
// none. pad may equal sep (Qwen3): masks come from lengths, never from ids.
struct SpecialIds {
  int32_t pad = 0, unk = 100, cls = 101, sep = 102, mask = 103;
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // cls pieces... sep (each where the tokenizer has one), at most max_length ids in all
  // (longer text loses its tail pieces; sep stays last), like Hugging Face's
  // truncation=True.
  virtual std::vector<int32_t> encode(std::string_view text, int max_length) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual SpecialIds special() const = 0;
  virtual std::string type() const = 0;  // "wordpiece" | "sentencepiece" | "unigram" | "bpe"
  // Writes the files that load_tokenizer(type(), dir) and Hugging Face's AutoTokenizer
  // read back (vocab.txt or the .model file, plus tokenizer_config.json,
  // special_tokens_map.json).
  virtual void save(const std::string& dir) const = 0;
  // How two texts are joined into one input (tokenize/pair_template.h). By default BERT's
  // form with special()'s cls and sep; tokenizers read from a tokenizer.json give its
  // post_processor's. Throws TokenizerError naming the files when there is none.
  virtual PairTemplate pair_template() const;

  // The longest input the model takes; save() writes it to tokenizer_config.json
  // (model_max_length). Loading takes it from there, else 512.
  int model_max_length() const { return model_max_length_; }
  void set_model_max_length(int n) { model_max_length_ = n; }

 protected:
  int model_max_length_ = 512;
};

// The tokens of `max_length` left for a text after `prompt` (put before it), counting
// the prompt's own tokens and the special tokens an encoding adds: 0 or less leaves no
// room, so that every input encodes to the same ids. `max_length` when there is no prompt.
int tokens_left_after_prompt(const Tokenizer& tokenizer, std::string_view prompt, int max_length);

// The tokenizer a Hugging Face folder holds, decided from its files in this order:
// spiece.model → "sentencepiece"; tokenizer.json whose model is Unigram → "unigram", BPE →
// "bpe" (but "sentencepiece" for a BPE with byte_fallback beside tokenizer.model, as Gemma's
// folders are: sentencepiece runs the model file), WordPiece → "wordpiece"; sentencepiece.bpe.model → "unigram"; vocab.txt →
// "wordpiece". Throws TokenizerError naming the folder (and the tokenizer.json model type
// that is not implemented, listing those that are).
std::string detect_tokenizer_type(const std::string& dir);

// type: "wordpiece" | "sentencepiece" | "unigram" | "bpe" (the kinds a folder holds, as
// type() names them), or "auto" (detect_tokenizer_type of the folder). path: the
// vocab.txt / .model file, or a folder holding the tokenizer's files. For WordPiece, a
// tokenizer_config.json beside the vocab decides lower-casing (do_lower_case); otherwise
// `lower_case`. Throws TokenizerError naming the path.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& type, const std::string& path,
                                          bool lower_case = true);
// The same for the config's tokenizer.type.
std::unique_ptr<Tokenizer> load_tokenizer(TokenizerType type, const std::string& path, bool lower_case = true);

// The sentences a tokenizer is trained on, pulled one at a time: true and the next
// sentence, false after the last. May throw (a file that cannot be read).
using NextSentence = std::function<bool(std::string& sentence)>;

// Trains a sentencepiece (unigram) model on the sentences `next` gives (data/text_corpus.h
// gives those of data files in every format; the trainer keeps at most 2 M of them, drawn
// with a fixed seed, so the same sentences in the same order train the same model) with
// BERT's special tokens [PAD]=0 [UNK]=1 [CLS]=2 [SEP]=3 [MASK]=4, and saves it into
// output_dir as save() does. `origin` names the inputs in messages. An exception from
// `next` ends training and is rethrown as it was (a DataError stays one); no sentences,
// a vocab_size under 8 or one the text cannot fill throw TokenizerError. Nothing is
// written into output_dir when it throws.
void train_sentencepiece(const NextSentence& next, int vocab_size, const std::string& output_dir,
                         const std::string& origin);

}  // namespace ddp_embed
