#include "model/encoder.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "model/bert.h"
#include "model/mpnet.h"
#include "model/modernbert.h"
#include "model/gemma3.h"
#include "model/qwen3.h"
#include "util/file_check.h"

namespace ddp_embed {

at::Tensor pool(const at::Tensor& hidden, const at::Tensor& attention_mask, Pooling mode) {
  if (mode == Pooling::Cls) return hidden.select(1, 0);
  if (mode == Pooling::LastToken) {
    // sentence-transformers' rule: the last position whose mask is 1 (a row without one
    // takes the last position), the output multiplied by that mask value.
    const int64_t length = attention_mask.size(1);
    const at::Tensor real = attention_mask.ne(0);
    const at::Tensor last = (length - 1) - real.flip({1}).to(at::kByte).argmax(1);  // [B]
    const at::Tensor picked = hidden.gather(1, last.view({-1, 1, 1}).expand({-1, 1, hidden.size(2)})).squeeze(1);
    return picked * real.gather(1, last.view({-1, 1})).to(hidden.scalar_type());
  }
  const at::Tensor m = attention_mask.to(hidden.scalar_type()).unsqueeze(-1);  // [B, L, 1]
  // clamp: an all-padding row gives 0 rather than NaN (as sentence-transformers does).
  return (hidden * m).sum(1) / m.sum(1).clamp_min(1e-9);
}

nlohmann::json read_config_json(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a model's config.json"); !folder.empty()) throw ModelError(folder);
  std::ifstream in(path);
  if (!in) throw ModelError(path + ": cannot open");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw ModelError(path + ": not valid JSON: " + e.what());
  }
  return j;
}

EncoderConfig encoder_config_from_hf_json(const std::string& path) {
  const nlohmann::json j = read_config_json(path);
  if (!j.is_object()) throw ModelError(path + ": a config must be a JSON object");
  const auto type = j.find("model_type");
  const std::string model_type = type != j.end() && type->is_string() ? type->get<std::string>() : "bert";
  EncoderConfig c;
  if (model_type == "bert" || model_type == "xlm-roberta") return encoder_config(bert_config_from_hf_json(j, path));
  if (model_type == "qwen3") {
    c.architecture = Architecture::Qwen3;
    c.qwen3 = qwen3_config_from_hf_json(j, path);
    return c;
  }
  if (model_type == "mpnet") {
    c.architecture = Architecture::MPNet;
    c.mpnet = mpnet_config_from_hf_json(j, path);
    return c;
  }
  if (model_type == "modernbert") {
    c.architecture = Architecture::ModernBert;
    c.modernbert = modernbert_config_from_hf_json(j, path);
    return c;
  }
  if (model_type == "gemma3_text") {
    c.architecture = Architecture::Gemma3;
    c.gemma3 = gemma3_config_from_hf_json(j, path);
    return c;
  }
  throw ModelError(path + ": model_type \"" + model_type +
                   "\" is not implemented (embed-train trains bert, xlm-roberta, mpnet, modernbert, qwen3 and "
                   "gemma3_text)");
}

}  // namespace ddp_embed
