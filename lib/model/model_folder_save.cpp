// Writing a model folder (model_folder.h: save_model_folder): a Hugging Face encoder folder
// with its tokenizer, wrapped in sentence-transformers' modules, written aside and swapped
// in whole.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "model/lora.h"
#include "model/model_folder.h"
#include "model/model_folder_files.h"
#include "model/weights.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddp_embed {
namespace {

using namespace folder_files;

// sentence-transformers passes each module's config.json to the module's constructor as
// keyword arguments: a key the installed release does not know is a TypeError, a key
// left out takes the constructor's default. So the writers below give exactly the keys
// that every release since kSentenceTransformersFormat accepts.
//
// That release is the first to read every key written here ("similarity_fn_name" in
// config_sentence_transformers.json, "include_prompt" in 1_Pooling/config.json); an
// older one warns that the folder was made for a newer release.
constexpr const char* kSentenceTransformersFormat = "3.0.0";

// Transformer, Pooling, then the optional Dense and Normalize, in the order
// sentence-transformers runs them. Normalize has no files; its path follows
// sentence-transformers' "<idx>_Normalize" naming.
// The folder of the k-th (from 0) Dense layer: 2_Dense, 3_Dense, ...
std::string dense_dir(size_t k) { return std::to_string(2 + k) + "_Dense"; }

json modules_json(size_t dense_layers, bool with_normalize) {
  auto module = [](int idx, const std::string& path, const std::string& type) {
    return json{{"idx", idx}, {"name", std::to_string(idx)}, {"path", path},
                {"type", "sentence_transformers.models." + type}};
  };
  json modules = json::array({module(0, "", "Transformer"), module(1, "1_Pooling", "Pooling")});
  for (size_t k = 0; k < dense_layers; ++k) modules.push_back(module(int(2 + k), dense_dir(k), "Dense"));
  if (with_normalize) {
    const int idx = static_cast<int>(modules.size());
    modules.push_back(module(idx, std::to_string(idx) + "_Normalize", "Normalize"));
  }
  return modules;
}

json pooling_json(int64_t hidden_size, Pooling pooling) {
  return {{"word_embedding_dimension", hidden_size},
          {"pooling_mode_cls_token", pooling == Pooling::Cls},
          {"pooling_mode_mean_tokens", pooling == Pooling::Mean},
          {"pooling_mode_max_tokens", false},
          {"pooling_mode_mean_sqrt_len_tokens", false},
          {"pooling_mode_weightedmean_tokens", false},
          {"pooling_mode_lasttoken", pooling == Pooling::LastToken},
          {"include_prompt", true}};
}

// Identity spelled out: sentence-transformers' Dense defaults to Tanh.
json dense_json(const torch::nn::LinearOptions& shape) {
  return {{"in_features", shape.in_features()},
          {"out_features", shape.out_features()},
          {"bias", shape.bias()},
          {"activation_function", kIdentity}};
}

json sentence_transformers_json(const ModelFolderOptions& options) {
  return {{"__version__", {{"sentence_transformers", kSentenceTransformersFormat}}},
          {"model_type", "SentenceTransformer"},
          {"prompts", json(options.prompts)},
          {"default_prompt_name", options.default_prompt_name ? json(*options.default_prompt_name) : json(nullptr)},
          {"similarity_fn_name", "cosine"}};
}

// ---- a cross-encoder's files: CrossEncoder.save()'s in sentence-transformers 6 ----------

const char* activation_class(ScoreActivation a) {
  switch (a) {
    case ScoreActivation::Sigmoid: return "torch.nn.modules.activation.Sigmoid";
    case ScoreActivation::Identity: return "torch.nn.modules.linear.Identity";
    case ScoreActivation::Tanh: return "torch.nn.modules.activation.Tanh";
  }
  return "?";
}

ScoreActivation folder_activation(const SentenceEmbedderImpl& model, const ModelFolderOptions& options) {
  if (options.activation) return *options.activation;
  return model.head->num_labels() == 1 ? ScoreActivation::Sigmoid : ScoreActivation::Identity;
}

// transformers' *ForSequenceClassification config: the encoder's, its architecture and
// labels; sentence-transformers before 6 read the activation from here.
json cross_encoder_config(const SentenceEmbedderImpl& model, ScoreActivation activation) {
  json config = model.encoder().hf_config_json();
  config["architectures"] = json::array({model.head->architecture()});
  json id2label = json::object(), label2id = json::object();
  for (int64_t i = 0; i < model.head->num_labels(); ++i) {
    id2label[std::to_string(i)] = "LABEL_" + std::to_string(i);
    label2id["LABEL_" + std::to_string(i)] = i;
  }
  config["id2label"] = id2label;
  config["label2id"] = label2id;
  config["sentence_transformers"] = {{"activation_fn", activation_class(activation)}};
  return config;
}

void write_cross_encoder_modules(const fs::path& tmp, const ModelFolderOptions& options, ScoreActivation activation) {
  write_json(tmp / "sentence_bert_config.json",
             {{"transformer_task", "sequence-classification"},
              {"modality_config", {{"text", {{"method", "forward"}, {"method_output_name", "logits"}}}}},
              {"module_output_name", "scores"},
              {"max_seq_length", options.max_length},
              {"do_lower_case", options.lower_case_text}});
  write_json(tmp / "modules.json",
             json::array({{{"idx", 0}, {"name", "0"}, {"path", ""},
                           {"type", "sentence_transformers.base.modules.transformer.Transformer"}}}));
  write_json(tmp / "config_sentence_transformers.json",
             {{"__version__", {{"sentence_transformers", "6.0.0"}}},
              {"model_type", "CrossEncoder"},
              {"activation_fn", activation_class(activation)},
              {"prompts", json(options.prompts)},
              {"default_prompt_name", options.default_prompt_name ? json(*options.default_prompt_name) : json(nullptr)}});
}

// ---- a sparse encoder's files: SparseEncoder.save()'s in sentence-transformers 6 ----------

void write_sparse_modules(const fs::path& tmp, const SentenceEmbedderImpl& model, const ModelFolderOptions& options) {
  write_json(tmp / "sentence_bert_config.json",
             {{"transformer_task", "fill-mask"},
              {"modality_config", {{"text", {{"method", "forward"}, {"method_output_name", "logits"}}}}},
              {"module_output_name", "token_embeddings"},
              {"max_seq_length", options.max_length},
              {"do_lower_case", options.lower_case_text}});
  write_json(tmp / "1_SpladePooling" / "config.json",
             {{"pooling_strategy", choice_name(model.sparse_shape().reduce)},
              {"activation_function", choice_name(model.sparse_shape().activation)},
              {"embedding_dimension", model.embedding_dim()}});
  write_json(tmp / "modules.json",
             json::array({{{"idx", 0}, {"name", "0"}, {"path", ""},
                           {"type", "sentence_transformers.base.modules.transformer.Transformer"}},
                          {{"idx", 1}, {"name", "1"}, {"path", "1_SpladePooling"},
                           {"type", "sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling"}}}));
  json st = {{"__version__", {{"sentence_transformers", "6.0.0"}}},
             {"model_type", "SparseEncoder"},
             {"prompts", json(options.prompts)},
             {"default_prompt_name", options.default_prompt_name ? json(*options.default_prompt_name) : json(nullptr)},
             {"similarity_fn_name", "dot"}};
  // SparseEncoder(dir) reads it back and encodes with it, as embed-train does.
  if (model.sparse_shape().max_active_dims > 0) st["max_active_dims"] = model.sparse_shape().max_active_dims;
  write_json(tmp / "config_sentence_transformers.json", st);
}

// Hugging Face tokenizers truncate to tokenizer_config.json's model_max_length; more
// tokens than the model has positions would fail inside the model, so cap it there.
void cap_tokenizer_max_length(const fs::path& dir, int64_t max_position) {
  const fs::path path = dir / "tokenizer_config.json";
  if (!fs::exists(path)) return;
  nlohmann::ordered_json config;
  {
    std::ifstream in(path);
    config = nlohmann::ordered_json::parse(in);
  }
  auto it = config.find("model_max_length");
  if (it != config.end() && it->is_number_integer() && it->get<int64_t>() <= max_position) return;
  config["model_max_length"] = max_position;
  std::ofstream out(path);
  out << config.dump(2) << "\n";
  if (!out) fail(path, "cannot write");
}

}  // namespace

void save_model_folder(const std::string& dir, SentenceEmbedder& model, const Tokenizer& tokenizer,
                       const ModelFolderOptions& options, const json& extra) {
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  // Module 0, the Transformer: a Hugging Face encoder folder with its tokenizer.
  const TextEncoderImpl& encoder = model->encoder();
  const EncoderConfig& config = encoder.encoder_config();
  const bool cross = model->is_cross_encoder(), sparse = model->is_sparse();
  const ScoreActivation activation = cross ? folder_activation(*model, options) : ScoreActivation::Identity;
  json hf_config = cross ? cross_encoder_config(*model, activation) : encoder.hf_config_json();
  if (sparse) hf_config["architectures"] = json::array({model->mlm->architecture()});
  write_json(tmp / "config.json", hf_config);
  // An encoder fine-tuned with LoRA is written with its adapters merged: a plain model.
  NamedTensors tensors = merged_tensors(encoder);
  if (cross) {  // a *ForSequenceClassification file: the encoder under its prefix, then the head
    for (auto& item : tensors) item.first = model->head->encoder_prefix() + item.first;
    for (const auto& item : model->head->file_tensors()) tensors.push_back(item);
  } else if (sparse) {  // a *ForMaskedLM file: the same, with the masked-LM head
    for (auto& item : tensors) item.first = model->mlm->encoder_prefix() + item.first;
    for (const auto& item : model->mlm->file_tensors()) tensors.push_back(item);
  } else {
    for (const auto& item : options.carried)
      if (std::none_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == item.first; }))
        tensors.push_back(item);
  }
  save_as_float32((tmp / "model.safetensors").string(), tensors);
  tokenizer.save(tmp.string());
  cap_tokenizer_max_length(tmp, config.max_length());

  if (cross) {
    write_cross_encoder_modules(tmp, options, activation);
  } else if (sparse) {
    write_sparse_modules(tmp, *model, options);
  } else {
    write_json(tmp / "sentence_bert_config.json",
               {{"max_seq_length", options.max_length}, {"do_lower_case", options.lower_case_text}});
    // Module 1, Pooling; modules 2, 3, ... the Dense layers; then Normalize.
    write_json(tmp / "1_Pooling" / "config.json", pooling_json(config.hidden_size(), model->pooling()));
    for (size_t k = 0; k < model->dense.size(); ++k) {
      write_json(tmp / dense_dir(k) / "config.json", dense_json(model->dense[k]->options));
      save_module(*model->dense[k], (tmp / dense_dir(k) / "model.safetensors").string(), "linear.");
    }
    write_json(tmp / "modules.json", modules_json(model->dense.size(), options.normalize));
    write_json(tmp / "config_sentence_transformers.json", sentence_transformers_json(options));
  }

  json info = extra;
  info["format"] = "ddp-embed model folder";
  info["format_version"] = 1;
  info["architecture"] = architecture_name(config.architecture);
  info["kind"] = choice_name(cross ? ModelKind::CrossEncoder : sparse ? ModelKind::Sparse : ModelKind::BiEncoder);
  if (cross) {
    info["num_labels"] = model->head->num_labels();
    info["activation"] = choice_name(activation);
  } else if (sparse) {
    info["pooling_strategy"] = choice_name(model->sparse_shape().reduce);
    info["activation_function"] = choice_name(model->sparse_shape().activation);
  } else {
    info["pooling"] = choice_name(model->pooling());
    info["projection_dim"] = model->dense.empty() ? 0 : model->embedding_dim();
  }
  info["normalize"] = options.normalize;
  info["tokenizer"] = {{"type", tokenizer.type()},
                       {"max_length", options.max_length},
                       {"lower_case_text", options.lower_case_text}};
  write_json(tmp / "embed_train.json", info);

  // Swap in: the old folder (if any) moves aside first and is removed only after the
  // new one is in place, so a crash leaves one complete folder under some name.
  const fs::path old = final_dir.string() + ".old-" + std::to_string(::getpid());
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
}

}  // namespace ddp_embed
