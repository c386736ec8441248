// Logger set-up (see logger.h).
#include "core/dist/logger.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdlib>
#include <filesystem>

#include "core/dist/runtime.h"
#include "core/common/check.h"

namespace booster::dist {

namespace {
std::shared_ptr<spdlog::logger> g_logger;

spdlog::level::level_enum parse_level(const std::string& s) {
  const auto l = spdlog::level::from_str(s);
  BOOSTER_CHECK(l != spdlog::level::off || s == "off", "log level '", s,
                "' is not one of trace, debug, info, warn, error, critical, off");
  return l;
}
}  // namespace

void configure_logging(const LogOptions& opts) {
  std::string level = opts.level;
  if (level.empty()) {
    const char* env = std::getenv("BOOSTER_LOG_LEVEL");
    level = env && *env ? env : "info";
  }
  const auto lvl = parse_level(level);
  const int rank = world_rank();
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  console->set_level(rank == 0 || opts.all_ranks ? lvl : spdlog::level::err);
  std::vector<spdlog::sink_ptr> sinks{console};
  if (!opts.file_dir.empty()) {
    std::filesystem::create_directories(opts.file_dir);
    auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(opts.file_dir + "/rank" + std::to_string(rank) + ".log");
    file->set_level(spdlog::level::trace);
    sinks.push_back(file);
  }
  g_logger = std::make_shared<spdlog::logger>("booster", sinks.begin(), sinks.end());
  g_logger->set_level(spdlog::level::trace);
  g_logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [rank " + std::to_string(rank) + "] [%^%l%$] %v");
  spdlog::set_default_logger(g_logger);
}

spdlog::logger& logger() {
  if (!g_logger) configure_logging();
  return *g_logger;
}

}  // namespace booster::dist
