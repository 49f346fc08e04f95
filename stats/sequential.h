// Group-sequential designs: how much of the significance level alpha each
// look at a growing batch may use, so that stopping at the first decided
// look keeps the chance of any false verdict across all looks <= alpha.
// Pure functions; results are cached per design (thread-safe).
//
//   spending    Lan & DeMets (1983) alpha spending with the O'Brien-Fleming
//               shape f(t) = 2 - 2 Phi(z_{1-a/2} / sqrt(t)) per side, a the
//               one-sided level (alpha / 2 per side of a two-sided test, as
//               gsDesign's sfLDOF and ldbounds do): by information fraction
//               t (seeds now / seeds at the last look) a side has spent f(t)
//               of a. The boundary c_k of look
//               k solves P(no crossing before k, |Z_k| >= c_k) = f(t_k) -
//               f(t_{k-1}) under "no difference", with Z_1..Z_K the
//               standardized statistics of a Brownian motion
//               (corr(Z_j, Z_k) = sqrt(t_j / t_k)); the probabilities come
//               from the recursive numerical integration of Armitage,
//               McPherson & Rowe (1969) (Jennison & Turnbull 2000, ch. 19).
//   bonferroni  alpha / K at every look (the union bound; trainq before
//               issue 40, kept to reproduce old verdicts and for bench/).
//
// A t statistic is used through its p-value (Jennison & Turnbull's
// "significance level" approach, ch. 11): look k rejects when the t-test's
// two-sided p is below the nominal level 2 (1 - Phi(c_k)).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace trainq::stats {

enum class SequentialKind { kSpending, kBonferroni };

Result<SequentialKind> ParseSequentialKind(std::string_view text);  // "spending" | "bonferroni"
std::string_view SequentialKindName(SequentialKind k);              // "spending" | "bonferroni"
// "O'Brien-Fleming spending" | "Bonferroni over looks"
std::string_view SequentialKindTitle(SequentialKind k);

struct SequentialDesign {
  SequentialKind kind = SequentialKind::kSpending;
  // Information fractions of the planned looks, increasing, the last 1.
  // One look (a fixed number of runs): every function below is the plain
  // fixed-sample test.
  std::vector<double> fractions{1.0};
  int looks() const { return static_cast<int>(fractions.size()); }
};

// The design of looks at n_1 < n_2 < ... < n_K runs: fractions n_k / n_K.
SequentialDesign DesignForLooks(SequentialKind kind, std::span<const int> runs_at_look);

// The Lan-DeMets O'Brien-Fleming spending function of a one-sided level a:
// the part of a spent by information fraction t in [0, 1].
double SpentByOBrienFleming(double alpha, double t);

// Boundaries c_1..c_K on the z scale of a spending design with overall level
// `alpha`, `sides` 1 (upper only) or 2 (symmetric, |Z| >= c). A look that may
// spend nothing gets +infinity. Exact up to the integration grid (~1e-6).
std::vector<double> SpendingBoundaries(std::span<const double> fractions, double alpha, int sides);

// The nominal level of look `look` (1-based, clamped to 1..K): the p-value
// (two-sided for sides 2, one-sided for sides 1) below which that look
// rejects, for an overall level `alpha` of the design. Bonferroni: alpha / K.
// One look: alpha.
double NominalLevel(const SequentialDesign& design, int look, double alpha, int sides = 2);

// The repeated p-value of a test stopped (or looked at) at `look` with
// two-sided p-value `p`: the smallest overall alpha' at which the design,
// run at level alpha', rejects at that look. Valid under any stopping rule:
// P(RepeatedP <= a) <= P(some look crosses its level-a boundary) <= a, so a
// family correction (Holm, BH) can take it as an ordinary p-value.
// Bonferroni: min(1, K p). One look: p. Spending: interpolated (log-log)
// between exact levels on a fixed grid of alpha' that contains 0.05, 0.01
// and 0.001 exactly, so a decision at those levels is exact; above 0.5 it is
// only shown, never used for a decision.
double RepeatedP(const SequentialDesign& design, int look, double p);

}  // namespace trainq::stats
