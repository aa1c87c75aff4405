// Reading a model folder's structure (model_folder.h: read_model_folder_layout) from its
// small files: modules.json and each module's config, or a plain Hugging Face folder's
// config.json; the prompts of config_sentence_transformers.json. No weights are read here.
#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <map>
#include <vector>
#include <nlohmann/json.hpp>

#include "model/model_folder.h"
#include "model/model_folder_files.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddp_embed {
namespace {

using namespace folder_files;

// ---- reading: modules.json --------------------------------------------------------------

// MlmTransformer: sparse_encoder's MLMTransformer, a Transformer whose task is fill-mask.
enum class ModuleKind { Transformer, MlmTransformer, Pooling, SpladePooling, Dense, Normalize };

const char* kind_name(ModuleKind kind) {
  switch (kind) {
    case ModuleKind::Transformer: return "Transformer";
    case ModuleKind::MlmTransformer: return "MLMTransformer";
    case ModuleKind::SpladePooling: return "SpladePooling";
    case ModuleKind::Pooling: return "Pooling";
    case ModuleKind::Dense: return "Dense";
    case ModuleKind::Normalize: return "Normalize";
  }
  return "?";
}

// The "type" strings that sentence-transformers releases write for the modules embed-train
// implements: type(module).__module__ up to 5.x, the class's full path from 6.0 on. Nothing
// else is accepted: another spelling would name another class (a subclass, remote code).
ModuleKind module_kind(const std::string& type, const fs::path& modules_file) {
  static const std::map<std::string, ModuleKind> kTypes = {
      {"sentence_transformers.models.Transformer", ModuleKind::Transformer},
      {"sentence_transformers.base.modules.transformer.Transformer", ModuleKind::Transformer},
      {"sentence_transformers.models.Pooling", ModuleKind::Pooling},
      {"sentence_transformers.sentence_transformer.modules.pooling.Pooling", ModuleKind::Pooling},
      {"sentence_transformers.models.Dense", ModuleKind::Dense},
      {"sentence_transformers.base.modules.dense.Dense", ModuleKind::Dense},
      {"sentence_transformers.models.Normalize", ModuleKind::Normalize},
      {"sentence_transformers.base.modules.normalize.Normalize", ModuleKind::Normalize},
      {"sentence_transformers.sparse_encoder.models.MLMTransformer", ModuleKind::MlmTransformer},
      {"sentence_transformers.sparse_encoder.modules.mlm_transformer.MLMTransformer", ModuleKind::MlmTransformer},
      {"sentence_transformers.sparse_encoder.models.SpladePooling", ModuleKind::SpladePooling},
      {"sentence_transformers.sparse_encoder.modules.splade_pooling.SpladePooling", ModuleKind::SpladePooling}};
  const auto it = kTypes.find(type);
  if (it == kTypes.end())
    fail(modules_file, "module type " + type +
                           " is not implemented (embed-train has sentence_transformers.models.Transformer (BERT, "
                           "XLM-RoBERTa or Qwen3), Pooling, Dense and Normalize; a sparse encoder's Transformer "
                           "(fill-mask) or MLMTransformer and SpladePooling)");
  return it->second;
}

// A module's folder, relative to the model folder ("" = the folder itself).
std::string checked_module_path(const std::string& path, const fs::path& modules_file) {
  const fs::path p(path);
  bool escapes = p.is_absolute();
  for (const auto& part : p) escapes = escapes || part == "..";
  if (escapes) fail(modules_file, "module path \"" + path + "\" leads outside the model folder");
  return path;
}

struct ModuleEntry {
  ModuleKind kind;
  std::string path;
};

// embed-train's model is Transformer, Pooling, then any number of Dense layers, then
// optionally Normalize; sentence-transformers runs the modules in list order, so any other
// list would compute something else. A lone Transformer is sentence-transformers'
// CrossEncoder (checked once config.json is read); a Transformer (or MLMTransformer) and
// SpladePooling, its SparseEncoder.
void check_module_chain(const std::vector<ModuleEntry>& modules, const fs::path& modules_file) {
  using K = ModuleKind;
  std::string names;
  for (const auto& m : modules) names += (names.empty() ? "" : ", ") + std::string(kind_name(m.kind));
  size_t at = 0;
  const auto take = [&](K kind) { return at < modules.size() && modules[at].kind == kind ? (++at, true) : false; };
  if (modules.size() == 2 && modules[1].kind == K::SpladePooling &&
      (modules[0].kind == K::Transformer || modules[0].kind == K::MlmTransformer))
    return;
  bool in_order = take(K::Transformer);
  if (in_order && at < modules.size()) {
    in_order = take(K::Pooling);
    while (take(K::Dense)) {
    }
    take(K::Normalize);
  }
  if (in_order && at == modules.size()) return;
  fail(modules_file, "modules " + names +
                         ": embed-train runs Transformer, Pooling, Dense (none or more), Normalize (optional), "
                         "in this order (or a sparse encoder's Transformer and SpladePooling)");
}

std::vector<ModuleEntry> read_modules(const fs::path& modules_file) {
  const json list = read_json(modules_file);
  if (!list.is_array() || list.empty())
    fail(modules_file, "expected a list of modules, each {\"idx\", \"name\", \"path\", \"type\"}");
  std::vector<ModuleEntry> modules;
  for (size_t i = 0; i < list.size(); ++i) {
    const json& m = list[i];
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string() || !m.contains("path") ||
        !m["path"].is_string())
      fail(modules_file, "module " + std::to_string(i) + ": expected an object with string \"type\" and \"path\"");
    modules.push_back({module_kind(m["type"].get<std::string>(), modules_file),
                       checked_module_path(m["path"].get<std::string>(), modules_file)});
  }
  check_module_chain(modules, modules_file);
  return modules;
}

// ---- reading: each module -------------------------------------------------------------

// A path as a Python string literal in a shell command's double quotes: 'PATH'.
std::string python_string(const fs::path& p) {
  std::string text = "'";
  text += p.string();
  text += "'";
  return text;
}

// Where a folder holds only pickled weights: the one-line conversion to safetensors.
std::string hugging_face_conversion(const fs::path& dir) {
  return "python -c \"from transformers import AutoModel; AutoModel.from_pretrained(" + python_string(dir) +
         ").save_pretrained(" + python_string(dir) + ", safe_serialization=True)\"";
}
std::string sentence_transformers_conversion(const fs::path& root) {
  return "python -c \"from sentence_transformers import SentenceTransformer; SentenceTransformer(" + python_string(root) +
         ").save(" + python_string(root) + ", safe_serialization=True)\"";
}

// dir/model.safetensors, which must exist. Pickled PyTorch weights are never read (loading
// them runs code); a folder holding only those gets the command that converts it.
void require_safetensors(const fs::path& dir, const std::string& conversion) {
  const fs::path file = dir / "model.safetensors";
  if (fs::exists(file) || fs::exists(dir / "model.safetensors.index.json")) return;  // one file, or shards
  const fs::path pickled = dir / "pytorch_model.bin";
  if (fs::exists(pickled))
    fail(pickled, "embed-train reads safetensors only (" + file.string() +
                      "), never pickled PyTorch weights; convert them once with\n  " + conversion);
  fail(file, "missing (the weights, as safetensors)");
}

// config.json's architectures naming a *ForSequenceClassification: a cross-encoder's
// checkpoint, with its number of labels (transformers': len(id2label), else num_labels).
bool read_classification(ModelFolderLayout& layout, const json& config, const fs::path& file) {
  bool classifier = false;
  const auto architectures = config.find("architectures");
  if (architectures != config.end() && architectures->is_array())
    for (const auto& name : *architectures)
      if (name.is_string()) {
        const std::string s = name.get<std::string>();
        const std::string suffix = "ForSequenceClassification";
        classifier = classifier || (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0);
      }
  if (!classifier) return false;
  const auto labels = config.find("id2label");
  if (labels != config.end() && labels->is_object() && !labels->empty()) {
    layout.num_labels = static_cast<int>(labels->size());
  } else if (config.contains("num_labels")) {
    const json& n = config["num_labels"];
    if (!n.is_number_integer() || n.get<int64_t>() < 1 || n.get<int64_t>() > 1000000)
      fail(file, "num_labels must be a positive integer, not " + n.dump());
    layout.num_labels = static_cast<int>(n.get<int64_t>());
  }
  return true;
}

// config.json's architectures naming a *ForMaskedLM: the folder has a masked-LM head.
bool names_masked_lm(const json& config) {
  const auto architectures = config.find("architectures");
  if (architectures == config.end() || !architectures->is_array()) return false;
  const std::string suffix = "ForMaskedLM";
  for (const auto& name : *architectures)
    if (name.is_string() && name.get<std::string>().size() > suffix.size() &&
        name.get<std::string>().compare(name.get<std::string>().size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

// The encoder: config.json and model.safetensors; the tokenizer files are read later.
// Returns whether config.json is a classification checkpoint (read_classification).
bool read_transformer(ModelFolderLayout& layout, const fs::path& dir, const std::string& conversion) {
  if (!fs::is_directory(dir)) fail(dir, "the Transformer's folder does not exist");
  const fs::path config = dir / "config.json";
  if (!fs::exists(config)) fail(config, "missing (the encoder's architecture, a Hugging Face config.json)");
  layout.encoder = encoder_config_from_hf_json(config.string());
  require_safetensors(dir, conversion);
  layout.transformer_dir = dir.string();
  const json object = read_json_object(config);
  layout.masked_lm = names_masked_lm(object);
  return read_classification(layout, object, config);
}

// A SparseEncoder's Transformer reads the masked-LM head's logits: sentence_bert_config.json's
// transformer_task "fill-mask" (the MLMTransformer module's, whatever the file says).
void check_fill_mask_task(const ModelFolderLayout& layout, bool mlm_transformer) {
  if (mlm_transformer) return;
  const fs::path file = fs::path(layout.transformer_dir) / "sentence_bert_config.json";
  const json config = fs::exists(file) ? read_json_object(file) : json::object();
  const auto task = config.find("transformer_task");
  if (task != config.end() && task->is_string() && task->get<std::string>() == "fill-mask") return;
  fail(file, "transformer_task is " + (task == config.end() ? std::string("absent") : task->dump()) +
                 ", and SpladePooling pools the masked-LM head's logits: a sparse encoder's Transformer has "
                 "transformer_task \"fill-mask\"");
}

// 1_SpladePooling/config.json: pooling_strategy, activation_function, embedding_dimension.
void read_splade_pooling(ModelFolderLayout& layout, const fs::path& file) {
  const json config = fs::exists(file) ? read_json_object(file) : json::object();
  const auto choice = [&](const char* key, const char* fallback, auto& out) {
    const auto it = config.find(key);
    const std::string name = it == config.end() || it->is_null() ? fallback : it->is_string() ? it->get<std::string>() : "";
    using Choice = std::decay_t<decltype(out)>;
    const auto value = find_choice<Choice>(name);
    if (!value)
      fail(file, std::string(key) + " " + (it == config.end() ? name : it->dump()) + ": expected " +
                     describe_choices(choice_names<Choice>()));
    out = *value;
  };
  choice("pooling_strategy", "max", layout.splade_reduce);
  choice("activation_function", "relu", layout.splade_activation);
  for (const char* key : {"embedding_dimension", "word_embedding_dimension"}) {
    const auto it = config.find(key);
    if (it != config.end() && !it->is_null() &&
        !(it->is_number_integer() && it->get<int64_t>() == layout.encoder.vocab_size()))
      fail(file, std::string(key) + " " + it->dump() + " is not the masked-LM head's vocabulary size " +
                     std::to_string(layout.encoder.vocab_size()) + " (config.json's vocab_size)");
  }
}

// The Transformer's own settings (sentence-transformers reads them from its folder).
// Keys other than these two (6.x writes a few) do not change a BERT's embeddings.
void read_sentence_bert_config(ModelFolderLayout& layout) {
  const fs::path file = fs::path(layout.transformer_dir) / "sentence_bert_config.json";
  if (!fs::exists(file)) return;
  const json config = read_json_object(file);
  const auto it = config.find("max_seq_length");
  if (it != config.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 2 || it->get<int64_t>() > (1 << 24))
      fail(file, "max_seq_length must be an integer of at least 2 ([CLS] and [SEP]), not " + it->dump());
    layout.max_seq_length = static_cast<int>(it->get<int64_t>());
  }
  layout.lower_case_text = bool_key(config, "do_lower_case", false, file);
  // sentence-transformers 6 renders every text through the tokenizer's chat template when
  // the folder lists a "message" modality (it writes one for any tokenizer that has a
  // template); embed-train feeds the text as it is, as the models' own folders say.
  const auto modalities = config.find("modality_config");
  if (modalities != config.end() && modalities->is_object() && modalities->contains("message"))
    fail(file, "modality_config.message: sentence-transformers would put every text through the tokenizer's chat "
               "template, which embed-train does not do; remove the \"message\" entry (or write "
               "{\"max_seq_length\": N} alone, as the model's own folder has it) so that both feed the text as it is");
}

// 1_Pooling/config.json's boolean keys, in the order sentence-transformers concatenates
// their outputs; the mode's name in messages is the key without "pooling_mode_".
constexpr std::array<const char*, 6> kPoolingModeKeys = {
    "pooling_mode_cls_token",           "pooling_mode_max_tokens",          "pooling_mode_mean_tokens",
    "pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"};

// The modes embed-train pools as, by the names sentence-transformers' files give them:
// the boolean keys' (without "pooling_mode_") and 6.x's pooling_mode names. File format,
// not config: mapped to the one Pooling of config/choices.h.
const std::map<std::string, Pooling> kPoolingModes = {
    {"cls_token", Pooling::Cls}, {"mean_tokens", Pooling::Mean}, {"lasttoken", Pooling::LastToken},
    {"cls", Pooling::Cls},       {"mean", Pooling::Mean},
};

// The modes a Pooling config turns on: 6.x writes "pooling_mode" (a name or a list of
// names), earlier releases one boolean key per mode. No mode on means mean, the default of
// every release. (A config that sets cls but leaves out the mean key is cls here and in
// 6.x, cls + mean in 3.x-5.x, whose constructor defaults that key to true; no release
// writes such a file.)
std::vector<std::string> pooling_modes(const json& config, const fs::path& file) {
  std::vector<std::string> modes;
  const auto named = config.find("pooling_mode");
  if (named != config.end() && !named->is_null()) {
    const json list = named->is_array() ? *named : json::array({*named});
    for (const auto& mode : list) {
      if (!mode.is_string()) fail(file, "pooling_mode must be a mode name or a list of them, not " + named->dump());
      modes.push_back(mode.get<std::string>());
    }
    if (modes.empty()) fail(file, "pooling_mode is an empty list");
    return modes;
  }
  for (const char* key : kPoolingModeKeys)
    if (bool_key(config, key, false, file)) modes.push_back(key + std::strlen("pooling_mode_"));
  if (modes.empty()) modes.push_back("mean_tokens");
  return modes;
}

// The mode, and include_prompt into `include_prompt` (sentence-transformers' default: true).
Pooling read_pooling(const fs::path& file, int64_t hidden_size, bool& include_prompt) {
  const json config = read_json_object(file);
  include_prompt = bool_key(config, "include_prompt", true, file);
  for (const char* key : {"word_embedding_dimension", "embedding_dimension"}) {
    const auto it = config.find(key);
    if (it != config.end() && !(it->is_number_integer() && it->get<int64_t>() == hidden_size))
      fail(file, std::string(key) + " " + it->dump() + " is not the encoder's hidden_size " + std::to_string(hidden_size));
  }
  const std::vector<std::string> modes = pooling_modes(config, file);
  for (const auto& mode : modes)
    if (!kPoolingModes.count(mode))
      fail(file, "pooling mode " + mode + " is not implemented (embed-train has cls, mean and lasttoken)");
  if (modes.size() > 1) {
    std::string names;
    for (const auto& mode : modes) names += (names.empty() ? "" : " + ") + mode;
    fail(file, "pooling modes " + names +
                   " together (concatenated) are not implemented (embed-train has cls, mean or lasttoken, one of them)");
  }
  return kPoolingModes.at(modes[0]);
}

// sentence-transformers' Dense is activation(linear(x)), the activation Tanh unless the
// config names another; embed-train's projection is the linear part alone.
void check_identity_activation(const json& config, const fs::path& file) {
  const auto it = config.find("activation_function");
  if (it != config.end() && it->is_string() && it->get<std::string>() == kIdentity) return;
  const std::string named = it == config.end() ? "absent (sentence-transformers then uses Tanh)"
                                               : (it->is_string() ? it->get<std::string>() : it->dump());
  fail(file, "activation_function " + named + " is not implemented (embed-train's projection is linear: " +
                 std::string(kIdentity) + ")");
}

// sentence-transformers 6's Dense reads features[module_input_name] and writes
// features[module_output_name]; embed-train's chain passes the sentence embedding along.
void check_embedding_feature(const json& config, const char* key, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null() || (it->is_string() && it->get<std::string>() == "sentence_embedding"))
    return;
  fail(file, std::string(key) + " " + it->dump() +
                 " is not implemented (embed-train's Dense layers take and give the sentence_embedding)");
}

// `width`: what the layer takes, the hidden size for the first, else the out_features of
// the one before.
ModelFolderLayout::Dense read_dense(const fs::path& dir, int64_t width, bool first, const fs::path& root) {
  const fs::path file = dir / "config.json";
  const json config = read_json_object(file);
  ModelFolderLayout::Dense dense;
  dense.dir = dir.string();
  dense.in_features = required_int_key(config, "in_features", file);
  dense.out_features = required_int_key(config, "out_features", file);
  if (dense.in_features != width)
    fail(file, "in_features " + std::to_string(dense.in_features) +
                   (first ? " does not match the encoder's hidden_size " + std::to_string(width) +
                                " (the Dense layer takes the pooled embedding)"
                          : " does not match the out_features " + std::to_string(width) + " of the Dense layer before"));
  if (dense.out_features <= 0) fail(file, "out_features must be positive, not " + std::to_string(dense.out_features));
  dense.bias = bool_key(config, "bias", true, file);
  if (bool_key(config, "use_residual", false, file)) fail(file, "use_residual true is not implemented");
  check_embedding_feature(config, "module_input_name", file);
  check_embedding_feature(config, "module_output_name", file);
  check_identity_activation(config, file);
  require_safetensors(dir, sentence_transformers_conversion(root));
  return dense;
}

void read_sentence_transformers_folder(ModelFolderLayout& layout, const fs::path& root) {
  const fs::path modules_file = root / "modules.json";
  layout.sentence_transformers = true;
  // check_module_chain put the Transformer first: the hidden size is known for the rest.
  const std::vector<ModuleEntry> modules = read_modules(modules_file);
  for (const ModuleEntry& m : modules) {
    const fs::path dir = m.path.empty() ? root : root / m.path;
    switch (m.kind) {
      case ModuleKind::Transformer:
      case ModuleKind::MlmTransformer:
        layout.cross_encoder = read_transformer(layout, dir, sentence_transformers_conversion(root)) &&
                               modules.size() == 1;
        read_sentence_bert_config(layout);
        break;
      case ModuleKind::SpladePooling:
        check_fill_mask_task(layout, modules.front().kind == ModuleKind::MlmTransformer);
        layout.sparse = true;
        read_splade_pooling(layout, dir / "config.json");
        break;
      case ModuleKind::Pooling:
        layout.pooling = read_pooling(dir / "config.json", layout.encoder.hidden_size(), layout.include_prompt);
        layout.pooling_config = (dir / "config.json").string();
        break;
      case ModuleKind::Dense:
        layout.dense.push_back(read_dense(dir,
                                          layout.dense.empty() ? layout.encoder.hidden_size()
                                                               : layout.dense.back().out_features,
                                          layout.dense.empty(), root));
        break;
      case ModuleKind::Normalize:
        layout.normalize = true;  // no parameters; 6.x's config.json only names its input
        break;
    }
  }
  if (modules.size() == 1 && !layout.cross_encoder)
    fail(modules_file, "a lone Transformer module is sentence-transformers' CrossEncoder, but " +
                           (fs::path(layout.transformer_dir) / "config.json").string() +
                           " names no *ForSequenceClassification architecture; an embedder's folder lists a "
                           "Pooling module after it");
}

// What sentence-transformers' CrossEncoder.predict applies to the logits: activation_fn
// in config_sentence_transformers.json (6.x) or config.json's
// sbert_ce_default_activation_function / sentence_transformers.activation_fn (earlier).
const std::map<std::string, ScoreActivation> kActivationClasses = {
    {"torch.nn.modules.activation.Sigmoid", ScoreActivation::Sigmoid},
    {"torch.nn.modules.linear.Identity", ScoreActivation::Identity},
    {"torch.nn.modules.activation.Tanh", ScoreActivation::Tanh}};

void read_activation(ModelFolderLayout& layout, const fs::path& root) {
  layout.activation = layout.num_labels == 1 ? ScoreActivation::Sigmoid : ScoreActivation::Identity;
  const fs::path st_file = root / "config_sentence_transformers.json";
  const fs::path hf_file = fs::path(layout.transformer_dir) / "config.json";
  std::optional<std::pair<json, fs::path>> named;
  if (fs::exists(st_file)) {
    const json config = read_json_object(st_file);
    if (config.contains("activation_fn") && !config["activation_fn"].is_null()) named = {{config["activation_fn"], st_file}};
  }
  if (!named) {
    const json config = read_json_object(hf_file);
    if (config.contains("sbert_ce_default_activation_function") && !config["sbert_ce_default_activation_function"].is_null())
      named = {{config["sbert_ce_default_activation_function"], hf_file}};
    else if (config.contains("sentence_transformers") && config["sentence_transformers"].is_object() &&
             config["sentence_transformers"].contains("activation_fn"))
      named = {{config["sentence_transformers"]["activation_fn"], hf_file}};
  }
  if (!named) return;
  const auto it = named->first.is_string() ? kActivationClasses.find(named->first.get<std::string>())
                                           : kActivationClasses.end();
  if (it == kActivationClasses.end())
    fail(named->second, "activation function " + named->first.dump() +
                            " is not implemented (embed-train scores with Sigmoid, Identity or Tanh)");
  layout.activation = it->second;
}

// config_sentence_transformers.json's "prompts" and "default_prompt_name", when it has them.
void read_prompts(ModelFolderLayout& layout, const json& config, const fs::path& file) {
  const auto prompts = config.find("prompts");
  if (prompts != config.end() && !prompts->is_null()) {
    if (!prompts->is_object()) fail(file, "prompts must be an object of names and texts, not " + prompts->dump());
    for (const auto& item : prompts->items()) {
      if (!item.value().is_string())
        fail(file, "prompts." + item.key() + " must be a string, not " + item.value().dump());
      layout.prompts[item.key()] = item.value().get<std::string>();
    }
  }
  const auto name = config.find("default_prompt_name");
  if (name != config.end() && !name->is_null()) {
    if (!name->is_string() || !layout.prompts.count(name->get<std::string>()))
      fail(file, "default_prompt_name " + name->dump() + " is not one of its prompts");
    layout.default_prompt_name = name->get<std::string>();
  }
}

// A SparseEncoder's config_sentence_transformers.json "max_active_dims": a positive
// integer, or absent or null (every entry).
void read_max_active_dims(ModelFolderLayout& layout, const json& config, const fs::path& file) {
  const auto it = config.find("max_active_dims");
  if (it == config.end() || it->is_null()) return;
  if (!it->is_number_integer() || it->get<int64_t>() <= 0)
    fail(file, "max_active_dims " + it->dump() + ": expected a positive integer (or null: every entry)");
  layout.max_active_dims = it->get<int64_t>();
}

}  // namespace

ModelFolderLayout read_model_folder_layout(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root))
    throw ModelError("model folder " + dir + (fs::exists(root) ? " is not a folder" : " does not exist"));
  ModelFolderLayout layout;
  layout.dir = dir;
  if (fs::exists(root / "modules.json"))
    read_sentence_transformers_folder(layout, root);
  else if (fs::exists(root / "config.json"))
    layout.cross_encoder = read_transformer(layout, root, hugging_face_conversion(root));
  else
    fail(root, "not a model folder: it has neither modules.json (a sentence-transformers folder) nor config.json "
               "(a Hugging Face folder: config.json, model.safetensors and the tokenizer files)");
  // config_sentence_transformers.json, read once: its prompts, and a sparse encoder's top k.
  if (const fs::path file = root / "config_sentence_transformers.json"; fs::exists(file)) {
    const json config = read_json_object(file);
    read_prompts(layout, config, file);
    if (layout.sparse) read_max_active_dims(layout, config, file);
  }
  if (layout.cross_encoder) read_activation(layout, root);
  return layout;
}

}  // namespace ddp_embed
