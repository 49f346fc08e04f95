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

}  // namespace
}  // namespace trainq
