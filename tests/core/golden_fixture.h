// The golden Hugging Face BERT folders, rebuilt from the trimmed fixtures.
//
// tests/fixtures/golden/<name>/model/model.trimmed.safetensors keeps only the rows of the
// word-embedding table that the golden texts use (scripts/dev/trim-golden-model.py);
// no other row can change their outputs. golden_model_dir() scatters them back into a
// zero table of the original shape and writes a complete Hugging Face folder
// (config.json + model.safetensors) under the build folder, once; it returns its path.
#pragma once

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace golden {

inline std::string golden_model_dir(const std::string& name) {
  namespace fs = std::filesystem;
  using namespace ddp_embed;
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  const fs::path src = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fixtures/golden" / name / "model";
  const fs::path dst = fs::path(DDP_EMBED_BINARY_DIR) / "golden" / name / "model";
  if (fs::exists(dst / "model.safetensors")) return dst.string();
  fs::create_directories(dst);

  const SafetensorsFile trimmed = read_safetensors((src / "model.trimmed.safetensors").string());
  const StTensorView* rows = trimmed.find("embeddings.word_embeddings.weight.rows");
  const StTensorView* ids = trimmed.find("embeddings.word_embeddings.weight.ids");
  const int64_t vocab = std::stoll(trimmed.metadata().at("trimmed_vocab_size"));
  const int64_t hidden = rows->shape[1];
  std::vector<float> table(size_t(vocab * hidden), 0.0f);
  for (int64_t r = 0; r < rows->shape[0]; ++r) {
    int64_t id;
    std::memcpy(&id, ids->data + r * 8, 8);
    std::memcpy(table.data() + id * hidden, rows->data + r * hidden * 4, size_t(hidden) * 4);
  }
  std::vector<StTensorToWrite> tensors;
  for (const auto& t : trimmed.tensors())
    if (&t != rows && &t != ids) tensors.push_back({t.name, t.dtype, t.shape, t.data, t.nbytes});
  tensors.push_back({"embeddings.word_embeddings.weight", StDtype::F32, {vocab, hidden}, table.data(),
                     table.size() * sizeof(float)});
  // Atomic writes: parallel test processes may rebuild the same folder at once.
  const std::string tmp = (dst / ("config.json.tmp-" + std::to_string(::getpid()))).string();
  fs::copy_file(src / "config.json", tmp, fs::copy_options::overwrite_existing);
  fs::rename(tmp, dst / "config.json");
  write_safetensors((dst / "model.safetensors").string(), tensors, {{"format", "pt"}});
  return dst.string();
}

}  // namespace golden
