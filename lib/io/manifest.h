// The manifest of a training checkpoint (manifest.json), without LibTorch; the kept best
// model folder (OUTPUT_DIR/best, output.keep_best) carries one too.
//
//   {"format": "ddp-embed checkpoint", "version": 1,
//    "files": {"model.safetensors": {"bytes": 1234, "fnv1a64": "<16 hex digits>"}, ...}}
//
// It is written last into a checkpoint folder and lists the size and FNV-1a 64 checksum
// of every other file; a folder whose files do not match it is incomplete or corrupt.
// The manifest is read from disk on resume, so parse_manifest() treats it as hostile
// input: every failure is a ManifestError "PATH: what", never a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "util/hash.h"

namespace ddp_embed {

struct ManifestError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ManifestEntry {
  uint64_t bytes = 0;
  std::string fnv1a64;  // 16 lower-case hex digits, as hash_hex() writes them
};

struct CheckpointManifest {
  std::map<std::string, ManifestEntry> files;  // by file name inside the checkpoint
};

// FNV-1a 64 (util/hash.h, from FNV's offset basis) of a whole file. Throws ManifestError
// "PATH: cannot open".
uint64_t fnv1a64_file(const std::string& path);

// The manifest of `names` inside `dir` as they are now (sizes and checksums).
CheckpointManifest describe_files(const std::string& dir, const std::vector<std::string>& names);

// manifest.json's text for `manifest` (indented, newline-terminated).
std::string manifest_text(const CheckpointManifest& manifest);

// Parses manifest.json's text; `origin` names it in errors. Each name in `required`
// must be listed. Throws ManifestError "ORIGIN: what".
CheckpointManifest parse_manifest(std::string_view text, const std::string& origin,
                                  const std::vector<std::string>& required);

// Reads DIR/manifest.json and checks that each required file exists with the listed
// size and checksum. Throws ManifestError naming the manifest or the file at fault:
//   DIR/manifest.json: missing (incomplete checkpoint)
//   DIR/manifest.json: does not list optimizer.safetensors
//   DIR/model.safetensors: size 12 does not match the manifest
//   DIR/model.safetensors: checksum does not match the manifest (corrupt file)
void verify_manifest(const std::string& dir, const std::vector<std::string>& required);

// The manifest of every regular file under `dir`, in its subfolders too ("1_Pooling/
// config.json"), but manifest.json: for a folder whose files are not known in advance.
CheckpointManifest describe_folder(const std::string& dir);

// verify_manifest() of every file DIR/manifest.json lists; each name in `required` must be
// listed. A listed name that leaves DIR (absolute, or with a ".." part) is refused. Throws
// ManifestError as verify_manifest() does.
void verify_folder_manifest(const std::string& dir, const std::vector<std::string>& required);

}  // namespace ddp_embed
