// Files that are whole or absent: written to PATH.tmp-<pid> beside PATH, renamed over it
// when complete, so a reader (or a crash) never sees half a file.
#pragma once

#include <string>

namespace ddp_embed {

// Writes `content` to `path` atomically. Throws std::runtime_error naming `path` (and the
// system's reason) when it cannot; the temporary file is removed then.
void write_file_atomically(const std::string& path, const std::string& content);

}  // namespace ddp_embed
