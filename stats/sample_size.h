// How many runs to ask for. Pure functions; `sd` is the per-run standard
// deviation, usually estimated from a previous batch.
#pragma once

#include "core/result.h"

namespace trainq::stats {

// Above this, advice is refused rather than computed: nobody queues it.
inline constexpr int kMaxAdvisedRuns = 10'000'000;

// The smallest n >= 2 for which the Student-t interval of the mean at `level`
// has half-width t_{(1+level)/2, n-1} * sd / sqrt(n) <= half_width.
// Fails (invalid_argument) for half_width <= 0, sd < 0, a level outside
// (0, 1), or an answer above kMaxAdvisedRuns.
Result<int> RunsForHalfWidth(double sd, double half_width, double level = 0.95);

// The smallest runs per side n >= 2 for which a two-sided two-sample t-test
// at `alpha`, with df = 2n - 2, detects a true difference `difference` with
// probability >= `power` when both sides have standard deviation `sd`.
// Power comes from the noncentral t distribution (both rejection tails), as
// R's power.t.test(strict = TRUE) and G*Power compute it. Fails
// (invalid_argument) for difference == 0, sd < 0, alpha or power outside
// (0, 1), or an answer above kMaxAdvisedRuns.
Result<int> RunsPerSideForDifference(double sd, double difference, double power = 0.8,
                                     double alpha = 0.05);

// The power of that test with n runs per side (n >= 2).
double TwoSampleTPower(int n, double sd, double difference, double alpha);

// The same for a paired design: the smallest number of pairs n >= 2 for which
// a two-sided one-sample t-test of the per-seed differences (df = n - 1, sd
// of the differences `sd_diff`) at `alpha` detects a mean difference
// `difference` with probability >= `power`. Fails as RunsPerSideForDifference.
Result<int> PairsForDifference(double sd_diff, double difference, double power = 0.8,
                               double alpha = 0.05);

// The power of the paired test with n pairs (n >= 2).
double PairedTPower(int n, double sd_diff, double difference, double alpha);

}  // namespace trainq::stats
