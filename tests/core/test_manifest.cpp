// Checkpoint manifests (io/manifest.h): what checkpoints write, what resuming verifies.
#include "io/manifest.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ddp_embed {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kFiles = {"model.safetensors", "state.json"};

// The ManifestError message of `fn`, or a test failure when it does not throw.
template <class F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const ManifestError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ManifestError";
  return "";
}

std::string parse_error(const std::string& text, const std::vector<std::string>& required = kFiles) {
  return error_of([&] { parse_manifest(text, "ckpt/manifest.json", required); });
}

class Manifest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("ddp_embed_manifest_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write("model.safetensors", "weights");
    write("state.json", "{\"step\": 3}\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& content) {
    std::ofstream(dir_ / name, std::ios::binary) << content;
  }
  // Writes the manifest of the files as they are now.
  void seal() { write("manifest.json", manifest_text(describe_files(dir_.string(), kFiles))); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string verify_error() const { return error_of([&] { verify_manifest(dir_.string(), kFiles); }); }

  fs::path dir_;
};

TEST_F(Manifest, Fnv1a64KnownValues) {
  EXPECT_EQ(fnv1a64("", 0), 0xcbf29ce484222325ULL);
  EXPECT_EQ(fnv1a64("a", 1), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(fnv1a64("ab", 2), fnv1a64("b", 1, fnv1a64("a", 1)));  // continues a hash
  EXPECT_EQ(hash_hex(0xaf63dc4c8601ec8cULL), "af63dc4c8601ec8c");
  EXPECT_EQ(hash_hex(1), "0000000000000001");
}

TEST_F(Manifest, TextRoundTrips) {
  CheckpointManifest m;
  m.files["model.safetensors"] = {1234, "0123456789abcdef"};
  m.files["state.json"] = {18446744073709551615ULL, "ffffffffffffffff"};
  const std::string text = manifest_text(m);
  EXPECT_NE(text.find("\"format\": \"ddp-embed checkpoint\""), std::string::npos) << text;
  EXPECT_NE(text.find("\"version\": 1"), std::string::npos) << text;
  const CheckpointManifest back = parse_manifest(text, "m.json", kFiles);
  ASSERT_EQ(back.files.size(), 2u);
  EXPECT_EQ(back.files.at("model.safetensors").bytes, 1234u);
  EXPECT_EQ(back.files.at("state.json").bytes, 18446744073709551615ULL);
  EXPECT_EQ(back.files.at("state.json").fnv1a64, "ffffffffffffffff");
}

TEST_F(Manifest, MalformedTextNamesTheManifestAndTheEntry) {
  EXPECT_EQ(parse_error("{\"files\": {"), "ckpt/manifest.json: not valid JSON at byte 12: syntax error while "
                                          "parsing object key - unexpected end of input; expected string literal");
  EXPECT_EQ(parse_error("[]"), "ckpt/manifest.json: no \"files\" object");
  EXPECT_EQ(parse_error("{\"files\": []}"), "ckpt/manifest.json: no \"files\" object");
  EXPECT_EQ(parse_error(R"({"files": {"model.safetensors": {"bytes": 1, "fnv1a64": "0123456789abcdef"}}})"),
            "ckpt/manifest.json: does not list state.json");
  EXPECT_EQ(parse_error(R"({"files": {"state.json": []}})"),
            "ckpt/manifest.json: files.\"state.json\" must be an object, got array");
  EXPECT_EQ(parse_error(R"({"files": {"a\nb": {"bytes": -1}}})"),
            "ckpt/manifest.json: files.\"a\\nb\".bytes must be a non-negative integer");
  EXPECT_EQ(parse_error(R"({"files": {"x": {"bytes": 1, "fnv1a64": "0123456789ABCDEF"}}})"),
            "ckpt/manifest.json: files.\"x\".fnv1a64 must be 16 lower-case hex digits");
  EXPECT_EQ(parse_error(std::string(20, '[') + std::string(20, ']')),
            "ckpt/manifest.json: nested too deeply: not a checkpoint manifest");
  EXPECT_EQ(parse_error(std::string((1 << 20) + 1, ' ')),
            "ckpt/manifest.json: larger than 1048576 bytes: not a checkpoint manifest");
}

// Bug (found by fuzz_manifest): nlohmann reports a number beyond a double's range as
// out_of_range, not parse_error; it escaped parse_manifest as a json exception.
TEST_F(Manifest, NumberOutOfRangeIsInvalidJson) {
  EXPECT_EQ(parse_error(R"({"files": {"a": {"bytes": 11e308}}})"),
            "ckpt/manifest.json: not valid JSON at byte 27: number overflow parsing '11e308'");
}

TEST_F(Manifest, CompleteFolderVerifies) {
  seal();
  EXPECT_NO_THROW(verify_manifest(dir_.string(), kFiles));
}

TEST_F(Manifest, MissingManifestMeansIncomplete) {
  EXPECT_EQ(verify_error(), path("manifest.json") + ": missing (incomplete checkpoint)");
}

TEST_F(Manifest, MissingTruncatedOrCorruptFilesAreNamed) {
  seal();
  write("state.json", "{\"step\": 3}");
  EXPECT_EQ(verify_error(), path("state.json") + ": size 11 does not match the manifest (12 bytes)");
  write("state.json", "{\"step\": 4}\n");
  EXPECT_EQ(verify_error(), path("state.json") + ": checksum does not match the manifest (corrupt file)");
  fs::remove(dir_ / "model.safetensors");
  EXPECT_EQ(verify_error(), path("model.safetensors") + ": missing");
}

TEST_F(Manifest, MustListEveryFile) {
  write("manifest.json", manifest_text(describe_files(dir_.string(), {"model.safetensors"})));
  EXPECT_EQ(verify_error(), path("manifest.json") + ": does not list state.json");
}

// A folder whose files are not known in advance (output.keep_best's best/): its manifest
// lists the files of its subfolders too, and a change to any of them is named.
TEST_F(Manifest, AFolderManifestCoversEveryFileInItsSubfolders) {
  fs::create_directories(dir_ / "2_Dense");
  write("2_Dense/model.safetensors", "dense weights");
  write("manifest.json", manifest_text(describe_folder(dir_.string())));
  EXPECT_NO_THROW(verify_folder_manifest(dir_.string(), kFiles));
  write("2_Dense/model.safetensors", "dense weightz");
  EXPECT_EQ(error_of([&] { verify_folder_manifest(dir_.string(), kFiles); }),
            path("2_Dense/model.safetensors") + ": checksum does not match the manifest (corrupt file)");
  fs::remove(dir_ / "2_Dense" / "model.safetensors");
  EXPECT_EQ(error_of([&] { verify_folder_manifest(dir_.string(), kFiles); }),
            path("2_Dense/model.safetensors") + ": missing");
}

// A hand-edited manifest cannot make the check read files outside the folder.
TEST_F(Manifest, AFolderManifestThatListsAFileOutsideTheFolderIsRefused) {
  CheckpointManifest m = describe_folder(dir_.string());
  m.files["../elsewhere"] = {1, "0123456789abcdef"};
  write("manifest.json", manifest_text(m));
  EXPECT_EQ(error_of([&] { verify_folder_manifest(dir_.string(), kFiles); }),
            path("manifest.json") + ": lists \"../elsewhere\", which is not a file inside the folder");
}

}  // namespace
}  // namespace ddp_embed
