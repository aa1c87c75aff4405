// Input files: glob patterns and gzip-compressed JSONL, read as the pair loader reads them.
#include "data/input_files.h"

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <zlib.h>

#include "data/pairs.h"

namespace fs = std::filesystem;

namespace ddp_embed {
namespace {

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("ddp-embed-input-files-" + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

std::string read_all(std::istream& in) { return std::string(std::istreambuf_iterator<char>(in), {}); }

std::string lines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "{\"query\": \"q" + std::to_string(i) + "\", \"pos\": \"p\"}\n";
  return text;
}

TEST(InputFiles, GzipAndPlainReadTheSame) {
  const fs::path dir = fresh_dir("gz");
  const std::string text = lines(20000);  // larger than one read buffer
  std::ofstream(dir / "a.jsonl") << text;
  write_gzip(dir / "a.jsonl.gz", text);
  EXPECT_EQ(read_all(*open_input_file((dir / "a.jsonl").string())), text);
  EXPECT_EQ(read_all(*open_input_file((dir / "a.jsonl.gz").string())), text);
  // Two gzip members one after the other (cat a.gz b.gz) are one text.
  write_gzip(dir / "b.gz", "{\"query\": \"x\", \"pos\": \"y\"}\n");
  {
    std::ofstream both(dir / "both.gz", std::ios::binary);
    both << std::ifstream(dir / "a.jsonl.gz", std::ios::binary).rdbuf() << std::ifstream(dir / "b.gz", std::ios::binary).rdbuf();
  }
  EXPECT_EQ(read_all(*open_input_file((dir / "both.gz").string())), text + "{\"query\": \"x\", \"pos\": \"y\"}\n");
}

TEST(InputFiles, ACutGzipFileIsAnErrorNamingIt) {
  const fs::path dir = fresh_dir("cut");
  write_gzip(dir / "full.gz", lines(5000));
  const auto size = fs::file_size(dir / "full.gz");
  fs::copy_file(dir / "full.gz", dir / "cut.gz");
  fs::resize_file(dir / "cut.gz", size / 2);
  try {
    auto in = open_input_file((dir / "cut.gz").string());
    read_all(*in);
    FAIL() << "a cut .gz file was read without an error";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("cut.gz"), std::string::npos) << e.what();
  }
  EXPECT_THROW(open_input_file((dir / "missing.jsonl").string()), DataError);
}

TEST(InputFiles, GlobsExpandInSortedOrderAndMustMatch) {
  const fs::path dir = fresh_dir("glob");
  for (const char* name : {"part-2.jsonl", "part-10.jsonl", "part-1.jsonl", "other.txt"}) std::ofstream(dir / name) << "";
  const auto paths = expand_input_paths({(dir / "part-*.jsonl").string(), (dir / "other.txt").string()});
  ASSERT_EQ(paths.size(), 4u);
  EXPECT_EQ(fs::path(paths[0]).filename(), "part-1.jsonl");
  EXPECT_EQ(fs::path(paths[1]).filename(), "part-10.jsonl");
  EXPECT_EQ(fs::path(paths[2]).filename(), "part-2.jsonl");
  EXPECT_EQ(fs::path(paths[3]).filename(), "other.txt");
  try {
    expand_input_paths({(dir / "nothing-*.jsonl").string()});
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("no file matches"), std::string::npos);
  }
}

}  // namespace
}  // namespace ddp_embed
