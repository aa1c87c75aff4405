#include "model/model_folder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>
#include <vector>

#include "model/bert.h"
#include "model/lora.h"
#include "model/weights.h"
#include "tokenize/hf_files.h"
#include "tokenize/unicode.h"
#include "util/file_check.h"
#include "util/utf8.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddp_embed {
namespace {

// ---- small files ----------------------------------------------------------------------

[[noreturn]] void fail(const fs::path& file, const std::string& what) {
  throw std::runtime_error(file.string() + ": " + what);
}

void write_json(const fs::path& path, const json& j) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

json read_json(const fs::path& path) {
  if (const std::string folder = folder_not_file(path.string(), "a JSON file"); !folder.empty())
    throw std::runtime_error(folder);
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw std::runtime_error(path.string() + ": not valid JSON: " + e.what());
  }
}

// A module's config file: it must exist and hold a JSON object.
json read_json_object(const fs::path& path) {
  if (!fs::exists(path)) fail(path, "missing");
  json j = read_json(path);
  if (!j.is_object()) fail(path, "expected a JSON object");
  return j;
}

// A boolean key; `fallback` when absent or null (the constructor's default).
bool bool_key(const json& config, const char* key, bool fallback, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(file, std::string(key) + " must be true or false, not " + it->dump());
  return it->get<bool>();
}

int64_t required_int_key(const json& config, const char* key, const fs::path& file) {
  const auto it = config.find(key);
  if (it == config.end()) fail(file, std::string(key) + " is missing");
  if (!it->is_number_integer()) fail(file, std::string(key) + " must be an integer, not " + it->dump());
  return it->get<int64_t>();
}

// ---- writing: sentence-transformers' files ----------------------------------------------

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
json modules_json(bool with_dense, bool with_normalize) {
  auto module = [](int idx, const std::string& path, const std::string& type) {
    return json{{"idx", idx}, {"name", std::to_string(idx)}, {"path", path},
                {"type", "sentence_transformers.models." + type}};
  };
  json modules = json::array({module(0, "", "Transformer"), module(1, "1_Pooling", "Pooling")});
  if (with_dense) modules.push_back(module(2, "2_Dense", "Dense"));
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

constexpr const char* kIdentity = "torch.nn.modules.linear.Identity";

// Identity spelled out: sentence-transformers' Dense defaults to Tanh.
json dense_json(int64_t in_features, int64_t out_features) {
  return {{"in_features", in_features},
          {"out_features", out_features},
          {"bias", true},
          {"activation_function", kIdentity}};
}

json sentence_transformers_json(const ModelFolderOptions& options) {
  return {{"__version__", {{"sentence_transformers", kSentenceTransformersFormat}}},
          {"model_type", "SentenceTransformer"},
          {"prompts", json(options.prompts)},
          {"default_prompt_name", options.default_prompt_name ? json(*options.default_prompt_name) : json(nullptr)},
          {"similarity_fn_name", "cosine"}};
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
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// ---- reading: modules.json --------------------------------------------------------------

enum class ModuleKind { Transformer, Pooling, Dense, Normalize };

const char* kind_name(ModuleKind kind) {
  switch (kind) {
    case ModuleKind::Transformer: return "Transformer";
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
      {"sentence_transformers.base.modules.normalize.Normalize", ModuleKind::Normalize}};
  const auto it = kTypes.find(type);
  if (it == kTypes.end())
    fail(modules_file, "module type " + type +
                           " is not implemented (embed-train has sentence_transformers.models.Transformer (BERT, "
                           "XLM-RoBERTa or Qwen3), Pooling, Dense and Normalize)");
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

// embed-train's model is Transformer, Pooling, then optionally Dense, then optionally
// Normalize; sentence-transformers runs the modules in list order, so any other list
// would compute something else.
void check_module_chain(const std::vector<ModuleEntry>& modules, const fs::path& modules_file) {
  using K = ModuleKind;
  static const std::vector<std::vector<K>> kChains = {{K::Transformer, K::Pooling},
                                                      {K::Transformer, K::Pooling, K::Dense},
                                                      {K::Transformer, K::Pooling, K::Normalize},
                                                      {K::Transformer, K::Pooling, K::Dense, K::Normalize}};
  std::vector<K> kinds;
  std::string names;
  for (const auto& m : modules) {
    kinds.push_back(m.kind);
    names += (names.empty() ? "" : ", ") + std::string(kind_name(m.kind));
  }
  if (std::find(kChains.begin(), kChains.end(), kinds) != kChains.end()) return;
  fail(modules_file, "modules " + names +
                         ": embed-train runs Transformer, Pooling, Dense (optional), Normalize (optional), "
                         "each once and in this order");
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

// The encoder: config.json and model.safetensors; the tokenizer files are read later.
void read_transformer(ModelFolderLayout& layout, const fs::path& dir, const std::string& conversion) {
  if (!fs::is_directory(dir)) fail(dir, "the Transformer's folder does not exist");
  const fs::path config = dir / "config.json";
  if (!fs::exists(config)) fail(config, "missing (the encoder's architecture, a Hugging Face config.json)");
  layout.encoder = encoder_config_from_hf_json(config.string());
  require_safetensors(dir, conversion);
  layout.transformer_dir = dir.string();
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

ModelFolderLayout::Dense read_dense(const fs::path& dir, int64_t hidden_size, const fs::path& root) {
  const fs::path file = dir / "config.json";
  const json config = read_json_object(file);
  ModelFolderLayout::Dense dense;
  dense.dir = dir.string();
  dense.in_features = required_int_key(config, "in_features", file);
  dense.out_features = required_int_key(config, "out_features", file);
  if (dense.in_features != hidden_size)
    fail(file, "in_features " + std::to_string(dense.in_features) + " does not match the encoder's hidden_size " +
                   std::to_string(hidden_size) + " (the Dense layer takes the pooled embedding)");
  if (dense.out_features <= 0) fail(file, "out_features must be positive, not " + std::to_string(dense.out_features));
  if (!bool_key(config, "bias", true, file))
    fail(file, "bias false is not implemented (embed-train's projection has a bias)");
  if (bool_key(config, "use_residual", false, file)) fail(file, "use_residual true is not implemented");
  check_identity_activation(config, file);
  require_safetensors(dir, sentence_transformers_conversion(root));
  return dense;
}

void read_sentence_transformers_folder(ModelFolderLayout& layout, const fs::path& root) {
  const fs::path modules_file = root / "modules.json";
  layout.sentence_transformers = true;
  // check_module_chain put the Transformer first: the hidden size is known for the rest.
  for (const ModuleEntry& m : read_modules(modules_file)) {
    const fs::path dir = m.path.empty() ? root : root / m.path;
    switch (m.kind) {
      case ModuleKind::Transformer:
        read_transformer(layout, dir, sentence_transformers_conversion(root));
        read_sentence_bert_config(layout);
        break;
      case ModuleKind::Pooling:
        layout.pooling = read_pooling(dir / "config.json", layout.encoder.hidden_size(), layout.include_prompt);
        layout.pooling_config = (dir / "config.json").string();
        break;
      case ModuleKind::Dense:
        layout.dense = read_dense(dir, layout.encoder.hidden_size(), root);
        break;
      case ModuleKind::Normalize:
        layout.normalize = true;  // no parameters; 6.x's config.json only names its input
        break;
    }
  }
}

// ---- the tokenizer ------------------------------------------------------------------------

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

 private:
  std::unique_ptr<Tokenizer> inner_;
};

// ---- the weights ----------------------------------------------------------------------------

void load_dense_weights(SentenceEmbedder& model, const ModelFolderLayout::Dense& dense) {
  if (!model->projection || model->embedding_dim() != dense.out_features ||
      model->projection->options.in_features() != dense.in_features)
    throw std::logic_error("load_folder_weights: the model's projection does not have the shape of " + dense.dir);
  const fs::path file = fs::path(dense.dir) / "model.safetensors";
  try {
    load_module(*model->projection, file.string(), LoadOptions{{"linear."}});
  } catch (const WeightsError& e) {
    // The file's message names the tensor; say which shape the config promised.
    throw WeightsError(std::string(e.what()) + " (" + (fs::path(dense.dir) / "config.json").string() +
                       ": in_features " + std::to_string(dense.in_features) + ", out_features " +
                       std::to_string(dense.out_features) + ")");
  }
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
  write_json(tmp / "config.json", encoder.hf_config_json());
  // An encoder fine-tuned with LoRA is written with its adapters merged: a plain model.
  NamedTensors tensors = merged_tensors(encoder);
  for (const auto& item : options.carried)
    if (std::none_of(tensors.begin(), tensors.end(), [&](const auto& t) { return t.first == item.first; }))
      tensors.push_back(item);
  save_as_float32((tmp / "model.safetensors").string(), tensors);
  tokenizer.save(tmp.string());
  cap_tokenizer_max_length(tmp, config.max_length());
  write_json(tmp / "sentence_bert_config.json",
             {{"max_seq_length", options.max_length}, {"do_lower_case", options.lower_case_text}});

  // Module 1, Pooling; module 2, the projection as a Dense layer; then Normalize.
  write_json(tmp / "1_Pooling" / "config.json", pooling_json(config.hidden_size(), model->pooling()));
  if (model->projection) {
    write_json(tmp / "2_Dense" / "config.json", dense_json(config.hidden_size(), model->embedding_dim()));
    save_module(*model->projection, (tmp / "2_Dense" / "model.safetensors").string(), "linear.");
  }
  write_json(tmp / "modules.json", modules_json(static_cast<bool>(model->projection), options.normalize));
  write_json(tmp / "config_sentence_transformers.json", sentence_transformers_json(options));

  json info = extra;
  info["format"] = "ddp-embed model folder";
  info["format_version"] = 1;
  info["architecture"] = architecture_name(config.architecture);
  info["pooling"] = choice_name(model->pooling());
  info["projection_dim"] = model->projection ? model->embedding_dim() : 0;
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

// config_sentence_transformers.json's "prompts" and "default_prompt_name", when it has them.
static void read_prompts(ModelFolderLayout& layout, const fs::path& root) {
  const fs::path file = root / "config_sentence_transformers.json";
  if (!fs::exists(file)) return;
  const json config = read_json_object(file);
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

ModelFolderLayout read_model_folder_layout(const std::string& dir) {
  const fs::path root(dir);
  if (!fs::is_directory(root))
    throw std::runtime_error("model folder " + dir + (fs::exists(root) ? " is not a folder" : " does not exist"));
  ModelFolderLayout layout;
  layout.dir = dir;
  if (fs::exists(root / "modules.json"))
    read_sentence_transformers_folder(layout, root);
  else if (fs::exists(root / "config.json"))
    read_transformer(layout, root, hugging_face_conversion(root));
  else
    fail(root, "not a model folder: it has neither modules.json (a sentence-transformers folder) nor config.json "
               "(a Hugging Face folder: config.json, model.safetensors and the tokenizer files)");
  read_prompts(layout, root);
  return layout;
}

std::unique_ptr<Tokenizer> load_folder_tokenizer(const ModelFolderLayout& layout, bool lower_case_fallback) {
  auto tokenizer = load_tokenizer("auto", layout.transformer_dir, lower_case_fallback);
  const EncoderConfig& encoder = layout.encoder;
  if (tokenizer->vocab_size() > encoder.vocab_size())
    throw std::runtime_error(layout.transformer_dir + ": the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
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

NamedTensors carried_init_tensors(const ModelFolderLayout& init) {
  if (init.encoder.is_decoder()) return {};  // Qwen3Model has no pooler
  // A file's name for a tensor, as a BertModel / XLMRobertaModel file names it: the
  // prefixes of a *ForMaskedLM file stripped, as loading strips them.
  const auto plain = [](const std::string& name) {
    for (const char* prefix : {"bert.", "roberta."})
      if (name.rfind(prefix, 0) == 0) return name.substr(std::strlen(prefix));
    return name;
  };
  const auto wanted = [&](const std::string& name) { return plain(name).rfind("pooler.", 0) == 0; };
  const fs::path dir(init.transformer_dir);
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
    for (auto& [name, tensor] : load_tensors(file, wanted)) out.emplace_back(plain(name), tensor);
  return out;
}

LoadReport load_folder_weights(SentenceEmbedder& model, const ModelFolderLayout& layout) {
  // A Qwen3ForCausalLM file names its tensors "model.*" (and has an lm_head, unused); the
  // original XLM-R checkpoints (XLMRobertaForMaskedLM) "roberta.*".
  LoadOptions options;
  options.strip_prefixes = layout.encoder.is_decoder() ? std::vector<std::string>{"model."}
                                                       : std::vector<std::string>{"bert.", "roberta."};
  LoadReport report = load_module_from_folder(model->encoder(), layout.transformer_dir, options);
  if (layout.dense) load_dense_weights(model, *layout.dense);
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

  // Pooling: the argument, else the folder's Pooling module, else cls (plain encoder
  // folders) or lasttoken (decoders).
  const Pooling fallback = layout.encoder.is_decoder() ? Pooling::LastToken : Pooling::Cls;
  const Pooling pool = pooling ? *pooling : layout.pooling.value_or(fallback);
  out.model = SentenceEmbedder(layout.encoder, layout.dense ? layout.dense->out_features : 0, pool);
  load_folder_weights(out.model, layout);
  out.model->eval();
  return out;
}

FolderTokenizer load_model_folder_tokenizer(const std::string& dir) {
  const ModelFolderLayout layout = read_model_folder_layout(dir);
  return {load_folder_tokenizer(layout), folder_max_length(layout)};
}

}  // namespace ddp_embed
