#include "stats/verdict.h"

#include <catch2/catch.hpp>
#include <vector>

namespace trainq::stats {
namespace {

// A t-test result built by hand: the verdict rules only read estimate, se, df
// and p, so each case states them directly.
TTest Test(double estimate, double se, double df, double p) {
  TTest t;
  t.estimate = estimate;
  t.se = se;
  t.df = df;
  t.t = estimate / se;
  t.p = p;
  t.ci95 = TInterval(t, 0.95);
  return t;
}

TEST_CASE("ParseGoal and names") {
  CHECK(ParseGoal("max") == Goal::kMax);
  CHECK(ParseGoal("min") == Goal::kMin);
  auto bad = ParseGoal("maximize");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message.find("maximize") != std::string::npos);
  CHECK(VerdictName(Verdict::kBetter) == "better");
  CHECK(VerdictName(Verdict::kWorse) == "worse");
  CHECK(VerdictName(Verdict::kNoDetectableChange) == "no detectable change");
  CHECK(VerdictName(Verdict::kNegligible) == "negligible");
  CHECK(VerdictName(Verdict::kNotEnoughRuns) == "not enough runs");
}

TEST_CASE("Decide: a table of cases") {
  struct Case {
    const char* name;
    std::optional<TTest> test;
    Goal goal;
    std::optional<double> min_effect;
    Verdict want;
  };
  // se = 0.01 at df = 18: t_{0.975,18} = 2.10092, so the 95 % interval is
  // estimate +- 0.0210 and p < 0.05 exactly when |estimate| > 0.0210.
  const Case cases[] = {
      {"no test", std::nullopt, Goal::kMax, std::nullopt, Verdict::kNotEnoughRuns},
      {"up, max", Test(0.03, 0.01, 18, 0.0077), Goal::kMax, std::nullopt, Verdict::kBetter},
      {"up, min", Test(0.03, 0.01, 18, 0.0077), Goal::kMin, std::nullopt, Verdict::kWorse},
      {"down, max", Test(-0.03, 0.01, 18, 0.0077), Goal::kMax, std::nullopt, Verdict::kWorse},
      {"down, min", Test(-0.03, 0.01, 18, 0.0077), Goal::kMin, std::nullopt, Verdict::kBetter},
      {"not significant", Test(0.01, 0.01, 18, 0.33), Goal::kMax, std::nullopt,
       Verdict::kNoDetectableChange},
      {"significant, large enough", Test(0.03, 0.01, 18, 0.0077), Goal::kMax, 0.02,
       Verdict::kBetter},
      // Real but smaller than what matters, and the interval [0.0090, 0.051]
      // still reaches past 0.04: more runs could show a change that matters.
      {"significant, maybe too small", Test(0.03, 0.01, 18, 0.0077), Goal::kMax, 0.04,
       Verdict::kNotEnoughRuns},
      // TOST: the 90 % interval [-0.0121, 0.0225] lies inside (-0.05, 0.05):
      // every change that matters is rejected.
      {"equivalent", Test(0.0052, 0.01, 18, 0.61), Goal::kMax, 0.05, Verdict::kEquivalent},
      // The 90 % interval [-0.0121, 0.0225] reaches past 0.02: cannot tell yet.
      {"undecided", Test(0.0052, 0.01, 18, 0.61), Goal::kMax, 0.02, Verdict::kNotEnoughRuns},
      // Interval [0.0107, 0.0453] excludes 0 but estimate 0.028 < 0.06 and
      // lies inside (-0.06, 0.06): a real change, too small to matter. Named
      // as such, so the words agree with the p-value printed beside them.
      {"significant, too small", Test(0.028, 0.01, 18, 0.012), Goal::kMax, 0.06,
       Verdict::kNegligible},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    VerdictOptions o;
    o.goal = c.goal;
    o.min_effect = c.min_effect;
    CHECK(Decide(c.test, o) == c.want);
  }
}

TEST_CASE("Decide: alpha moves the line") {
  TTest t = Test(0.02, 0.01, 18, 0.061);
  CHECK(Decide(t, {.alpha = 0.05}) == Verdict::kNoDetectableChange);
  CHECK(Decide(t, {.alpha = 0.10}) == Verdict::kBetter);
}

TEST_CASE("Decide(Comparison): uses the paired test when there is one") {
  // Accuracies of 10 seeds (see compare_test.cc): Welch p = 0.0036, paired
  // p = 1.2e-5. At alpha = 0.001 only the paired test decides.
  std::vector<double> a = {0.662, 0.671, 0.659, 0.668, 0.675, 0.664, 0.669, 0.657, 0.673, 0.666};
  std::vector<double> b = {0.655, 0.661, 0.650, 0.664, 0.659, 0.652, 0.660, 0.648, 0.667, 0.658};
  VerdictOptions strict{.alpha = 0.001};
  auto unpaired = Compare(a, b);
  auto paired = Compare(a, b, {.paired = true});
  REQUIRE(unpaired);
  REQUIRE(paired);
  CHECK(Decide(*unpaired, strict) == Verdict::kNoDetectableChange);
  CHECK(Decide(*paired, strict) == Verdict::kBetter);
  CHECK(Decide(*paired, {.goal = Goal::kMin, .alpha = 0.001}) == Verdict::kWorse);
}

TEST_CASE("Decide(Comparison): one run a side is not enough, constants are decided") {
  std::vector<double> one = {0.7}, many = {0.6, 0.61, 0.59};
  auto c = Compare(one, many);
  REQUIRE(c);
  CHECK(Decide(*c, {}) == Verdict::kNotEnoughRuns);
  // A deterministic config: every run identical on each side.
  std::vector<double> a(3, 0.7), b(3, 0.6);
  auto d = Compare(a, b);
  REQUIRE(d);
  CHECK(Decide(*d, {}) == Verdict::kBetter);
  auto e = Compare(a, a);
  REQUIRE(e);
  CHECK(Decide(*e, {}) == Verdict::kNoDetectableChange);
  CHECK(Decide(*e, {.min_effect = 0.01}) == Verdict::kEquivalent);
}

TEST_CASE("Decide: equivalence is two one-sided tests at the level given") {
  // se 0.01, df 18: t_{0.95,18} = 1.7341, t_{0.975,18} = 2.1009. Estimate
  // 0.002 with margin 0.02: the 90 % interval [-0.0153, 0.0193] is inside,
  // the 95 % one [-0.0190, 0.0230] is not.
  TTest t = Test(0.002, 0.01, 18, 0.84);
  CHECK(Decide(t, {.min_effect = 0.02}) == Verdict::kEquivalent);
  CHECK(Decide(t, {.min_effect = 0.02, .equivalence_level = 0.95}) == Verdict::kNotEnoughRuns);
  CHECK(VerdictPhrase(Verdict::kEquivalent, 0.003) == "equivalent within ±0.003");
  CHECK(VerdictPhrase(Verdict::kEquivalent, std::nullopt) == "equivalent");
  CHECK(VerdictPhrase(Verdict::kBetter, 0.003) == "better");
  CHECK(VerdictName(Verdict::kEquivalent) == "equivalent");
  CHECK(Decided(Verdict::kEquivalent));
  CHECK(Decided(Verdict::kNegligible));
  CHECK_FALSE(Decided(Verdict::kNotEnoughRuns));
  CHECK_FALSE(Decided(Verdict::kNoDetectableChange));
}

}  // namespace
}  // namespace trainq::stats
