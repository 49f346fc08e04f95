// The test-set noise floor (Jordan 2024, "Calibrated Chaos: Variance Between
// Runs of Neural Network Training is Harmless and Inevitable", arXiv
// 2304.01910): a metric that is the share of n evaluation examples a model
// gets right (accuracy, error rate) varies between runs by at least about
// sqrt(p(1-p)/n) from which examples each run happens to get right, even when
// the runs are equally good on the distribution. When the spread between
// seeds is no larger than that, the evaluation set, not training, sets it:
// more seeds do not shrink it, a larger evaluation set does.
// docs/STATISTICS.md ("The test-set noise floor") gives the rule below.
#pragma once

#include <optional>
#include <span>

namespace trainq::stats {

struct NoiseFloor {
  double examples = 0;          // n, the evaluation set size
  double p = 0;                 // the mean metric, a proportion in [0, 1]
  double floor = 0;             // sqrt(p(1-p)/n)
  int seeds = 0;                // values the seed sd comes from
  double sd = 0;                // the seed sd (sample, n-1)
  double sd_lo = 0, sd_hi = 0;  // its 95% interval (chi-square on seeds-1 df)
  double ratio = 0;             // sd / floor (infinite when the floor is 0)
  // The seed sd's 95% interval reaches down to the floor (sd_lo <= floor):
  // the seeds cannot be told apart from runs that differ only by which
  // evaluation examples they get right.
  bool at_floor = false;
};

// The floor of `values` (one metric per seed) scored on `examples`
// evaluation examples. None when fewer than 2 values, `examples` < 1, or
// any value lies outside [0, 1] (the metric is not a proportion of examples).
std::optional<NoiseFloor> EvalNoiseFloor(std::span<const double> values, double examples);

}  // namespace trainq::stats
