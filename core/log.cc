#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace trainq {

void InitLogging(int verbosity, bool quiet) {
  auto logger = spdlog::stderr_color_mt("trainq");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  if (quiet) {
    spdlog::set_level(spdlog::level::warn);
  } else if (verbosity >= 2) {
    spdlog::set_level(spdlog::level::trace);
  } else if (verbosity == 1) {
    spdlog::set_level(spdlog::level::debug);
  } else {
    spdlog::set_level(spdlog::level::info);
  }
}

}  // namespace trainq
