// Chart ticks at round numbers (issue 38.9: the experiment page's y axis read
// 0.9821, 0.9737, 0.9652; the sweeps page's "runs spent" 2.1, 7.05, 12, 16.95).
#include "agent/results/axis_ticks.h"

#include <catch2/catch.hpp>
#include <cmath>

namespace trainq {
namespace {

std::vector<std::string> Labels(const AxisTicks& t) {
  std::vector<std::string> out;
  for (double v : t.values) out.push_back(TickLabel(v, t.decimals));
  return out;
}

// True when consecutive ticks differ by one step of 1, 2 or 5 x 10^k, and
// each is a whole multiple of it (to the precision of doubles near it).
bool OneTwoFive(const AxisTicks& t) {
  if (t.values.size() < 2) return true;
  const double diff = t.values[1] - t.values[0];
  const double mag = std::pow(10.0, std::floor(std::log10(diff) + 1e-6));
  double step = 0;
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (std::fabs(diff / mag - m) < 1e-6) step = m * mag;
  }
  if (step == 0) return false;
  for (std::size_t i = 1; i < t.values.size(); ++i) {
    const double slack = 1e-12 * std::fabs(t.values[i]) + 1e-9 * step;
    if (std::fabs(t.values[i] - t.values[i - 1] - step) > 2 * slack) return false;
  }
  for (double v : t.values) {
    const double k = std::round(v / step);
    if (std::fabs(v - k * step) > 1e-12 * std::fabs(v) + 1e-9 * step) return false;
  }
  return true;
}

TEST_CASE("axis ticks: round numbers in 1-2-5 steps inside the range", "[ticks]") {
  struct Case {
    double lo, hi;
    std::vector<std::string> labels;
  };
  const Case cases[] = {
      {0.9483, 0.9821, {"0.95", "0.96", "0.97", "0.98"}},
      {2.1, 21.9, {"5", "10", "15", "20"}},
      {0, 1, {"0", "0.5", "1"}},
      {-0.021, 0.011, {"-0.02", "-0.01", "0", "0.01"}},
      {0.96, 0.961, {"0.96", "0.9605", "0.961"}},
      {0, 1000, {"0", "500", "1000"}},
      {0, 0.9, {"0", "0.2", "0.4", "0.6", "0.8"}},
      {17, 23, {"18", "20", "22"}},
  };
  for (const auto& c : cases) {
    INFO(c.lo << ".." << c.hi);
    auto t = NiceTicks(c.lo, c.hi);
    CHECK(Labels(t) == c.labels);
    CHECK(OneTwoFive(t));
    CHECK(t.values.size() >= 3);
    for (double v : t.values) CHECK((v >= c.lo - 1e-12 && v <= c.hi + 1e-12));
  }
  // Any range: 3 to a few ticks, each a multiple of a 1-2-5 step.
  for (double lo : {-3.7, 0.0, 0.123, 950.0}) {
    for (double span : {1e-6, 0.0049, 0.33, 7.0, 1234.5}) {
      INFO(lo << " + " << span);
      auto t = NiceTicks(lo, lo + span);
      CHECK(OneTwoFive(t));
      CHECK(t.values.size() >= 3);
      CHECK(t.values.size() <= 12);
    }
  }
  CHECK(NiceTicks(0.5, 0.5).values == std::vector<double>{0.5});
  CHECK(NiceTicks(NAN, 1).values.empty());
}

TEST_CASE("axis ticks: a log axis gets powers of ten, or 1-2-5 times them over a short range",
          "[ticks]") {
  CHECK(Labels(LogTicks(0.0003, 0.2)) == std::vector<std::string>{"0.001", "0.01", "0.1"});
  CHECK(Labels(LogTicks(0.0015, 0.03)) ==
        std::vector<std::string>{"0.002", "0.005", "0.01", "0.02"});
  CHECK(Labels(LogTicks(1, 10000)) == std::vector<std::string>{"1", "10", "100", "1000", "10000"});
  CHECK(LogTicks(3, 4).values.size() >= 3);  // no 1-2-5 value inside: linear ticks
}

TEST_CASE("axis ticks: labels drop trailing zeros and never read -0", "[ticks]") {
  CHECK(TickLabel(0.950000001, 2) == "0.95");
  CHECK(TickLabel(0.5, 2) == "0.5");
  CHECK(TickLabel(-0.0000001, 2) == "0");
  CHECK(TickLabel(20, 0) == "20");
}

}  // namespace
}  // namespace trainq
