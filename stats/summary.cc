#include "stats/summary.h"

#include <algorithm>
#include <cmath>

namespace trainq::stats {

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
  auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  s.min = *lo;
  s.max = *hi;
  return s;
}

}  // namespace trainq::stats
