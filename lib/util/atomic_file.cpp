#include "util/atomic_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <system_error>

namespace fs = std::filesystem;

namespace ddp_embed {

void write_file_atomically(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << content;
    if (!out.flush()) {
      fs::remove(temporary, ec);
      throw std::runtime_error(path + ": cannot write");
    }
  }
  fs::rename(temporary, path, ec);
  if (ec) {
    const std::string why = ec.message();
    fs::remove(temporary, ec);
    throw std::runtime_error(path + ": cannot write: " + why);
  }
}

}  // namespace ddp_embed
