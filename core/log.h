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

// At most one line per `every_ms` for one kind of event. Thread-safe; the
// time is the caller's (a Clock's Now()).
class LogLimiter {
 public:
  explicit LogLimiter(std::int64_t every_ms) : every_ms_(every_ms) {}
  // nullopt: do not log this one (it is counted). Otherwise log it, and say
  // how many were not logged since the last line (0 for none).
  std::optional<std::int64_t> Allow(std::int64_t now_ms);

 private:
  const std::int64_t every_ms_;
  std::mutex mu_;
  bool logged_ = false;
  std::int64_t last_ms_ = 0;
  std::int64_t suppressed_ = 0;
};

// A line a loop would write every pass while nothing changes ("pool cpu: m1
// holds work; not stopped") goes to the log at most once per `every_ms` for
// each key: Allow() says whether to write it now, and how many of that key
// were held back since the last one written (to say "(12 more since)").
// Keys not written for two periods are forgotten, so memory stays bounded by
// the keys of two periods. Not thread-safe: one per loop.
class RepeatLimiter {
 public:
  explicit RepeatLimiter(TimeMs every_ms = 10'000) : every_ms_(every_ms) {}

  bool Allow(const std::string& key, TimeMs now, int* held_back = nullptr);
  // "" for 0, else " (3 more like it held back)": for the end of the line.
  static std::string HeldBackNote(int held_back);

 private:
  struct Seen {
    TimeMs written = 0;
    int held = 0;
  };
  TimeMs every_ms_;
  std::map<std::string, Seen> seen_;
  TimeMs last_prune_ = 0;
};

}  // namespace trainq
