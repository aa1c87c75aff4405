#include "tokenize/hf_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "util/file_check.h"

namespace ddp_embed {
namespace hf_files {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  if (const std::string folder = folder_not_file(path.string(), "a tokenizer file"); !folder.empty())
    throw TokenizerError(folder);
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TokenizerError("cannot open " + path.string() + ": " + std::strerror(errno));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw TokenizerError("cannot read " + path.string() + ": " + std::strerror(errno));
  return std::move(buffer).str();
}

void write_file(const fs::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw TokenizerError("cannot write " + path.string() + ": " + std::strerror(errno));
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) throw TokenizerError("cannot write " + path.string() + ": " + std::strerror(errno));
}

void make_dir(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw TokenizerError("cannot create " + dir.string() + ": " + ec.message());
}

std::optional<nlohmann::json> read_json_if_exists(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  const std::string text = read_file(path);
  nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object())
    throw TokenizerError(path.string() + ": not a JSON object");
  return value;
}

void write_json(const fs::path& path, const nlohmann::ordered_json& value) {
  write_file(path, value.dump(2) + "\n");
}

std::string token_name(const nlohmann::json& config, const char* key, const std::string& fallback) {
  auto it = config.find(key);
  if (it == config.end()) return fallback;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) {
    auto content = it->find("content");
    if (content != it->end() && content->is_string()) return content->get<std::string>();
  }
  return fallback;
}

bool bool_setting(const nlohmann::json& config, const char* key, bool fallback,
                  const std::string& source) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw TokenizerError(source + ": \"" + key + "\" must be true or false");
  return it->get<bool>();
}

MetaspacePrepend metaspace_prepend(const nlohmann::json& metaspace, const std::string& where) {
  const auto scheme = metaspace.find("prepend_scheme");
  if (scheme == metaspace.end() || scheme->is_null())
    return bool_setting(metaspace, "add_prefix_space", true, where) ? MetaspacePrepend::Always : MetaspacePrepend::Never;
  const std::string word = scheme->is_string() ? scheme->get<std::string>() : scheme->dump();
  if (word == "always") return MetaspacePrepend::Always;  // tokenizer.json's word, not a config choice
  if (word == "first") return MetaspacePrepend::First;    // tokenizer.json's word, not a config choice
  if (word == "never") return MetaspacePrepend::Never;    // tokenizer.json's word, not a config choice
  throw TokenizerError(where + ".prepend_scheme: \"" + word + "\" is not always, first or never");
}

int max_length_setting(const nlohmann::json& config, int fallback) {
  auto it = config.find("model_max_length");
  if (it == config.end() || !it->is_number_integer()) return fallback;
  const auto n = it->get<int64_t>();
  return (n > 0 && n <= (1 << 24)) ? static_cast<int>(n) : fallback;
}

void write_tokenizer_config(const fs::path& folder, nlohmann::ordered_json settings, int model_max_length,
                            const nlohmann::ordered_json& special_tokens) {
  settings["model_max_length"] = model_max_length;
  // Only affects decoding; said outright because recent transformers warn when it is missing.
  settings["clean_up_tokenization_spaces"] = true;
  settings.update(special_tokens);
  write_json(folder / "tokenizer_config.json", settings);
  write_json(folder / "special_tokens_map.json", special_tokens);
}

}  // namespace hf_files
}  // namespace ddp_embed
