#include "stats/numbers.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace trainq::stats {
namespace {

TEST_CASE("ParseNumberLines: numbers, comments, blank lines, CRLF") {
  auto r = ParseNumberLines("# accuracy per seed\n0.66\n\n  0.7  # seed 2\r\n-1e-3\n+2\n", "a.txt");
  REQUIRE(r);
  REQUIRE(r->size() == 4);
  CHECK((*r)[0].line == 2);
  CHECK((*r)[0].value == 0.66);
  CHECK((*r)[1].line == 4);
  CHECK((*r)[1].value == 0.7);
  CHECK((*r)[2].value == -0.001);
  CHECK((*r)[3].line == 6);
  CHECK((*r)[3].value == 2);
}

TEST_CASE("ParseNumberLines: no trailing newline") {
  auto r = ParseNumberLines("1\n2", "a.txt");
  REQUIRE(r);
  CHECK(r->size() == 2);
}

TEST_CASE("ParseNumberLines: errors name the file and line") {
  auto bad = ParseNumberLines("0.5\n0.6\nabc\n", "a.txt");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().kind == ErrorKind::kInvalidArgument);
  CHECK(bad.error().message == "a.txt:3: not a number: \"abc\"");
  CHECK(ParseNumberLines("0.5x\n", "f").error().message == "f:1: not a number: \"0.5x\"");
  CHECK(ParseNumberLines("1 2\n", "f").error().message == "f:1: not a number: \"1 2\"");
  CHECK(ParseNumberLines("0,5\n", "f").error().message == "f:1: not a number: \"0,5\"");
  CHECK_FALSE(ParseNumberLines("+-1\n", "f"));
  CHECK_FALSE(ParseNumberLines("+\n", "f"));
  CHECK(ParseNumberLines("1e999\n", "f").error().message.find("f:1: out of range") == 0);
}

TEST_CASE("ParseNumberLines: empty or comment-only input is an error") {
  CHECK(ParseNumberLines("", "e.txt").error().message == "e.txt: no numbers in the file");
  CHECK_FALSE(ParseNumberLines("# nothing yet\n\n", "e.txt"));
}

TEST_CASE("ParseNumberLines: nan and inf parse, for the caller to leave out") {
  auto r = ParseNumberLines("0.5\nnan\ninf\n-inf\n", "a.txt");
  REQUIRE(r);
  REQUIRE(r->size() == 4);
  CHECK(std::isnan((*r)[1].value));
  CHECK((*r)[1].line == 2);
  CHECK(std::isinf((*r)[2].value));
  CHECK((*r)[3].value < 0);
}

}  // namespace
}  // namespace trainq::stats
