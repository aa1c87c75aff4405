#include "util/log.h"

#include <filesystem>
#include <memory>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace ddp_embed {

void init_console_log(int rank) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_pattern("%H:%M:%S %^%l%$ %v");
  console->set_level(rank == 0 ? spdlog::level::info : spdlog::level::warn);
  auto logger = std::make_shared<spdlog::logger>("embed-train", console);
  logger->set_level(spdlog::level::debug);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

std::string add_file_log(const std::string& dir, int rank) {
  std::filesystem::create_directories(dir);
  const std::string path =
      dir + (rank == 0 ? "/train.log" : "/train.rank" + std::to_string(rank) + ".log");
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  file->set_pattern("%Y-%m-%d %H:%M:%S.%e [rank " + std::to_string(rank) + "] %l %v");
  file->set_level(spdlog::level::debug);
  spdlog::default_logger()->sinks().push_back(file);
  return path;
}

}  // namespace ddp_embed
