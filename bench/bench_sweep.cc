// Sweep strategies at equal run budgets on objectives with seed noise and a
// known truth (bench/sweep_objectives.h): Branin, Hartmann-6 and a table of
// real digits-MLP runs. A run is one seed at one point.
//
// Strategies (research/sweeps.md, section 4):
//   random          random points, 1 seed each, pick = best single value
//   gp-naive        the same GP as trainq's but fed single values as exact
//                   (nugget 1e-6, no point has two seeds), EI over the best
//                   observed value, pick = best single value: phs and W&B
//   tpe             Optuna's TPESampler (Debian python3-optuna 3.1.0, driven
//                   by bench/sweep_optuna.py over pipes), 1 seed each, pick =
//                   best single value (study.best_trial)
//   trainq          the daemon's suggester (SuggestPoints, GP with each
//                   point's variance of the mean as its noise), 3 seeds per
//                   point, pick = best one-sided 95% lower bound (PickBest),
//                   then 3 fresh seeds of the pick out of the same budget
//                   (`confirm`, the default): their mean is the claim
//   trainq-noconfirm as trainq with confirm: 0 (the claim is the mean of the
//                   3 seeds the pick was chosen on)
//   trainq-adaptive as trainq with repeats {min: 2, max: 10}: StepSweep's rule
//                   (PointsNeedingSeeds) gives 2 more seeds to points that could
//                   still be the best before any new point (parallel: 1)
// Every strategy runs point k with seeds 1..n (1-seed strategies: seed 1 at
// every point, as a fixed seed in a config; the shared seed effect then
// cancels in their comparisons, which favours them). The model strategies and
// random search share their first `initial` points (drawn per (sweep seed,
// point index)); TPE draws its own (seeded by the sweep seed).
//
// Figures per strategy over --reps sweep seeds: true regret of the
// recommended point after the budget (median [IQR]), the winner's-curse
// error (claimed value of the pick minus its true value), how often the claim
// is within one standard error of the truth (trainq: its measured SE; 1-seed
// strategies, which measure none: the true SD of one run), trainq's 95% CI
// coverage, and exact paired Wilcoxon signed-rank tests (same sweep seeds) of
// trainq and trainq-adaptive against each baseline on final regret.
// Run by hand, one objective and noise level at a time:
//   build/bench/bench_sweep --objective branin --noise 0.5 --reps 20 --out bench/results/sweep
// --out writes per-sweep rows and regret-vs-runs curves (every 10% of the
// budget) as CSV; --strategies and --first-seed split a long run into parts,
// and bench/sweep_report.py merges the parts into the README's tables.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "agent/results/sweep.h"
#include "bench/sweep_objectives.h"
#include "stats/summary.h"

using nlohmann::json;
using namespace trainq;
using namespace trainq::bench;

#ifndef TRAINQ_BENCH_DIR
#define TRAINQ_BENCH_DIR "bench"
#endif

namespace {

struct Outcome {
  double final_regret = NAN;
  double claim = NAN;       // the value the strategy reports for its pick
  double truth = NAN;       // the pick's true value
  double se = NAN;          // trainq: measured SE of the pick's mean; 1-seed: true run SD
  bool ci_covers = false;   // trainq: 95% CI of the mean contains the truth
  int pick_n = 0;           // seeds behind the claim
  int runs = 0, points = 0;
  double suggest_ms = 0;
  std::vector<std::pair<int, double>> trace;  // (runs spent, regret of the pick then)
};

struct Point {
  json params;
  std::vector<double> ys;  // by seed 1..n
};

bool Close(double a, double b) { return std::abs(a - b) <= 1e-12 * std::max(1.0, std::abs(b)); }

// The pick and what it claims. Single: the best single value (1-seed
// strategies). Otherwise the best one-sided 95% lower bound among points with
// two or more seeds, first in point order on ties (PickBest's stable sort).
std::size_t Pick(const Objective& obj, const std::vector<Point>& pts, bool single, double noise,
                 Outcome& out) {
  std::size_t best = pts.size();
  double best_v = -1e300;
  for (std::size_t i = 0; i < pts.size(); ++i) {
    double v;
    if (single) {
      v = *std::max_element(pts[i].ys.begin(), pts[i].ys.end());
    } else {
      if (pts[i].ys.size() < 2) continue;
      auto s = stats::Summarize(pts[i].ys);
      v = stats::MeanInterval(s, 0.90)->lo;
    }
    if (v > best_v) {
      best_v = v;
      best = i;
    }
  }
  if (best == pts.size()) return best;
  const Point& p = pts[best];
  out.truth = obj.True(p.params);
  out.final_regret = obj.optimum() - out.truth;
  out.pick_n = static_cast<int>(p.ys.size());
  if (single) {
    out.claim = best_v;
    out.se = obj.RunSd(p.params, noise);
    out.ci_covers = false;
  } else {
    auto s = stats::Summarize(p.ys);
    out.claim = s.mean;
    out.se = s.se;
    auto ci = stats::MeanInterval(s, 0.95);
    out.ci_covers = ci->contains(out.truth) || Close(out.claim, out.truth);
  }
  return best;
}

SweepHistory History(const std::vector<Point>& pts, bool naive) {
  SweepHistory h;
  for (const auto& p : pts) {
    auto s = stats::Summarize(p.ys);
    PointObservation o;
    o.params = p.params;
    o.n = static_cast<int>(p.ys.size());
    o.mean = s.mean;
    o.var = naive ? 0 : s.sd * s.sd;
    h.observed.push_back(o);
  }
  return h;
}

// A child process with its stdin and stdout on pipes.
struct Child {
  pid_t pid = -1;
  FILE* to = nullptr;
  FILE* from = nullptr;
};

Child Spawn(const std::vector<std::string>& argv) {
  int in[2], out[2];
  if (pipe(in) != 0 || pipe(out) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  pid_t pid = fork();
  if (pid == 0) {
    dup2(in[0], 0);
    dup2(out[1], 1);
    close(in[0]);
    close(in[1]);
    close(out[0]);
    close(out[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "bench_sweep: cannot run %s\n", args[0]);
    _exit(127);
  }
  close(in[0]);
  close(out[1]);
  return {pid, fdopen(in[1], "w"), fdopen(out[0], "r")};
}

std::string ReadLine(FILE* f) {
  std::string s;
  int c;
  while ((c = std::fgetc(f)) != EOF && c != '\n') s.push_back(static_cast<char>(c));
  if (c == EOF && s.empty()) return {};
  return s;
}

[[noreturn]] void OptunaFailed(Child& c, const std::string& what) {
  int status = 0;
  fclose(c.to);
  waitpid(c.pid, &status, 0);
  std::fprintf(stderr,
               "bench_sweep: the tpe strategy needs Debian's python3-optuna (3.1.0) under "
               "/usr/bin/python3: %s (exit %d). apt-get install python3-optuna, or ci/install-deps; "
               "or leave tpe out with --strategies\n",
               what.c_str(), WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  std::exit(1);
}

Outcome RunTpe(const Objective& obj, std::uint64_t sweep, double noise, int budget) {
  json spec;
  spec["seed"] = sweep;
  spec["startup"] = obj.initial();
  spec["trials"] = budget;
  for (const auto& p : obj.params()) {
    std::string kind = p.kind == ParamKind::kLogUniform ? "log_uniform"
                       : p.kind == ParamKind::kInt      ? "int_log"
                                                        : "uniform";
    spec["params"].push_back({{"name", p.name}, {"kind", kind}, {"lo", p.lo}, {"hi", p.hi}});
  }
  Child c = Spawn({"/usr/bin/python3", std::string(TRAINQ_BENCH_DIR) + "/sweep_optuna.py",
                   spec.dump()});
  Outcome out;
  std::vector<Point> pts;
  double ms = 0;
  for (int t = 0; t < budget; ++t) {
    auto t0 = std::chrono::steady_clock::now();
    std::string line = ReadLine(c.from);
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    json p = json::parse(line, nullptr, false);
    if (p.is_discarded() || !p.is_object()) OptunaFailed(c, "no trial from sweep_optuna.py");
    p = obj.Snap(p);
    double y = obj.Run(p, 1, sweep, noise);
    std::fprintf(c.to, "%.17g\n", y);
    std::fflush(c.to);
    pts.push_back({p, {y}});
    out.runs = t + 1;
    Pick(obj, pts, true, noise, out);
    out.trace.push_back({out.runs, out.final_regret});
  }
  json version = json::parse(ReadLine(c.from), nullptr, false);
  if (version.is_discarded() || !version.contains("optuna")) OptunaFailed(c, "no end line");
  fclose(c.to);
  fclose(c.from);
  int status = 0;
  waitpid(c.pid, &status, 0);
  out.points = static_cast<int>(pts.size());
  out.suggest_ms = ms / budget;
  return out;
}

Outcome RunSweep(const Objective& obj, const std::string& strategy, std::uint64_t sweep,
                 double noise, int budget) {
  if (strategy == "tpe") return RunTpe(obj, sweep, noise, budget);
  const bool naive = strategy == "random" || strategy == "gp-naive";
  const bool adaptive = strategy == "trainq-adaptive";
  const bool fixed3 = strategy == "trainq" || strategy == "trainq-noconfirm";
  const int repeats = fixed3 ? 3 : adaptive ? 2 : 1;
  const int confirm = strategy == "trainq" ? 3 : 0;  // SweepSpec::ConfirmSeeds's default
  const int max_seeds = std::min(10, obj.max_seeds()), step = 2;
  SweepSpec space;
  space.params = obj.params();
  for (auto& p : space.params) {
    p.model = strategy == "random" ? SweepParam::Model::kRandom : SweepParam::Model::kBayes;
  }
  space.initial = obj.initial();
  space.budget_points = 100000;
  std::vector<json> existing;
  std::vector<Point> pts;
  Outcome out;
  double ms = 0;
  auto run = [&](Point& p, int from, int to) {
    for (int s = from; s <= to; ++s) p.ys.push_back(obj.Run(p.params, s, sweep, noise));
    out.runs += to - from + 1;
    Pick(obj, pts, naive, noise, out);
    out.trace.push_back({out.runs, out.final_regret});
  };
  for (;;) {
    if (adaptive) {
      // StepSweep with parallel 1: extend the first point that could still win.
      auto h = History(pts, false);
      auto var = VarianceOfMeans(h.observed);
      std::vector<PointEstimate> est;
      for (std::size_t i = 0; i < pts.size(); ++i) {
        est.push_back({h.observed[i].n, h.observed[i].mean, std::sqrt(var[i]), false});
      }
      bool extended = false;
      for (auto i : PointsNeedingSeeds(est, true, max_seeds)) {
        int n = static_cast<int>(pts[i].ys.size());
        int add = std::min(n + step, max_seeds) - n;
        if (add <= 0 || add > budget - out.runs) continue;
        run(pts[i], n + 1, n + add);
        extended = true;
        break;
      }
      if (extended) continue;
    }
    if (out.runs + repeats > budget - confirm) break;
    auto t0 = std::chrono::steady_clock::now();
    auto next = SuggestPoints(space, existing, 1, sweep, History(pts, naive));
    ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!next) {
      std::fprintf(stderr, "suggest: %s\n", next.error().message.c_str());
      std::exit(1);
    }
    existing.push_back(next->at(0));
    pts.push_back({obj.Snap(next->at(0)), {}});
    run(pts.back(), 1, repeats);
  }
  if (confirm > 0) {
    // StepSweep once the search has ended: the pick gets fresh seeds, and
    // their mean alone is its claimed value (PointResult::confirmed).
    std::size_t w = Pick(obj, pts, false, noise, out);
    if (w < pts.size()) {
      Point& p = pts[w];
      const int n = static_cast<int>(p.ys.size());
      std::vector<double> fresh;
      for (int s = n + 1; s <= n + confirm; ++s) fresh.push_back(obj.Run(p.params, s, sweep, noise));
      p.ys.insert(p.ys.end(), fresh.begin(), fresh.end());
      out.runs += confirm;
      auto sum = stats::Summarize(fresh);
      out.claim = sum.mean;
      out.se = sum.se;
      out.pick_n = confirm;
      auto ci = stats::MeanInterval(sum, 0.95);
      out.ci_covers = (ci && ci->contains(out.truth)) || Close(out.claim, out.truth);
      out.trace.push_back({out.runs, out.final_regret});
    }
  }
  out.points = static_cast<int>(pts.size());
  out.suggest_ms = pts.empty() ? 0 : ms / static_cast<double>(pts.size());
  return out;
}

double Quantile(std::vector<double> v, double q) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return stats::SortedQuantile(v, q);
}

// Exact two-sided Wilcoxon signed-rank test of paired differences: zeros
// dropped (Wilcoxon's convention), tied |d| get their average rank, and the
// null distribution of W+ is enumerated over the 2^n sign patterns of those
// ranks (by dynamic programming on doubled ranks), so ties are exact too.
// Returns {p, n nonzero}. Matches scipy.stats.wilcoxon(d, zero_method="wilcox",
// method="exact") when there are no ties.
std::pair<double, int> Wilcoxon(const std::vector<double>& d) {
  std::vector<double> nz;
  for (double x : d) {
    if (std::abs(x) > 1e-12) nz.push_back(x);
  }
  const std::size_t n = nz.size();
  if (n == 0) return {1.0, 0};
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return std::abs(nz[a]) < std::abs(nz[b]); });
  std::vector<int> rank2(n);  // doubled ranks: integers even with ties
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j + 1 < n && std::abs(std::abs(nz[order[j + 1]]) - std::abs(nz[order[i]])) <= 1e-12) ++j;
    int r2 = static_cast<int>(i + 1 + j + 1);  // 2 x average of ranks i+1..j+1
    for (std::size_t k = i; k <= j; ++k) rank2[order[k]] = r2;
    i = j + 1;
  }
  int total = 0, w = 0;
  for (std::size_t i = 0; i < n; ++i) {
    total += rank2[i];
    if (nz[i] > 0) w += rank2[i];
  }
  std::vector<double> count(static_cast<std::size_t>(total) + 1, 0.0);
  count[0] = 1;
  for (std::size_t i = 0; i < n; ++i) {
    for (int s = total; s >= rank2[i]; --s) {
      count[static_cast<std::size_t>(s)] += count[static_cast<std::size_t>(s - rank2[i])];
    }
  }
  double all = std::pow(2.0, static_cast<double>(n)), lo = 0, hi = 0;
  for (int s = 0; s <= total; ++s) {
    if (s <= w) lo += count[static_cast<std::size_t>(s)];
    if (s >= w) hi += count[static_cast<std::size_t>(s)];
  }
  return {std::min(1.0, 2 * std::min(lo, hi) / all), static_cast<int>(n)};
}

template <typename... A>
std::string Fmt(const char* f, A... a) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, static_cast<double>(a)...);
  return buf;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string x;
  while (std::getline(ss, x, ',')) out.push_back(x);
  return out;
}

int Usage() {
  std::fprintf(stderr,
               "usage: bench_sweep [--objective branin|hartmann6|digits] [--noise SD[,SD...]] "
               "[--reps N] [--first-seed S] [--budget RUNS] [--strategies random,gp-naive,tpe,trainq,trainq-noconfirm,trainq-adaptive] "
               "[--data digits_grid.csv] [--out DIR]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 20, budget = 0, first = 1;
  std::string objective = "branin", noise_arg, out_dir;
  std::string data = std::string(TRAINQ_BENCH_DIR) + "/data/digits_grid.csv";
  std::vector<std::string> strategies = {"random", "gp-naive", "tpe", "trainq", "trainq-noconfirm", "trainq-adaptive"};
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--reps") reps = std::atoi(argv[i + 1]);
    else if (a == "--first-seed") first = std::atoi(argv[i + 1]);
    else if (a == "--budget") budget = std::atoi(argv[i + 1]);
    else if (a == "--objective") objective = argv[i + 1];
    else if (a == "--noise") noise_arg = argv[i + 1];
    else if (a == "--strategies") strategies = Split(argv[i + 1]);
    else if (a == "--data") data = argv[i + 1];
    else if (a == "--out") out_dir = argv[i + 1];
    else return Usage();
  }
  if (argc % 2 == 0) return Usage();
  std::signal(SIGPIPE, SIG_IGN);  // a dead Optuna child: a clear message, not a silent kill
  std::unique_ptr<Objective> obj;
  try {
    if (objective == "branin") obj = std::make_unique<BraninObjective>();
    else if (objective == "hartmann6") obj = std::make_unique<Hartmann6Objective>();
    else if (objective == "digits") obj = std::make_unique<DigitsTable>(data);
    else return Usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_sweep: %s\n", e.what());
    return 1;
  }
  // The objectives at their known optima, so a typo in a constant cannot pass.
  if (!(std::abs(-Branin(3.14159265358979, 2.275) - (-0.397887)) < 1e-6 &&
        std::abs(-Hartmann6({0.20169, 0.150011, 0.476874, 0.275332, 0.311652, 0.6573}) - 3.32237) <
            1e-5)) {
    std::fprintf(stderr, "bench_sweep: an objective misses its known optimum\n");
    return 1;
  }
  if (budget <= 0) budget = obj->budget();
  std::vector<double> noises;
  if (noise_arg.empty()) noises = obj->noise_levels();
  else for (const auto& s : Split(noise_arg)) noises.push_back(std::atof(s.c_str()));

  for (double noise : noises) {
    std::printf("\n%s (max %.6g), noise %s %g, budget %d runs, sweep seeds %d..%d\n",
                obj->name().c_str(), obj->optimum(),
                obj->name() == "digits" ? "scale" : "sigma0", noise, budget, first,
                first + reps - 1);
    std::map<std::string, std::vector<Outcome>> res;
    for (const auto& s : strategies) {
      for (int r = first; r < first + reps; ++r) {
        res[s].push_back(RunSweep(*obj, s, static_cast<std::uint64_t>(r), noise, budget));
      }
    }
    std::printf("| strategy | final regret: median [IQR] | claim error: mean (median) | "
                "within 1 SE | 95%% CI covers | trainq - this: median diff, p | "
                "adaptive - this: median diff, p | points | ms/point |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    auto regrets = [&](const std::string& s) {
      std::vector<double> v;
      for (const auto& o : res[s]) v.push_back(o.final_regret);
      return v;
    };
    auto versus = [&](const std::string& a, const std::string& b) -> std::string {
      if (!res.count(a) || !res.count(b) || a == b) return "";
      auto x = regrets(a), y = regrets(b);
      std::vector<double> d;
      for (std::size_t i = 0; i < x.size(); ++i) d.push_back(x[i] - y[i]);
      auto [p, n] = Wilcoxon(d);
      return Fmt("%.3g, p=%.3g", Quantile(d, 0.5), p) + " (n=" + std::to_string(n) + ")";
    };
    for (const auto& s : strategies) {
      const auto& v = res[s];
      std::vector<double> err, rel, pts, ms;
      int within = 0, covers = 0;
      for (const auto& o : v) {
        err.push_back(o.claim - o.truth);
        double e = std::abs(o.claim - o.truth);
        within += e <= o.se || Close(o.claim, o.truth);
        covers += o.ci_covers;
        pts.push_back(o.points);
        ms.push_back(o.suggest_ms);
      }
      double mean_err = 0;
      for (double e : err) mean_err += e;
      mean_err /= static_cast<double>(err.size());
      auto reg = regrets(s);
      bool multi = s.rfind("trainq", 0) == 0;
      std::printf("| %s | %s | %s | %d/%d | %s | %s | %s | %.0f | %.1f |\n", s.c_str(),
                  Fmt("%.4g [%.4g, %.4g]", Quantile(reg, 0.5), Quantile(reg, 0.25),
                      Quantile(reg, 0.75))
                      .c_str(),
                  Fmt("%+.3g (%+.3g)", mean_err, Quantile(err, 0.5)).c_str(), within, reps,
                  multi ? (std::to_string(covers) + "/" + std::to_string(reps)).c_str() : "-",
                  versus("trainq", s).c_str(), versus("trainq-adaptive", s).c_str(),
                  Quantile(pts, 0.5), Quantile(ms, 0.5));
      std::fflush(stdout);
    }
    if (!out_dir.empty()) {
      std::filesystem::create_directories(out_dir);
      std::string tag = obj->name() + "_" + Fmt("%g", noise) + "_" + strategies.front() +
                        (strategies.size() > 1 ? "+" : "") + "_s" +
                        std::to_string(first) + "-" + std::to_string(first + reps - 1);
      std::ofstream sw(out_dir + "/sweeps_" + tag + ".csv");
      sw << "objective,noise,strategy,sweep_seed,final_regret,claim,truth,se,pick_seeds,runs,"
            "points\n";
      std::ofstream cu(out_dir + "/curves_" + tag + ".csv");
      cu << "objective,noise,strategy,sweep_seed,runs,regret\n";
      for (const auto& s : strategies) {
        for (int r = 0; r < reps; ++r) {
          const auto& o = res[s][static_cast<std::size_t>(r)];
          sw << obj->name() << ',' << noise << ',' << s << ',' << first + r << ','
             << Fmt("%.10g,%.10g,%.10g,%.6g", o.final_regret, o.claim, o.truth, o.se) << ','
             << o.pick_n << ',' << o.runs << ',' << o.points << '\n';
          for (int j = 1; j <= 10; ++j) {
            int c = (budget * j + 5) / 10;
            double reg = NAN;
            for (const auto& [runs, rg] : o.trace) {
              if (runs <= c) reg = rg;
            }
            cu << obj->name() << ',' << noise << ',' << s << ',' << first + r << ',' << c << ','
               << Fmt("%.10g", reg) << '\n';
          }
        }
      }
    }
  }
  return 0;
}
