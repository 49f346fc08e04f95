#include "stats/sequential.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <random>
#include <vector>

namespace trainq::stats {
namespace {

double TwoSidedZP(double z) { return std::erfc(std::fabs(z) / std::sqrt(2.0)); }

TEST_CASE("SpendingBoundaries: five equal looks match the published O'Brien-Fleming bounds") {
  // ldbounds::bounds(seq(0.2, 1, 0.2), iuse = c(1, 1), alpha = c(0.025, 0.025))
  // and gsDesign (sfLDOF, two-sided 0.05): 4.8769 3.3569 2.6803 2.2898 2.0310.
  const std::vector<double> t = {0.2, 0.4, 0.6, 0.8, 1.0};
  auto c = SpendingBoundaries(t, 0.05, 2);
  const double want[] = {4.8769, 3.3569, 2.6803, 2.2898, 2.0310};
  REQUIRE(c.size() == 5);
  for (int k = 0; k < 5; ++k) CHECK(c[k] == Approx(want[k]).margin(2e-3));
  // One-sided at 0.025 is each side of the two-sided design.
  auto one = SpendingBoundaries(t, 0.025, 1);
  for (int k = 0; k < 5; ++k) CHECK(one[k] == Approx(c[k]).margin(1e-3));
}

TEST_CASE("SpentByOBrienFleming spends nothing at 0 and all of alpha at 1") {
  CHECK(SpentByOBrienFleming(0.05, 0) == 0);
  CHECK(SpentByOBrienFleming(0.05, 1) == Approx(0.05));
  CHECK(SpentByOBrienFleming(0.05, 0.5) < SpentByOBrienFleming(0.05, 0.75));
}

TEST_CASE("NominalLevel: one look is the fixed test, Bonferroni splits evenly") {
  SequentialDesign one;
  CHECK(NominalLevel(one, 1, 0.05) == 0.05);
  CHECK(RepeatedP(one, 1, 0.02) == 0.02);
  const int runs[] = {4, 8, 12, 16, 20, 24};
  auto bonf = DesignForLooks(SequentialKind::kBonferroni, runs);
  CHECK(bonf.looks() == 6);
  CHECK(NominalLevel(bonf, 3, 0.05) == Approx(0.05 / 6));
  CHECK(RepeatedP(bonf, 3, 0.001) == Approx(0.006));
  CHECK(RepeatedP(bonf, 3, 0.5) == 1);
  auto spend = DesignForLooks(SequentialKind::kSpending, runs);
  // O'Brien-Fleming: strict early, close to alpha at the last look, and
  // more than Bonferroni's share from the middle on.
  CHECK(NominalLevel(spend, 1, 0.05) < 1e-4);
  CHECK(NominalLevel(spend, 6, 0.05) > 0.04);
  CHECK(NominalLevel(spend, 4, 0.05) > 0.05 / 6);
  for (int k = 2; k <= 6; ++k) CHECK(NominalLevel(spend, k, 0.05) > NominalLevel(spend, k - 1, 0.05));
}

TEST_CASE("RepeatedP is exact at 0.05, monotone and never below p") {
  const int runs[] = {4, 8, 12, 16, 20, 24};
  auto d = DesignForLooks(SequentialKind::kSpending, runs);
  for (int k = 1; k <= 6; ++k) {
    double level = NominalLevel(d, k, 0.05);
    CHECK(RepeatedP(d, k, level) == Approx(0.05).epsilon(1e-9));
    CHECK(RepeatedP(d, k, level * 0.999) < 0.05);
    CHECK(RepeatedP(d, k, level * 1.001) > 0.05);
    double prev = 0;
    for (double p : {1e-9, 1e-6, 1e-4, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 0.6, 0.9, 1.0}) {
      double r = RepeatedP(d, k, p);
      CHECK(r >= p);
      CHECK(r >= prev);
      CHECK(r <= 1);
      prev = r;
    }
  }
}

TEST_CASE("A spending design keeps the error across looks at alpha (Brownian simulation)") {
  // Z_k = B(t_k) / sqrt(t_k): the chance that some look crosses its
  // boundary, and that the repeated p-value falls below 0.01 at some look.
  const int runs[] = {4, 8, 12, 16, 20, 24};
  auto d = DesignForLooks(SequentialKind::kSpending, runs);
  std::vector<double> level05, level01;
  for (int k = 1; k <= 6; ++k) {
    level05.push_back(NominalLevel(d, k, 0.05));
    level01.push_back(NominalLevel(d, k, 0.01));
  }
  std::mt19937_64 rng(40);
  std::normal_distribution<double> normal;
  const int paths = 200000;
  int crossed05 = 0, crossed01 = 0, repeated01 = 0;
  for (int i = 0; i < paths; ++i) {
    double b = 0, t_prev = 0;
    bool c05 = false, c01 = false, r01 = false;
    for (int k = 0; k < 6; ++k) {
      double t = d.fractions[k];
      b += std::sqrt(t - t_prev) * normal(rng);
      t_prev = t;
      double p = TwoSidedZP(b / std::sqrt(t));
      c05 = c05 || p < level05[k];
      c01 = c01 || p < level01[k];
      if (k % 2 == 1) r01 = r01 || RepeatedP(d, k + 1, p) < 0.01;  // every other look
    }
    crossed05 += c05;
    crossed01 += c01;
    repeated01 += r01;
  }
  // Binomial sd at 200,000 paths: 0.00049 (0.05), 0.00022 (0.01).
  CHECK(crossed05 / double(paths) == Approx(0.05).margin(0.0015));
  CHECK(crossed01 / double(paths) == Approx(0.01).margin(0.0007));
  CHECK(repeated01 / double(paths) <= 0.01 + 0.0007);
}

TEST_CASE("ParseSequentialKind names the accepted values") {
  CHECK(ParseSequentialKind("spending") == SequentialKind::kSpending);
  CHECK(ParseSequentialKind("bonferroni") == SequentialKind::kBonferroni);
  auto bad = ParseSequentialKind("pocock");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("pocock") != std::string::npos);
}

}  // namespace
}  // namespace trainq::stats
