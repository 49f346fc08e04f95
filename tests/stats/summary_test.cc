#include "stats/summary.h"

#include <catch2/catch.hpp>
#include <vector>

namespace trainq::stats {
namespace {

// Expected values: `python3 tests/stats/reference.py`, section "summary ...":
// mean/sd from statistics.fmean/stdev, quartiles from
// statistics.quantiles(method="inclusive"), the t quantile from integrating
// the t density (not Boost), the IQM by sorting and slicing.
const std::vector<double> kSleep1 = {0.7, -1.6, -0.2, -1.2, -0.1, 3.4, 3.7, 0.8, 0.0, 2.0};
const std::vector<double> kAccA = {0.662, 0.671, 0.659, 0.668, 0.675,
                                   0.664, 0.669, 0.657, 0.673, 0.666};
const std::vector<double> kSeven = {3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.6};

Approx Near(double x) { return Approx(x).epsilon(1e-12).margin(1e-15); }

TEST_CASE("Summarize: Student's sleep data, group 1") {
  Summary s = Summarize(kSleep1);
  CHECK(s.n == 10);
  CHECK(s.mean == Near(0.75));
  CHECK(s.sd == Near(1.7890096577591625));
  CHECK(s.se == Near(0.5657345274557277));
  REQUIRE(s.ci95);
  CHECK(s.ci95->lo == Approx(-0.5297804135262234).epsilon(1e-10));
  CHECK(s.ci95->hi == Approx(2.0297804135262236).epsilon(1e-10));
  CHECK(s.median == Near(0.35));
  CHECK(s.q1 == Near(-0.175));
  CHECK(s.q3 == Near(1.7));
  CHECK(s.iqr == Near(1.875));
  CHECK(s.iqm == Near(0.5333333333333333));  // mean of the middle 6 of 10
  CHECK(s.min == -1.6);
  CHECK(s.max == 3.7);
}

TEST_CASE("Summarize: accuracies close together keep their precision") {
  Summary s = Summarize(kAccA);
  CHECK(s.mean == Near(0.6664));
  CHECK(s.sd == Near(0.0059292120518291145));
  CHECK(s.se == Near(0.0018749814813900326));
  REQUIRE(s.ci95);
  CHECK(s.ci95->lo == Approx(0.6621584972117597).epsilon(1e-10));
  CHECK(s.ci95->hi == Approx(0.6706415027882405).epsilon(1e-10));
  CHECK(s.median == Near(0.667));
  CHECK(s.q1 == Near(0.6625));
  CHECK(s.q3 == Near(0.6705));
  CHECK(s.iqm == Near(0.6666666666666666));
}

TEST_CASE("Summarize: odd n with a tie and an outlier, unsorted input") {
  Summary s = Summarize(kSeven);
  CHECK(s.n == 7);
  CHECK(s.mean == Near(3.6571428571428575));
  CHECK(s.sd == Near(2.7729990641043876));
  CHECK(s.median == Near(3.0));
  CHECK(s.q1 == Near(1.8));
  CHECK(s.q3 == Near(4.5));
  // floor(7/4) = 1 value cut at each end: mean(1, 2.6, 3, 4, 5) = 3.12.
  CHECK(s.iqm == Near(3.12));
  REQUIRE(s.ci95);
  CHECK(s.ci95->lo == Approx(1.0925464626160366).epsilon(1e-10));
  CHECK(s.ci95->hi == Approx(6.221739251669678).epsilon(1e-10));
}

TEST_CASE("Summarize: n = 1 has no spread and no interval") {
  std::vector<double> one = {0.66};
  Summary s = Summarize(one);
  CHECK(s.n == 1);
  CHECK(s.mean == 0.66);
  CHECK(s.sd == 0);
  CHECK(s.se == 0);
  CHECK_FALSE(s.ci95.has_value());
  CHECK(s.median == 0.66);
  CHECK(s.iqm == 0.66);
  CHECK(s.min == 0.66);
  CHECK(s.max == 0.66);
  CHECK(s.iqr == 0);
}

TEST_CASE("Summarize: all values equal give sd 0 and a point interval, no NaN") {
  std::vector<double> same(5, 0.1);
  Summary s = Summarize(same);
  CHECK(s.mean == 0.1);
  CHECK(s.sd == 0);
  CHECK(s.se == 0);
  REQUIRE(s.ci95);
  CHECK(s.ci95->lo == 0.1);
  CHECK(s.ci95->hi == 0.1);
  CHECK(s.iqm == 0.1);  // exactly, not 0.1 + rounding
  CHECK(s.median == 0.1);
}

TEST_CASE("Summarize: empty input gives n = 0") {
  Summary s = Summarize(std::span<const double>{});
  CHECK(s.n == 0);
  CHECK_FALSE(s.ci95.has_value());
}

TEST_CASE("Summarize: the first five fields still aggregate-initialise in order") {
  // agent/cli/cmd_status.cc and older callers rely on {n, mean, sd, min, max}.
  Summary s{3, 2.0, 1.0, 1.0, 3.0};
  CHECK(s.n == 3);
  CHECK(s.mean == 2.0);
  CHECK(s.sd == 1.0);
  CHECK(s.min == 1.0);
  CHECK(s.max == 3.0);
}

TEST_CASE("MeanInterval: other levels widen and narrow as they should") {
  Summary s = Summarize(kSleep1);
  auto ci90 = MeanInterval(s, 0.90);
  auto ci99 = MeanInterval(s, 0.99);
  REQUIRE(ci90);
  REQUIRE(ci99);
  CHECK(ci90->half_width() < s.ci95->half_width());
  CHECK(ci99->half_width() > s.ci95->half_width());
  // t_{0.975, 9} = 2.2621571627981893 (reference.py, "t quantiles").
  CHECK(s.ci95->half_width() / s.se == Approx(2.2621571627981893).epsilon(1e-10));
}

TEST_CASE("SortedQuantile: type 7 interpolation at the ends and between points") {
  std::vector<double> x = {1, 2, 4, 8};
  CHECK(SortedQuantile(x, 0) == 1);
  CHECK(SortedQuantile(x, 1) == 8);
  CHECK(SortedQuantile(x, 0.5) == 3);            // halfway between 2 and 4
  CHECK(SortedQuantile(x, 0.25) == Near(1.75));  // h = 0.75
  std::vector<double> one = {5};
  CHECK(SortedQuantile(one, 0.3) == 5);
}

}  // namespace
}  // namespace trainq::stats
