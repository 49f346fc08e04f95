// Logging setup. Code logs through spdlog's default logger (to stderr).
// Never log secrets: tokens, webhook secrets and signatures stay out of logs.
// What a client sent (a path, a header, a name) goes through LogSafe, so one
// request cannot write a line of its own into the log; a warning that any
// client can cause goes through a LogLimiter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"

namespace trainq {

// verbosity: 0 = info, 1 = debug, 2+ = trace; quiet lowers it to warnings.
void InitLogging(int verbosity, bool quiet = false);

// `s` for a log line: control characters (< 0x20, 0x7f) as \n, \r, \t or
// \xNN, a backslash as \\, and at most `max` bytes of `s` (then "...").
std::string LogSafe(std::string_view s, std::size_t max = 200);

// A line that would repeat (a loop's "pool cpu: m1 holds work; not stopped"
// every pass, a warning any client can cause at every request) goes to the
// log at most once per `every_ms` for each key: Allow() says whether to write
// it now and how many of that key were held back since the last one written.
// A key not written for two periods with nothing held back is forgotten, so
// memory stays bounded by the keys of two periods and those holding a count.
// Thread-safe; the time is the caller's (a Clock's Now()).
class LogLimiter {
 public:
  explicit LogLimiter(TimeMs every_ms = 10'000) : every_ms_(every_ms) {}
  // Moved only while nothing else uses it (a Fleet built and returned).
  LogLimiter(LogLimiter&& o) noexcept
      : every_ms_(o.every_ms_), seen_(std::move(o.seen_)), last_prune_(o.last_prune_) {}

  bool Allow(const std::string& key, TimeMs now, int* held_back = nullptr);
  // One kind of event (the key ""): nullopt, do not log this one (it is
  // counted); otherwise log it, with how many were held back since the last.
  std::optional<std::int64_t> Allow(TimeMs now);
  // "" for 0, else " (3 more like it held back)": for the end of the line.
  static std::string HeldBackNote(int held_back);

 private:
  struct Seen {
    TimeMs written = 0;
    int held = 0;
  };
  const TimeMs every_ms_;
  std::mutex mu_;
  std::map<std::string, Seen> seen_;
  TimeMs last_prune_ = 0;
};

}  // namespace trainq
