// ddp-launch: start one worker per device and supervise them (lib/launch/launcher.h).
#include <string>
#include <vector>

#include "launch/launcher.h"

int main(int argc, char** argv, char** envp) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ddp_embed::launch::run_launcher(args, envp);
}
