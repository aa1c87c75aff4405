// safetensors reader and writer: round trip, every hostile-header case, the golden file.
#include "golden_fixture.h"
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace ddp_embed;

namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("st_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // A file made of: the 8-byte length (header.size() unless overridden), header, data.
  std::string make_file(const std::string& header, const std::string& data = "",
                        std::optional<uint64_t> declared_len = std::nullopt) {
    const std::string path = (dir_ / "f.safetensors").string();
    std::ofstream out(path, std::ios::binary);
    const uint64_t n = declared_len.value_or(header.size());
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
    out << header << data;
    return path;
  }

  // Reading `path` fails with a message that names the path and contains `what`.
  void expect_error(const std::string& path, const std::string& what) {
    try {
      read_safetensors(path);
      ADD_FAILURE() << "no error for a file expected to fail with: " << what;
    } catch (const SafetensorsError& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
      EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg << "\nexpected: " << what;
    }
  }

  fs::path dir_;
};

std::string tensor(const std::string& name, const std::string& dtype, const std::string& shape, int64_t b,
                   int64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
         std::to_string(b) + "," + std::to_string(e) + "]}";
}

}  // namespace

TEST_F(SafetensorsTest, RoundTripKeepsNamesDtypesShapesBytesAndMetadata) {
  const std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -7.0f};
  const std::vector<int64_t> ids = {0, -1, int64_t(1) << 40};
  const std::vector<uint16_t> half = {0x3c00, 0xbc00};
  const uint8_t flag = 1;
  const std::string path = (dir_ / "rt.safetensors").string();
  write_safetensors(path,
                    {{"weight", StDtype::F32, {2, 3}, w.data(), w.size() * 4},
                     {"a.ids", StDtype::I64, {3}, ids.data(), ids.size() * 8},
                     {"h", StDtype::BF16, {2, 1}, half.data(), 4},
                     {"scalar", StDtype::BOOL, {}, &flag, 1},
                     {"empty", StDtype::F16, {0, 5}, nullptr, 0}},
                    {{"format", "pt"}});

  // Header padded with spaces to a multiple of 8, so the data is 8-byte aligned.
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);

  const auto f = read_safetensors(path);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors()[0].name, "a.ids");  // sorted by name
  const auto* t = f.find("weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, StDtype::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t->nbytes, 24u);
  EXPECT_EQ(std::memcmp(t->data, w.data(), 24), 0);
  EXPECT_EQ(std::memcmp(f.find("a.ids")->data, ids.data(), 24), 0);
  EXPECT_EQ(f.find("h")->dtype, StDtype::BF16);
  EXPECT_EQ(f.find("scalar")->shape.size(), 0u);
  EXPECT_EQ(f.find("scalar")->nbytes, 1u);
  EXPECT_EQ(f.find("empty")->nbytes, 0u);
  EXPECT_EQ(f.find("missing"), nullptr);

  // Written atomically: no temporary file left behind.
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
}

TEST_F(SafetensorsTest, AllDtypesParse) {
  for (const char* d : {"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"}) {
    const auto dt = st_dtype_from_name(d);
    ASSERT_TRUE(dt) << d;
    EXPECT_EQ(st_dtype_name(*dt), d);
    const auto size = static_cast<int64_t>(st_dtype_size(*dt));
    const auto path = make_file("{" + tensor("x", d, "[3]", 0, 3 * size) + "}", std::string(3 * size, '\0'));
    EXPECT_EQ(read_safetensors(path).find("x")->nbytes, static_cast<size_t>(3 * size)) << d;
  }
  EXPECT_FALSE(st_dtype_from_name("F8"));
}

// Python's safetensors (0.8, the reference of requirements.lock) reads a file whose
// tensors, in the order of their offsets, tile the data; names in another order than the
// offsets, and a header whose length is not a multiple of 8, are fine. Overlapping
// tensors, a gap, a first tensor not at 0 and bytes after the last one are refused there,
// and here, naming the file and the tensor.
TEST_F(SafetensorsTest, TensorsMustTileTheDataAsPythonSafetensorsRequires) {
  const std::string unsorted = "{" + tensor("b", "F32", "[2]", 8, 16) + "," + tensor("a", "F32", "[2]", 0, 8) + "}";
  EXPECT_EQ(read_safetensors(make_file(unsorted, std::string(16, 'x'))).tensors().size(), 2u);
  const std::string odd_header = "{" + tensor("a", "F32", "[2]", 0, 8) + "}   ";  // not padded to 8
  EXPECT_EQ(read_safetensors(make_file(odd_header, std::string(8, 'x'))).tensors().size(), 1u);
  const std::string empty_then = "{" + tensor("e", "F32", "[0]", 0, 0) + "," + tensor("a", "F32", "[2]", 0, 8) + "}";
  EXPECT_EQ(read_safetensors(make_file(empty_then, std::string(8, 'x'))).tensors().size(), 2u);
  // An F32 tensor at byte 2, after a 2-byte F16 one: unaligned for its dtype, and read
  // there (safetensors 0.8's load_file returns both).
  const std::string unaligned = "{" + tensor("h", "F16", "[1]", 0, 2) + "," + tensor("f", "F32", "[2]", 2, 10) + "}";
  EXPECT_EQ(read_safetensors(make_file(unaligned, std::string(10, 'x'))).tensors().size(), 2u);

  expect_error(make_file("{" + tensor("b", "F32", "[2]", 4, 12) + "," + tensor("a", "F32", "[2]", 0, 8) + "}",
                         std::string(12, 'x')),
               "tensor \"b\": data_offsets [4, 12) overlap tensor \"a\"'s [0, 8): each tensor's bytes must begin "
               "where the one before ends (Python's safetensors refuses this file too)");
  expect_error(make_file("{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 0, 8) + "}",
                         std::string(8, 'x')),
               "overlap tensor \"a\"'s [0, 8)");
  expect_error(make_file("{" + tensor("a", "F32", "[2]", 0, 8) + "," + tensor("b", "F32", "[2]", 12, 20) + "}",
                         std::string(20, 'x')),
               "tensor \"b\": data_offsets [12, 20) leave bytes 8..12 after tensor \"a\" unused");
  expect_error(make_file("{" + tensor("a", "F32", "[2]", 4, 12) + "}", std::string(12, 'x')),
               "tensor \"a\": data_offsets [4, 12) begin at 4, not at 0, the start of the data");
  expect_error(make_file("{" + tensor("a", "F32", "[2]", 0, 8) + "}", std::string(12, 'x')),
               "the data holds 4 bytes after the last tensor (\"a\", ending at 8)");
}

TEST_F(SafetensorsTest, MetadataMustBeAStringMap) {
  const auto ok = read_safetensors(make_file("{\"__metadata__\":{\"format\":\"pt\",\"k\":\"v\"}}"));
  EXPECT_EQ(ok.metadata().size(), 2u);
  EXPECT_TRUE(ok.tensors().empty());
  expect_error(make_file("{\"__metadata__\":{\"n\":1}}"), "__metadata__ value of \"n\" is not a string");
  expect_error(make_file("{\"__metadata__\":[\"a\"]}"), "__metadata__ is not an object");
}

TEST_F(SafetensorsTest, HostileFilesAreErrorsNamingThePath) {
  const std::string data(16, '\0');
  const std::string good = "{" + tensor("x", "F32", "[4]", 0, 16) + "}";

  // Too short, header lengths past the end or absurdly large.
  {
    const std::string path = (dir_ / "short.safetensors").string();
    std::ofstream(path, std::ios::binary) << "abc";
    expect_error(path, "too short");
  }
  expect_error(make_file(good, data, good.size() + data.size() + 1), "runs past the end of the file");
  expect_error(make_file(good, data, uint64_t(1) << 63), "exceeds the 100 MB limit");
  expect_error(make_file(good, data, ~uint64_t(0)), "exceeds the 100 MB limit");

  // Header text.
  expect_error(make_file("{\"x\": {", data), "not valid JSON");
  expect_error(make_file("[1,2,3]", data), "not a JSON object");
  expect_error(make_file(std::string(5000, '[') + std::string(5000, ']')), "nested too deeply");
  expect_error(make_file("{\"x\":[]}", data), "entry is not an object");
  expect_error(make_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[4]}}", data), "needs dtype, shape and data_offsets");
  expect_error(make_file("{" + tensor("x", "Q4", "[4]", 0, 16) + "}", data), "unsupported dtype Q4");
  expect_error(make_file("{\"x\":{\"dtype\":3,\"shape\":[4],\"data_offsets\":[0,16]}}", data),
               "dtype is not a string");
  expect_error(make_file("{\"x\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", data),
               "shape is not an array");
  expect_error(make_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0]}}", data),
               "data_offsets is not [begin, end]");

  // Shapes.
  expect_error(make_file("{" + tensor("x", "F32", "[-4]", 0, 16) + "}", data), "is negative");
  expect_error(make_file("{" + tensor("x", "F32", "[2.5]", 0, 16) + "}", data), "must be a non-negative integer");
  expect_error(make_file("{" + tensor("x", "F32", "[4611686018427387904,4611686018427387904]", 0, 16) + "}", data),
               "overflows");
  expect_error(make_file("{" + tensor("x", "F32", "[18446744073709551615]", 0, 16) + "}", data), "too large");

  // Offsets.
  expect_error(make_file("{" + tensor("x", "F32", "[4]", 0, 20) + "}", data), "runs past the data");
  expect_error(make_file("{" + tensor("x", "F32", "[4]", 16, 0) + "}", data), "begin 16 > end 0");
  expect_error(make_file("{" + tensor("x", "F32", "[4]", -16, 0) + "}", data), "is negative");
  expect_error(make_file("{" + tensor("x", "F32", "[3]", 0, 16) + "}", data), "needs 12");
  expect_error(make_file("{" + tensor("x", "F32", "[4]", 4, 20) + "}", data), "runs past the data");
  expect_error(make_file("{\"x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,18446744073709551615]}}", data),
               "too large");

  // A missing file.
  expect_error((dir_ / "nope.safetensors").string(), "cannot open");
}

TEST_F(SafetensorsTest, WriterRefusesBadTensorsAndLeavesNoFile) {
  const float x[2] = {1, 2};
  const std::string path = (dir_ / "bad.safetensors").string();
  EXPECT_THROW(write_safetensors(path, {{"x", StDtype::F32, {3}, x, 8}}), SafetensorsError);
  EXPECT_THROW(write_safetensors(path, {{"x", StDtype::F32, {2}, x, 8}, {"x", StDtype::F32, {2}, x, 8}}),
               SafetensorsError);
  EXPECT_THROW(write_safetensors(path, {{"x", StDtype::F32, {-2}, x, 8}}), SafetensorsError);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_THROW(write_safetensors((dir_ / "no/such/dir/x.safetensors").string(), {}), SafetensorsError);
}

TEST_F(SafetensorsTest, GoldenModelListsBertParameters) {
  const std::string path = golden::golden_model_dir("bert-tiny-a") + "/model.safetensors";
  const auto f = read_safetensors(path);
  EXPECT_EQ(f.tensors().size(), 5u + 2 * 16 + 2);  // embeddings, 2 layers, pooler
  const auto expect_shape = [&](const std::string& name, std::vector<int64_t> shape) {
    const auto* t = f.find(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, StDtype::F32) << name;
    EXPECT_EQ(t->shape, shape) << name;
  };
  expect_shape("embeddings.word_embeddings.weight", {30522, 32});
  expect_shape("embeddings.position_embeddings.weight", {128, 32});
  expect_shape("embeddings.token_type_embeddings.weight", {2, 32});
  expect_shape("embeddings.LayerNorm.weight", {32});
  expect_shape("encoder.layer.1.attention.self.query.weight", {32, 32});
  expect_shape("encoder.layer.0.intermediate.dense.weight", {64, 32});
  expect_shape("encoder.layer.0.output.dense.weight", {32, 64});
  expect_shape("encoder.layer.1.output.LayerNorm.bias", {32});
  expect_shape("pooler.dense.weight", {32, 32});
}
