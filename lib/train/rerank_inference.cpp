// Scoring pairs with a cross-encoder folder: the reading of rerank's input, the batching
// by length and the kind checks that keep each folder to the commands that can use it.
#include "train/rerank_inference.h"

#include "train/rerank_batches.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <stdexcept>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "compat/cuda_support.h"
#include "config/choices.h"
#include "data/pairs.h"
#include "tokenize/pair_template.h"
#include "train/inference.h"
#include "train/rerank_batches.h"
#include "util/atomic_file.h"
#include "util/file_check.h"
#include "util/progress.h"
#include "util/text.h"

namespace ddp_embed {
namespace {

// JSON's name of a value's type, for messages: "a number", "null", ...
std::string rerank_json_kind(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_number()) return "a number";
  if (v.is_boolean()) return "a boolean";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "a string";
}

// The one key of `names` a line holds; "" when none. Two of them is an error naming both.
std::string rerank_field_of(const nlohmann::json& line, std::initializer_list<const char*> names,
                            const std::string& where) {
  std::string found;
  for (const char* name : names) {
    if (!line.contains(name)) continue;
    if (!found.empty())
      throw DataError(where + ": both \"" + found + "\" and \"" + name + "\": give the document once");
    found = name;
  }
  return found;
}

// The string of `key` at `where`, or a DataError saying what it holds instead.
std::string rerank_string_at(const nlohmann::json& line, const std::string& key, const std::string& where) {
  const nlohmann::json& v = line.at(key);
  if (!v.is_string()) throw DataError(where + ": \"" + key + "\" is " + rerank_json_kind(v) + ", not a string");
  return v.get<std::string>();
}

// One line's pair: {"query", "doc" | "document" | "passage"} or {"text1", "text2"}.
TextPair rerank_pair_of(const nlohmann::json& line, const std::string& where) {
  constexpr const char* kShape =
      "each line needs {\"query\": ..., \"doc\": ...} (the document may be \"document\" or \"passage\"), or "
      "{\"text1\": ..., \"text2\": ...}";
  if (!line.is_object()) throw DataError(where + ": " + rerank_json_kind(line) + ", not a JSON object; " + kShape);
  const std::string query = rerank_field_of(line, {"query", "text1"}, where);
  if (query.empty()) throw DataError(where + ": no query; " + kShape);
  const bool text_pair = query == "text1";
  const std::string doc = text_pair ? rerank_field_of(line, {"text2"}, where)
                                    : rerank_field_of(line, {"doc", "document", "passage"}, where);
  if (doc.empty())
    throw DataError(where + ": no document" + (text_pair ? " (\"text2\") beside \"text1\"" : " beside \"query\"") +
                    "; " + kShape);
  return {rerank_string_at(line, query, where), rerank_string_at(line, doc, where)};
}

// float32 [n, num_labels] logits → the folder's scores.
// What a cross-encoder folder is, for messages: "a cross-encoder folder
// (BertForSequenceClassification, 1 label)".
std::string rerank_cross_encoder_kind(const LoadedModel& model) {
  const int64_t labels = model.model->head->num_labels();
  return "a cross-encoder folder (" + model.model->head->architecture() + ", " + std::to_string(labels) + " label" +
         (labels == 1 ? "" : "s") + ")";
}

}  // namespace

std::vector<TextPair> read_rerank_pairs(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a JSONL file of {\"query\", \"doc\"} lines"); !folder.empty())
    throw std::runtime_error(folder);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path + (std::filesystem::exists(path) ? "" : ": no such file"));
  std::vector<TextPair> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // a file written on Windows
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw DataError(where + ": not valid JSON (" + e.what() + "); each line is one JSON object");
    }
    out.push_back(rerank_pair_of(j, where));
  }
  if (out.empty()) throw DataError(path + ": no pairs in it (JSONL, a {\"query\", \"doc\"} object a line)");
  return out;
}

at::Tensor score_pairs(LoadedModel& loaded, const std::vector<TextPair>& pairs, const RerankSettings& settings) {
  return score_pairs(loaded.model, *loaded.tokenizer, loaded.activation, pairs, settings);
}

at::Tensor score_pairs(SentenceEmbedder& model, const Tokenizer& tokenizer, ScoreActivation activation,
                       const std::vector<TextPair>& pairs, const RerankSettings& settings) {
  const int64_t n = int64_t(pairs.size());
  std::vector<PairIds> joined(pairs.size());
  at::parallel_for(0, n, 64, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      joined[size_t(i)] =
          encode_pair(tokenizer, pairs[size_t(i)].query, pairs[size_t(i)].doc, settings.max_length);
  });
  // Batches of similar lengths pad less; the output keeps the input order.
  std::vector<int64_t> order(pairs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return joined[size_t(a)].ids.size() > joined[size_t(b)].ids.size(); });

  const int64_t batch = settings.batch_size, labels = model->head->num_labels();
  at::Tensor sorted = at::empty({n, labels}, at::kFloat);
  WorkProgress progress(settings.label, "pairs", n, batch, true);
  StatusLineScope status_line;
  for (int64_t b = 0; b < n; b += batch) {
    const auto batch_begin = std::chrono::steady_clock::now();
    const int64_t rows = std::min(batch, n - b);
    EncoderInput in = collate_pairs(joined, std::vector<int64_t>(order.begin() + b, order.begin() + b + rows));
    in.ids = in.ids.to(settings.device);
    in.mask = in.mask.to(settings.device);
    in.types = in.types.to(settings.device);
    const at::Tensor logits = model->score_batch(in).to(at::kFloat).cpu();
    sorted.narrow(0, b, rows).copy_(activated(logits, activation));
    progress.step_done(b + rows,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() - batch_begin).count());
  }
  at::Tensor out = at::empty_like(sorted);
  out.index_copy_(0, at::tensor(order, at::kLong), sorted);
  return out;
}

void require_cross_encoder(const LoadedModel& model, const std::string& dir, const std::string& command) {
  if (model.model->is_cross_encoder()) return;
  throw std::invalid_argument(
      dir + " is a bi-encoder folder (a sentence embedder: it embeds one text at a time, it does not score pairs); " +
      command + " needs a cross-encoder folder (config.json's architectures a *ForSequenceClassification, as "
      "training with model.kind \"cross_encoder\" or CrossEncoder.save writes one). To rank with this folder use "
      "embed-train encode, or eval --beir DIR --model " + dir + " (or give it as --first-stage)");
}

void require_bi_encoder(const LoadedModel& model, const std::string& dir, const std::string& command) {
  if (!model.model->is_cross_encoder()) return;
  throw std::invalid_argument(dir + " is " + rerank_cross_encoder_kind(model) +
                              ": it scores (query, document) pairs and gives no embeddings, which " + command +
                              " needs. Score pairs with embed-train rerank --model " + dir +
                              ", or rerank a bi-encoder's candidates with embed-train eval --model " + dir +
                              " --beir DIR --first-stage BI_ENCODER_FOLDER");
}

void require_dense_embedder(const LoadedModel& model, const std::string& dir, const std::string& command) {
  require_bi_encoder(model, dir, command);
  if (!model.model->is_sparse()) return;
  throw std::invalid_argument(dir + " is a sparse encoder (SpladePooling): its vectors have one weight per vocabulary "
                              "entry and are compared by dot product through an inverted index, and " + command +
                              " compares dense embeddings by cosine: give a sentence embedder's folder (embed-train "
                              "eval --beir evaluates a sparse encoder)");
}

int run_rerank(const RerankOptions& o) {
  if (same_file(o.output, o.input))
    throw std::invalid_argument("--output " + o.output + " is the --input file (" + o.input +
                                "): writing it would overwrite what is read; name another file");
  const c10::Device device(o.device);
  compat::prepare_device(device);  // before any tensor: CUDA is loaded on first use (compat/cuda_support.h)
  const std::vector<TextPair> pairs = read_rerank_pairs(o.input);
  LoadedModel loaded = load_model_folder(o.model_dir);
  require_cross_encoder(loaded, o.model_dir, "rerank");
  loaded.model->to(device);
  const int max_length = o.max_length > 0 ? o.max_length : loaded.max_length;
  const at::Tensor scores = score_pairs(loaded, pairs, {o.batch_size, device, max_length, "rerank"}).contiguous();

  const int64_t labels = scores.size(1);
  const float* s = scores.data_ptr<float>();
  std::string lines;
  for (int64_t i = 0; i < scores.size(0); ++i) {
    const nlohmann::json line = labels == 1 ? nlohmann::json{{"score", s[i]}}
                                            : nlohmann::json{{"scores", std::vector<float>(s + i * labels,
                                                                                          s + (i + 1) * labels)}};
    lines += line.dump() + "\n";
  }
  write_file_atomically(o.output, lines);
  spdlog::info("rerank: {} pairs (at most {} tokens each), {} score{} each, written to {}", pairs.size(), max_length,
               labels, labels == 1 ? "" : "s", o.output);
  return 0;
}

}  // namespace ddp_embed
