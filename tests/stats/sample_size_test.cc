#include "stats/sample_size.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

namespace trainq::stats {
namespace {

TEST_CASE("RunsForHalfWidth: the smallest n whose t half-width fits") {
  // sd 1, half-width 0.5: t_{0.975,16}/sqrt(17) = 2.1199/4.1231 = 0.514 > 0.5
  // and t_{0.975,17}/sqrt(18) = 2.1098/4.2426 = 0.497 <= 0.5, so 18. The
  // quantiles are from any t table; reference.py's search gives 18 as well.
  CHECK(RunsForHalfWidth(1, 0.5) == 18);
  // Only the ratio matters: accuracy sd 0.01, wanted +-0.005.
  CHECK(RunsForHalfWidth(0.01, 0.005) == 18);
  // 99 %: reference.py's search (t_{0.995}) gives 31.
  CHECK(RunsForHalfWidth(2, 1, 0.99) == 31);
}

TEST_CASE("RunsForHalfWidth: a loose target still needs 2 runs, sd 0 too") {
  CHECK(RunsForHalfWidth(1, 100) == 2);
  CHECK(RunsForHalfWidth(0, 0.001) == 2);
}

TEST_CASE("RunsForHalfWidth: bad input and absurd targets are errors") {
  CHECK_FALSE(RunsForHalfWidth(1, 0));
  CHECK_FALSE(RunsForHalfWidth(1, -1));
  CHECK_FALSE(RunsForHalfWidth(-1, 0.5));
  CHECK_FALSE(RunsForHalfWidth(1, 0.5, 1.0));
  auto huge = RunsForHalfWidth(1, 1e-6);
  REQUIRE_FALSE(huge);
  CHECK(huge.error().message.find("10000000") != std::string::npos);
}

TEST_CASE("RunsPerSideForDifference: Cohen's power table, alpha 0.05 two-sided, power 0.8") {
  // Cohen (1988), Statistical Power Analysis, Table 2.4.1: n per group for
  // d = 0.2, 0.5, 0.8 is 393, 64, 26; R's power.t.test(delta = d, power = 0.8)
  // gives n = 393.4, 63.77, 25.52 (so 394, 64, 26) and n = 16.71 (17) for
  // d = 1. Cohen's 393 rounds his normal approximation; the exact noncentral
  // t answer is 394. reference.py integrates the power: n = 16 gives 0.7814,
  // n = 17 gives 0.8070; 63 -> 0.7952, 64 -> 0.8015; 25 -> 0.7915, 26 -> 0.8075.
  CHECK(RunsPerSideForDifference(1, 1) == 17);
  CHECK(RunsPerSideForDifference(1, 0.5) == 64);
  CHECK(RunsPerSideForDifference(1, 0.8) == 26);
  CHECK(RunsPerSideForDifference(1, 0.2) == 394);
  // Units do not matter, nor the sign of the difference.
  CHECK(RunsPerSideForDifference(0.01, -0.005) == 64);
}

TEST_CASE("TwoSampleTPower: matches the numerically integrated power") {
  // reference.py, "power": integrates the normal cdf over the chi-square density.
  CHECK(TwoSampleTPower(16, 1, 1, 0.05) == Approx(0.7813977924663907).epsilon(1e-6));
  CHECK(TwoSampleTPower(17, 1, 1, 0.05) == Approx(0.8070367151472154).epsilon(1e-6));
  CHECK(TwoSampleTPower(64, 1, 0.5, 0.05) == Approx(0.8014595579223297).epsilon(1e-6));
  // R's ?power.t.test example, power.t.test(n = 20, delta = 1): 0.8689528
  // (R counts the upper tail only; the lower one adds about 2e-7 here).
  CHECK(TwoSampleTPower(20, 1, 1, 0.05) == Approx(0.8689530277240003).epsilon(1e-6));
}

TEST_CASE("RunsPerSideForDifference: other power and alpha, and edge cases") {
  // R's own ?power.t.test example: power.t.test(power = .90, delta = 1)
  // gives n = 22.02110, so 23; reference.py: n = 22 -> 0.8997, 23 -> 0.9125.
  CHECK(RunsPerSideForDifference(1, 1, 0.9) == 23);
  // reference.py at alpha 0.01: n = 25 -> 0.7986, n = 26 -> 0.8184.
  CHECK(RunsPerSideForDifference(1, 1, 0.8, 0.01) == 26);
  CHECK(RunsPerSideForDifference(0, 0.001) == 2);
  CHECK(RunsPerSideForDifference(1, 100) == 2);
  CHECK_FALSE(RunsPerSideForDifference(1, 0));
  CHECK_FALSE(RunsPerSideForDifference(-1, 1));
  CHECK_FALSE(RunsPerSideForDifference(1, 1, 1.5));
  CHECK_FALSE(RunsPerSideForDifference(1, 1, 0.8, 0));
  CHECK_FALSE(RunsPerSideForDifference(1, 1e-5));
}

}  // namespace
}  // namespace trainq::stats

using namespace trainq::stats;

TEST_CASE("power: the smallest n equals SciPy's on 28 cases, two-sample and paired") {
  // Written by tests/stats/power_reference.py (scipy.stats.nct).
  std::ifstream in(std::string(TRAINQ_SOURCE_DIR) + "/tests/stats/data/power_reference.json");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  auto j = nlohmann::json::parse(text.str());
  int checked = 0;
  for (const auto& c : j.at("cases")) {
    double sd = c.at("sd"), d = c.at("effect"), alpha = c.at("alpha"), power = c.at("power");
    int want = c.at("n");
    bool paired = c.at("design") == "paired";
    INFO(c.dump());
    auto n = paired ? PairsForDifference(sd, d, power, alpha)
                    : RunsPerSideForDifference(sd, d, power, alpha);
    REQUIRE(n);
    CHECK(*n == want);
    double at_n = paired ? PairedTPower(want, sd, d, alpha) : TwoSampleTPower(want, sd, d, alpha);
    CHECK(at_n == Approx(c.at("power_at_n").get<double>()).epsilon(1e-7));
    if (!c.at("power_at_n_minus_1").is_null()) {
      double below = paired ? PairedTPower(want - 1, sd, d, alpha)
                            : TwoSampleTPower(want - 1, sd, d, alpha);
      CHECK(below == Approx(c.at("power_at_n_minus_1").get<double>()).epsilon(1e-7));
      CHECK(below < power);
    }
    ++checked;
  }
  CHECK(checked == 28);
}

TEST_CASE("PairsForDifference: bad input is an error, sd 0 needs 2 pairs") {
  CHECK_FALSE(PairsForDifference(1, 0));
  CHECK_FALSE(PairsForDifference(-1, 1));
  CHECK_FALSE(PairsForDifference(1, 1, 1.0));
  CHECK_FALSE(PairsForDifference(1, 1, 0.8, 0));
  CHECK(PairsForDifference(0, 1) == 2);
}
