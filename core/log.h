// Logging setup. Code logs through spdlog's default logger (to stderr).
// Never log secrets: tokens, webhook secrets and signatures stay out of logs.
#pragma once

#include <map>
#include <string>

#include "core/clock.h"

namespace trainq {

// verbosity: 0 = info, 1 = debug, 2+ = trace; quiet lowers it to warnings.
void InitLogging(int verbosity, bool quiet = false);

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
