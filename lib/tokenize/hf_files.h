// Reading and writing the small files that go with a Hugging Face tokenizer
// (tokenizer_config.json, special_tokens_map.json, the vocabulary). Every failure is a
// TokenizerError that names the file.
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "tokenize/tokenizer.h"

namespace ddp_embed {
namespace hf_files {

// The whole file; throws "cannot open PATH: <strerror>".
std::string read_file(const std::filesystem::path& path);
// Writes (replacing) the file; throws "cannot write PATH: <strerror>".
void write_file(const std::filesystem::path& path, std::string_view content);
// Creates the folder and its parents; throws naming it.
void make_dir(const std::filesystem::path& dir);

// The parsed JSON object in `path`, or nothing when the file does not exist.
std::optional<nlohmann::json> read_json_if_exists(const std::filesystem::path& path);
void write_json(const std::filesystem::path& path, const nlohmann::ordered_json& value);

// A special token's text from a tokenizer config: "unk_token": "[UNK]" or
// "unk_token": {"content": "[UNK]", ...}; `fallback` when absent.
std::string token_name(const nlohmann::json& config, const char* key, const std::string& fallback);

// A boolean setting; `fallback` when absent or null. Throws naming `source` on a non-bool.
bool bool_setting(const nlohmann::json& config, const char* key, bool fallback,
                  const std::string& source);

// A Metaspace pre-tokenizer's prepend_scheme: "always", "first" (only before the text's start,
// not after an added token) or "never"; files of tokenizers before 0.19 say add_prefix_space
// true or false instead. Throws "where.prepend_scheme: ..." for another word.
enum class MetaspacePrepend { Always, First, Never };
MetaspacePrepend metaspace_prepend(const nlohmann::json& metaspace, const std::string& where);

// tokenizer_config.json's model_max_length when it is a sane integer (Hugging Face writes
// 1e30 for "no limit"), else `fallback`.
int max_length_setting(const nlohmann::json& config, int fallback);

// What every tokenizer's save() writes beside its vocabulary: tokenizer_config.json, that
// is `settings` (the tokenizer class and its own options, in their order), then
// model_max_length, clean_up_tokenization_spaces and the special tokens; and
// special_tokens_map.json, the special tokens alone.
void write_tokenizer_config(const std::filesystem::path& folder, nlohmann::ordered_json settings,
                            int model_max_length, const nlohmann::ordered_json& special_tokens);

}  // namespace hf_files
}  // namespace ddp_embed
