#include "model/weights.h"

#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "io/safetensors.h"

namespace ddp_embed {
namespace {

struct DtypePair {
  StDtype st;
  at::ScalarType at;
};
constexpr DtypePair kDtypePairs[] = {
    {StDtype::F64, at::kDouble}, {StDtype::F32, at::kFloat}, {StDtype::F16, at::kHalf},
    {StDtype::BF16, at::kBFloat16}, {StDtype::I64, at::kLong}, {StDtype::I32, at::kInt},
    {StDtype::I16, at::kShort}, {StDtype::I8, at::kChar}, {StDtype::U8, at::kByte},
    {StDtype::BOOL, at::kBool},
};

at::ScalarType to_scalar_type(StDtype d) {
  for (const auto& p : kDtypePairs)
    if (p.st == d) return p.at;
  throw WeightsError("unmapped safetensors dtype");
}

StDtype to_st_dtype(at::ScalarType t, const std::string& name) {
  for (const auto& p : kDtypePairs)
    if (p.at == t) return p.st;
  throw WeightsError("tensor \"" + name + "\": dtype " + std::string(c10::toString(t)) +
                     " cannot be stored in safetensors");
}

at::Tensor to_tensor(const StTensorView& v) {
  at::Tensor t = at::empty(v.shape, at::TensorOptions().dtype(to_scalar_type(v.dtype)));
  if (v.nbytes > 0) std::memcpy(t.data_ptr(), v.data, v.nbytes);  // memcpy: file data may be unaligned
  return t;
}

std::string shape_text(at::IntArrayRef shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// "a, b, c and 7 more"
std::string name_list(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  constexpr size_t kShown = 8;
  std::string s;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > kShown) s += " and " + std::to_string(names.size() - kShown) + " more";
  return s;
}

NamedTensors module_tensors(const torch::nn::Module& module) {
  NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : module.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

// The file names that may hold module tensor `name`, best first.
std::vector<std::string> candidate_names(const std::string& name, const LoadOptions& options) {
  std::vector<std::string> bases = {name};
  // Old TensorFlow-converted checkpoints call LayerNorm's weight/bias gamma/beta.
  const auto ends_with = [&](const std::string& suffix) {
    return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  if (ends_with("LayerNorm.weight")) bases.push_back(name.substr(0, name.size() - 6) + "gamma");
  if (ends_with("LayerNorm.bias")) bases.push_back(name.substr(0, name.size() - 4) + "beta");
  std::vector<std::string> out = bases;
  for (const auto& prefix : options.strip_prefixes)
    for (const auto& base : bases) out.push_back(prefix + base);
  return out;
}

// Checks every (file tensor, module tensor) pair of `file` (shape; a float fills a float,
// an integer the same integer type), then copies them all, giving back the file's pages
// after each tensor (a mapped file of several GB is never resident whole).
void check_and_copy(std::vector<std::pair<const StTensorView*, at::Tensor>>& plan, const SafetensorsFile& file) {
  const std::string& path = file.path();
  for (const auto& [view, target] : plan) {
    if (at::IntArrayRef(view->shape) != target.sizes())
      throw WeightsError(path + ": tensor \"" + view->name + "\" has shape " + shape_text(view->shape) +
                         ", the model's has " + shape_text(target.sizes()));
    const at::ScalarType from = to_scalar_type(view->dtype);
    const bool ok = at::isFloatingType(target.scalar_type()) ? at::isFloatingType(from) : from == target.scalar_type();
    if (!ok)
      throw WeightsError(path + ": tensor \"" + view->name + "\" is " + std::string(st_dtype_name(view->dtype)) +
                         ", which cannot fill a " + std::string(c10::toString(target.scalar_type())) + " tensor");
  }
  at::NoGradGuard no_grad;
  for (auto& [view, target] : plan) {
    at::Tensor t = target;  // shares storage with the module's tensor
    t.copy_(to_tensor(*view));
    file.release_pages();
  }
}

}  // namespace

NamedTensors load_tensors(const std::string& path) {
  const SafetensorsFile file = read_safetensors(path);
  NamedTensors out;
  for (const auto& v : file.tensors()) out.emplace_back(v.name, to_tensor(v));
  return out;
}

NamedTensors load_tensors(const std::string& path, const std::function<bool(const std::string&)>& wanted) {
  const SafetensorsFile file = read_safetensors(path);
  NamedTensors out;
  for (const auto& v : file.tensors())
    if (wanted(v.name)) out.emplace_back(v.name, to_tensor(v));
  return out;
}

void save_tensors(const std::string& path, const NamedTensors& tensors,
                  const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep_alive;  // CPU contiguous copies the views below point into
  std::vector<StTensorToWrite> views;
  keep_alive.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    const StDtype dtype = to_st_dtype(tensor.scalar_type(), name);
    keep_alive.push_back(tensor.detach().to(at::kCPU).contiguous());
    const at::Tensor& t = keep_alive.back();
    views.push_back({name, dtype, t.sizes().vec(), t.data_ptr(), static_cast<size_t>(t.numel()) * t.element_size()});
  }
  write_safetensors(path, views, metadata);
}

LoadReport load_module(torch::nn::Module& module, const std::string& path, const LoadOptions& options) {
  const SafetensorsFile file = read_safetensors(path);
  const NamedTensors targets = module_tensors(module);

  std::set<std::string> used;
  std::vector<std::pair<const StTensorView*, at::Tensor>> plan;
  std::vector<std::string> missing;
  LoadReport report;
  for (const auto& [name, target] : targets) {
    const StTensorView* found = nullptr;
    for (const auto& candidate : candidate_names(name, options))
      if ((found = file.find(candidate))) break;
    if (!found) {
      missing.push_back(name + " " + shape_text(target.sizes()));
      continue;
    }
    used.insert(found->name);
    plan.emplace_back(found, target);
    report.loaded.push_back(name);
  }
  for (const auto& v : file.tensors())
    if (!used.count(v.name)) report.unused.push_back(v.name);
  if (!missing.empty())
    throw WeightsError(path + ": missing tensor" + (missing.size() > 1 ? "s " : " ") + name_list(missing) +
                       "; tensors of the file that matched nothing: " + name_list(report.unused));

  // Check everything before changing anything: a failed load leaves the module as it was.
  check_and_copy(plan, file);
  return report;
}

LoadReport load_module_from_folder(torch::nn::Module& module, const std::string& dir, const LoadOptions& options) {
  const std::string single = dir + "/model.safetensors", index_path = dir + "/model.safetensors.index.json";
  if (std::ifstream(single).good()) return load_module(module, single, options);
  std::ifstream in(index_path);
  if (!in) throw WeightsError(dir + ": neither model.safetensors nor model.safetensors.index.json");
  nlohmann::json index;
  try {
    in >> index;
  } catch (const nlohmann::json::exception& e) {
    throw WeightsError(index_path + ": not valid JSON: " + e.what());
  }
  const auto map = index.find("weight_map");
  if (!index.is_object() || map == index.end() || !map->is_object())
    throw WeightsError(index_path + ": needs a \"weight_map\" object (tensor name → shard file)");
  std::map<std::string, std::string> file_of;  // tensor name → shard file name
  for (const auto& item : map->items()) {
    if (!item.value().is_string() || item.value().get<std::string>().find('/') != std::string::npos)
      throw WeightsError(index_path + ": weight_map." + item.key() + " must name a file of the folder, not " +
                         item.value().dump());
    file_of[item.key()] = item.value().get<std::string>();
  }

  // Which file name fills each module tensor, and so which shard it is in.
  std::map<std::string, std::vector<std::pair<std::string, at::Tensor>>> by_shard;
  std::vector<std::string> missing;
  std::set<std::string> used;
  LoadReport report;
  for (const auto& [name, target] : module_tensors(module)) {
    std::string found;
    for (const auto& candidate : candidate_names(name, options))
      if (file_of.count(candidate)) {
        found = candidate;
        break;
      }
    if (found.empty()) {
      missing.push_back(name + " " + shape_text(target.sizes()));
      continue;
    }
    used.insert(found);
    by_shard[file_of[found]].emplace_back(found, target);
    report.loaded.push_back(name);
  }
  for (const auto& [name, file] : file_of)
    if (!used.count(name)) report.unused.push_back(name);
  if (!missing.empty())
    throw WeightsError(index_path + ": missing tensor" + (missing.size() > 1 ? "s " : " ") + name_list(missing) +
                       "; tensors of the index that matched nothing: " + name_list(report.unused));
  for (const auto& [file, entries] : by_shard) {
    const std::string path = dir + "/" + file;
    const SafetensorsFile shard = read_safetensors(path);
    std::vector<std::pair<const StTensorView*, at::Tensor>> plan;
    for (const auto& [name, target] : entries) {
      const StTensorView* view = shard.find(name);
      if (!view) throw WeightsError(path + ": has no tensor \"" + name + "\", which " + index_path + " puts there");
      plan.emplace_back(view, target);
    }
    check_and_copy(plan, shard);
  }
  return report;
}

void save_as_float32(const std::string& path, const NamedTensors& tensors, const std::string& name_prefix,
                     const std::map<std::string, std::string>& metadata) {
  NamedTensors out;
  for (const auto& [name, tensor] : tensors)
    out.emplace_back(name_prefix + name, at::isFloatingType(tensor.scalar_type()) ? tensor.detach().to(at::kFloat)
                                                                                   : tensor.detach());
  save_tensors(path, out, metadata);
}

void save_module(const torch::nn::Module& module, const std::string& path, const std::string& name_prefix,
                 const std::map<std::string, std::string>& metadata) {
  save_as_float32(path, module_tensors(module), name_prefix, metadata);
}

}  // namespace ddp_embed
