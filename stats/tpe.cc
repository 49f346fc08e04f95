#include "stats/tpe.h"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <boost/random/discrete_distribution.hpp>
#include <boost/random/normal_distribution.hpp>
#include <boost/random/uniform_int_distribution.hpp>
#include <boost/random/uniform_real_distribution.hpp>
#include <cmath>
#include <numeric>

namespace trainq::stats {

namespace {

// Bandwidth of each centre: the larger gap to its sorted neighbours (the
// interval ends count as neighbours), clipped to [0.01, 1] (Bergstra's rule).
std::vector<double> Bandwidths(const std::vector<double>& centres) {
  std::vector<std::size_t> order(centres.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return centres[a] < centres[b]; });
  std::vector<double> bw(centres.size());
  const double min_bw = 0.01;
  for (std::size_t r = 0; r < order.size(); ++r) {
    double c = centres[order[r]];
    double left = r == 0 ? c : c - centres[order[r - 1]];
    double right = r + 1 == order.size() ? 1.0 - c : centres[order[r + 1]] - c;
    bw[order[r]] = std::clamp(std::max(left, right), min_bw, 1.0);
  }
  return bw;
}

double TruncatedPdf(double mu, double sigma, double x) {
  boost::math::normal n(mu, sigma);
  double mass = boost::math::cdf(n, 1.0) - boost::math::cdf(n, 0.0);
  if (mass <= 1e-12) return 0;
  return boost::math::pdf(n, x) / mass;
}

}  // namespace

std::vector<std::size_t> TpeGood(const std::vector<double>& values, double gamma) {
  std::vector<std::size_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return values[a] > values[b]; });
  auto n = static_cast<std::size_t>(std::ceil(gamma * static_cast<double>(values.size())));
  n = std::clamp<std::size_t>(n, values.empty() ? 0 : 1, 25);
  order.resize(std::min(n, order.size()));
  return order;
}

double TpeDensity(const std::vector<double>& centres, double x) {
  const double prior_w = 1.0 / static_cast<double>(centres.size() + 1);
  double p = prior_w;  // the flat prior on [0, 1]
  auto bw = Bandwidths(centres);
  for (std::size_t i = 0; i < centres.size(); ++i) {
    p += prior_w * TruncatedPdf(centres[i], bw[i], x);
  }
  return p;
}

double TpeContinuous(const std::vector<double>& good, const std::vector<double>& bad,
                     boost::random::mt19937_64& rng, int candidates) {
  auto bw = Bandwidths(good);
  double best_x = 0.5, best_score = -1;
  for (int c = 0; c < candidates; ++c) {
    // Draw from the good mixture: pick a component (prior included), then a
    // truncated normal by rejection (bounded tries, then clamp).
    auto pick = boost::random::uniform_int_distribution<std::size_t>(0, good.size())(rng);
    double x;
    if (pick == good.size()) {
      x = boost::random::uniform_real_distribution<double>(0, 1)(rng);
    } else {
      boost::random::normal_distribution<double> nd(good[pick], bw[pick]);
      x = nd(rng);
      for (int t = 0; t < 16 && (x < 0 || x > 1); ++t) x = nd(rng);
      x = std::clamp(x, 0.0, 1.0);
    }
    double score = TpeDensity(good, x) / TpeDensity(bad, x);
    if (score > best_score) {
      best_score = score;
      best_x = x;
    }
  }
  return best_x;
}

std::size_t TpeCategorical(const std::vector<std::size_t>& good,
                           const std::vector<std::size_t>& bad, std::size_t k,
                           boost::random::mt19937_64& rng, int candidates) {
  // Counts with one pseudo-observation per category (the prior).
  std::vector<double> l(k, 1.0), g(k, 1.0);
  for (auto c : good) l[c] += 1;
  for (auto c : bad) g[c] += 1;
  double lsum = std::accumulate(l.begin(), l.end(), 0.0);
  double gsum = std::accumulate(g.begin(), g.end(), 0.0);
  boost::random::discrete_distribution<std::size_t> draw(l.begin(), l.end());
  std::size_t best = 0;
  double best_score = -1;
  for (int c = 0; c < candidates; ++c) {
    std::size_t x = draw(rng);
    double score = (l[x] / lsum) / (g[x] / gsum);
    if (score > best_score) {
      best_score = score;
      best = x;
    }
  }
  return best;
}

}  // namespace trainq::stats
