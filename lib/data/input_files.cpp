#include "data/input_files.h"

#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <streambuf>

#include "data/pairs.h"
#include "util/file_check.h"

namespace ddp_embed {
namespace {

// A read-only streambuf over zlib's gz* functions (which also read a file of several
// gzip members, as `cat a.gz b.gz` makes, and plain files).
class GzipBuffer : public std::streambuf {
 public:
  explicit GzipBuffer(const std::string& path) : path_(path), file_(gzopen(path.c_str(), "rb")) {
    if (!file_) throw DataError("cannot open " + path + ": " + std::strerror(errno ? errno : ENOMEM));
    gzbuffer(file_, 1 << 18);
  }
  ~GzipBuffer() override { gzclose(file_); }

 protected:
  int_type underflow() override {
    const int n = gzread(file_, buffer_, sizeof(buffer_));
    if (n < 0 || (n == 0 && !gzeof(file_))) {
      int code = 0;
      const char* what = gzerror(file_, &code);
      throw DataError(path_ + ": cannot decompress (" + (what ? what : "zlib error") +
                      "): a cut or corrupt .gz file?");
    }
    if (n == 0) {
      // gzeof after a member whose stream ended early: zlib says so in gzerror.
      int code = 0;
      gzerror(file_, &code);
      if (code != Z_OK && code != Z_BUF_ERROR) throw DataError(path_ + ": cannot decompress");
      if (code == Z_BUF_ERROR) throw DataError(path_ + ": the compressed data ends early (a cut .gz file?)");
      return traits_type::eof();
    }
    setg(buffer_, buffer_, buffer_ + n);
    return traits_type::to_int_type(buffer_[0]);
  }

 private:
  std::string path_;
  gzFile file_;
  char buffer_[1 << 16];
};

class GzipStream : public std::istream {
 public:
  explicit GzipStream(const std::string& path) : std::istream(nullptr), buffer_(path) {
    rdbuf(&buffer_);
    exceptions(std::ios::badbit);  // the buffer's DataError reaches the reader
  }

 private:
  GzipBuffer buffer_;
};

// The file's first four bytes (fewer when it is shorter).
std::string first_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {0, 0, 0, 0};
  in.read(magic, 4);
  return std::string(magic, static_cast<size_t>(in.gcount()));
}

}  // namespace

std::vector<std::string> expand_input_paths(const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  std::vector<std::string> named_by;  // the pattern or path that gave each file
  auto add = [&](const std::string& file, const std::string& by) {
    // A file named twice (by its name and by a pattern, or by two patterns) would be read
    // twice, its pairs counted double: refused, naming both.
    for (size_t i = 0; i < out.size(); ++i)
      if (same_file(out[i], file))
        throw DataError(file + " is named twice: " + (by == file ? "" : "by \"" + by + "\" and ") +
                        (named_by[i] == out[i] ? "as " + out[i] : "by \"" + named_by[i] + "\"") +
                        "; its pairs would be read twice: name each file once");
    out.push_back(file);
    named_by.push_back(by);
  };
  for (const auto& pattern : patterns) {
    if (pattern.find_first_of("*?[") == std::string::npos) {
      add(pattern, pattern);
      continue;
    }
    glob_t found{};
    const int rc = glob(pattern.c_str(), 0, nullptr, &found);
    std::vector<std::string> matches(found.gl_pathv, found.gl_pathv + found.gl_pathc);
    globfree(&found);
    if (rc != 0 || matches.empty()) throw DataError("no file matches " + pattern);
    std::sort(matches.begin(), matches.end());
    for (const auto& match : matches) add(match, pattern);
  }
  return out;
}

std::unique_ptr<std::istream> open_input_file(const std::string& path) {
  if (const std::string folder = folder_not_file(path, "a file of pairs (JSONL, or .gz)"); !folder.empty())
    throw DataError(folder + "; nor is it a prepared folder, which holds manifest.json (a prepare that did not "
                    "finish, or a copy that lost it?): name its files, or prepare it again");
  const std::string magic = first_bytes(path);
  if (magic.size() >= 2 && static_cast<unsigned char>(magic[0]) == 0x1f && static_cast<unsigned char>(magic[1]) == 0x8b)
    return std::make_unique<GzipStream>(path);
  if (magic == "PAR1")
    throw DataError(path + " is a Parquet file, and only files of pairs (data.train, data.eval) are read from "
                    "Parquet so far: give this one as JSONL");
  auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
  if (!*in) throw DataError("cannot open " + path + ": " + std::strerror(errno));
  return in;
}

}  // namespace ddp_embed
