// The one error type of lib/model: a model that cannot be built, read or run as asked
// (a folder's files, a config field, a tensor's shape or dtype, a loss's inputs). Its
// message says what and where, and how to mend it where the caller can.
#pragma once

#include <stdexcept>

namespace ddp_embed {

struct ModelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace ddp_embed
