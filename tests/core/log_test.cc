#include "core/log.h"

#include <catch2/catch.hpp>

namespace trainq {
namespace {

TEST_CASE("LogSafe escapes control characters so a request cannot start a log line of its own",
          "[log]") {
  CHECK(LogSafe("/experiment/x") == "/experiment/x");
  CHECK(LogSafe("/x\n2099-01-01 info dashboard: admin session cancelled") ==
        "/x\\n2099-01-01 info dashboard: admin session cancelled");
  CHECK(LogSafe("a\r\nSet-Cookie: evil=1") == "a\\r\\nSet-Cookie: evil=1");
  CHECK(LogSafe(std::string("a\0b\x1b[31m\x7f", 9)) == "a\\x00b\\x1b[31m\\x7f");
  CHECK(LogSafe("tab\there") == "tab\\there");
  CHECK(LogSafe("back\\slash\\n") == "back\\\\slash\\\\n");  // not mistaken for an escape
  CHECK(LogSafe("h\xc3\xa9llo") == "h\xc3\xa9llo");           // UTF-8 stays
  CHECK(LogSafe(std::string(300, 'a')) == std::string(200, 'a') + "...");
  CHECK(LogSafe("abcdef", 3) == "abc...");
}

TEST_CASE("LogLimiter lets one line through per period and counts the others", "[log]") {
  LogLimiter limit(60'000);
  CHECK(limit.Allow(1'000) == std::optional<std::int64_t>(0));
  CHECK_FALSE(limit.Allow(1'001));
  CHECK_FALSE(limit.Allow(30'000));
  CHECK_FALSE(limit.Allow(60'999));
  CHECK(limit.Allow(61'000) == std::optional<std::int64_t>(3));  // 3 were not logged
  CHECK_FALSE(limit.Allow(61'500));
  CHECK(limit.Allow(200'000) == std::optional<std::int64_t>(1));
  CHECK(limit.Allow(400'000) == std::optional<std::int64_t>(0));
}


TEST_CASE("LogLimiter: a line repeated every 200 ms is written once per period, with how many "
          "were held back") {
  LogLimiter limit(5'000);
  int written = 0;
  int held_total = 0;
  // 60 s of a loop that logs the same line 5 times a second.
  for (TimeMs t = 0; t < 60'000; t += 200) {
    int held = -1;
    if (limit.Allow("pool local: m1 holds work", t, &held)) {
      ++written;
      held_total += held;
      if (t > 0) CHECK(held == 24);  // 5 s at 5 a second, less the one written
    } else {
      CHECK(held == 0);
    }
  }
  CHECK(written == 12);
  CHECK(held_total == 11 * 24);
  CHECK(LogLimiter::HeldBackNote(0).empty());
  CHECK(LogLimiter::HeldBackNote(24) == " (24 more like it held back)");
}

TEST_CASE("LogLimiter: keys are limited each on their own, and one that stops repeating is "
          "forgotten") {
  LogLimiter limit(1'000);
  CHECK(limit.Allow("a", 0));
  CHECK(limit.Allow("b", 100));
  CHECK_FALSE(limit.Allow("a", 500));
  CHECK_FALSE(limit.Allow("b", 600));
  CHECK(limit.Allow("a", 1'000));
  // "b" is not seen again for long: it is written at once when it comes back.
  CHECK(limit.Allow("b", 10'000));
  CHECK_FALSE(limit.Allow("b", 10'100));
}

}  // namespace
}  // namespace trainq
