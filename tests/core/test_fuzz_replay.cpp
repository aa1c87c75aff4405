// The fuzz targets on every seed of tests/fuzz/corpus/<target>/ and every crash input
// kept in tests/fuzz/regressions/<target>/, in the normal build: the harnesses keep
// compiling and passing without the fuzz build, and a crash once found stays fixed.
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "../fuzz/fuzz_targets.h"

namespace ddp_embed::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
};

const Target kTargets[] = {
    {"safetensors", fuzz_safetensors}, {"pairs", fuzz_pairs}, {"config", fuzz_config},
    {"wordpiece", fuzz_wordpiece},     {"vocab", fuzz_vocab}, {"manifest", fuzz_manifest},
    {"prepared", fuzz_prepared},       {"tokenizer_json", fuzz_tokenizer_json},
    {"rendezvous", fuzz_rendezvous},
};

const fs::path kFuzzDir = fs::path(DDP_EMBED_SOURCE_DIR) / "tests/fuzz";

// The files of `dir` (none when it does not exist), sorted.
std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (!fs::is_directory(dir)) return files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.is_regular_file()) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void replay(const Target& target, const fs::path& input) {
  const std::string bytes = read_bytes(input);
  try {
    target.run(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  } catch (const std::exception& e) {
    ADD_FAILURE() << input.string() << ": " << e.what();
  }
}

class FuzzReplay : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzReplay, EverySeedAndRegressionInputPasses) {
  const Target& target = GetParam();
  const auto seeds = files_in(kFuzzDir / "corpus" / target.name);
  EXPECT_GE(seeds.size(), 3u) << "tests/fuzz/corpus/" << target.name << " needs seeds";
  for (const auto& input : seeds) replay(target, input);
  for (const auto& input : files_in(kFuzzDir / "regressions" / target.name)) replay(target, input);
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzReplay, ::testing::ValuesIn(kTargets),
                         [](const auto& info) { return std::string(info.param.name); });

// A corpus folder without a target would never be replayed.
TEST(FuzzReplay, EveryInputFolderNamesATarget) {
  for (const char* kind : {"corpus", "regressions"}) {
    if (!fs::is_directory(kFuzzDir / kind)) continue;
    for (const auto& entry : fs::directory_iterator(kFuzzDir / kind)) {
      const std::string name = entry.path().filename().string();
      const bool known = std::any_of(std::begin(kTargets), std::end(kTargets),
                                     [&](const Target& t) { return name == t.name; });
      EXPECT_TRUE(known) << "tests/fuzz/" << kind << "/" << name << " has no fuzz target";
    }
  }
}

}  // namespace
}  // namespace ddp_embed::fuzz
