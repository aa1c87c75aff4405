// parse_manifest() on arbitrary bytes: a ManifestError naming the manifest, or a
// manifest that manifest_text() writes back and parse_manifest() reads unchanged.
#include <string>

#include "fuzz_targets.h"
#include "io/manifest.h"

namespace ddp_embed::fuzz {
namespace {

const char* const kManifestOrigin = "step-1/manifest.json";
const std::vector<std::string> kCheckpointFiles = {"model.safetensors", "optimizer.safetensors",
                                                   "state.json"};

bool same(const CheckpointManifest& a, const CheckpointManifest& b) {
  if (a.files.size() != b.files.size()) return false;
  for (const auto& [name, entry] : a.files) {
    const auto it = b.files.find(name);
    if (it == b.files.end() || it->second.bytes != entry.bytes || it->second.fnv1a64 != entry.fnv1a64)
      return false;
  }
  return true;
}

}  // namespace

int fuzz_manifest(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckpointManifest manifest;
  try {
    manifest = parse_manifest(text, kManifestOrigin, {});
  } catch (const ManifestError& e) {
    const std::string message = e.what();
    if (message.rfind(std::string(kManifestOrigin) + ": ", 0) != 0) fail("error without the file name: " + message);
    return 0;
  }
  check(same(parse_manifest(manifest_text(manifest), kManifestOrigin, {}), manifest),
        "a manifest does not read back as written");
  bool complete = true;
  for (const auto& name : kCheckpointFiles) complete = complete && manifest.files.count(name) > 0;
  try {
    parse_manifest(text, kManifestOrigin, kCheckpointFiles);
    check(complete, "a manifest without every checkpoint file accepted");
  } catch (const ManifestError&) {
    check(!complete, "a manifest that lists every checkpoint file refused");
  }
  return 0;
}

}  // namespace ddp_embed::fuzz
