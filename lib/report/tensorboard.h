// TensorBoard event files (output.report_to ["tensorboard"]): every number of every
// metrics.jsonl line as a scalar, under the line's step.
//
// Written here, not with a library: the C++ writers there are (tensorboard_logger and
// the like) depend on protobuf, and what TensorBoard reads of a scalar is small. A file is
// a sequence of records, each
//     uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of data
// (little-endian; masked = ((crc >> 15) | (crc << 17)) + 0xa282ead8), and each record's
// data one Event protobuf message, encoded by hand:
//     Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//     Summary { repeated Value value = 1; }
//     Value   { string tag = 1; float simple_value = 2; }
// The first event of a file carries file_version "brain.Event:2", as TensorFlow's writer's.
// Tags are metrics.jsonl's keys ("loss", "eval/trecqa_beir/ndcg@10"); an object's numbers
// are "key/name" ("steps_per_source/train"); text and booleans are left out, null (a NaN
// metrics.jsonl cannot hold) is NaN. The file is flushed after each event.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ddp_embed {

// CRC-32C (Castagnoli) of `data`, and the masked form TFRecord files store.
uint32_t crc32c(std::string_view data);
uint32_t masked_crc32c(std::string_view data);

// One record of a TFRecord file: the framing above around `data`.
std::string tfrecord(std::string_view data);

// The Event protobuf encodings (above).
struct Scalar {
  std::string tag;
  float value = 0;
};
std::string event_file_version(double wall_time);
std::string event_scalars(double wall_time, int64_t step, const std::vector<Scalar>& scalars);

// A metrics.jsonl line's scalars (see above); its "step" is the step, not a scalar.
std::vector<Scalar> scalars_of_metrics_line(const nlohmann::json& line);

// DIR/events.out.tfevents.<seconds>.<host>.<pid>.ddp-embed, one per writer (TensorBoard
// reads every file of a folder as one run, in name order).
class TensorBoardWriter {
 public:
  // Makes `dir` and the file. Throws std::runtime_error naming the file when it cannot be
  // written.
  explicit TensorBoardWriter(const std::string& dir);
  // One event with the line's scalars at its "step" (a line without a step is skipped).
  void write_metrics_line(const nlohmann::json& line);
  // One event of these scalars at `step`.
  void write_scalars(int64_t step, const std::vector<Scalar>& scalars);
  const std::string& path() const { return path_; }

 private:
  void write_record(const std::string& event);
  std::string path_;
  std::ofstream out_;
};

// The folder a resumed run writes into: its earlier event files go (they may hold steps
// past the checkpoint the run resumes from, which it is about to repeat), and a new file
// gets `lines` (metrics.jsonl's lines so far) with a step at or below `resumed_step`,
// the last line of each step and key winning. Every step once: TensorBoard shows no
// step twice. Returns the writer, to go on with.
TensorBoardWriter rewrite_tensorboard_folder(const std::string& dir, const std::vector<nlohmann::json>& lines,
                                             int64_t resumed_step);

}  // namespace ddp_embed
