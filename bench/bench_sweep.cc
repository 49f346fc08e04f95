// Sweep strategies on a synthetic noisy objective with a known optimum:
// grid vs random vs bayes vs tpe, the same suggester the daemon runs
// (SuggestPoints with the measured history), each point run with `repeats`
// seeds. Figures: runs spent until the pick (the leader by the lower
// confidence bound, as `trainq sweep best`) is within `--within` of the true
// optimum, and the true regret of the pick at the end; medians and quartiles
// over `--reps` sweep seeds. Run by hand:
//   build/bench/bench_sweep --reps 20 --budget 120 --noise 0.1
// Objective: the negated Branin function on [-5, 10] x [0, 15] (maximised;
// optimum -0.397887), y = f(x) + noise * (0.5 z_seed + 0.866 z_point,seed):
// a seed effect shared by every point (what paired seeds cancel) plus point
// noise, deterministic per (sweep seed, point, seed).
#include <algorithm>
#include <boost/random/mersenne_twister.hpp>
#include <boost/random/normal_distribution.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "agent/results/sweep.h"
#include "stats/summary.h"

using nlohmann::json;
using namespace trainq;

namespace {

double Branin(double x1, double x2) {
  const double pi = 3.14159265358979323846;
  double a = 1, b = 5.1 / (4 * pi * pi), c = 5 / pi, r = 6, s = 10, t = 1 / (8 * pi);
  double q = x2 - b * x1 * x1 + c * x1 - r;
  return a * q * q + s * (1 - t) * std::cos(x1) + s;
}
constexpr double kOptimum = -0.397887;

double Objective(const json& p) { return -Branin(p["x1"].get<double>(), p["x2"].get<double>()); }

std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double Normal(std::uint64_t key) {
  boost::random::mt19937_64 rng(Mix(key));
  return boost::random::normal_distribution<double>(0, 1)(rng);
}

SweepSpec Space(const std::string& strategy, int initial) {
  SweepSpec s;
  for (const char* name : {"x1", "x2"}) {
    SweepParam p;
    p.name = name;
    if (strategy == "grid") {
      p.kind = ParamKind::kValues;
      p.grid = true;
      double lo = name[1] == '1' ? -5 : 0, hi = name[1] == '1' ? 10 : 15;
      for (int i = 0; i < 8; ++i) p.options.push_back(lo + (hi - lo) * (i + 0.5) / 8);
    } else {
      p.kind = ParamKind::kUniform;
      p.lo = name[1] == '1' ? -5 : 0;
      p.hi = name[1] == '1' ? 10 : 15;
      if (strategy == "bayes") p.model = SweepParam::Model::kBayes;
      if (strategy == "tpe") p.model = SweepParam::Model::kTpe;
    }
    s.params.push_back(p);
  }
  s.initial = initial;
  s.budget_points = 100000;
  return s;
}

struct Outcome {
  double runs_to_reach = NAN;  // NaN: never within reach
  double final_regret = 0;
  double suggest_ms = 0;
};

Outcome RunSweep(const std::string& strategy, std::uint64_t seed, int budget, int repeats,
                 double noise, double within) {
  SweepSpec space = Space(strategy, 6);
  std::vector<json> points;
  SweepHistory h;
  std::vector<stats::Summary> sums;
  Outcome out;
  int runs = 0;
  double ms = 0;
  while (runs + repeats <= budget) {
    auto t0 = std::chrono::steady_clock::now();
    auto next = SuggestPoints(space, points, 1, seed, h);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!next) {
      std::fprintf(stderr, "suggest: %s\n", next.error().message.c_str());
      std::exit(1);
    }
    json p = next->at(0);
    std::uint64_t k = points.size();
    points.push_back(p);
    std::vector<double> ys;
    for (int s = 1; s <= repeats; ++s) {
      double z = 0.5 * Normal(seed * 1000003 + static_cast<std::uint64_t>(s)) +
                 0.8660254 * Normal((seed * 1000003 + k) * 7919 + static_cast<std::uint64_t>(s));
      ys.push_back(Objective(p) + noise * z);
    }
    runs += repeats;
    auto sum = stats::Summarize(ys);
    sums.push_back(sum);
    PointObservation o;
    o.params = p;
    o.n = repeats;
    o.mean = sum.mean;
    o.var = sum.sd * sum.sd;
    h.observed.push_back(o);
    // The pick: best one-sided 95% lower bound (as PickBest), or the best
    // mean with one seed.
    std::size_t pick = 0;
    double best = -1e300;
    for (std::size_t i = 0; i < sums.size(); ++i) {
      double lcb = sums[i].mean;
      if (repeats >= 2) {
        auto ci = stats::MeanInterval(sums[i], 0.90);
        if (ci) lcb = ci->lo;
      }
      if (lcb > best) {
        best = lcb;
        pick = i;
      }
    }
    double regret = kOptimum - Objective(points[pick]);
    out.final_regret = regret;
    if (std::isnan(out.runs_to_reach) && regret <= within) out.runs_to_reach = runs;
  }
  out.suggest_ms = ms / static_cast<double>(points.size());
  return out;
}

double Quantile(std::vector<double> v, double q) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  double pos = q * static_cast<double>(v.size() - 1);
  auto lo = static_cast<std::size_t>(std::floor(pos));
  auto hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, budget = 120, repeats = 3;
  double noise = 0.5, within = 0.5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--budget") budget = std::atoi(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--noise") noise = std::atof(argv[i + 1]);
    else if (a == "--within") within = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_sweep [--reps N] [--budget RUNS] [--repeats N] "
                           "[--noise SD] [--within REGRET]\n");
      return 2;
    }
  }
  std::printf("negated Branin (max %.6f), noise sd %.3g (half shared by seed), %d seeds per "
              "point, budget %d runs, %d sweep seeds; reach = regret of the pick <= %.3g\n",
              kOptimum, noise, repeats, budget, reps, within);
  std::printf("%-8s %-28s %-26s %-10s %s\n", "strategy", "runs to reach: median [IQR]",
              "final regret: median [IQR]", "reached", "suggest ms/point");
  for (const std::string strategy : {"grid", "random", "tpe", "bayes"}) {
    std::vector<double> reach, regret, ms;
    int reached = 0;
    for (int r = 0; r < reps; ++r) {
      auto o = RunSweep(strategy, static_cast<std::uint64_t>(r + 1), budget, repeats, noise, within);
      reach.push_back(o.runs_to_reach);
      regret.push_back(o.final_regret);
      ms.push_back(o.suggest_ms);
      reached += !std::isnan(o.runs_to_reach);
    }
    char a[64], b[64];
    std::snprintf(a, sizeof a, "%.0f [%.0f, %.0f]", Quantile(reach, 0.5), Quantile(reach, 0.25),
                  Quantile(reach, 0.75));
    std::snprintf(b, sizeof b, "%.3f [%.3f, %.3f]", Quantile(regret, 0.5), Quantile(regret, 0.25),
                  Quantile(regret, 0.75));
    std::printf("%-8s %-28s %-26s %2d/%-7d %.1f\n", strategy.c_str(), a, b, reached, reps,
                Quantile(ms, 0.5));
  }
  return 0;
}
