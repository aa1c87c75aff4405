#include "util/log.h"

#include <filesystem>
#include <memory>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include "util/progress.h"

namespace ddp_embed {
namespace {

// The console sink while a status line is shown (util/progress.h): the line is erased
// before each log line and drawn again after it, so the two never share a row.
class StatusAwareSink final : public spdlog::sinks::sink {
 public:
  StatusAwareSink(std::shared_ptr<spdlog::sinks::sink> console, StatusLine& status)
      : console_(std::move(console)), status_(status) {}

  void log(const spdlog::details::log_msg& msg) override {
    status_.print_above([&] { console_->log(msg); });
  }
  void flush() override { console_->flush(); }
  void set_pattern(const std::string& pattern) override { console_->set_pattern(pattern); }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    console_->set_formatter(std::move(formatter));
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> console_;
  StatusLine& status_;
};

}  // namespace

void init_console_log(int rank) {
  std::shared_ptr<spdlog::sinks::sink> console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_pattern("%H:%M:%S %^%l%$ %v");
  // Only rank 0 shows progress, and only to a person at a terminal.
  const bool status_line = rank == 0 && stderr_is_terminal();
  console_status().enable(status_line);
  if (status_line) console = std::make_shared<StatusAwareSink>(console, console_status());
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
