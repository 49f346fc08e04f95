// The one-word answer to "did this change help?", from a comparison of A
// (the change) against B (what it is compared with). Pure functions.
#pragma once

#include <optional>
#include <string_view>

#include "core/result.h"
#include "stats/compare.h"

namespace trainq::stats {

enum class Goal { kMax, kMin };                 // whether a larger metric is better
Result<Goal> ParseGoal(std::string_view text);  // "max" or "min"
std::string_view GoalName(Goal goal);

// kNegligible: significant, but the equivalence interval lies inside
// (-min_effect, +min_effect): a real change too small to act on.
// kEquivalent: not significant, and the equivalence interval lies inside
// (-min_effect, +min_effect): two one-sided tests (TOST) reject every change
// of min_effect or more. Distinct from kNoDetectableChange, which decides
// nothing (there is no min_effect to be equivalent within).
enum class Verdict { kBetter, kWorse, kNoDetectableChange, kNotEnoughRuns, kNegligible, kEquivalent };
// "better", "worse", "no detectable change", "not enough runs", "negligible",
// "equivalent".
std::string_view VerdictName(Verdict verdict);
// The verdict as every surface writes it: VerdictName, except "equivalent
// within ±0.003" (the margin, min_effect, in %g form).
std::string VerdictPhrase(Verdict verdict, std::optional<double> min_effect);
// Whether the verdict ends an adaptive batch: better, worse, negligible, equivalent.
bool Decided(Verdict verdict);

struct VerdictOptions {
  Goal goal = Goal::kMax;
  double alpha = 0.05;  // two-sided significance level, 0 < alpha < 1
  // The smallest difference worth acting on, in the metric's units (>= 0).
  std::optional<double> min_effect{};
  // After a multiple-comparison correction (stats/multiple.h): the test's
  // adjusted p-value, used instead of its own p, and the confidence level of
  // the interval checked against min_effect (absent: 1 - alpha).
  std::optional<double> adjusted_p{};
  std::optional<double> interval_level{};
  // The confidence level of the equivalence interval: 1 - 2 b, with b the
  // one-sided level of each of the two one-sided tests (absent: 1 - 2 alpha,
  // the classic TOST's 90 % interval at alpha 0.05). A sequential design
  // passes its one-sided nominal level at the current look.
  std::optional<double> equivalence_level{};
};

// Decides from a t-test of A - B (paired or Welch):
//  - no test (fewer than 2 runs on a side): not enough runs;
//  - p < alpha (the adjusted p when given) and |difference| >= min_effect: better or worse, by the goal;
//  - otherwise, with a min_effect: if the equivalence interval (TOST, level
//    equivalence_level) lies inside (-min_effect, +min_effect), every change
//    that large is rejected: equivalent, or negligible when p < alpha too (a
//    real change, too small to act on); if not, the runs cannot yet tell a
//    change of min_effect from none: not enough runs;
//  - otherwise (no min_effect): no detectable change. Without a size that
//    matters, "no difference" and "too few runs" cannot be told apart.
Verdict Decide(const std::optional<TTest>& test, const VerdictOptions& options);

// Decide() on the paired test when the comparison has one (the same seeds
// on both sides cancel seed noise), else on Welch's test.
Verdict Decide(const Comparison& comparison, const VerdictOptions& options);

}  // namespace trainq::stats
