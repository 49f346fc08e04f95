#include "stats/compare.h"

#include <algorithm>
#include <boost/math/distributions/fisher_f.hpp>
#include <boost/math/distributions/students_t.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace trainq::stats {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// t = estimate / se, defined also for se == 0 (see the header).
double TStatistic(double estimate, double se) {
  if (se > 0) return estimate / se;
  if (estimate == 0) return 0;
  return estimate > 0 ? kInf : -kInf;
}

TTest MakeTest(double estimate, double se, double df) {
  TTest t;
  t.estimate = estimate;
  t.se = se;
  t.df = df;
  t.t = TStatistic(estimate, se);
  t.p = TwoSidedP(t.t, df);
  t.ci95 = TInterval(t, 0.95);
  return t;
}

}  // namespace

double TwoSidedP(double t, double df) {
  if (std::isinf(t)) return 0;
  if (t == 0) return 1;
  boost::math::students_t dist(df);
  double p = 2 * boost::math::cdf(boost::math::complement(dist, std::fabs(t)));
  return std::min(p, 1.0);
}

std::optional<SpreadTest> BrownForsytheTest(std::span<const double> a, std::span<const double> b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  auto deviations = [](std::span<const double> x) {
    double med = Summarize(x).median;
    std::vector<double> z;
    for (double v : x) z.push_back(std::fabs(v - med));
    return z;
  };
  auto za = deviations(a), zb = deviations(b);
  auto mean = [](const std::vector<double>& z) {
    double s = 0;
    for (double v : z) s += v;
    return s / static_cast<double>(z.size());
  };
  double na = static_cast<double>(za.size()), nb = static_cast<double>(zb.size());
  double ma = mean(za), mb = mean(zb), m = (ma * na + mb * nb) / (na + nb);
  double between = na * (ma - m) * (ma - m) + nb * (mb - m) * (mb - m);  // df 1
  double within = 0;
  for (double v : za) within += (v - ma) * (v - ma);
  for (double v : zb) within += (v - mb) * (v - mb);
  SpreadTest t;
  t.df2 = na + nb - 2;
  if (within == 0) {
    t.f = between == 0 ? 0 : std::numeric_limits<double>::infinity();
    t.p = between == 0 ? 1 : 0;
    return t;
  }
  t.f = between / (within / t.df2);
  boost::math::fisher_f dist(t.df1, t.df2);
  t.p = boost::math::cdf(boost::math::complement(dist, t.f));
  return t;
}

Interval TInterval(const TTest& test, double level) {
  if (test.se == 0) return {test.estimate, test.estimate};
  boost::math::students_t dist(test.df);
  double q = boost::math::quantile(dist, 0.5 + level / 2);
  return {test.estimate - q * test.se, test.estimate + q * test.se};
}

std::optional<TTest> WelchTTest(std::span<const double> a, std::span<const double> b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  Summary sa = Summarize(a), sb = Summarize(b);
  double na = static_cast<double>(sa.n), nb = static_cast<double>(sb.n);
  double va = sa.sd * sa.sd / na, vb = sb.sd * sb.sd / nb;  // squared standard errors
  double se = std::sqrt(va + vb);
  double df;
  if (va + vb > 0) {
    // Welch–Satterthwaite, (va+vb)^2 / (va^2/(na-1) + vb^2/(nb-1)), written with
    // the shares of the variance so tiny variances cannot underflow to 0/0.
    double ra = va / (va + vb), rb = vb / (va + vb);
    df = 1 / (ra * ra / (na - 1) + rb * rb / (nb - 1));
  } else {
    // Both spreads are 0 and the formula is 0/0; its limit for equal variances
    // and the pooled test's df is na + nb - 2. Only the interval's (zero) width
    // and a p of exactly 0 or 1 follow, so the choice changes no result.
    df = na + nb - 2;
  }
  return MakeTest(sa.mean - sb.mean, se, df);
}

std::optional<TTest> OneSampleTTest(std::span<const double> d) {
  if (d.size() < 2) return std::nullopt;
  Summary s = Summarize(d);
  return MakeTest(s.mean, s.se, static_cast<double>(s.n - 1));
}

std::optional<TTest> PairedTTest(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size()) return std::nullopt;
  std::vector<double> d(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return OneSampleTTest(d);
}

std::optional<double> HedgesG(std::span<const double> a, std::span<const double> b) {
  if (a.size() < 2 || b.size() < 2) return std::nullopt;
  Summary sa = Summarize(a), sb = Summarize(b);
  double na = static_cast<double>(sa.n), nb = static_cast<double>(sb.n);
  double pooled_var = ((na - 1) * sa.sd * sa.sd + (nb - 1) * sb.sd * sb.sd) / (na + nb - 2);
  double diff = sa.mean - sb.mean;
  double j = 1 - 3 / (4 * (na + nb) - 9);
  return j * TStatistic(diff, std::sqrt(pooled_var));
}

std::optional<MannWhitney> MannWhitneyU(std::span<const double> a, std::span<const double> b) {
  if (a.empty() || b.empty()) return std::nullopt;
  std::vector<std::pair<double, bool>> all;  // (value, from A)
  all.reserve(a.size() + b.size());
  for (double v : a) all.emplace_back(v, true);
  for (double v : b) all.emplace_back(v, false);
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  // Ranks are 1-based; a run of ties at positions i..j-1 all get their mean rank.
  double rank_sum_a = 0;
  for (std::size_t i = 0; i < all.size();) {
    std::size_t j = i;
    while (j < all.size() && all[j].first == all[i].first) ++j;
    double mid_rank = (static_cast<double>(i + 1) + static_cast<double>(j)) / 2;
    for (std::size_t k = i; k < j; ++k) {
      if (all[k].second) rank_sum_a += mid_rank;
    }
    i = j;
  }
  double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  MannWhitney mw;
  mw.u = rank_sum_a - na * (na + 1) / 2;
  mw.p_a_gt_b = mw.u / (na * nb);
  return mw;
}

Result<Comparison> Compare(std::span<const double> a, std::span<const double> b,
                           const CompareOptions& options) {
  if (a.empty() || b.empty()) {
    return Fail(ErrorKind::kInvalidArgument, "a comparison needs at least one value on each side");
  }
  if (options.paired && a.size() != b.size()) {
    return Fail(ErrorKind::kInvalidArgument,
                "a paired comparison needs the same number of values on both sides, got " +
                    std::to_string(a.size()) + " and " + std::to_string(b.size()));
  }
  Comparison c;
  c.a = Summarize(a);
  c.b = Summarize(b);
  c.diff = c.a.mean - c.b.mean;
  c.welch = WelchTTest(a, b);
  if (options.paired) c.paired = PairedTTest(a, b);
  c.hedges_g = HedgesG(a, b);
  c.mann_whitney = MannWhitneyU(a, b);
  if (options.paired) {
    std::vector<double> d(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
    c.bootstrap_ci95 = BootstrapMeanInterval(d, options.bootstrap);
  } else {
    c.bootstrap_ci95 = BootstrapDiffInterval(a, b, options.bootstrap);
  }
  return c;
}

namespace {

double Beats(double x, double y) { return x > y ? 1.0 : x == y ? 0.5 : 0.0; }

// Type-7 quantile of sorted values.
double Quantile7(const std::vector<double>& sorted, double q) {
  double h = (sorted.size() - 1) * q;
  size_t lo = static_cast<size_t>(std::floor(h));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - lo) * (sorted[hi] - sorted[lo]);
}

}  // namespace

std::optional<Improvement> ProbabilityOfImprovement(std::span<const double> a,
                                                    std::span<const double> b, bool paired,
                                                    const BootstrapOptions& options) {
  if (a.empty() || b.empty() || (paired && a.size() != b.size())) return std::nullopt;
  Improvement out;
  out.paired = paired;
  auto estimate = [&](auto pick_a, auto pick_b, size_t na, size_t nb) {
    double sum = 0;
    if (paired) {
      for (size_t i = 0; i < na; ++i) {
        size_t k = pick_a(i);
        sum += Beats(a[k], b[k]);
      }
      return sum / static_cast<double>(na);
    }
    for (size_t i = 0; i < na; ++i) {
      for (size_t j = 0; j < nb; ++j) sum += Beats(a[pick_a(i)], b[pick_b(j)]);
    }
    return sum / static_cast<double>(na * nb);
  };
  auto same = [](size_t i) { return i; };
  out.estimate = estimate(same, same, a.size(), b.size());
  if (a.size() < 2 || b.size() < 2 || options.resamples < 1) return out;
  Rng rng(options.seed);
  std::vector<size_t> ia(a.size()), ib(b.size());
  std::vector<double> stats;
  stats.reserve(static_cast<size_t>(options.resamples));
  for (int r = 0; r < options.resamples; ++r) {
    for (auto& i : ia) i = rng.Below(a.size());
    if (!paired) {
      for (auto& j : ib) j = rng.Below(b.size());
    }
    stats.push_back(estimate([&](size_t i) { return ia[i]; }, [&](size_t j) { return ib[j]; },
                             a.size(), b.size()));
  }
  std::sort(stats.begin(), stats.end());
  double tail = (1 - options.level) / 2;
  out.interval = Interval{Quantile7(stats, tail), Quantile7(stats, 1 - tail)};
  return out;
}

}  // namespace trainq::stats
