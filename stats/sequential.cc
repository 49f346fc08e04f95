#include "stats/sequential.h"

#include <algorithm>
#include <boost/math/distributions/normal.hpp>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

namespace trainq::stats {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kInvSqrt2Pi = 0.39894228040143267794;

double UpperTail(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }  // 1 - Phi(z)
double ZQuantileUpper(double p) {  // z with 1 - Phi(z) = p, 0 < p < 1
  return boost::math::quantile(boost::math::complement(boost::math::normal(), p));
}

// A Simpson grid over [lo, hi] with spacing at most h: points and weights.
struct Grid {
  std::vector<double> x, w;
};
Grid SimpsonGrid(double lo, double hi, double h) {
  int intervals = std::clamp(static_cast<int>(std::ceil((hi - lo) / h)), 50, 4000);
  if (intervals % 2) ++intervals;
  Grid g;
  const double step = (hi - lo) / intervals;
  g.x.resize(intervals + 1);
  g.w.resize(intervals + 1);
  for (int i = 0; i <= intervals; ++i) {
    g.x[i] = lo + step * i;
    g.w[i] = step / 3 * (i == 0 || i == intervals ? 1 : (i % 2 ? 4 : 2));
  }
  return g;
}

// How far below 0 a one-sided design's continuation region is followed, in
// standard deviations of S_k: the mass beyond is below 1e-15.
constexpr double kLowerSds = 8.5;

std::vector<double> ComputeBoundaries(const std::vector<double>& t, double alpha, int sides) {
  const size_t k_looks = t.size();
  std::vector<double> c(k_looks, kInf);
  // Work on the score scale S_k = Z_k sqrt(t_k), a Brownian motion at time t_k.
  Grid grid;                // continuation region after the previous look
  std::vector<double> dens; // density of S there (mass = no crossing so far)
  double spent_before = 0;
  for (size_t k = 0; k < k_looks; ++k) {
    const double tk = t[k];
    // Two-sided: each side spends as a one-sided design at alpha / 2.
    const double spent = sides == 2 ? 2 * SpentByOBrienFleming(alpha / 2, tk)
                                    : SpentByOBrienFleming(alpha, tk);
    const double target = std::max(0.0, spent - spent_before);
    spent_before = spent;
    const double sd_k = std::sqrt(tk);
    if (k == 0) {
      double per_side = target / sides;
      c[0] = per_side <= 0 ? kInf : per_side >= 0.5 ? 0 : ZQuantileUpper(per_side);
    } else {
      const double delta = tk - t[k - 1];
      const double sd_step = std::sqrt(std::max(delta, 1e-300));
      auto crossing = [&](double ck) {
        double sum = 0;
        for (size_t i = 0; i < grid.x.size(); ++i) {
          double up = UpperTail((ck * sd_k - grid.x[i]) / sd_step);
          double down = sides == 2 ? UpperTail((ck * sd_k + grid.x[i]) / sd_step) : 0;
          sum += grid.w[i] * dens[i] * (up + down);
        }
        return sum;
      };
      if (target <= 0) {
        c[k] = kInf;
      } else if (crossing(0) <= target) {
        c[k] = 0;
      } else {
        double lo = 0, hi = 40;
        for (int it = 0; it < 100 && hi - lo > 1e-10; ++it) {
          double mid = 0.5 * (lo + hi);
          (crossing(mid) > target ? lo : hi) = mid;
        }
        c[k] = 0.5 * (lo + hi);
      }
    }
    if (k + 1 == k_looks) break;
    // The density of S_k on the continuation region, for the next look.
    const double next_step = std::sqrt(t[k + 1] - tk);
    const double this_step = k == 0 ? sd_k : std::sqrt(tk - t[k - 1]);
    const double h = std::min(this_step, next_step) / 6;
    const double hi = std::isinf(c[k]) ? kLowerSds * sd_k : c[k] * sd_k;
    const double lo = sides == 2 ? -hi : -kLowerSds * sd_k;
    Grid next = SimpsonGrid(lo, std::max(hi, lo + 1e-9), h);
    std::vector<double> next_dens(next.x.size(), 0.0);
    if (k == 0) {
      for (size_t j = 0; j < next.x.size(); ++j) {
        double z = next.x[j] / sd_k;
        next_dens[j] = kInvSqrt2Pi * std::exp(-0.5 * z * z) / sd_k;
      }
    } else {
      const double sd_step = std::sqrt(tk - t[k - 1]);
      for (size_t j = 0; j < next.x.size(); ++j) {
        double sum = 0;
        for (size_t i = 0; i < grid.x.size(); ++i) {
          double z = (next.x[j] - grid.x[i]) / sd_step;
          sum += grid.w[i] * dens[i] * std::exp(-0.5 * z * z);
        }
        next_dens[j] = sum * kInvSqrt2Pi / sd_step;
      }
    }
    grid = std::move(next);
    dens = std::move(next_dens);
  }
  return c;
}

// Boundaries are cached: a status page asks for the same few designs many times.
std::mutex cache_mutex;
std::map<std::tuple<std::vector<double>, double, int>, std::vector<double>> cache;

std::vector<double> CachedBoundaries(const std::vector<double>& t, double alpha, int sides) {
  auto key = std::make_tuple(t, alpha, sides);
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  auto c = ComputeBoundaries(t, alpha, sides);
  std::lock_guard<std::mutex> lock(cache_mutex);
  if (cache.size() > 20000) cache.clear();  // bounded; entries are recomputed on demand
  return cache.emplace(std::move(key), std::move(c)).first->second;
}

// The alpha' grid of RepeatedP: log-spaced, with the levels people use exact.
const std::vector<double>& AlphaGrid() {
  static const std::vector<double> grid = [] {
    std::vector<double> g = {0.05, 0.01, 0.001, 0.025, 0.005, 0.1};
    for (double a = 1e-7; a < 0.5; a *= 1.6) g.push_back(a);
    g.push_back(0.5);
    std::sort(g.begin(), g.end());
    g.erase(std::unique(g.begin(), g.end(),
                        [](double x, double y) { return std::fabs(x - y) < 1e-3 * y; }),
            g.end());
    return g;
  }();
  return grid;
}

}  // namespace

Result<SequentialKind> ParseSequentialKind(std::string_view text) {
  if (text == "spending") return SequentialKind::kSpending;
  if (text == "bonferroni") return SequentialKind::kBonferroni;
  return Fail(ErrorKind::kInvalidArgument, "design must be \"spending\" or \"bonferroni\", got \"" +
                                               std::string(text) + "\"");
}

std::string_view SequentialKindName(SequentialKind k) {
  return k == SequentialKind::kSpending ? "spending" : "bonferroni";
}

std::string_view SequentialKindTitle(SequentialKind k) {
  return k == SequentialKind::kSpending ? "O'Brien-Fleming spending" : "Bonferroni over looks";
}

SequentialDesign DesignForLooks(SequentialKind kind, std::span<const int> runs_at_look) {
  SequentialDesign d;
  d.kind = kind;
  if (runs_at_look.empty() || runs_at_look.back() <= 0) return d;
  d.fractions.clear();
  const double last = runs_at_look.back();
  for (int n : runs_at_look) d.fractions.push_back(std::clamp(n / last, 1e-6, 1.0));
  return d;
}

double SpentByOBrienFleming(double alpha, double t) {
  if (t <= 0) return 0;
  if (t >= 1) return alpha;
  return 2 * UpperTail(ZQuantileUpper(alpha / 2) / std::sqrt(t));
}

std::vector<double> SpendingBoundaries(std::span<const double> fractions, double alpha, int sides) {
  return ComputeBoundaries(std::vector<double>(fractions.begin(), fractions.end()), alpha,
                           sides == 1 ? 1 : 2);
}

double NominalLevel(const SequentialDesign& design, int look, double alpha, int sides) {
  const int k_looks = design.looks();
  if (k_looks <= 1) return alpha;
  if (design.kind == SequentialKind::kBonferroni) return alpha / k_looks;
  look = std::clamp(look, 1, k_looks);
  const auto c = CachedBoundaries(design.fractions, alpha, sides == 1 ? 1 : 2);
  double ck = c[static_cast<size_t>(look - 1)];
  if (std::isinf(ck)) return 0;
  return std::min(1.0, (sides == 1 ? 1 : 2) * UpperTail(ck));
}

double RepeatedP(const SequentialDesign& design, int look, double p) {
  p = std::clamp(p, 0.0, 1.0);
  const int k_looks = design.looks();
  if (k_looks <= 1) return p;
  if (design.kind == SequentialKind::kBonferroni) return std::min(1.0, k_looks * p);
  if (p <= 0) return 0;
  const auto& grid = AlphaGrid();
  double prev_alpha = 0, prev_level = 0;
  for (double a : grid) {
    double level = NominalLevel(design, look, a, 2);
    if (level <= 0) continue;
    if (p <= level) {
      if (prev_level <= 0) return std::max(p, a * p / level);  // below the grid
      double f = (std::log(p) - std::log(prev_level)) / (std::log(level) - std::log(prev_level));
      return std::max(p, std::exp(std::log(prev_alpha) + f * (std::log(a) - std::log(prev_alpha))));
    }
    prev_alpha = a;
    prev_level = level;
  }
  // Above the grid (alpha' > 0.5): shown only, never decides anything.
  if (prev_level >= 1) return 1;
  return std::clamp(0.5 + (p - prev_level) * 0.5 / (1 - prev_level), p, 1.0);
}

}  // namespace trainq::stats
