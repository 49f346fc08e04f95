// Descriptive statistics of one batch of repeated runs. Pure functions.
#pragma once

#include <cstddef>
#include <span>

namespace trainq::stats {

struct Summary {
  std::size_t n = 0;
  double mean = 0;
  double sd = 0;   // sample standard deviation (Bessel's n-1); 0 when n < 2
  double min = 0;
  double max = 0;
};

// Summarises `values`; NaN and infinite values must be removed by the caller.
Summary Summarize(std::span<const double> values);

}  // namespace trainq::stats
