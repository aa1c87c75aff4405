// The pieces of report/tensorboard.h against published values: CRC-32C's check value,
// the record framing, and which numbers of a metrics.jsonl line become scalars. That
// TensorBoard's own reader reads the files back with metrics.jsonl's values is
// ProgressAndFigure.TensorBoardShowsEveryScalarOfMetricsJsonlOnceAcrossAResume.
#include "report/tensorboard.h"

#include <cmath>
#include <cstring>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace ddp_embed {
namespace {

uint32_t read_u32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | static_cast<unsigned char>(s[at + size_t(i)]);
  return v;
}

TEST(TensorBoard, Crc32cIsTheCastagnoliChecksum) {
  EXPECT_EQ(crc32c("123456789"), 0xe3069283u);  // the check value of CRC-32C
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8a9136aau);  // RFC 3720, B.4: 32 bytes of zeros
  const uint32_t c = crc32c("123456789");
  EXPECT_EQ(masked_crc32c("123456789"), ((c >> 15) | (c << 17)) + 0xa282ead8u);
}

TEST(TensorBoard, RecordIsLengthItsCrcDataAndItsCrc) {
  const std::string data = "an event";
  const std::string record = tfrecord(data);
  ASSERT_EQ(record.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(read_u32(record, 0), data.size());
  EXPECT_EQ(read_u32(record, 4), 0u);  // the upper half of the 64-bit length
  EXPECT_EQ(read_u32(record, 8), masked_crc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, data.size()), data);
  EXPECT_EQ(read_u32(record, 12 + data.size()), masked_crc32c(data));
}

// Event{wall_time = 1.5, step = 300, summary{value{tag: "loss", simple_value: 0.25}}}, as
// protobuf encodes it, byte for byte.
TEST(TensorBoard, ScalarEventIsTheProtobufEncoding) {
  const std::string event = event_scalars(1.5, 300, {{"loss", 0.25f}});
  std::string want = "\x09";
  const double wall = 1.5;
  char bytes[8];
  std::memcpy(bytes, &wall, 8);
  want.append(bytes, 8);
  want += std::string("\x10\xac\x02", 3);                       // step 300 as a varint
  want += std::string("\x2a\x0d\x0a\x0b\x0a\x04loss\x15", 11);  // summary, value, tag
  const float value = 0.25f;
  std::memcpy(bytes, &value, 4);
  want.append(bytes, 4);
  EXPECT_EQ(event, want);
  EXPECT_NE(event_file_version(0).find("brain.Event:2"), std::string::npos);
}

TEST(TensorBoard, EveryNumberOfAMetricsLineIsAScalar) {
  const auto scalars = scalars_of_metrics_line(nlohmann::json::parse(
      R"({"step": 4, "loss": 0.5, "source": "train", "steps_per_source": {"a": 3, "b": 1}, "eval/x/ndcg@10": null,
          "flag": true})"));
  std::map<std::string, float> by_tag;
  for (const auto& s : scalars) by_tag[s.tag] = s.value;
  ASSERT_EQ(by_tag.size(), 4u);
  EXPECT_EQ(by_tag["loss"], 0.5f);
  EXPECT_EQ(by_tag["steps_per_source/a"], 3.0f);
  EXPECT_EQ(by_tag["steps_per_source/b"], 1.0f);
  EXPECT_TRUE(std::isnan(by_tag["eval/x/ndcg@10"]));
}

}  // namespace
}  // namespace ddp_embed
