#include "model/model_folder.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "model/bert.h"
#include "model/weights.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

void write_json(const fs::path& path, const nlohmann::json& j) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": not valid JSON: " + e.what());
  }
}

// sentence-transformers passes each module's config.json to the module's constructor as
// keyword arguments: a key the installed release does not know is a TypeError, a key
// left out takes the constructor's default. So the writers below give exactly the keys
// that every release since kSentenceTransformersFormat accepts.
//
// That release is the first to read every key written here ("similarity_fn_name" in
// config_sentence_transformers.json, "include_prompt" in 1_Pooling/config.json); an
// older one warns that the folder was made for a newer release.
constexpr const char* kSentenceTransformersFormat = "3.0.0";

nlohmann::json modules_json(bool with_dense) {
  auto module = [](int idx, const std::string& path, const std::string& type) {
    return nlohmann::json{{"idx", idx}, {"name", std::to_string(idx)}, {"path", path},
                          {"type", "sentence_transformers.models." + type}};
  };
  nlohmann::json modules = nlohmann::json::array({module(0, "", "Transformer"), module(1, "1_Pooling", "Pooling")});
  if (with_dense) modules.push_back(module(2, "2_Dense", "Dense"));
  return modules;
}

nlohmann::json pooling_json(int64_t hidden_size, Pooling pooling) {
  const bool mean = pooling == Pooling::Mean;
  return {{"word_embedding_dimension", hidden_size},
          {"pooling_mode_cls_token", !mean},
          {"pooling_mode_mean_tokens", mean},
          {"pooling_mode_max_tokens", false},
          {"pooling_mode_mean_sqrt_len_tokens", false},
          {"pooling_mode_weightedmean_tokens", false},
          {"pooling_mode_lasttoken", false},
          {"include_prompt", true}};
}

// Identity spelled out: sentence-transformers' Dense defaults to Tanh.
nlohmann::json dense_json(int64_t in_features, int64_t out_features) {
  return {{"in_features", in_features},
          {"out_features", out_features},
          {"bias", true},
          {"activation_function", "torch.nn.modules.linear.Identity"}};
}

nlohmann::json sentence_transformers_json() {
  return {{"__version__", {{"sentence_transformers", kSentenceTransformersFormat}}},
          {"model_type", "SentenceTransformer"},
          {"prompts", nlohmann::json::object()},
          {"default_prompt_name", nullptr},
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

}  // namespace

void save_model_folder(const std::string& dir, SentenceEmbedder& model, const Tokenizer& tokenizer,
                       int max_length, const nlohmann::json& extra) {
  const fs::path final_dir(dir);
  const fs::path tmp = final_dir.string() + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);

  // Module 0, the Transformer: a Hugging Face BERT folder with its tokenizer.
  const BertConfig& bert = model->bert->config();
  write_json(tmp / "config.json", bert.to_hf_json());
  save_module(*model->bert, (tmp / "model.safetensors").string());
  tokenizer.save(tmp.string());
  cap_tokenizer_max_length(tmp, bert.max_position);
  write_json(tmp / "sentence_bert_config.json", {{"max_seq_length", max_length}, {"do_lower_case", false}});

  // Module 1, Pooling; module 2, the projection as a Dense layer.
  write_json(tmp / "1_Pooling" / "config.json", pooling_json(bert.hidden_size, model->pooling()));
  if (model->projection) {
    write_json(tmp / "2_Dense" / "config.json", dense_json(bert.hidden_size, model->embedding_dim()));
    save_module(*model->projection, (tmp / "2_Dense" / "model.safetensors").string(), "linear.");
  }
  write_json(tmp / "modules.json", modules_json(static_cast<bool>(model->projection)));
  write_json(tmp / "config_sentence_transformers.json", sentence_transformers_json());

  nlohmann::json info = extra;
  info["format"] = "ddp-embed model folder";
  info["format_version"] = 1;
  info["pooling"] = pooling_name(model->pooling());
  info["projection_dim"] = model->projection ? model->embedding_dim() : 0;
  info["tokenizer"] = {{"type", tokenizer.type()}, {"max_length", max_length}};
  write_json(tmp / "embed_train.json", info);

  // Swap in: the old folder (if any) moves aside first and is removed only after the
  // new one is in place, so a crash leaves one complete folder under some name.
  const fs::path old = final_dir.string() + ".old-" + std::to_string(::getpid());
  if (fs::exists(final_dir)) fs::rename(final_dir, old);
  fs::rename(tmp, final_dir);
  fs::remove_all(old);
}

LoadedModel load_model_folder(const std::string& dir, const std::string& pooling) {
  const fs::path root(dir);
  if (!fs::is_directory(root)) throw std::runtime_error("model folder " + dir + " does not exist");
  for (const char* required : {"config.json", "model.safetensors"})
    if (!fs::exists(root / required))
      throw std::runtime_error(dir + ": not a model folder (no " + required +
                               "; expected a folder written by embed-train or a Hugging Face BERT folder)");

  LoadedModel out;
  const BertConfig bert = BertConfig::from_hf_json((root / "config.json").string());

  // Pooling: the argument, else 1_Pooling/config.json, else cls (plain BERT folders).
  std::string pool_name = pooling;
  if (pool_name.empty() && fs::exists(root / "1_Pooling" / "config.json")) {
    const auto pc = read_json(root / "1_Pooling" / "config.json");
    pool_name = pc.value("pooling_mode_mean_tokens", false) ? "mean" : "cls";
  }
  if (pool_name.empty()) pool_name = "cls";

  int64_t projection_dim = 0;
  const fs::path dense = root / "2_Dense";
  if (fs::exists(dense / "config.json")) {
    const auto dc = read_json(dense / "config.json");
    const std::string act = dc.value("activation_function", "torch.nn.modules.activation.Tanh");
    if (act != "torch.nn.modules.linear.Identity")
      throw std::runtime_error((dense / "config.json").string() + ": activation_function " + act +
                               " is not supported (only torch.nn.modules.linear.Identity)");
    projection_dim = dc.at("out_features").get<int64_t>();
  }

  out.model = SentenceEmbedder(bert, projection_dim, parse_pooling(pool_name));
  load_module(*out.model->bert, (root / "model.safetensors").string());
  if (projection_dim > 0)
    load_module(*out.model->projection, (dense / "model.safetensors").string(), LoadOptions{{"linear."}});
  out.model->eval();

  const bool sentencepiece = fs::exists(root / "spiece.model");
  out.tokenizer = load_tokenizer(sentencepiece ? "sentencepiece" : "wordpiece", dir);

  out.max_length = static_cast<int>(bert.max_position);
  if (fs::exists(root / "sentence_bert_config.json")) {
    const auto sc = read_json(root / "sentence_bert_config.json");
    out.max_length = sc.value("max_seq_length", out.max_length);
  } else if (fs::exists(root / "tokenizer_config.json")) {
    const auto tc = read_json(root / "tokenizer_config.json");
    if (tc.contains("model_max_length") && tc["model_max_length"].is_number_integer())
      out.max_length = std::min<int>(out.max_length, tc["model_max_length"].get<int>());
  }
  out.max_length = std::min<int>(out.max_length, static_cast<int>(bert.max_position));
  return out;
}

}  // namespace ddp_embed
