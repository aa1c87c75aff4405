#include "train/guide.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <stdexcept>

#include "config/config_error.h"
#include "util/log.h"

namespace ddp_embed {
namespace fs = std::filesystem;

namespace {

const std::string& guide_dir(const Config& cfg) {
  if (!cfg.loss.guide.model) throw std::logic_error("loss.guide.model unset: no guide");
  return *cfg.loss.guide.model;
}

// The folder's layout, or an error that names the key, the path and what a guide must be.
ModelFolderLayout guide_layout(const std::string& dir) {
  try {
    return read_model_folder_layout(dir);
  } catch (const std::exception& e) {
    throw ConfigError("loss.guide.model: " + dir +
                             " is not a model folder embed-train reads (a sentence-transformers or Hugging Face "
                             "folder of a BERT, XLM-RoBERTa or Qwen3 encoder, e.g. model.init's): " + e.what());
  }
}

// Rows [start, start + count) of a batch part, cut to the longest of them (padding is on
// the right): GradCache's chunks (train/gradcache.cpp).
EncoderInput rows_of(const EncoderInput& part, int64_t start, int64_t count) {
  const at::Tensor mask = part.mask.narrow(0, start, count);
  const int64_t longest = std::max<int64_t>(1, mask.sum(1).max().item<int64_t>());
  return {part.ids.narrow(0, start, count).narrow(1, 0, longest), mask.narrow(1, 0, longest)};
}

using Clock = std::chrono::steady_clock;

}  // namespace

bool guide_reads_model_tokens(const Config& cfg) {
  const std::string& dir = guide_dir(cfg);
  std::error_code error;
  if (!cfg.model.init || !fs::equivalent(dir, *cfg.model.init, error) || error) return false;
  // The model's tokenizer is the init folder's; its length must be within the guide's
  // (sentence-transformers retokenizes for a guide of shorter inputs too).
  return cfg.tokenizer.lower_case && cfg.tokenizer.max_length <= folder_max_length(guide_layout(dir));
}

TokenStore guide_token_store(const Config& cfg, const std::vector<SourceInput>& sources,
                             const TokenStore& model_tokens, int threads) {
  const std::string& dir = guide_dir(cfg);
  const ModelFolderLayout layout = guide_layout(dir);
  const std::unique_ptr<Tokenizer> tokenizer = load_folder_tokenizer(layout);
  PairDataset again = load_sources(sources, *tokenizer, folder_max_length(layout), cfg.data.skip_bad_lines, threads,
                                   cfg.data.max_line_bytes);
  if (again.tokens.num_sequences() != model_tokens.num_sequences())
    throw ConfigError(fmt::format("loss.guide.model: the guide's tokenizer ({}) read {} sequences of data.train "
                                         "where the model's read {}: the lines read differ (a line bad for one "
                                         "tokenizer only?)",
                                         dir, again.tokens.num_sequences(), model_tokens.num_sequences()));
  again.tokens.shrink_to_fit();
  return std::move(again.tokens);
}

GuideEncoder::GuideEncoder(const GuideConfig& guide, const c10::Device& device, Precision precision)
    : dir_(guide.model.value_or("")), device_(device), precision_(precision) {
  // The clear errors first, before the weights are read.
  if (guide_layout(dir_).sparse)
    throw ConfigError("loss.guide.model: " + dir_ + " is a sparse encoder (SpladePooling); the guide masks negatives "
                      "by the cosines of dense embeddings: give a sentence embedder's folder");
  loaded_ = load_model_folder(dir_);
  loaded_.model->to(device_);
  loaded_.model->eval();  // no dropout, ever
  for (auto& p : loaded_.model->parameters()) p.set_requires_grad(false);
}

int64_t GuideEncoder::parameter_bytes() const {
  int64_t bytes = 0;
  for (const auto& p : loaded_.model->parameters()) bytes += p.numel() * int64_t(p.element_size());
  for (const auto& b : loaded_.model->buffers()) bytes += b.numel() * int64_t(b.element_size());
  return bytes;
}

std::string GuideEncoder::describe() const {
  return fmt::format("guide: {} ({} embeddings, {:.1f} MB of parameters on {}), frozen", dir_,
                     loaded_.model->embedding_dim(), double(parameter_bytes()) / 1e6, device_.str());
}

at::Tensor GuideEncoder::embed(const EncoderInput& input, int64_t chunk) {
  const int64_t rows = input.ids.size(0);
  if (chunk <= 0 || chunk >= rows) return loaded_.model->embed(input).to(at::kFloat);
  std::vector<at::Tensor> pieces;
  for (int64_t start = 0; start < rows; start += chunk)
    pieces.push_back(loaded_.model->embed(rows_of(input, start, std::min(chunk, rows - start))).to(at::kFloat));
  return at::cat(pieces);
}

double GuideEncoder::embed_into(PairBatch& batch, int64_t chunk) {
  // On a GPU the host waits for the work queued before (so that it is not counted) and
  // for the guide's (so that it is): two waits a micro-batch, the price of its figure.
  if (device_.is_cuda()) batch.query.mask.sum().item<int64_t>();
  const auto start = Clock::now();
  const bool own = batch.guide_query.defined();
  const EncoderInput& query = own ? batch.guide_query : batch.query;
  const EncoderInput& pos = own ? batch.guide_pos : batch.pos;
  const EncoderInput& neg = own ? batch.guide_neg : batch.neg;
  {
    at::NoGradGuard no_grad;
    AutocastScope autocast(precision_, device_);
    batch.labels.guide_queries = embed(query, chunk);
    const at::Tensor positives = embed(pos, chunk);
    batch.labels.guide_candidates = neg.defined() ? at::cat({positives, embed(neg, chunk)}) : positives;
  }
  if (device_.is_cuda()) batch.labels.guide_candidates.sum().item<float>();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace ddp_embed
