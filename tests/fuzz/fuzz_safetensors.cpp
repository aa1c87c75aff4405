// parse_safetensors() on arbitrary bytes: a SafetensorsError or a file whose every
// tensor lies inside it, with the size its shape and dtype say.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_targets.h"
#include "io/manifest.h"
#include "io/safetensors.h"

namespace ddp_embed::fuzz {
namespace {

void check_tensor(const SafetensorsFile& file, const StTensorView& t) {
  uint64_t bytes = st_dtype_size(t.dtype);
  for (int64_t d : t.shape) {
    check(d >= 0, "a negative dimension");
    check(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), "the size of a shape overflows");
  }
  if (bytes != t.nbytes) fail("tensor " + t.name + ": nbytes != numel * itemsize");
  check(st_dtype_from_name(st_dtype_name(t.dtype)) == t.dtype, "dtype name does not round-trip");
  if (file.find(t.name) != &t) fail("find() does not return tensor " + t.name);
  // Reads every byte: AddressSanitizer reports a view that reaches outside the file.
  (void)fnv1a64(t.data, t.nbytes);
}

}  // namespace

int fuzz_safetensors(const uint8_t* data, size_t size) {
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  SafetensorsFile file;
  try {
    file = parse_safetensors(std::vector<std::byte>(bytes, bytes + size), "fuzz.safetensors");
  } catch (const SafetensorsError&) {
    return 0;
  }
  const auto& tensors = file.tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (i > 0) check(tensors[i - 1].name < tensors[i].name, "tensors are not sorted by unique names");
    check(tensors[i].name != "__metadata__", "__metadata__ taken for a tensor");
    check_tensor(file, tensors[i]);
  }
  return 0;
}

}  // namespace ddp_embed::fuzz
