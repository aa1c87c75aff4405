// Loading a model folder (model_folder.h): its tokenizer as the model is fed, its input
// length, its weights, and the whole model. The folder's structure is read by
// model_folder_layout.cpp, a folder written by model_folder_save.cpp.
#include "model/model_folder.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <functional>
#include <set>
#include <stdexcept>
#include <vector>
#include <nlohmann/json.hpp>

#include "model/model_folder_files.h"
#include "model/weights.h"
#include "tokenize/hf_files.h"
#include "tokenize/pair_template.h"
#include "tokenize/unicode.h"
#include "util/utf8.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddp_embed {
namespace {

using folder_files::read_json;

// Python's str.lower() of UTF-8 text, one character at a time. Ill-formed bytes pass
// through unchanged, for the tokenizer to treat as it always does. Known difference:
// Python turns a word-final capital sigma into ς, this into σ.
std::string python_lower(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  const char* p = text.data();
  const char* const end = p + text.size();
  while (p < end) {
    const char* const start = p;
    const char32_t cp = utf8::decode(p, end);
    if (cp == utf8::kInvalid) {
      out.append(start, p);
      continue;
    }
    char32_t lowered[3];
    const int n = unicode::to_lower(cp, lowered);
    for (int i = 0; i < n; ++i) utf8::append(out, lowered[i]);
  }
  return out;
}

// sentence_bert_config.json's do_lower_case: sentence-transformers lower-cases every text
// before its tokenizer sees it. The rest is the wrapped tokenizer's; save() writes its
// files (the flag itself goes to sentence_bert_config.json).
class TextLowerCasingTokenizer final : public Tokenizer {
 public:
  explicit TextLowerCasingTokenizer(std::unique_ptr<Tokenizer> inner) : inner_(std::move(inner)) {
    set_model_max_length(inner_->model_max_length());
  }
  std::vector<int32_t> encode(std::string_view text, int max_length) const override {
    return inner_->encode(python_lower(text), max_length);
  }
  int32_t vocab_size() const override { return inner_->vocab_size(); }
  SpecialIds special() const override { return inner_->special(); }
  std::string type() const override { return inner_->type(); }
  void save(const std::string& dir) const override { inner_->save(dir); }
  PairTemplate pair_template() const override { return inner_->pair_template(); }

 private:
  std::unique_ptr<Tokenizer> inner_;
};

// ---- the weights ----------------------------------------------------------------------------

void load_dense_weights(SentenceEmbedder& model, const std::vector<ModelFolderLayout::Dense>& chain) {
  if (model->dense.size() != chain.size())
    throw std::logic_error("load_folder_weights: the model has " + std::to_string(model->dense.size()) +
                           " Dense layers, the folder " + std::to_string(chain.size()));
  for (size_t k = 0; k < chain.size(); ++k) {
    const ModelFolderLayout::Dense& dense = chain[k];
    const torch::nn::LinearOptions& shape = model->dense[k]->options;
    if (shape.out_features() != dense.out_features || shape.in_features() != dense.in_features ||
        shape.bias() != dense.bias)
      throw std::logic_error("load_folder_weights: the model's Dense layer " + std::to_string(k + 1) +
                             " does not have the shape of " + dense.dir);
    const fs::path file = fs::path(dense.dir) / "model.safetensors";
    try {
      const LoadReport report = load_module(*model->dense[k], file.string(), LoadOptions{{"linear."}});
      // A bias the config says the layer lacks: sentence-transformers refuses the file too.
      if (!report.unused.empty())
        throw WeightsError(file.string() + ": holds " + report.unused.front() + ", which the layer does not have");
    } catch (const WeightsError& e) {
      // The file's message names the tensor; say which shape the config promised.
      throw WeightsError(std::string(e.what()) + " (" + (fs::path(dense.dir) / "config.json").string() +
                         ": in_features " + std::to_string(dense.in_features) + ", out_features " +
                         std::to_string(dense.out_features) + ", bias " + (dense.bias ? "true" : "false") + ")");
    }
  }
}

}  // namespace

std::vector<DenseShape> dense_shapes(const ModelFolderLayout& layout) {
  std::vector<DenseShape> shapes;
  for (const auto& d : layout.dense) shapes.push_back({d.in_features, d.out_features, d.bias});
  return shapes;
}

std::unique_ptr<Tokenizer> load_folder_tokenizer(const ModelFolderLayout& layout, bool lower_case_fallback) {
  auto tokenizer = load_tokenizer("auto", layout.transformer_dir, lower_case_fallback);
  const EncoderConfig& encoder = layout.encoder;
  if (tokenizer->vocab_size() > encoder.vocab_size())
    throw ModelError(layout.transformer_dir + ": the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                             " ids but config.json's vocab_size is " + std::to_string(encoder.vocab_size()));
  if (!layout.lower_case_text) return tokenizer;
  return std::make_unique<TextLowerCasingTokenizer>(std::move(tokenizer));
}

int folder_max_length(const ModelFolderLayout& layout) {
  const int max_position = static_cast<int>(layout.encoder.max_length());
  if (layout.max_seq_length) return std::min(*layout.max_seq_length, max_position);
  // No max_seq_length: the tokenizer's limit, as Hugging Face and sentence-transformers
  // truncate then.
  const fs::path file = fs::path(layout.transformer_dir) / "tokenizer_config.json";
  if (!fs::exists(file)) return max_position;
  return std::min(hf_files::max_length_setting(read_json(file), max_position), max_position);
}

namespace {

// The tensors of a folder's weights (model.safetensors, or the shards holding them) whose
// names `wanted` takes, read alone.
NamedTensors folder_tensors(const fs::path& dir, const std::function<bool(const std::string&)>& wanted) {
  std::vector<std::string> files;
  if (fs::exists(dir / "model.safetensors")) {
    files.push_back((dir / "model.safetensors").string());
  } else {  // shards: those that hold a wanted tensor
    const json index = read_json(dir / "model.safetensors.index.json");
    std::set<std::string> shards;
    if (index.contains("weight_map") && index["weight_map"].is_object())
      for (const auto& item : index["weight_map"].items())
        if (wanted(item.key()) && item.value().is_string()) shards.insert((dir / item.value().get<std::string>()).string());
    files.assign(shards.begin(), shards.end());
  }
  NamedTensors out;
  for (const auto& file : files)
    for (auto& item : load_tensors(file, wanted)) out.push_back(std::move(item));
  return out;
}

// A file's name for a tensor, as a BertModel / XLMRobertaModel file names it: the prefixes
// of a *ForMaskedLM or *ForSequenceClassification file stripped, as loading strips them.
std::string plain_tensor_name(const std::string& name) {
  for (const char* prefix : {"bert.", "roberta.", "mpnet."})
    if (name.rfind(prefix, 0) == 0) return name.substr(std::strlen(prefix));
  return name;
}

// The tensors of the folder's weights that a head names (`file_tensors()`'s names), read alone.
NamedTensors head_tensors(const ModelFolderLayout& layout, const NamedTensors& named) {
  std::set<std::string> names;
  for (const auto& item : named) names.insert(item.first);
  return folder_tensors(layout.transformer_dir, [&](const std::string& name) { return names.count(name) > 0; });
}

// A cross-encoder's head from its folder; from an embedder's folder, BERT's pooler alone.
void load_head_weights(SentenceEmbedder& model, const ModelFolderLayout& layout) {
  RerankHead& head = model->head;
  if (!layout.cross_encoder) {
    head->load_pooler(carried_init_tensors(layout));
    return;
  }
  if (head->num_labels() != layout.num_labels)
    throw ModelError((fs::path(layout.transformer_dir) / "config.json").string() + ": the folder's head has " +
                     std::to_string(layout.num_labels) + " labels (id2label) but the model asks for " +
                     std::to_string(head->num_labels()) + ": set model.num_labels to " +
                     std::to_string(layout.num_labels));
  bool pooler_loaded = false;
  head->load_file_tensors(head_tensors(layout, head->file_tensors()), layout.transformer_dir, pooler_loaded);
}

}  // namespace

NamedTensors carried_init_tensors(const ModelFolderLayout& init) {
  if (init.encoder.is_decoder() || init.encoder.is_modernbert()) return {};  // no pooler in Qwen3 or ModernBERT
  const auto wanted = [&](const std::string& name) { return plain_tensor_name(name).rfind("pooler.", 0) == 0; };
  NamedTensors out;
  for (auto& [name, tensor] : folder_tensors(init.transformer_dir, wanted))
    out.emplace_back(plain_tensor_name(name), tensor);
  return out;
}

LoadReport load_folder_weights(SentenceEmbedder& model, const ModelFolderLayout& layout) {
  // A Qwen3ForCausalLM or Gemma3ForCausalLM file names its tensors "model.*" (and has an
  // lm_head, unused), and so does ModernBertForMaskedLM (ModernBERT-base's; its head and
  // decoder unused); the original XLM-R checkpoints (XLMRobertaForMaskedLM) "roberta.*",
  // MPNetForMaskedLM's "mpnet.*".
  LoadOptions options;
  const EncoderConfig& e = layout.encoder;
  options.strip_prefixes = e.is_decoder() || e.is_modernbert() || e.is_gemma3()
                               ? std::vector<std::string>{"model."}
                               : std::vector<std::string>{"bert.", "roberta.", "mpnet."};
  LoadReport report = load_module_from_folder(model->encoder(), layout.transformer_dir, options);
  if (model->is_cross_encoder()) load_head_weights(model, layout);
  if (model->is_sparse()) {
    const NamedTensors head = head_tensors(layout, model->mlm->file_tensors());
    model->mlm->load_file_tensors(head, layout.transformer_dir);
    // The encoder's load left the head's tensors unused; the head used them.
    const auto used = [&](const std::string& name) {
      return std::any_of(head.begin(), head.end(), [&](const auto& t) { return t.first == name; });
    };
    report.unused.erase(std::remove_if(report.unused.begin(), report.unused.end(), used), report.unused.end());
  }
  if (!layout.dense.empty()) load_dense_weights(model, layout.dense);
  return report;
}

LoadedModel load_model_folder(const std::string& dir, std::optional<Pooling> pooling) {
  const ModelFolderLayout layout = read_model_folder_layout(dir);
  LoadedModel out;
  out.tokenizer = load_folder_tokenizer(layout);
  out.max_length = folder_max_length(layout);
  out.normalize = layout.normalize;
  out.prompts = layout.prompts;
  out.default_prompt_name = layout.default_prompt_name;
  if (!layout.include_prompt) out.prompt_excluded_by = layout.pooling_config;

  if (layout.sparse) {
    out.model = SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(
        layout.encoder, SentenceEmbedderImpl::SparseShape{layout.splade_reduce, layout.splade_activation,
                                                          SentenceEmbedderImpl::SparseShape{}.chunk_tokens,
                                                          layout.max_active_dims}));
    load_folder_weights(out.model, layout);
    out.model->eval();
    return out;
  }
  if (layout.cross_encoder) {
    out.model = SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(
        layout.encoder, SentenceEmbedderImpl::CrossEncoderShape{layout.num_labels}));
    out.activation = layout.activation;
    load_folder_weights(out.model, layout);
    out.model->eval();
    return out;
  }
  // Pooling: the argument, else the folder's Pooling module, else cls (plain encoder
  // folders) or lasttoken (decoders).
  const Pooling fallback = layout.encoder.is_decoder() ? Pooling::LastToken : Pooling::Cls;
  const Pooling pool = pooling ? *pooling : layout.pooling.value_or(fallback);
  out.model = SentenceEmbedder(std::make_shared<SentenceEmbedderImpl>(layout.encoder, dense_shapes(layout), pool));
  load_folder_weights(out.model, layout);
  out.model->eval();
  return out;
}

FolderTokenizer load_model_folder_tokenizer(const std::string& dir) {
  const ModelFolderLayout layout = read_model_folder_layout(dir);
  return {load_folder_tokenizer(layout), folder_max_length(layout)};
}

}  // namespace ddp_embed
