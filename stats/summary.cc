#include "stats/summary.h"

#include <algorithm>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <vector>

namespace trainq::stats {

double SortedQuantile(std::span<const double> sorted, double p) {
  // Type 7: h = (n-1)p, interpolate between x[floor h] and x[floor h + 1].
  double h = static_cast<double>(sorted.size() - 1) * p;
  auto lo = static_cast<std::size_t>(std::floor(h));
  if (lo + 1 >= sorted.size()) return sorted.back();
  double frac = h - static_cast<double>(lo);
  return sorted[lo] + frac * (sorted[lo + 1] - sorted[lo]);
}

std::optional<Interval> MeanInterval(const Summary& s, double level) {
  if (s.n < 2) return std::nullopt;
  boost::math::students_t dist(static_cast<double>(s.n - 1));
  double q = boost::math::quantile(dist, 0.5 + level / 2);
  return Interval{s.mean - q * s.se, s.mean + q * s.se};
}

Summary Summarize(std::span<const double> values) {
  Summary s;
  s.n = values.size();
  if (s.n == 0) return s;
  // Welford's update: stable for values that are close together, as accuracies are.
  double mean = 0, m2 = 0;
  std::size_t k = 0;
  for (double v : values) {
    ++k;
    double d = v - mean;
    mean += d / static_cast<double>(k);
    m2 += d * (v - mean);
  }
  s.mean = mean;
  s.sd = s.n > 1 ? std::sqrt(m2 / static_cast<double>(s.n - 1)) : 0.0;
  s.se = s.n > 1 ? s.sd / std::sqrt(static_cast<double>(s.n)) : 0.0;
  s.ci95 = MeanInterval(s, 0.95);

  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  s.min = sorted.front();
  s.max = sorted.back();
  s.median = SortedQuantile(sorted, 0.5);
  s.q1 = SortedQuantile(sorted, 0.25);
  s.q3 = SortedQuantile(sorted, 0.75);
  s.iqr = s.q3 - s.q1;

  std::size_t cut = s.n / 4;
  double sum = 0;
  for (std::size_t i = cut; i < s.n - cut; ++i) sum += sorted[i];
  s.iqm = sum / static_cast<double>(s.n - 2 * cut);
  // All-equal inputs must give exactly that value back, not a rounding neighbour.
  if (s.min == s.max) s.mean = s.iqm = s.min;
  return s;
}

}  // namespace trainq::stats
