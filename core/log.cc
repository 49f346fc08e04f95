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

bool RepeatLimiter::Allow(const std::string& key, TimeMs now, int* held_back) {
  if (held_back) *held_back = 0;
  if (now - last_prune_ >= every_ms_) {
    // A key not written for two periods has stopped repeating: forget it.
    std::erase_if(seen_, [&](const auto& kv) { return now - kv.second.written >= 2 * every_ms_; });
    last_prune_ = now;
  }
  auto [it, fresh] = seen_.try_emplace(key, Seen{now, 0});
  if (fresh) return true;
  Seen& s = it->second;
  if (now - s.written < every_ms_) {
    ++s.held;
    return false;
  }
  if (held_back) *held_back = s.held;
  s = Seen{now, 0};
  return true;
}

std::string RepeatLimiter::HeldBackNote(int held_back) {
  if (held_back <= 0) return "";
  return " (" + std::to_string(held_back) + " more like it held back)";
}

}  // namespace trainq
