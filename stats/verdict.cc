#include "stats/verdict.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace trainq::stats {

Result<Goal> ParseGoal(std::string_view text) {
  if (text == "max") return Goal::kMax;
  if (text == "min") return Goal::kMin;
  return Fail(ErrorKind::kInvalidArgument,
              "goal must be \"max\" or \"min\", got \"" + std::string(text) + "\"");
}

std::string_view GoalName(Goal goal) { return goal == Goal::kMax ? "max" : "min"; }

std::string_view VerdictName(Verdict verdict) {
  switch (verdict) {
    case Verdict::kBetter:
      return "better";
    case Verdict::kWorse:
      return "worse";
    case Verdict::kNoDetectableChange:
      return "no detectable change";
    case Verdict::kNotEnoughRuns:
      return "not enough runs";
    case Verdict::kNegligible:
      return "negligible";
    case Verdict::kEquivalent:
      return "equivalent";
  }
  return "?";
}

std::string VerdictPhrase(Verdict verdict, std::optional<double> min_effect) {
  std::string word(VerdictName(verdict));
  if (verdict != Verdict::kEquivalent || !min_effect) return word;
  char margin[32];
  std::snprintf(margin, sizeof margin, "%g", *min_effect);
  return word + " within ±" + margin;
}

bool Decided(Verdict verdict) {
  return verdict == Verdict::kBetter || verdict == Verdict::kWorse ||
         verdict == Verdict::kNegligible || verdict == Verdict::kEquivalent;
}

Verdict Decide(const std::optional<TTest>& test, const VerdictOptions& options) {
  if (!test) return Verdict::kNotEnoughRuns;
  double min_effect = options.min_effect.value_or(0);
  double diff = test->estimate;
  double p = options.adjusted_p.value_or(test->p);
  if (p < options.alpha && std::fabs(diff) >= min_effect) {
    bool a_larger = diff > 0;
    return a_larger == (options.goal == Goal::kMax) ? Verdict::kBetter : Verdict::kWorse;
  }
  if (min_effect > 0) {
    // Two one-sided tests at level b each: the 1 - 2b interval inside the margin.
    Interval ci = TInterval(*test, options.equivalence_level.value_or(1 - 2 * options.alpha));
    if (-min_effect < ci.lo && ci.hi < min_effect) {
      return p < options.alpha ? Verdict::kNegligible : Verdict::kEquivalent;
    }
    return Verdict::kNotEnoughRuns;
  }
  return Verdict::kNoDetectableChange;
}

Verdict Decide(const Comparison& comparison, const VerdictOptions& options) {
  return Decide(comparison.paired ? comparison.paired : comparison.welch, options);
}

}  // namespace trainq::stats
