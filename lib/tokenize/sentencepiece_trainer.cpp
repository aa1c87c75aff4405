// train_sentencepiece(): sentencepiece's own unigram trainer (in its module, see
// tokenize/spm_library.h), fed from our files through a callback.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tokenize/sentencepiece_tokenizer.h"
#include "tokenize/spm_library.h"
#include "tokenize/tokenizer.h"
#include "util/file_check.h"
#include "util/utf8.h"

namespace ddp_embed {

namespace fs = std::filesystem;

namespace {

// Every field of a pair record that holds text (data/pairs.h's formats, plus "text").
constexpr const char* kTextFields[] = {"query",    "pos",   "neg",   "anchor", "positive",
                                       "negative", "text1", "text2", "text"};

bool looks_like_jsonl(const std::string& file) {
  const std::string ext = fs::path(file).extension().string();
  if (ext == ".jsonl" || ext == ".json") return true;
  std::ifstream in(file, std::ios::binary);
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos) continue;
    if (line[first] != '{') return false;
    const auto value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    return value.is_object();
  }
  return false;
}

// Streams the sentences of the input files to the trainer one at a time, so the corpus
// is never held twice in memory. A read or parse error ends the stream; the trainer
// then fails and train_sentencepiece() reports error().
class CorpusSentences final {
 public:
  explicit CorpusSentences(const std::vector<std::string>& files) : files_(files) {}

  // The trainer's ddp_embed_spm_next_fn: 1 and the next sentence, 0 at the end, -1 after
  // an error. Nothing may throw into the module.
  static int next(void* ctx, const char** text, size_t* size) noexcept {
    auto& self = *static_cast<CorpusSentences*>(ctx);
    try {
      if (!self.advance()) return self.error_.empty() ? 0 : -1;
      *text = self.value_.data();
      *size = self.value_.size();
      return 1;
    } catch (const std::exception& e) {
      self.fail(std::string("reading the training text failed: ") + e.what());
    } catch (...) {
      self.fail("reading the training text failed");
    }
    return -1;
  }

  const std::string& error() const { return error_; }
  int64_t sentences() const { return sentences_; }

 private:
  // Moves to the next sentence (value_); false at the end or after an error.
  bool advance() {
    while (!done_) {
      if (next_field_ < fields_.size()) {
        value_ = std::move(fields_[next_field_++]);
        ++sentences_;
        return true;
      }
      fields_.clear();
      next_field_ = 0;
      read_line();
    }
    return false;
  }

  // Fills fields_ from the next line (possibly none), opening the next file as needed.
  void read_line() {
    if (!in_.is_open()) {
      if (file_index_ >= files_.size()) {
        done_ = true;
        return;
      }
      const std::string& file = files_[file_index_];
      jsonl_ = looks_like_jsonl(file);
      in_.open(file, std::ios::binary);
      line_number_ = 0;
      if (!in_) return fail("cannot open " + file + ": " + std::strerror(errno));
    }
    std::string line;
    if (!std::getline(in_, line)) {
      in_.close();
      in_.clear();
      ++file_index_;
      return;
    }
    ++line_number_;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) return;
    if (!jsonl_) return add(std::move(line));

    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_object())
      return fail(files_[file_index_] + ":" + std::to_string(line_number_) +
                  ": not a JSON object (a JSONL file needs one object a line)");
    for (const char* key : kTextFields) {
      auto it = record.find(key);
      if (it == record.end()) continue;
      if (it->is_string()) add(it->get<std::string>());
      if (it->is_array())
        for (const auto& item : *it)
          if (item.is_string()) add(item.get<std::string>());
    }
  }

  void add(std::string text) {
    if (text.empty()) return;
    const char* end = text.data() + text.size();
    if (!utf8::is_valid(text.data(), end))
      text = utf8::replace_ill_formed(text.data(), end);
    fields_.push_back(std::move(text));
  }

  void fail(std::string message) {
    error_ = std::move(message);
    done_ = true;
  }

  const std::vector<std::string>& files_;
  size_t file_index_ = 0;
  std::ifstream in_;
  bool jsonl_ = false;
  int64_t line_number_ = 0;
  std::vector<std::string> fields_;
  size_t next_field_ = 0;
  std::string value_;
  std::string error_;
  bool done_ = false;
  int64_t sentences_ = 0;
};

}  // namespace

void train_sentencepiece(const std::vector<std::string>& inputs, int vocab_size,
                         const std::string& output_dir) {
  if (inputs.empty()) throw TokenizerError("no input files to train the tokenizer on");
  if (vocab_size < 8)
    throw TokenizerError("vocab_size " + std::to_string(vocab_size) + " is too small");
  for (const auto& file : inputs) {
    if (const std::string folder = folder_not_file(file, "a file of texts or pairs"); !folder.empty())
      throw TokenizerError(folder);
    std::ifstream probe(file, std::ios::binary);
    if (!probe) throw TokenizerError("cannot open " + file + ": " + std::strerror(errno));
  }

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
  CorpusSentences corpus(inputs);
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
                                   &CorpusSentences::next, &corpus, write, &model, error,
                                   sizeof error);
  if (!corpus.error().empty()) throw TokenizerError(corpus.error());
  if (corpus.sentences() == 0)
    throw TokenizerError("no text to train the tokenizer on in " + inputs.front());
  if (status != 0) throw TokenizerError(std::string("training the tokenizer failed: ") + error);
  if (model.empty())
    throw TokenizerError("training the tokenizer failed: no memory for the model");

  auto tokenizer = SentencePieceTokenizer::from_serialized(model, output_dir);
  tokenizer->save(output_dir);
}

}  // namespace ddp_embed
