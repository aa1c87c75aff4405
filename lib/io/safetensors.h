// safetensors files, read and written without LibTorch.
//
// Format (https://github.com/huggingface/safetensors): an 8-byte little-endian header
// length N, N bytes of JSON, then the raw little-endian tensor data. The JSON maps each
// tensor name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to
// the start of the data) and may hold "__metadata__", a map of strings to strings.
//
// read_safetensors() validates everything before handing out a byte: a truncated or
// hostile file is a SafetensorsError "PATH: what", never a crash or an out-of-bounds
// read. It refuses what Python's safetensors refuses: tensors that overlap, leave a gap
// or end before the file does (their data_offsets must tile the data). write_safetensors() writes atomically (temporary file, fsync, rename).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ddp_embed {

struct SafetensorsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class StDtype { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

// "F32" etc., as written in the header.
std::string_view st_dtype_name(StDtype dtype);
std::optional<StDtype> st_dtype_from_name(std::string_view name);
std::size_t st_dtype_size(StDtype dtype);  // bytes per element

// One tensor of a file that has been read. `data` points into the owning
// SafetensorsFile's buffer: valid while it lives, with no alignment promise (copy it out
// with memcpy).
struct StTensorView {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const std::byte* data;
  std::size_t nbytes;  // == numel(shape) * st_dtype_size(dtype), checked
};

class MappedFile;

class SafetensorsFile {
 public:
  const std::string& path() const { return path_; }
  // Every tensor, sorted by name.
  const std::vector<StTensorView>& tensors() const { return tensors_; }
  // nullptr when absent.
  const StTensorView* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // For a mapped file (read_safetensors): gives back the pages read so far, which stay in
  // the page cache. Called after each tensor is copied out, loading a file of several GB
  // holds one tensor's pages at a time, not the file's.
  void release_pages() const;

 private:
  friend SafetensorsFile read_safetensors(const std::string& path);
  friend SafetensorsFile parse_safetensors(std::vector<std::byte> bytes, const std::string& origin);
  // Validates the bytes [base_, base_ + size_) and fills tensors_ and metadata_.
  void parse();
  // The tensors tile the last `data_size` bytes of the file: no overlap, no gap, nothing
  // after the last one (the reference implementation's rules).
  void check_layout(std::size_t data_size) const;
  std::string path_;
  std::vector<std::byte> bytes_;              // the whole file (parse_safetensors), or
  std::shared_ptr<const MappedFile> mapped_;  // the file mapped (read_safetensors)
  const std::byte* base_ = nullptr;
  std::size_t size_ = 0;
  std::vector<StTensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// Maps the file read-only and validates it. Throws SafetensorsError.
SafetensorsFile read_safetensors(const std::string& path);

// Validates an in-memory image of a file; `origin` names it in errors.
SafetensorsFile parse_safetensors(std::vector<std::byte> bytes, const std::string& origin);

// A tensor to write: `data` must hold exactly numel(shape) * st_dtype_size(dtype) bytes.
struct StTensorToWrite {
  std::string name;
  StDtype dtype;
  std::vector<int64_t> shape;
  const void* data;
  std::size_t nbytes;
};

// Writes PATH atomically: PATH.tmp-<pid>, fsync, rename over PATH, fsync the folder.
// Tensors are laid out sorted by name; the header is padded with spaces to a multiple of
// 8 bytes (as the reference implementation does) so the data starts 8-byte aligned.
// Throws SafetensorsError on a bad tensor (duplicate name, size mismatch) or an I/O error.
void write_safetensors(const std::string& path, const std::vector<StTensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace ddp_embed
