// The test-set noise floor (stats/noise_floor.h): the binomial floor, the
// seed sd's chi-square interval and the "sits at the floor" rule of
// docs/STATISTICS.md.
#include "stats/noise_floor.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

using trainq::stats::EvalNoiseFloor;

TEST_CASE("noise floor: sqrt(p(1-p)/n) of the mean, the sd's 95% interval and the rule",
          "[stats][floor]") {
  // Mean 0.9 on 10,000 examples: floor sqrt(0.09/10000) = 0.003.
  const std::vector<double> at = {0.897, 0.903, 0.900, 0.904, 0.896};
  auto f = EvalNoiseFloor(at, 10000);
  REQUIRE(f);
  CHECK(f->p == Approx(0.9));
  CHECK(f->floor == Approx(0.003));
  CHECK(f->seeds == 5);
  CHECK(f->sd == Approx(std::sqrt((9 + 9 + 0 + 16 + 16) * 1e-6 / 4)));
  // chi-square(4): 0.975 quantile 11.1433, 0.025 quantile 0.484419.
  CHECK(f->sd_lo == Approx(f->sd * std::sqrt(4 / 11.1433)).epsilon(1e-4));
  CHECK(f->sd_hi == Approx(f->sd * std::sqrt(4 / 0.484419)).epsilon(1e-4));
  CHECK(f->ratio == Approx(f->sd / 0.003));
  CHECK(f->at_floor);  // sd 0.0035: its interval's lower end (0.0021) is below 0.003

  // Training noise 10x the floor: clearly above it.
  const std::vector<double> above = {0.87, 0.93, 0.90, 0.94, 0.86};
  auto g = EvalNoiseFloor(above, 10000);
  REQUIRE(g);
  CHECK_FALSE(g->at_floor);
  CHECK(g->ratio > 10);

  // The rule is the interval, not a fixed ratio: an sd 1.6x the floor sits at
  // it with 4 seeds (the lower end is 0.57 sd) but not with 24 (0.78 sd).
  auto spread = [](int k, double sd) {
    std::vector<double> v;
    for (int i = 0; i < k; ++i) v.push_back(0.5 + ((i % 2) ? sd : -sd) * std::sqrt((k - 1.0) / k));
    return v;
  };
  const double floor_100 = std::sqrt(0.25 / 100);  // 0.05 at p 0.5, n 100
  auto four = EvalNoiseFloor(spread(4, 1.6 * floor_100), 100);
  auto many = EvalNoiseFloor(spread(24, 1.6 * floor_100), 100);
  REQUIRE(four);
  REQUIRE(many);
  CHECK(four->sd == Approx(1.6 * floor_100));
  CHECK(many->sd == Approx(1.6 * floor_100));
  CHECK(four->at_floor);
  CHECK_FALSE(many->at_floor);

  // No floor: one value, no examples, or a metric that is not a share.
  CHECK_FALSE(EvalNoiseFloor(std::vector<double>{0.9}, 1000));
  CHECK_FALSE(EvalNoiseFloor(at, 0));
  CHECK_FALSE(EvalNoiseFloor(std::vector<double>{0.5, 1.5}, 1000));
  CHECK_FALSE(EvalNoiseFloor(std::vector<double>{12.0, 13.0}, 1000));
}
