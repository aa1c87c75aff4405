// Tensors and module weights to and from safetensors files (io/safetensors.h): what
// model.safetensors, 2_Dense/model.safetensors and checkpoints are made of. No pickle.
#pragma once

#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include "model/model_error.h"

namespace ddp_embed {

// A weights file that cannot be read into the module as asked: lib/model's ModelError,
// of its own type so that a caller can add which file's shape it expected.
struct WeightsError : ModelError {
  using ModelError::ModelError;
};

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

// Every tensor of a file, as CPU tensors in the file's dtype, sorted by name.
// Throws SafetensorsError for a bad file.
NamedTensors load_tensors(const std::string& path);
// The tensors of a file whose names `wanted` takes, read alone (the others' bytes untouched).
NamedTensors load_tensors(const std::string& path, const std::function<bool(const std::string&)>& wanted);

// Writes tensors (any device, contiguous or not) in their own dtype; names must be unique.
// Metadata defaults to {"format": "pt"}, which transformers requires.
void save_tensors(const std::string& path, const NamedTensors& tensors,
                  const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

struct LoadOptions {
  // A file name starting with one of these also matches the module name without it
  // ("bert.encoder..." → "encoder..."; "linear.weight" → "weight").
  std::vector<std::string> strip_prefixes = {"bert."};
};

struct LoadReport {
  std::vector<std::string> loaded;  // module names that were filled
  std::vector<std::string> unused;  // file names that matched nothing (pooler.*, cls.*, ...)
};

// Fills every parameter and buffer of `module` from the file by name, converting
// F32/F16/BF16/F64 to the parameter's dtype and device (old "LayerNorm.gamma/beta"
// names are read as weight/bias). A module tensor missing from the file, or a shape
// or dtype-kind mismatch, throws WeightsError naming the tensor and listing the file's
// unused names; extra file tensors are returned in LoadReport::unused.
LoadReport load_module(torch::nn::Module& module, const std::string& path, const LoadOptions& options = {});

// A folder's weights as transformers writes them: DIR/model.safetensors (load_module), or
// the shards that DIR/model.safetensors.index.json's "weight_map" names (tensor → file, as
// a large model is saved), read one shard at a time. The same checks and report as
// load_module; a bad shard found after others were copied leaves the module partly filled
// (the caller stops). Neither file: WeightsError naming the folder.
LoadReport load_module_from_folder(torch::nn::Module& module, const std::string& dir,
                                   const LoadOptions& options = {});

// Writes the module's parameters and buffers as F32 (integer buffers keep their dtype),
// each name prefixed with `name_prefix` (e.g. "linear." for sentence-transformers'
// 2_Dense/model.safetensors).
void save_module(const torch::nn::Module& module, const std::string& path, const std::string& name_prefix = "",
                 const std::map<std::string, std::string>& metadata = {{"format", "pt"}});
// The same for tensors by name (a module's as model/lora.h's merged_tensors gives them).
void save_as_float32(const std::string& path, const NamedTensors& tensors, const std::string& name_prefix = "",
                     const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace ddp_embed
