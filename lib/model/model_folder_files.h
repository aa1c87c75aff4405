// The small JSON files of a model folder, for model_folder*.cpp alone: read and written
// with errors that name the file. Every error here is a ModelError.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "model/model_error.h"

namespace ddp_embed::folder_files {

// ModelError "FILE: what".
[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what);

// The JSON, indented, its folder made when missing.
void write_json(const std::filesystem::path& path, const nlohmann::json& j);
// A file's JSON; a folder at the path, an unreadable file or bad JSON is a ModelError.
nlohmann::json read_json(const std::filesystem::path& path);
// A module's config file: it must exist and hold a JSON object.
nlohmann::json read_json_object(const std::filesystem::path& path);

// A boolean key; `fallback` when absent or null (the constructor's default).
bool bool_key(const nlohmann::json& config, const char* key, bool fallback, const std::filesystem::path& file);
int64_t required_int_key(const nlohmann::json& config, const char* key, const std::filesystem::path& file);

// sentence-transformers' name for a Dense layer without activation, written spelled out
// (its Dense defaults to Tanh) and the only one read back.
constexpr const char* kIdentity = "torch.nn.modules.linear.Identity";

}  // namespace ddp_embed::folder_files
