#include "io/manifest.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util/file_check.h"
#include "util/json_input.h"
#include "util/text.h"

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kManifestFormat = "ddp-embed checkpoint";
constexpr int kManifestVersion = 1;
// A manifest lists a handful of files in a few hundred bytes. Anything far larger, or
// nested deeper than {"files": {NAME: {...}}}, is not one: refused before it is held in
// memory or parsed.
constexpr std::size_t kMaxManifestBytes = 1 << 20;
constexpr int kMaxDepth = 8;

[[noreturn]] void fail_manifest(const std::string& origin, const std::string& what) {
  throw ManifestError(origin + ": " + what);
}

// Up to kMaxManifestBytes + 1 bytes of `path`: enough to tell that it is too large.
std::string read_manifest_file(const std::string& path) {
  if (!folder_not_file(path, "a file").empty()) fail_manifest(path, "a folder, not a file (a damaged checkpoint)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_manifest(path, "missing (incomplete checkpoint)");
  std::string text(kMaxManifestBytes + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) fail_manifest(path, std::string("read error: ") + std::strerror(errno));
  text.resize(static_cast<std::size_t>(in.gcount()));
  return text;
}

bool is_lower_hex64(const std::string& s) {
  if (s.size() != 16) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

ManifestEntry parse_entry(const json& value, const std::string& origin, const std::string& name) {
  const std::string where = "files." + json_quoted(name);
  if (!value.is_object()) fail_manifest(origin, where + " must be an object, got " + value.type_name());
  ManifestEntry entry;
  const auto bytes = value.find("bytes");
  if (bytes == value.end() || !bytes->is_number_unsigned())
    fail_manifest(origin, where + ".bytes must be a non-negative integer");
  entry.bytes = bytes->get<uint64_t>();
  const auto checksum = value.find("fnv1a64");
  if (checksum == value.end() || !checksum->is_string() ||
      !is_lower_hex64(checksum->get<std::string>()))
    fail_manifest(origin, where + ".fnv1a64 must be 16 lower-case hex digits");
  entry.fnv1a64 = checksum->get<std::string>();
  return entry;
}

}  // namespace

uint64_t fnv1a64_file(const std::string& path) {
  if (!folder_not_file(path, "a file").empty()) fail_manifest(path, "a folder, not a file (a damaged checkpoint)");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_manifest(path, "cannot open");
  uint64_t hash = kFnv1a64Offset;
  std::vector<char> buffer(1 << 16);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    hash = fnv1a64(buffer.data(), static_cast<std::size_t>(in.gcount()), hash);
  }
  if (in.bad()) fail_manifest(path, std::string("read error: ") + std::strerror(errno));
  return hash;
}

CheckpointManifest describe_files(const std::string& dir, const std::vector<std::string>& names) {
  CheckpointManifest manifest;
  for (const auto& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    std::error_code ec;
    const auto bytes = fs::file_size(path, ec);
    if (ec) fail_manifest(path, "cannot read its size: " + ec.message());
    manifest.files[name] = ManifestEntry{bytes, hash_hex(fnv1a64_file(path))};
  }
  return manifest;
}

std::string manifest_text(const CheckpointManifest& manifest) {
  json files = json::object();
  for (const auto& [name, entry] : manifest.files)
    files[name] = {{"bytes", entry.bytes}, {"fnv1a64", entry.fnv1a64}};
  const json j = {{"format", kManifestFormat}, {"version", kManifestVersion}, {"files", files}};
  return j.dump(2) + "\n";
}

CheckpointManifest parse_manifest(std::string_view text, const std::string& origin,
                                  const std::vector<std::string>& required) {
  if (text.size() > kMaxManifestBytes)
    fail_manifest(origin, "larger than " + std::to_string(kMaxManifestBytes) + " bytes: not a checkpoint manifest");
  if (json_nesting_depth(text) > kMaxDepth) fail_manifest(origin, "nested too deeply: not a checkpoint manifest");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    const JsonTextError error = find_json_error(text);
    fail_manifest(origin, "not valid JSON at byte " + std::to_string(error.byte) + ": " + error.reason);
  }
  const auto files = j.is_object() ? j.find("files") : j.end();
  if (!j.is_object() || files == j.end() || !files->is_object()) fail_manifest(origin, "no \"files\" object");

  CheckpointManifest manifest;
  for (const auto& [name, value] : files->items()) manifest.files[name] = parse_entry(value, origin, name);
  for (const auto& name : required)
    if (manifest.files.count(name) == 0) fail_manifest(origin, "does not list " + name);
  return manifest;
}

namespace {

// Each of `names` inside `dir` against `manifest`, which lists them.
void verify_manifest_entries(const std::string& dir, const CheckpointManifest& manifest,
                             const std::vector<std::string>& names) {
  for (const auto& name : names) {
    const std::string path = (fs::path(dir) / name).string();
    const ManifestEntry& entry = manifest.files.at(name);
    std::error_code ec;
    const auto size = fs::file_size(path, ec);
    if (ec) fail_manifest(path, "missing");
    if (size != entry.bytes)
      fail_manifest(path, "size " + std::to_string(size) + " does not match the manifest (" +
                     std::to_string(entry.bytes) + " bytes)");
    if (hash_hex(fnv1a64_file(path)) != entry.fnv1a64)
      fail_manifest(path, "checksum does not match the manifest (corrupt file)");
  }
}

}  // namespace

void verify_manifest(const std::string& dir, const std::vector<std::string>& required) {
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  verify_manifest_entries(dir, parse_manifest(read_manifest_file(manifest_path), manifest_path, required), required);
}

CheckpointManifest describe_folder(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string name = fs::relative(it->path(), dir).generic_string();
    if (it->is_regular_file() && name != "manifest.json") names.push_back(name);
  }
  if (ec) fail_manifest(dir, "cannot list its files: " + ec.message());
  return describe_files(dir, names);
}

void verify_folder_manifest(const std::string& dir, const std::vector<std::string>& required) {
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  const CheckpointManifest manifest = parse_manifest(read_manifest_file(manifest_path), manifest_path, required);
  std::vector<std::string> names;
  for (const auto& [name, entry] : manifest.files) {
    const fs::path p(name);
    if (name.empty() || p.is_absolute() || std::find(p.begin(), p.end(), fs::path("..")) != p.end())
      fail_manifest(manifest_path, "lists " + json_quoted(name) + ", which is not a file inside the folder");
    names.push_back(name);
  }
  verify_manifest_entries(dir, manifest, names);
}

}  // namespace ddp_embed
