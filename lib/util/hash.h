// The project's small hashes, one copy each:
//   FNV-1a 64   behind every hash the project records or compares (checkpoint manifests,
//               prepared folders, text hashes, config and tensor checksums);
//   mix64       splitmix64's finalizer, a good 64-bit mix (the data order's generator and
//               permutation, and the last step of a text hash).
//   XXH3-64     xxHash's (the libxxhash library): the prepared folders' array checksums,
//               which a run verifies over gigabytes at every start. FNV-1a goes a byte at a
//               time (0.2 GB/s here); XXH3 runs at memory bandwidth (12 GB/s of a 1 GiB
//               buffer on one core of this project's 2-core machine, where a memcpy makes
//               7.3), so the check costs what reading the data costs.
//
// FNV-1a:
// Two starting values are in use, and both stay: hashes made from them are on disk.
//   kFnv1a64Offset        FNV's offset basis (14695981039346656037): checkpoint manifests
//                         (io/manifest.h), so that any FNV-1a tool checks their files.
//   kFnv1a64ShortOffset   1469598103934665603, the offset basis with its last digit lost,
//                         as every other hash has started since its first version: config
//                         hashes, text hashes (data/pairs.h, recorded in prepared folders),
//                         prepared folders' fingerprints and tensor checksums. Any start
//                         gives a hash as good; changing it would make every prepared
//                         folder stale.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ddp_embed {

constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ULL;
constexpr uint64_t kFnv1a64ShortOffset = 1469598103934665603ULL;
constexpr uint64_t kFnv1a64Prime = 0x100000001b3ULL;

// One step: `value` (a byte, or a 64-bit word where a hash takes words) mixed into `hash`.
constexpr uint64_t fnv1a64_mix(uint64_t hash, uint64_t value) { return (hash ^ value) * kFnv1a64Prime; }

// FNV-1a 64 of a byte range; `hash` continues an earlier call.
inline uint64_t fnv1a64(const void* data, std::size_t size, uint64_t hash = kFnv1a64Offset) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < size; ++i) hash = fnv1a64_mix(hash, bytes[i]);
  return hash;
}
inline uint64_t fnv1a64(std::string_view text, uint64_t hash = kFnv1a64Offset) {
  return fnv1a64(text.data(), text.size(), hash);
}

// 16 lower-case hex digits of any 64-bit hash (FNV-1a, XXH3), as manifests and prepared
// folders write one.
std::string hash_hex(uint64_t hash);

// XXH3-64 (seed 0) of a byte range, as `xxhsum -H3` prints it.
uint64_t xxh3_64(const void* data, std::size_t size);

// XXH3-64 of bytes that come in pieces (a file as it is written): the same value as
// xxh3_64 of all of them at once.
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, std::size_t size);
  uint64_t digest() const;
  void reset();

 private:
  void* state_;  // XXH3_state_t, kept out of this header
};

// splitmix64's finalizer (Steele, Lea and Flood's mix): every input bit reaches every
// output bit.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

}  // namespace ddp_embed
