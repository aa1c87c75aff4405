// The files a source names: paths and glob patterns ("shards/*.jsonl.gz"), plain or
// gzip-compressed. Large training sets come as dozens of compressed files.
#pragma once

#include <istream>
#include <memory>
#include <string>
#include <vector>

namespace ddp_embed {

// Each pattern as a path, or, when it holds * ? or [, the files it matches in sorted
// order. A pattern that matches nothing is a DataError naming it, and so is a file named
// twice (by its name and by a pattern, or by two patterns): it would be read twice.
std::vector<std::string> expand_input_paths(const std::vector<std::string>& patterns);

// The file's text: gunzipped when it begins with gzip's magic bytes, else as it is. A
// compressed file that is cut short or corrupt throws DataError naming it while it is
// read; a file that cannot be opened, or a Parquet file (only pair files are read from
// Parquet: data/table_files.h), throws DataError at once.
std::unique_ptr<std::istream> open_input_file(const std::string& path);

}  // namespace ddp_embed
