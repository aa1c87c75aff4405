#include "report/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <stdexcept>
#include <nlohmann/json.hpp>

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

// The table of the reflected Castagnoli polynomial 0x82f63b78, one byte at a time.
std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    table[i] = c;
  }
  return table;
}

void put_fixed(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A protobuf field's key: its number and wire type (0 varint, 1 64-bit, 2 bytes, 5 32-bit).
void put_key(std::string& out, int field, int wire_type) { put_varint(out, uint64_t(field) << 3 | uint64_t(wire_type)); }

void put_bytes(std::string& out, int field, std::string_view bytes) {
  put_key(out, field, 2);
  put_varint(out, bytes.size());
  out.append(bytes);
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 1);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, 5);
  put_fixed(out, bits, 4);
}

// Event.wall_time (1) and Event.step (2).
std::string event_head(double wall_time, int64_t step) {
  std::string event;
  put_double(event, 1, wall_time);
  if (step != 0) {  // proto3: a default value is not written
    put_key(event, 2, 0);
    put_varint(event, static_cast<uint64_t>(step));
  }
  return event;
}

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void add_scalars(const std::string& prefix, const nlohmann::json& value, std::vector<Scalar>& out) {
  if (value.is_number()) {
    out.push_back({prefix, value.get<float>()});
  } else if (value.is_null()) {
    out.push_back({prefix, std::numeric_limits<float>::quiet_NaN()});
  } else if (value.is_object()) {
    for (const auto& [name, inner] : value.items()) add_scalars(prefix + "/" + name, inner, out);
  }  // text and booleans are not scalars
}

}  // namespace

uint32_t crc32c(std::string_view data) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  uint32_t c = 0xffffffffu;
  for (unsigned char byte : data) c = table[(c ^ byte) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(std::string_view data) {
  const uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(std::string_view data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string out = length;
  put_fixed(out, masked_crc32c(length), 4);
  out.append(data);
  put_fixed(out, masked_crc32c(data), 4);
  return out;
}

std::string event_file_version(double wall_time) {
  std::string event = event_head(wall_time, 0);
  put_bytes(event, 3, "brain.Event:2");
  return event;
}

std::string event_scalars(double wall_time, int64_t step, const std::vector<Scalar>& scalars) {
  std::string summary;
  for (const Scalar& s : scalars) {
    std::string value;
    put_bytes(value, 1, s.tag);
    put_float(value, 2, s.value);
    put_bytes(summary, 1, value);
  }
  std::string event = event_head(wall_time, step);
  put_bytes(event, 5, summary);
  return event;
}

std::vector<Scalar> scalars_of_metrics_line(const nlohmann::json& line) {
  std::vector<Scalar> out;
  for (const auto& [key, value] : line.items())
    if (key != "step") add_scalars(key, value, out);
  return out;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = dir + "/events.out.tfevents." + std::to_string(static_cast<int64_t>(now_seconds())) + "." + host + "." +
          std::to_string(::getpid()) + ".ddp-embed";
  out_.open(path_, std::ios::binary | std::ios::trunc);
  if (!out_) throw std::runtime_error("output.report_to tensorboard: cannot write " + path_);
  write_record(event_file_version(now_seconds()));
}

void TensorBoardWriter::write_metrics_line(const nlohmann::json& line) {
  if (!line.contains("step") || !line["step"].is_number_integer()) return;
  write_scalars(line["step"].get<int64_t>(), scalars_of_metrics_line(line));
}

void TensorBoardWriter::write_scalars(int64_t step, const std::vector<Scalar>& scalars) {
  if (!scalars.empty()) write_record(event_scalars(now_seconds(), step, scalars));
}

void TensorBoardWriter::write_record(const std::string& event) {
  out_ << tfrecord(event);
  out_.flush();
}

TensorBoardWriter rewrite_tensorboard_folder(const std::string& dir, const std::vector<nlohmann::json>& lines,
                                             int64_t resumed_step) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().find("tfevents") != std::string::npos) fs::remove(entry.path(), ec);
  // Step → tag → value: the last line of a step and tag wins (a step repeated after an
  // earlier resume is the one that led here).
  std::map<int64_t, std::map<std::string, float>> steps;
  for (const nlohmann::json& line : lines) {
    if (!line.contains("step") || !line["step"].is_number_integer()) continue;
    const int64_t step = line["step"].get<int64_t>();
    if (step > resumed_step) continue;
    for (const Scalar& s : scalars_of_metrics_line(line)) steps[step][s.tag] = s.value;
  }
  TensorBoardWriter writer(dir);
  for (const auto& [step, tags] : steps) {
    std::vector<Scalar> scalars;
    for (const auto& [tag, value] : tags) scalars.push_back({tag, value});
    writer.write_scalars(step, scalars);
  }
  return writer;
}

}  // namespace ddp_embed
