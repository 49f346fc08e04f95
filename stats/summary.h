// Descriptive statistics of one batch of repeated runs. Pure functions.
//
// Every function here expects finite values: NaN and infinities must be
// removed by the caller (the CLI parser and the result loader do, with a
// warning), because one NaN would silently poison every number below.
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace trainq::stats {

// A closed interval [lo, hi], e.g. a confidence interval.
struct Interval {
  double lo = 0;
  double hi = 0;
  double half_width() const { return (hi - lo) / 2; }
  bool contains(double x) const { return lo <= x && x <= hi; }
  friend bool operator==(const Interval&, const Interval&) = default;
};

struct Summary {
  std::size_t n = 0;
  double mean = 0;
  double sd = 0;  // sample standard deviation (Bessel's n-1); 0 when n < 2
  double min = 0;
  double max = 0;
  double se = 0;  // standard error of the mean, sd / sqrt(n); 0 when n < 2
  // 95 % Student-t interval of the mean. Empty when n < 2: one run says
  // nothing about the spread, and a zero-width interval would claim certainty.
  std::optional<Interval> ci95{};
  // Quartiles by linear interpolation between order statistics (Hyndman & Fan
  // type 7, the default of R, NumPy and Python's statistics.quantiles with
  // method="inclusive").
  double median = 0;
  double q1 = 0;
  double q3 = 0;
  double iqr = 0;  // q3 - q1
  // Interquartile mean: the mean after dropping floor(n/4) values at each end,
  // i.e. scipy.stats.trim_mean(x, 0.25) as used by rliable (Agarwal et al.,
  // NeurIPS 2021). Robust to a diverged seed, but uses more runs than the median.
  double iqm = 0;
};

// Summarises `values` (any order). An empty span gives a Summary with n == 0
// and every other field 0.
Summary Summarize(std::span<const double> values);

// The Student-t interval of the mean at confidence `level` (0 < level < 1);
// empty when n < 2. With sd == 0 it is the single point [mean, mean].
std::optional<Interval> MeanInterval(const Summary& s, double level);

// Quantile p (0 <= p <= 1) of already sorted values by linear interpolation
// (type 7). REQUIRES: `sorted` non-empty and ascending.
double SortedQuantile(std::span<const double> sorted, double p);

}  // namespace trainq::stats
