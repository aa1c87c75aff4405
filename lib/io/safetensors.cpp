#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "util/json_input.h"
#include "util/mapped_file.h"

namespace ddp_embed {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
// A header is a flat object of small objects; deeper nesting can only be an attack on the
// JSON parser's stack.
constexpr int kMaxJsonDepth = 8;

struct DtypeInfo {
  StDtype dtype;
  const char* name;
  std::size_t size;
};
constexpr DtypeInfo kDtypes[] = {
    {StDtype::F64, "F64", 8}, {StDtype::F32, "F32", 4}, {StDtype::F16, "F16", 2},
    {StDtype::BF16, "BF16", 2}, {StDtype::I64, "I64", 8}, {StDtype::I32, "I32", 4},
    {StDtype::I16, "I16", 2},   {StDtype::I8, "I8", 1},   {StDtype::U8, "U8", 1},
    {StDtype::BOOL, "BOOL", 1},
};

const DtypeInfo& info(StDtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  throw SafetensorsError("unknown safetensors dtype");
}

[[noreturn]] void fail_safetensors(const std::string& origin, const std::string& what) {
  throw SafetensorsError(origin + ": " + what);
}

std::string sys_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// A JSON number that must be a non-negative integer fitting in int64.
int64_t non_negative_int(const nlohmann::json& v, const std::string& origin, const std::string& what) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail_safetensors(origin, what + " " + std::to_string(u) + " is too large");
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) fail_safetensors(origin, what + " " + v.dump() + " is negative");
  fail_safetensors(origin, what + " must be a non-negative integer, not " + v.dump());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel * itemsize, or nullopt on overflow.
std::optional<std::size_t> byte_size(const std::vector<int64_t>& shape, std::size_t itemsize) {
  uint64_t n = itemsize;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (d != 0 && n > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      return std::nullopt;
    n *= static_cast<uint64_t>(d);
  }
  if (n > std::numeric_limits<std::size_t>::max()) return std::nullopt;
  return static_cast<std::size_t>(n);
}

void write_all(int fd, const void* data, std::size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail_safetensors(path, sys_error("write error"));
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

}  // namespace

std::string_view st_dtype_name(StDtype dtype) { return info(dtype).name; }
std::size_t st_dtype_size(StDtype dtype) { return info(dtype).size; }

std::optional<StDtype> st_dtype_from_name(std::string_view name) {
  for (const auto& i : kDtypes)
    if (name == i.name) return i.dtype;
  return std::nullopt;
}

const StTensorView* SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const StTensorView& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

SafetensorsFile read_safetensors(const std::string& path) {
  SafetensorsFile file;
  file.path_ = path;
  // The errors a read would give, named as the other errors here are ("PATH: ...").
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail_safetensors(path, sys_error("cannot open"));
  struct stat st {};
  const bool directory = ::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode);
  ::close(fd);
  if (directory) fail_safetensors(path, "is a folder, not a safetensors file");
  std::shared_ptr<const MappedFile> mapped;
  try {
    mapped = std::make_shared<const MappedFile>(path, /*random_access=*/false);
  } catch (const std::exception& e) {
    fail_safetensors(path, e.what());
  }
  file.mapped_ = mapped;
  file.base_ = static_cast<const std::byte*>(mapped->data());
  file.size_ = mapped->size();
  file.parse();
  return file;
}

SafetensorsFile parse_safetensors(std::vector<std::byte> bytes, const std::string& origin) {
  SafetensorsFile file;
  file.path_ = origin;
  file.bytes_ = std::move(bytes);
  file.base_ = file.bytes_.data();
  file.size_ = file.bytes_.size();
  file.parse();
  return file;
}

void SafetensorsFile::release_pages() const {
  if (mapped_) mapped_->release_pages();
}

void SafetensorsFile::parse() {
  SafetensorsFile& file = *this;
  const std::string& origin = path_;
  const std::size_t size = size_;
  if (size < 8) fail_safetensors(origin, "too short for a safetensors file (" + std::to_string(size) + " bytes)");

  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | std::to_integer<uint64_t>(base_[i]);
  if (header_len > kMaxHeaderBytes)
    fail_safetensors(origin, "header length " + std::to_string(header_len) + " exceeds the 100 MB limit");
  if (header_len > size - 8)
    fail_safetensors(origin, "header length " + std::to_string(header_len) + " runs past the end of the file (" +
                     std::to_string(size) + " bytes)");

  const char* header = reinterpret_cast<const char*>(base_ + 8);
  const std::string_view header_text(header, static_cast<std::size_t>(header_len));
  if (json_nesting_depth(header_text) > kMaxJsonDepth) fail_safetensors(origin, "header JSON is nested too deeply");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header_text);
  } catch (const nlohmann::json::exception&) {
    const JsonTextError error = find_json_error(header_text);
    fail_safetensors(origin, "header is not valid JSON at byte " + std::to_string(8 + error.byte - 1) + " of the file: " +
                     error.reason);
  }
  if (!j.is_object()) fail_safetensors(origin, "header is not a JSON object");

  const std::size_t data_begin = 8 + static_cast<std::size_t>(header_len);
  const std::size_t data_size = size - data_begin;
  for (const auto& [name, entry] : j.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail_safetensors(origin, "__metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail_safetensors(origin, "__metadata__ value of \"" + key + "\" is not a string");
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string what = "tensor \"" + name + "\"";
    if (!entry.is_object()) fail_safetensors(origin, what + ": entry is not an object");
    const auto dt = entry.find("dtype");
    const auto sh = entry.find("shape");
    const auto off = entry.find("data_offsets");
    if (dt == entry.end() || sh == entry.end() || off == entry.end())
      fail_safetensors(origin, what + ": needs dtype, shape and data_offsets");
    if (!dt->is_string()) fail_safetensors(origin, what + ": dtype is not a string");
    const auto dtype = st_dtype_from_name(dt->get<std::string>());
    if (!dtype) fail_safetensors(origin, what + ": unsupported dtype " + dt->get<std::string>());
    if (!sh->is_array()) fail_safetensors(origin, what + ": shape is not an array");
    std::vector<int64_t> shape;
    for (const auto& d : *sh) shape.push_back(non_negative_int(d, origin, what + ": dimension"));
    if (!off->is_array() || off->size() != 2) fail_safetensors(origin, what + ": data_offsets is not [begin, end]");
    const int64_t begin = non_negative_int((*off)[0], origin, what + ": data offset");
    const int64_t end = non_negative_int((*off)[1], origin, what + ": data offset");
    if (begin > end)
      fail_safetensors(origin, what + ": data_offsets begin " + std::to_string(begin) + " > end " + std::to_string(end));
    if (static_cast<uint64_t>(end) > data_size)
      fail_safetensors(origin, what + ": data_offsets end " + std::to_string(end) + " runs past the data (" +
                       std::to_string(data_size) + " bytes)");
    const auto nbytes = byte_size(shape, info(*dtype).size);
    if (!nbytes) fail_safetensors(origin, what + ": shape " + shape_text(shape) + " overflows");
    if (*nbytes != static_cast<std::size_t>(end - begin))
      fail_safetensors(origin, what + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") hold " +
                       std::to_string(end - begin) + " bytes, shape " + shape_text(shape) + " " +
                       std::string(st_dtype_name(*dtype)) + " needs " + std::to_string(*nbytes));
    file.tensors_.push_back(StTensorView{name, *dtype, std::move(shape),
                                         base_ + data_begin + begin, *nbytes});
  }
  check_layout(data_size);
  // nlohmann's object is a sorted map already; sort anyway so find() never depends on it.
  std::sort(file.tensors_.begin(), file.tensors_.end(),
            [](const StTensorView& a, const StTensorView& b) { return a.name < b.name; });
}

void SafetensorsFile::check_layout(std::size_t data_size) const {
  // Python's safetensors (Metadata::validate, and read_metadata's last check): the
  // tensors, in the order of their data_offsets, tile the data: the first begins at 0,
  // each where the one before it ends, the last at its end. Overlapping tensors (two
  // names for the same bytes, which training would then update twice), gaps and bytes
  // after the last tensor are all refused there, so they are here. The order of the names
  // in the header does not matter, nor the data's alignment (a header whose length is not
  // a multiple of 8 is read as Python reads it).
  const std::byte* data = base_ + (size_ - data_size);
  std::vector<const StTensorView*> by_offset;
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](const StTensorView* a, const StTensorView* b) {
    return std::make_pair(a->data, a->data + a->nbytes) < std::make_pair(b->data, b->data + b->nbytes);
  });
  auto range = [&](const StTensorView& t) {
    return "[" + std::to_string(t.data - data) + ", " + std::to_string(t.data - data + std::ptrdiff_t(t.nbytes)) + ")";
  };
  const StTensorView* previous = nullptr;
  std::size_t end = 0;
  for (const StTensorView* t : by_offset) {
    const std::size_t begin = std::size_t(t->data - data);
    const std::string what = "tensor \"" + t->name + "\": data_offsets " + range(*t);
    if (begin < end)
      fail_safetensors(path_, what + " overlap tensor \"" + previous->name + "\"'s " + range(*previous) +
                      ": each tensor's bytes must begin where the one before ends (Python's safetensors refuses "
                      "this file too)");
    if (begin > end)
      fail_safetensors(path_, what + (previous ? " leave bytes " + std::to_string(end) + ".." + std::to_string(begin) +
                                         " after tensor \"" + previous->name + "\" unused"
                                   : " begin at " + std::to_string(begin) + ", not at 0, the start of the data") +
                      ": each tensor's bytes must begin where the one before ends (Python's safetensors refuses "
                      "this file too)");
    end = begin + t->nbytes;
    previous = t;
  }
  if (end != data_size)
    fail_safetensors(path_, "the data holds " + std::to_string(data_size - end) + " bytes after the last tensor" +
                    (previous ? " (\"" + previous->name + "\", ending at " + std::to_string(end) + ")" : std::string()) +
                    ": a cut or padded file? (Python's safetensors refuses this file too)");
}

void write_safetensors(const std::string& path, const std::vector<StTensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const StTensorToWrite*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->name < b->name; });

  // ordered_json: __metadata__ first, then tensors in data order, as Python writes it.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    const auto& t = *order[i];
    if (t.name.empty() || t.name == "__metadata__") fail_safetensors(path, "invalid tensor name \"" + t.name + "\"");
    if (i > 0 && order[i - 1]->name == t.name) fail_safetensors(path, "duplicate tensor name \"" + t.name + "\"");
    const auto nbytes = byte_size(t.shape, st_dtype_size(t.dtype));
    if (!nbytes || *nbytes != t.nbytes)
      fail_safetensors(path, "tensor \"" + t.name + "\": " + std::to_string(t.nbytes) + " bytes do not match shape " +
                     shape_text(t.shape) + " " + std::string(st_dtype_name(t.dtype)));
    header[t.name] = {{"dtype", std::string(st_dtype_name(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + t.nbytes}}};
    offset += t.nbytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = static_cast<unsigned char>((text.size() >> (8 * i)) & 0xff);

  const std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail_safetensors(tmp, sys_error("cannot create"));
  try {
    write_all(fd, len_bytes, 8, tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const auto* t : order) write_all(fd, t->data, t->nbytes, tmp);
    if (::fsync(fd) != 0) fail_safetensors(tmp, sys_error("fsync failed"));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail_safetensors(tmp, sys_error("close failed"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = sys_error("cannot rename " + tmp + " to it");
    ::unlink(tmp.c_str());
    fail_safetensors(path, err);
  }
  // Make the rename itself durable.
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace ddp_embed
