#include <catch2/catch.hpp>

#include "core/log.h"

namespace trainq {
namespace {

TEST_CASE("RepeatLimiter: a line repeated every 200 ms is written once per period, with how many "
          "were held back") {
  RepeatLimiter limit(5'000);
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
  CHECK(RepeatLimiter::HeldBackNote(0).empty());
  CHECK(RepeatLimiter::HeldBackNote(24) == " (24 more like it held back)");
}

TEST_CASE("RepeatLimiter: keys are limited each on their own, and one that stops repeating is "
          "forgotten") {
  RepeatLimiter limit(1'000);
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
