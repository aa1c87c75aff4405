// The error of lib/config: a config file, key or value that cannot be used, its message
// naming the file, the key, the bad value and the fix (config/config.h says more).
#pragma once

#include <stdexcept>

namespace ddp_embed {

struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddp_embed
