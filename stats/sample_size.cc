#include "stats/sample_size.h"

#include <algorithm>
#include <boost/math/distributions/non_central_t.hpp>
#include <boost/math/distributions/normal.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <exception>
#include <functional>
#include <string>

namespace trainq::stats {

namespace {

bool InUnitInterval(double x) { return x > 0 && x < 1; }

Result<int> TooMany() {
  return Fail(ErrorKind::kInvalidArgument,
              "more than " + std::to_string(kMaxAdvisedRuns) + " runs would be needed");
}

// The smallest n in [2, kMaxAdvisedRuns] with enough(n), for a predicate that
// is monotone in n. `guess` (from the normal approximation) only speeds it up.
Result<int> SmallestN(double guess, const std::function<bool(int)>& enough) {
  if (!(guess < kMaxAdvisedRuns)) guess = kMaxAdvisedRuns;
  int hi = std::max(2, static_cast<int>(std::ceil(guess)));
  while (!enough(hi)) {
    if (hi >= kMaxAdvisedRuns) return TooMany();
    hi = std::min(kMaxAdvisedRuns, hi * 2);
  }
  int lo = 1;  // invariant: enough(hi), and lo < 2 or !enough(lo)
  while (hi - lo > 1) {
    int mid = lo + (hi - lo) / 2;
    if (mid >= 2 && enough(mid)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

}  // namespace

Result<int> RunsForHalfWidth(double sd, double half_width, double level) {
  if (!(half_width > 0) || !(sd >= 0) || !std::isfinite(sd) || !InUnitInterval(level)) {
    return Fail(ErrorKind::kInvalidArgument,
                "runs for a half-width need half_width > 0, sd >= 0 and 0 < level < 1");
  }
  if (sd == 0) return 2;  // the fewest runs that show the spread at all
  double z = boost::math::quantile(boost::math::normal(), 0.5 + level / 2);
  double guess = std::pow(z * sd / half_width, 2);
  return SmallestN(guess, [&](int n) {
    boost::math::students_t dist(n - 1);
    double q = boost::math::quantile(dist, 0.5 + level / 2);
    return q * sd / std::sqrt(static_cast<double>(n)) <= half_width;
  });
}

namespace {

// P(|T'| > t_{1-alpha/2, df}) for T' noncentral t with (df, ncp): the power of
// a two-sided t-test, both rejection tails counted.
double TwoSidedTPower(double df, double ncp, double alpha) {
  double crit = boost::math::quantile(boost::math::students_t(df), 1 - alpha / 2);
  boost::math::non_central_t dist(df, ncp);
  return boost::math::cdf(boost::math::complement(dist, crit)) + boost::math::cdf(dist, -crit);
}

Result<int> SmallestNForPower(double sd, double power, double guess,
                              const std::function<double(int)>& power_at) {
  // The caller checked the arguments.
  if (sd == 0) return 2;
  // Boost reports a series or root search that fails to converge with an
  // exception; nothing above this function expects one.
  try {
    return SmallestN(guess, [&](int n) { return power_at(n) >= power; });
  } catch (const std::exception& e) {
    return Fail(ErrorKind::kInternal, std::string("power calculation failed: ") + e.what());
  }
}

double NormalGuess(double sd, double difference, double power, double alpha) {
  boost::math::normal std_normal;
  double z =
      boost::math::quantile(std_normal, 1 - alpha / 2) + boost::math::quantile(std_normal, power);
  return std::pow(z * sd / difference, 2);
}

}  // namespace

double TwoSampleTPower(int n, double sd, double difference, double alpha) {
  if (sd == 0) return 1;
  double ncp = std::fabs(difference) / (sd * std::sqrt(2.0 / n));
  return TwoSidedTPower(2.0 * n - 2, ncp, alpha);
}

double PairedTPower(int n, double sd_diff, double difference, double alpha) {
  if (sd_diff == 0) return 1;
  double ncp = std::fabs(difference) / (sd_diff / std::sqrt(static_cast<double>(n)));
  return TwoSidedTPower(n - 1.0, ncp, alpha);
}

Result<int> PairsForDifference(double sd_diff, double difference, double power, double alpha) {
  if (!(difference != 0) || !std::isfinite(difference) || !(sd_diff >= 0) ||
      !std::isfinite(sd_diff) || !InUnitInterval(power) || !InUnitInterval(alpha)) {
    return Fail(ErrorKind::kInvalidArgument,
                "pairs need difference != 0, sd >= 0, 0 < power < 1 and 0 < alpha < 1");
  }
  return SmallestNForPower(sd_diff, power,
                           NormalGuess(sd_diff, difference, power, alpha),
                           [&](int n) { return PairedTPower(n, sd_diff, difference, alpha); });
}

Result<int> RunsPerSideForDifference(double sd, double difference, double power, double alpha) {
  if (!(difference != 0) || !std::isfinite(difference) || !(sd >= 0) || !std::isfinite(sd) ||
      !InUnitInterval(power) || !InUnitInterval(alpha)) {
    return Fail(ErrorKind::kInvalidArgument,
                "runs per side need difference != 0, sd >= 0, 0 < power < 1 and 0 < alpha < 1");
  }
  return SmallestNForPower(sd, power,
                           2 * NormalGuess(sd, difference, power, alpha),
                           [&](int n) { return TwoSampleTPower(n, sd, difference, alpha); });
}

}  // namespace trainq::stats
