#include "util/hash.h"

#include <cstdio>
#include <new>

// The header alone, its functions compiled here: no library to link or carry.
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace ddp_embed {

std::string hash_hex(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

uint64_t xxh3_64(const void* data, std::size_t size) { return XXH3_64bits(data, size); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  if (!state_) throw std::bad_alloc();
  reset();
}
Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }
void Xxh3Stream::update(const void* data, std::size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}
uint64_t Xxh3Stream::digest() const { return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_)); }
void Xxh3Stream::reset() { XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_)); }

}  // namespace ddp_embed
