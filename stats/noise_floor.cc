#include "stats/noise_floor.h"

#include <boost/math/distributions/chi_squared.hpp>
#include <cmath>
#include <limits>

#include "stats/summary.h"

namespace trainq::stats {

std::optional<NoiseFloor> EvalNoiseFloor(std::span<const double> values, double examples) {
  if (values.size() < 2 || !(examples >= 1) || !std::isfinite(examples)) return std::nullopt;
  for (double v : values) {
    if (!(v >= 0 && v <= 1)) return std::nullopt;
  }
  auto s = Summarize(values);
  NoiseFloor f;
  f.examples = examples;
  f.p = s.mean;
  f.floor = std::sqrt(s.mean * (1 - s.mean) / examples);
  f.seeds = static_cast<int>(s.n);
  f.sd = s.sd;
  // (k-1) s^2 / sigma^2 ~ chi-square(k-1) for normal values: the 95%
  // interval of sigma is s sqrt((k-1)/q(0.975)) .. s sqrt((k-1)/q(0.025)).
  double df = static_cast<double>(s.n - 1);
  boost::math::chi_squared chi(df);
  f.sd_lo = s.sd * std::sqrt(df / boost::math::quantile(chi, 0.975));
  f.sd_hi = s.sd * std::sqrt(df / boost::math::quantile(chi, 0.025));
  f.ratio = f.floor > 0 ? s.sd / f.floor : std::numeric_limits<double>::infinity();
  f.at_floor = f.sd_lo <= f.floor;
  return f;
}

}  // namespace trainq::stats
