// Logging for embed-train: one readable line per event.
//
// Rank 0 writes to the console and to OUTPUT_DIR/train.log; every other rank writes to
// OUTPUT_DIR/train.rank<R>.log and puts only warnings and errors on the console (so a
// launcher's failure report still shows why a rank died). On a terminal, rank 0's console
// log shares stderr with the progress line of util/progress.h without breaking it.
#pragma once

#include <string>

#include <spdlog/spdlog.h>

namespace ddp_embed {

// Console-only logging before the output folder is known (start-up, subcommands).
void init_console_log(int rank = 0);

// Adds the per-rank log file in `dir` (created if needed). Returns the file's path.
std::string add_file_log(const std::string& dir, int rank);

}  // namespace ddp_embed
