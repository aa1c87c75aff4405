// Refusing a folder where a file is read. On Linux a folder opens as a stream that reads
// as an empty file (the error, EISDIR, comes only from read(), which a stream swallows),
// so a reader that only checks the stream takes a folder for an empty file of texts, a
// config without keys, a vocabulary without words. Every reader of a file asks here first.
#pragma once

#include <string>

namespace ddp_embed {

// "PATH is a folder, not WHAT" when `path` names a folder (or a link to one); "" otherwise
// (a file, or a path whose problem opening it will tell). `what` says what was expected:
// "a file of pairs (JSONL)", "a config file" ...
std::string folder_not_file(const std::string& path, const std::string& what);

// Whether two paths name the same file: the same file on disk (a link, another spelling
// of its path, "./a" and "a"), or, where one is not there yet, the same path once made
// absolute and normal. For an output that must not overwrite an input.
bool same_file(const std::string& a, const std::string& b);

}  // namespace ddp_embed
