#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>

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

bool LogLimiter::Allow(const std::string& key, TimeMs now, int* held_back) {
  if (held_back) *held_back = 0;
  std::lock_guard<std::mutex> lock(mu_);
  if (now - last_prune_ >= every_ms_) {
    // A key not written for two periods has stopped repeating: forget it,
    // unless it holds a count its next line must still say.
    std::erase_if(seen_, [&](const auto& kv) {
      return kv.second.held == 0 && now - kv.second.written >= 2 * every_ms_;
    });
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

std::optional<std::int64_t> LogLimiter::Allow(TimeMs now) {
  int held = 0;
  if (!Allow(std::string(), now, &held)) return std::nullopt;
  return held;
}

std::string LogLimiter::HeldBackNote(int held_back) {
  if (held_back <= 0) return "";
  return " (" + std::to_string(held_back) + " more like it held back)";
}

}  // namespace trainq

namespace trainq {

std::string LogSafe(std::string_view s, std::size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const std::size_t n = std::min(s.size(), max);
  out.reserve(n + 8);
  for (std::size_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\\': out += "\\\\"; break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

}  // namespace trainq
