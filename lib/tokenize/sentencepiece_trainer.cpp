// train_sentencepiece(): sentencepiece's own unigram trainer (in its module, see
// tokenize/spm_library.h), fed the caller's sentences through a callback, one at a time,
// so that the corpus is never held twice in memory. Where the sentences come from (data
// files of every format) is lib/data's (data/text_corpus.h): this floor reads no files.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/spm_library.h"
#include "tokenize/tokenizer.h"

namespace ddp_embed {

namespace {

// The trainer's ddp_embed_spm_next_fn over a NextSentence. Nothing may throw into the
// module: an exception of `next` ends the stream (-1) and is kept for the caller to
// rethrow once the trainer has returned.
class SentenceFeed final {
 public:
  explicit SentenceFeed(const NextSentence& next) : next_(next) {}

  static int next(void* ctx, const char** text, size_t* size) noexcept {
    auto& self = *static_cast<SentenceFeed*>(ctx);
    if (self.failure_ || self.done_) return self.failure_ ? -1 : 0;
    try {
      if (!self.next_(self.sentence_)) {
        self.done_ = true;
        return 0;
      }
    } catch (...) {
      self.failure_ = std::current_exception();
      return -1;
    }
    ++self.sentences_;
    *text = self.sentence_.data();
    *size = self.sentence_.size();
    return 1;
  }

  // What `next` threw, rethrown as it was; nothing when it threw nothing.
  void rethrow_failure() const {
    if (failure_) std::rethrow_exception(failure_);
  }
  int64_t sentences() const { return sentences_; }

 private:
  const NextSentence& next_;
  std::string sentence_;
  std::exception_ptr failure_;
  bool done_ = false;
  int64_t sentences_ = 0;
};

}  // namespace

void train_sentencepiece(const NextSentence& next, int vocab_size, const std::string& output_dir,
                          const std::string& origin) {
  if (vocab_size < 8)
    throw TokenizerError("vocab_size " + std::to_string(vocab_size) + " is too small (at least 8)");

  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  const std::vector<std::pair<std::string, std::string>> args = {
      {"model_type", "unigram"},
      {"vocab_size", std::to_string(vocab_size)},
      {"character_coverage", "0.9995"},
      // BERT's special tokens at BERT's usual order: [PAD]=0 [UNK]=1, then the
      // control symbols take the next ids in order: [CLS]=2 [SEP]=3 [MASK]=4. Control
      // symbols (not user-defined ones) because sentencepiece must never produce them
      // from text: Hugging Face's tokenizer cuts such text out itself.
      {"pad_id", "0"},
      {"unk_id", "1"},
      {"bos_id", "-1"},
      {"eos_id", "-1"},
      {"pad_piece", "[PAD]"},
      {"unk_piece", "[UNK]"},
      {"control_symbols", "[CLS],[SEP],[MASK]"},
      // Enough sentences for a good vocabulary without unbounded memory on big data.
      {"input_sentence_size", "2000000"},
      {"shuffle_input_sentence", "true"},
      {"num_threads", std::to_string(threads)},
      {"minloglevel", "2"},  // errors only: training logs thousands of lines otherwise
  };

  std::vector<const char*> keys, values;
  for (const auto& [key, value] : args) {
    keys.push_back(key.c_str());
    values.push_back(value.c_str());
  }

  const spm::Library& library = spm::library();
  SentenceFeed feed(next);
  std::string model;
  auto write = [](void* ctx, const char* data, size_t size) noexcept {
    try {
      static_cast<std::string*>(ctx)->assign(data, size);
    } catch (...) {  // no memory: the model stays empty, reported below
    }
  };
  char error[1024];
  const int status = library.train(keys.data(), values.data(), keys.size(),
                                   /*seed=*/42,  // same corpus, same model
                                   &SentenceFeed::next, &feed, write, &model, error,
                                   sizeof error);
  feed.rethrow_failure();
  if (feed.sentences() == 0) throw TokenizerError("no text to train the tokenizer on in " + origin);
  if (status != 0) throw TokenizerError(std::string("training the tokenizer failed: ") + error);
  if (model.empty())
    throw TokenizerError("training the tokenizer failed: no memory for the model");

  auto tokenizer = SentencePieceTokenizer::from_serialized(model, output_dir);
  tokenizer->save(output_dir);
}

}  // namespace ddp_embed
