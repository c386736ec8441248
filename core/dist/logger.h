// The distributed logger on spdlog: the rank in every line; rank 0 logs at the chosen
// level, other ranks only errors unless all_ranks; an optional file per rank.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace booster::dist {

struct LogOptions {
  std::string level;      // trace, debug, info, warn, error; empty: BOOSTER_LOG_LEVEL or info
  bool all_ranks = false; // every rank logs at `level`
  std::string file_dir;   // when set, each rank also writes <file_dir>/rank<N>.log (all levels)
};

/// (Re)configures the logger; call after launch so the rank is known.
void configure_logging(const LogOptions& opts = {});
/// The logger (configured with defaults on first use).
spdlog::logger& logger();

}  // namespace booster::dist
