// How much a verdict costs and how often it is wrong, under three designs,
// driving the real decision code (agent/results/analysis.h: PlanTopUp,
// RunsToAdd, DecideBatches) over simulated experiments. bench/README.md,
// "Verdicts", has the table and how it was run.
//
// Each sequence is one experiment changed by one commit: seed s gives the
// base 0.9 + u_s + e_s and the head 0.9 + u_s + delta + e'_s, with u_s the
// seed's effect shared by both commits (sd `seed_sd`) and e, e' fresh noise
// per commit (sd 0.004), as in issue 40's replay. min_effect 0.003,
// `repeats: {min: 4, max: 24, step: 4, until: decided}`. The three designs
// see the same simulated numbers (common random numbers):
//
//   today   Bonferroni over the looks (`design: bonferroni`), head-only
//           top-ups: the baseline keeps its first 4 runs (as before issue 40).
//   fixed   10 runs a side, one look.
//   new     O'Brien-Fleming spending, paired top-ups (PlanTopUp's
//           base_repeats grows the baseline with the same seeds).
//
// Usage: bench_verdicts [--sequences 10000] [--threads N]
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "agent/results/analysis.h"

using namespace trainq;

namespace {

constexpr double kNoiseSd = 0.004;
constexpr double kMinEffect = 0.003;
constexpr int kMax = 24;

struct Case {
  const char* name;
  double delta;
  double seed_sd;
};

enum Design { kToday, kFixed, kNew, kDesigns };
const char* kDesignNames[] = {"today: Bonferroni looks, head-only top-ups", "fixed N = 10",
                              "new: O'Brien-Fleming spending, paired top-ups"};

struct Tally {
  long sequences = 0;
  long better = 0, worse = 0, equivalent = 0, negligible = 0, undecided = 0;
  long runs = 0;
  long decided() const { return better + worse + equivalent + negligible; }
};

BatchProgress Side(std::int64_t id, const std::vector<double>& values, int n,
                   const std::string& spec) {
  BatchProgress b;
  b.id = id;
  b.experiment = "e";
  b.metric_name = "accuracy";
  b.metric_goal = "max";
  b.spec_json = spec;
  b.seed_start = 1;
  b.repeats = n;
  b.values.assign(values.begin(), values.begin() + n);
  for (int i = 0; i < n; ++i) b.seeds.push_back(1 + i);
  b.counts[static_cast<int>(RunState::kSucceeded)] = n;
  return b;
}

const std::string kTodaySpec =
    R"({"metric": {"min_effect": 0.003}, "correction": "none", "adaptive": {"min": 4, "max": 24,)"
    R"( "step": 4, "until": "decided", "design": "bonferroni"}})";
const std::string kNewSpec =
    R"({"metric": {"min_effect": 0.003}, "correction": "none", "adaptive": {"min": 4, "max": 24,)"
    R"( "step": 4, "until": "decided"}})";
const std::string kFixedSpec = R"({"metric": {"min_effect": 0.003}, "correction": "none"})";

// One sequence under one design: the final verdict and the runs spent on
// both sides.
stats::Verdict RunDesign(Design d, const std::vector<double>& head, const std::vector<double>& base,
                         long* runs) {
  if (d == kFixed) {
    auto c = DecideBatches(Side(1, head, 10, kFixedSpec), Side(2, base, 10, kFixedSpec));
    *runs += 20;
    return c.verdict;
  }
  const std::string& spec = d == kToday ? kTodaySpec : kNewSpec;
  int n_head = 4, n_base = 4;
  for (int round = 0; round < 100; ++round) {
    BatchProgress h = Side(1, head, n_head, spec);
    BatchProgress b = Side(2, base, n_base, kFixedSpec);
    TopUp plan = PlanTopUp(h, b);
    if (plan.head_add <= 0) break;
    n_head += plan.head_add;
    // Today's queue grew the head only; the new one grows the baseline with it.
    if (d == kNew && plan.base_repeats > 0) n_base = std::min(kMax, plan.base_repeats);
  }
  *runs += n_head + n_base;
  auto c = DecideBatches(Side(1, head, n_head, spec), Side(2, base, n_base, kFixedSpec));
  return c.verdict;
}

void Count(Tally& t, stats::Verdict v) {
  ++t.sequences;
  switch (v) {
    case stats::Verdict::kBetter: ++t.better; break;
    case stats::Verdict::kWorse: ++t.worse; break;
    case stats::Verdict::kEquivalent: ++t.equivalent; break;
    case stats::Verdict::kNegligible: ++t.negligible; break;
    default: ++t.undecided; break;
  }
}

void RunCase(const Case& c, int sequences, std::uint64_t seed, Tally* out) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> head(kMax), base(kMax);
  for (int i = 0; i < sequences; ++i) {
    for (int s = 0; s < kMax; ++s) {
      double u = c.seed_sd * normal(rng);
      base[s] = 0.9 + u + kNoiseSd * normal(rng);
      head[s] = 0.9 + u + c.delta + kNoiseSd * normal(rng);
    }
    for (int d = 0; d < kDesigns; ++d) {
      long runs = 0;
      Count(out[d], RunDesign(static_cast<Design>(d), head, base, &runs));
      out[d].runs += runs;
    }
  }
}

double Pct(long k, long n) { return n ? 100.0 * k / n : 0; }

}  // namespace

int main(int argc, char** argv) {
  int sequences = 10000;
  int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--sequences") && i + 1 < argc) {
      sequences = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads = std::max(1, std::atoi(argv[++i]));
    } else {
      std::fprintf(stderr, "usage: bench_verdicts [--sequences N] [--threads N]\n");
      return 2;
    }
  }
  const Case cases[] = {
      {"null, seed sd 0.002", 0, 0.002},          {"null, seed sd 0.02", 0, 0.02},
      {"+1x min_effect, seed sd 0.002", kMinEffect, 0.002},
      {"+1x min_effect, seed sd 0.02", kMinEffect, 0.02},
      {"+2x min_effect, seed sd 0.002", 2 * kMinEffect, 0.002},
      {"+2x min_effect, seed sd 0.02", 2 * kMinEffect, 0.02},
  };
  const int n_cases = sizeof cases / sizeof cases[0];
  // Each case is split into chunks run on the threads; chunk k of case c uses
  // its own seed, so the figures do not depend on the thread count.
  const int chunks = 16;
  std::vector<Tally> tallies(static_cast<size_t>(n_cases * chunks * kDesigns));
  std::vector<std::pair<int, int>> work;
  for (int c = 0; c < n_cases; ++c) {
    for (int k = 0; k < chunks; ++k) work.push_back({c, k});
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (size_t w; (w = next++) < work.size();) {
        auto [c, k] = work[w];
        int n = sequences / chunks + (k < sequences % chunks ? 1 : 0);
        RunCase(cases[c], n, 40'000 + 1000 * c + k,
                &tallies[static_cast<size_t>((c * chunks + k) * kDesigns)]);
      }
    });
  }
  for (auto& t : pool) t.join();

  std::printf("%d sequences per case; noise sd %.3f per commit; min_effect %.3f; "
              "repeats {min 4, max 24, step 4, until decided}; alpha 0.05\n\n",
              sequences, kNoiseSd, kMinEffect);
  std::printf("| case | design | better | worse | equivalent | negligible | undecided | "
              "mean runs | runs per decided verdict |\n|---|---|---|---|---|---|---|---|---|\n");
  std::vector<Tally> total(static_cast<size_t>(n_cases * kDesigns));
  for (int c = 0; c < n_cases; ++c) {
    for (int d = 0; d < kDesigns; ++d) {
      Tally& s = total[static_cast<size_t>(c * kDesigns + d)];
      for (int k = 0; k < chunks; ++k) {
        const Tally& x = tallies[static_cast<size_t>((c * chunks + k) * kDesigns + d)];
        s.sequences += x.sequences;
        s.better += x.better;
        s.worse += x.worse;
        s.equivalent += x.equivalent;
        s.negligible += x.negligible;
        s.undecided += x.undecided;
        s.runs += x.runs;
      }
      std::printf("| %s | %s | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.1f | %s |\n",
                  cases[c].name, kDesignNames[d], Pct(s.better, s.sequences),
                  Pct(s.worse, s.sequences), Pct(s.equivalent, s.sequences),
                  Pct(s.negligible, s.sequences), Pct(s.undecided, s.sequences),
                  double(s.runs) / s.sequences,
                  s.decided() ? std::to_string(s.runs / s.decided()).c_str() : "∞");
    }
  }
  // Issue 40's family: 50 nulls, 50 changed by 2x min_effect (25 up, 25
  // down: the same by symmetry), seed sd 0.02.
  std::printf("\nissue 40's family (50 nulls, 50 at ±2x min_effect, seed sd 0.02):\n\n"
              "| design | decided of 100 | false better/worse among the 50 nulls | runs | runs per "
              "decided verdict |\n|---|---|---|---|---|\n");
  for (int d = 0; d < kDesigns; ++d) {
    const Tally& null = total[static_cast<size_t>(1 * kDesigns + d)];
    const Tally& eff = total[static_cast<size_t>(5 * kDesigns + d)];
    double decided = 50.0 * null.decided() / null.sequences + 50.0 * eff.decided() / eff.sequences;
    double false_nulls = 50.0 * (null.better + null.worse) / null.sequences;
    double runs = 50.0 * null.runs / null.sequences + 50.0 * eff.runs / eff.sequences;
    std::printf("| %s | %.1f | %.2f | %.0f | %.1f |\n", kDesignNames[d], decided, false_nulls, runs,
                decided > 0 ? runs / decided : 0.0);
  }
  return 0;
}
