// Comparing two batches of runs (A and B): tests, effect sizes, intervals.
// Pure functions; every difference is A minus B. Inputs must be finite.
//
// Degenerate data stays defined instead of turning into NaN: when both sides
// have sd 0 (a deterministic config), equal means give t = 0, p = 1 and a
// differing mean gives t = +-infinity, p = 0 and a zero-width interval.
#pragma once

#include <optional>
#include <span>

#include "core/result.h"
#include "stats/bootstrap.h"
#include "stats/summary.h"

namespace trainq::stats {

// A t-test of a difference in means.
struct TTest {
  double estimate = 0;  // the difference (A - B, or the mean paired difference)
  double se = 0;        // its standard error
  double t = 0;         // estimate / se; +-infinity when se == 0 and estimate != 0
  double df = 0;
  double p = 1;     // two-sided
  Interval ci95{};  // of the difference
};

// Two-sided p-value of t with df degrees of freedom (Student t).
double TwoSidedP(double t, double df);
// Interval estimate +- q * se with q the Student t quantile for `level`.
Interval TInterval(const TTest& test, double level);

// Welch's unequal-variance t-test with the Welch–Satterthwaite df. Empty when
// either side has fewer than 2 values (no variance to estimate).
std::optional<TTest> WelchTTest(std::span<const double> a, std::span<const double> b);

// One-sample t-test of mean(d) against 0, df = n - 1; empty when n < 2.
std::optional<TTest> OneSampleTTest(std::span<const double> d);

// Paired t-test on the differences a[i] - b[i] (the same seed on both sides).
// Empty when the sizes differ or there are fewer than 2 pairs.
std::optional<TTest> PairedTTest(std::span<const double> a, std::span<const double> b);

// Hedges' g: (mean A - mean B) / pooled sd, times the small-sample correction
// J = 1 - 3 / (4 (na + nb) - 9), the usual approximation of Hedges' (1981)
// gamma-function factor, as most packages use. Empty when either side has fewer than 2 values. With
// a pooled sd of 0 it is 0 for equal means and +-infinity otherwise.
std::optional<double> HedgesG(std::span<const double> a, std::span<const double> b);

// Mann–Whitney U of A with mid-ranks for ties: the number of pairs (a, b) with
// a > b, plus half the pairs with a == b. p_a_gt_b = u / (na nb) is the
// probability that a random run of A beats a random run of B (ties count
// half), the "common-language effect size". Empty when either side is empty.
struct MannWhitney {
  double u = 0;
  double p_a_gt_b = 0;
};
std::optional<MannWhitney> MannWhitneyU(std::span<const double> a, std::span<const double> b);

// Brown–Forsythe test of equal spread (Levene's test with the median as
// centre, robust to non-normal data): the one-way ANOVA F on |x - median of
// its group|, here for two groups (df 1, n_a + n_b - 2). Empty when a group
// has fewer than 2 values. When every deviation equals its group's mean
// deviation, F is 0 (equal) or +infinity (p = 0).
struct SpreadTest {
  double f = 0;
  double df1 = 1;
  double df2 = 0;
  double p = 1;
};
std::optional<SpreadTest> BrownForsytheTest(std::span<const double> a, std::span<const double> b);

// Probability of improvement (Bouthillier et al. 2021; Agarwal et al. 2021,
// rliable): the chance that a run of A beats a run of B, ties counting half.
// Paired (a[i], b[i] the same seed): the share of seeds where A's run beats
// B's; unpaired: the Mann-Whitney estimate U / (na nb). The interval is a
// seeded percentile bootstrap (resampling the pairs, or each side on its
// own), at options.level. Empty when a side is empty (paired: when the sizes
// differ or are 0); no interval with fewer than 2 values a side.
struct Improvement {
  double estimate = 0.5;
  std::optional<Interval> interval;
  bool paired = false;
};
std::optional<Improvement> ProbabilityOfImprovement(std::span<const double> a,
                                                    std::span<const double> b, bool paired,
                                                    const BootstrapOptions& options = {});

struct CompareOptions {
  bool paired = false;  // also run the paired test; needs equal sizes
  BootstrapOptions bootstrap{};
};

struct Comparison {
  Summary a;
  Summary b;
  double diff = 0;  // mean A - mean B
  std::optional<TTest> welch;
  std::optional<TTest> paired;  // only with CompareOptions::paired
  std::optional<double> hedges_g;
  std::optional<MannWhitney> mann_whitney;
  // Percentile bootstrap interval of the difference at bootstrap.level (0.95
  // unless changed): resampling each side on its own, or, when paired,
  // resampling the per-seed differences, so that it matches the test the
  // verdict uses.
  std::optional<Interval> bootstrap_ci95;
};

// All of the above at once. Fails (invalid_argument) when a side is empty, or
// when paired is asked for and the sizes differ.
Result<Comparison> Compare(std::span<const double> a, std::span<const double> b,
                           const CompareOptions& options = {});

}  // namespace trainq::stats
