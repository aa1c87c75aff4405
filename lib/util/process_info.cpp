#include "util/process_info.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace ddp_embed {

double peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;
}

double seconds_since_process_start() {
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  double up = 0;
  if (paren == std::string::npos || !(uptime >> up)) return 0;
  std::istringstream fields(text.substr(paren + 2));
  std::string field;
  for (int i = 0; i < 20 && fields >> field; ++i) {}  // field 22: start time, in clock ticks since boot
  const double started = std::strtod(field.c_str(), nullptr) / double(::sysconf(_SC_CLK_TCK));
  return std::max(0.0, up - started);
}

}  // namespace ddp_embed
