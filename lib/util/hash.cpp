#include "util/hash.h"

#include <cstdio>

namespace ddp_embed {

std::string fnv1a64_hex(uint64_t hash) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

}  // namespace ddp_embed
