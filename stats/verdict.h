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

// kNegligible: significant, but the whole interval lies inside
// (-min_effect, +min_effect): a real change too small to act on.
enum class Verdict { kBetter, kWorse, kNoDetectableChange, kNotEnoughRuns, kNegligible };
// "better", "worse", "no detectable change", "not enough runs", "negligible".
std::string_view VerdictName(Verdict verdict);

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
};

// Decides from a t-test of A - B (paired or Welch):
//  - no test (fewer than 2 runs on a side): not enough runs;
//  - p < alpha (the adjusted p when given) and |difference| >= min_effect: better or worse, by the goal;
//  - otherwise, with a min_effect: if the (1 - alpha) interval of the
//    difference lies inside (-min_effect, +min_effect), no change that large
//    is plausible: no detectable change; if not, the runs cannot yet tell a
//    change of min_effect from none: not enough runs; an interval inside
//    that excludes 0 (p < alpha) is a real but negligible change;
//  - otherwise (no min_effect): no detectable change. Without a size that
//    matters, "no difference" and "too few runs" cannot be told apart.
Verdict Decide(const std::optional<TTest>& test, const VerdictOptions& options);

// Decide() on the paired test when the comparison has one (the same seeds
// on both sides cancel seed noise), else on Welch's test.
Verdict Decide(const Comparison& comparison, const VerdictOptions& options);

}  // namespace trainq::stats
