#include "model/model_folder_files.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "util/file_check.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace ddp_embed::folder_files {

void fail(const fs::path& file, const std::string& what) { throw ModelError(file.string() + ": " + what); }

void write_json(const fs::path& path, const json& j) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) fail(path, "cannot write");
}

json read_json(const fs::path& path) {
  if (const std::string folder = folder_not_file(path.string(), "a JSON file"); !folder.empty())
    throw ModelError(folder);
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path, std::string("not valid JSON: ") + e.what());
  }
}

json read_json_object(const fs::path& path) {
  if (!fs::exists(path)) fail(path, "missing");
  json j = read_json(path);
  if (!j.is_object()) fail(path, "expected a JSON object");
  return j;
}

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

}  // namespace ddp_embed::folder_files
