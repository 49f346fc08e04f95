// `trainq stats summary FILE`, `trainq stats compare FILE_A FILE_B` and
// `trainq stats power A [B --paired] --effect D`: the statistics of stats/ on
// plain files of numbers, so that any results (ours or another tool's) can be
// checked by hand.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "agent/cli/cli.h"
#include "core/strings.h"
#include "stats/bootstrap.h"
#include "stats/compare.h"
#include "stats/numbers.h"
#include "stats/sample_size.h"
#include "stats/summary.h"
#include "stats/verdict.h"

using nlohmann::json;

namespace trainq {

namespace {

struct StatsSummaryOptions {
  std::string path;
  bool json = false;
  stats::BootstrapOptions bootstrap;
};

struct StatsCompareOptions {
  std::string path_a;
  std::string path_b;
  bool paired = false;
  bool json = false;
  std::string goal = "max";
  double alpha = 0.05;
  std::optional<double> min_effect;
  stats::BootstrapOptions bootstrap;
};

struct StatsPowerOptions {
  std::string path_a;
  std::string path_b;  // with --paired: the sd is that of B - A, pair by pair
  bool paired = false;
  bool json = false;
  double effect = 0;
  double alpha = 0.05;
  double power = 0.8;
};

// Enough digits to tell 0.6642 from 0.6651, without trailing noise. Plain
// snprintf: trainq never calls setlocale, so the decimal point stays '.'.
std::string Num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

std::string Signed(double v) { return (v > 0 ? "+" : "") + Num(v); }

std::string IntervalText(const stats::Interval& i) {
  return "[" + Num(i.lo) + ", " + Num(i.hi) + "]";
}

// JSON has no infinity; nlohmann would write null anyway, this says so on purpose.
json JsonNum(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

json JsonInterval(const std::optional<stats::Interval>& i) {
  if (!i) return nullptr;
  return json::array({JsonNum(i->lo), JsonNum(i->hi)});
}

json JsonSummary(const stats::Summary& s) {
  bool spread = s.n > 1;
  return {{"n", s.n},
          {"mean", s.mean},
          {"sd", spread ? json(s.sd) : json(nullptr)},
          {"se", spread ? json(s.se) : json(nullptr)},
          {"ci95", JsonInterval(s.ci95)},
          {"median", s.median},
          {"iqm", s.iqm}};
}

json JsonTest(const std::optional<stats::TTest>& t) {
  if (!t) return nullptr;
  return {{"t", JsonNum(t->t)}, {"df", t->df}, {"p", t->p}, {"ci95", JsonInterval(t->ci95)}};
}

Result<std::vector<stats::NumberLine>> ReadNumbers(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  return stats::ParseNumberLines(text, path);
}

// The finite values of one file; each non-finite one is reported and left out.
Result<std::vector<double>> FiniteValues(const std::string& path,
                                         const std::vector<stats::NumberLine>& lines,
                                         std::ostream& err) {
  std::vector<double> values;
  for (const auto& l : lines) {
    if (std::isfinite(l.value)) {
      values.push_back(l.value);
    } else {
      err << "trainq: warning: " << path << ":" << l.line << ": not finite: " << Num(l.value)
          << "; left out\n";
    }
  }
  if (values.empty()) {
    return Fail(ErrorKind::kInvalidArgument, path + ": no finite numbers in the file");
  }
  return values;
}

// Pairs the i-th number of A with the i-th of B (the same seed); a pair with
// a non-finite value on either side is left out as a whole, so that the
// remaining pairs stay aligned.
Status PairedValues(const StatsCompareOptions& o, const std::vector<stats::NumberLine>& a,
                    const std::vector<stats::NumberLine>& b, std::vector<double>* va,
                    std::vector<double>* vb, std::ostream& err) {
  if (a.size() != b.size()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--paired needs the same number of values in both files (one per seed): " +
                    o.path_a + " has " + std::to_string(a.size()) + ", " + o.path_b + " has " +
                    std::to_string(b.size()));
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(a[i].value) && std::isfinite(b[i].value)) {
      va->push_back(a[i].value);
      vb->push_back(b[i].value);
      continue;
    }
    err << "trainq: warning: pair " << i + 1 << " (" << o.path_a << ":" << a[i].line << " "
        << Num(a[i].value) << ", " << o.path_b << ":" << b[i].line << " " << Num(b[i].value)
        << ") is not finite; the pair is left out\n";
  }
  if (va->empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "no pair of finite numbers in " + o.path_a + " and " + o.path_b);
  }
  return {};
}

Status CheckBootstrap(const stats::BootstrapOptions& b) {
  if (b.resamples < 1 || b.resamples > 10'000'000) {
    return Fail(ErrorKind::kInvalidArgument, "--resamples must be between 1 and 10000000");
  }
  return {};
}

// One line per batch: "n=10  mean 0.6642  sd 0.0123  95% CI [..]  median ..  IQM ..".
std::string SummaryLine(const stats::Summary& s) {
  std::string line = "n=" + std::to_string(s.n) + "  mean " + Num(s.mean);
  if (!s.ci95) return line + "  (no interval with n=1)";
  return line + "  sd " + Num(s.sd) + "  95% CI " + IntervalText(*s.ci95) + "  median " +
         Num(s.median) + "  IQM " + Num(s.iqm);
}

std::string TestText(const stats::TTest& t) {
  return "t=" + Num(t.t) + ", df=" + Num(t.df) + ", p=" + Num(t.p);
}

Status StatsSummary(const StatsSummaryOptions& o, std::ostream& out, std::ostream& err) {
  TRY(CheckBootstrap(o.bootstrap));
  ASSIGN_OR_RETURN(auto lines, ReadNumbers(o.path));
  ASSIGN_OR_RETURN(auto values, FiniteValues(o.path, lines, err));
  stats::Summary s = stats::Summarize(values);
  auto boot = stats::BootstrapMeanInterval(values, o.bootstrap);
  if (o.json) {
    json j = JsonSummary(s);
    j["min"] = s.min;
    j["max"] = s.max;
    j["q1"] = s.q1;
    j["q3"] = s.q3;
    j["iqr"] = s.iqr;
    j["bootstrap_ci95"] = JsonInterval(boot);
    out << j.dump(2) << "\n";
    return {};
  }
  out << o.path << ": n=" << s.n << "\n";
  if (s.n == 1) {
    out << "  value   " << Num(s.mean) << "  (no interval with n=1)\n";
    return {};
  }
  out << "  mean    " << Num(s.mean) << "  sd " << Num(s.sd) << "  se " << Num(s.se) << "\n";
  out << "  95% CI  " << IntervalText(*s.ci95) << " (t), " << IntervalText(*boot) << " (bootstrap, "
      << o.bootstrap.resamples << " resamples, seed " << o.bootstrap.seed << ")\n";
  out << "  median  " << Num(s.median) << "  IQR " << Num(s.iqr) << " [" << Num(s.q1) << ", "
      << Num(s.q3) << "]  IQM " << Num(s.iqm) << "\n";
  out << "  range   " << Num(s.min) << " .. " << Num(s.max) << "\n";
  return {};
}

Status StatsCompare(const StatsCompareOptions& o, std::ostream& out, std::ostream& err) {
  ASSIGN_OR_RETURN(stats::Goal goal, stats::ParseGoal(o.goal));
  if (!(o.alpha > 0 && o.alpha < 1)) {
    return Fail(ErrorKind::kInvalidArgument,
                "--alpha must be between 0 and 1, got " + Num(o.alpha));
  }
  if (o.min_effect && !(*o.min_effect >= 0 && std::isfinite(*o.min_effect))) {
    return Fail(ErrorKind::kInvalidArgument,
                "--min-effect must be a finite number >= 0, got " + Num(*o.min_effect));
  }
  TRY(CheckBootstrap(o.bootstrap));
  ASSIGN_OR_RETURN(auto lines_a, ReadNumbers(o.path_a));
  ASSIGN_OR_RETURN(auto lines_b, ReadNumbers(o.path_b));
  std::vector<double> a, b;
  if (o.paired) {
    TRY(PairedValues(o, lines_a, lines_b, &a, &b, err));
  } else {
    ASSIGN_OR_RETURN(a, FiniteValues(o.path_a, lines_a, err));
    ASSIGN_OR_RETURN(b, FiniteValues(o.path_b, lines_b, err));
  }
  stats::CompareOptions co;
  co.paired = o.paired;
  co.bootstrap = o.bootstrap;
  ASSIGN_OR_RETURN(stats::Comparison c, stats::Compare(a, b, co));
  stats::VerdictOptions vo;
  vo.goal = goal;
  vo.alpha = o.alpha;
  vo.min_effect = o.min_effect;
  stats::Verdict verdict = stats::Decide(c, vo);

  if (o.json) {
    json j = {{"a", JsonSummary(c.a)},
              {"b", JsonSummary(c.b)},
              {"diff", c.diff},
              {"welch", JsonTest(c.welch)},
              {"hedges_g", c.hedges_g ? JsonNum(*c.hedges_g) : json(nullptr)},
              {"p_a_gt_b", c.mann_whitney->p_a_gt_b},
              {"u", c.mann_whitney->u},
              {"bootstrap_ci95", JsonInterval(c.bootstrap_ci95)},
              {"verdict", stats::VerdictPhrase(verdict, o.min_effect)}};
    if (o.paired) j["paired"] = JsonTest(c.paired);
    out << j.dump(2) << "\n";
    return {};
  }
  out << "A " << o.path_a << ": " << SummaryLine(c.a) << "\n";
  out << "B " << o.path_b << ": " << SummaryLine(c.b) << "\n";
  out << "A - B:  " << Signed(c.diff);
  if (c.welch) {
    out << "  95% CI " << IntervalText(c.welch->ci95) << "  (Welch " << TestText(*c.welch) << ")\n";
  } else {
    out << "  (no t-test: it needs at least 2 runs on each side)\n";
  }
  if (o.paired) {
    if (c.paired) {
      out << "paired: " << Signed(c.paired->estimate) << "  95% CI " << IntervalText(c.paired->ci95)
          << "  (" << TestText(*c.paired) << ", " << a.size() << " pairs)\n";
    } else {
      out << "paired: no test (it needs at least 2 pairs)\n";
    }
  }
  if (c.bootstrap_ci95) {
    out << "bootstrap 95% CI of A - B: " << IntervalText(*c.bootstrap_ci95)
        << (o.paired ? " (resampling pairs)\n" : "\n");
  }
  out << "P(A>B) " << Num(c.mann_whitney->p_a_gt_b) << " (Mann-Whitney U=" << Num(c.mann_whitney->u)
      << ")";
  if (c.hedges_g) out << "  Hedges' g " << Num(*c.hedges_g);
  out << "\n";
  out << "verdict: " << stats::VerdictPhrase(verdict, o.min_effect) << " (A against B; goal " << o.goal
      << ", alpha " << Num(o.alpha);
  if (o.min_effect) out << ", min effect " << Num(*o.min_effect);
  out << (c.paired ? ", paired t-test" : c.welch ? ", Welch t-test" : "") << ")\n";
  return {};
}

Status StatsPower(const StatsPowerOptions& o, std::ostream& out, std::ostream& err) {
  if (!(o.alpha > 0 && o.alpha < 1)) {
    return Fail(ErrorKind::kInvalidArgument, "--alpha must be between 0 and 1, got " + Num(o.alpha));
  }
  if (!(o.power > 0 && o.power < 1)) {
    return Fail(ErrorKind::kInvalidArgument, "--power must be between 0 and 1, got " + Num(o.power));
  }
  if (!(o.effect != 0) || !std::isfinite(o.effect)) {
    return Fail(ErrorKind::kInvalidArgument,
                "--effect must be a finite difference other than 0, in the metric's units");
  }
  if (o.paired == o.path_b.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                o.paired ? "--paired needs FILE_B: the sd is that of B - A, seed by seed"
                         : "FILE_B is only read with --paired (two-sample power uses the sd of "
                           "FILE_A)");
  }
  std::vector<double> values;
  std::string sd_of;
  ASSIGN_OR_RETURN(auto lines_a, ReadNumbers(o.path_a));
  if (o.paired) {
    ASSIGN_OR_RETURN(auto lines_b, ReadNumbers(o.path_b));
    StatsCompareOptions names;
    names.path_a = o.path_a;
    names.path_b = o.path_b;
    std::vector<double> a, b;
    TRY(PairedValues(names, lines_a, lines_b, &a, &b, err));
    for (size_t i = 0; i < a.size(); ++i) values.push_back(b[i] - a[i]);
    sd_of = "B - A";
  } else {
    ASSIGN_OR_RETURN(values, FiniteValues(o.path_a, lines_a, err));
    sd_of = "A";
  }
  if (values.size() < 2) {
    return Fail(ErrorKind::kInvalidArgument,
                (o.paired ? "--paired needs at least 2 pairs" : o.path_a + ": needs at least 2 values") +
                    std::string(" to estimate the sd"));
  }
  stats::Summary s = stats::Summarize(values);
  ASSIGN_OR_RETURN(int n, o.paired ? stats::PairsForDifference(s.sd, o.effect, o.power, o.alpha)
                                   : stats::RunsPerSideForDifference(s.sd, o.effect, o.power,
                                                                     o.alpha));
  auto power_at = [&](int k) {
    return o.paired ? stats::PairedTPower(k, s.sd, o.effect, o.alpha)
                    : stats::TwoSampleTPower(k, s.sd, o.effect, o.alpha);
  };
  double achieved = power_at(n);
  std::optional<double> below;
  if (n > 2) below = power_at(n - 1);
  if (o.json) {
    out << json{{"n", n},
                {"design", o.paired ? "paired" : "two-sample"},
                {"per", o.paired ? "pairs" : "runs per side"},
                {"sd", s.sd},
                {"sd_of", sd_of},
                {"sd_n", s.n},
                {"effect", o.effect},
                {"alpha", o.alpha},
                {"target_power", o.power},
                {"power", achieved},
                {"power_at_n_minus_1", below ? json(*below) : json(nullptr)},
                {"test", o.paired ? "paired t, two-sided" : "two-sample t, two-sided"}}
                .dump(2)
        << "\n";
    return {};
  }
  out << "sd " << Num(s.sd) << " (of " << sd_of << ", n=" << s.n << "); effect ±"
      << Num(std::fabs(o.effect)) << ", alpha " << Num(o.alpha) << " two-sided, power "
      << Num(o.power) << "\n";
  out << (o.paired ? "pairs (seeds on both sides): " : "runs per side: ") << n << "  (power "
      << Num(achieved) << " with " << n;
  if (below) out << ", " << Num(*below) << " with " << n - 1;
  out << "; exact noncentral t, " << (o.paired ? "paired" : "two-sample") << " t-test)\n";
  return {};
}

void Report(const Status& st, int* exit_code) {
  if (st) return;
  std::cerr << "trainq: error: " << st.error().message << "\n";
  *exit_code = 1;
}

void AddBootstrapOptions(CLI::App* cmd, stats::BootstrapOptions* b) {
  cmd->add_option("--resamples", b->resamples, "Bootstrap resamples")->capture_default_str();
  cmd->add_option("--seed", b->seed, "Bootstrap seed (the same seed gives the same interval)")
      ->capture_default_str();
}

}  // namespace

void AddStatsCommands(CLI::App& app, int* exit_code) {
  auto* c_stats = app.add_subcommand(
      "stats", "Statistics on files of numbers (one per line, # comments allowed)");
  c_stats->require_subcommand(1);

  // The options live as long as `app`: CLI11 writes into them while parsing
  // and runs the callbacks afterwards.
  auto summary = std::make_shared<StatsSummaryOptions>();
  auto* c_summary = c_stats->add_subcommand(
      "summary", "n, mean, sd, se, 95% t and bootstrap intervals, median, IQR, IQM, range");
  c_summary->add_option("FILE", summary->path, "File of numbers")->required();
  c_summary->add_flag("--json", summary->json, "Print as JSON");
  AddBootstrapOptions(c_summary, &summary->bootstrap);
  c_summary->callback(
      [summary, exit_code] { Report(StatsSummary(*summary, std::cout, std::cerr), exit_code); });

  auto compare = std::make_shared<StatsCompareOptions>();
  auto* c_compare = c_stats->add_subcommand(
      "compare", "Compare A with B: Welch t-test, Hedges' g, P(A>B), bootstrap, verdict");
  c_compare->add_option("FILE_A", compare->path_a, "File of numbers: the change")->required();
  c_compare->add_option("FILE_B", compare->path_b, "File of numbers: what it is compared with")
      ->required();
  c_compare->add_flag("--paired", compare->paired,
                      "Line i of both files ran the same seed: add the paired t-test, "
                      "and base the verdict on it");
  c_compare->add_flag("--json", compare->json,
                      "Print as JSON (statistics that are infinite are written as null)");
  c_compare->add_option("--goal", compare->goal, "max: larger is better; min: smaller is better")
      ->capture_default_str();
  c_compare->add_option("--alpha", compare->alpha, "Significance level of the verdict")
      ->capture_default_str();
  c_compare->add_option("--min-effect", compare->min_effect,
                        "Smallest difference that matters, in the metric's units");
  AddBootstrapOptions(c_compare, &compare->bootstrap);
  c_compare->callback(
      [compare, exit_code] { Report(StatsCompare(*compare, std::cout, std::cerr), exit_code); });

  auto power = std::make_shared<StatsPowerOptions>();
  auto* c_power = c_stats->add_subcommand(
      "power",
      "Runs needed: the smallest n per side (or pairs) whose two-sided t-test detects "
      "--effect with the given power (exact noncentral t)");
  c_power->add_option("FILE_A", power->path_a, "File of numbers: its sd is the per-run noise")
      ->required();
  c_power->add_option("FILE_B", power->path_b,
                      "With --paired: the other side, line i the same seed as A's line i");
  c_power->add_flag("--paired", power->paired,
                    "Paired design: the sd is that of B - A, and n counts pairs");
  c_power->add_option("--effect", power->effect,
                      "The difference to detect, in the metric's units")
      ->required();
  c_power->add_option("--alpha", power->alpha, "Significance level (two-sided)")
      ->capture_default_str();
  c_power->add_option("--power", power->power, "Probability of detecting the effect")
      ->capture_default_str();
  c_power->add_flag("--json", power->json, "Print as JSON ({\"n\": N, ...})");
  c_power->callback(
      [power, exit_code] { Report(StatsPower(*power, std::cout, std::cerr), exit_code); });
}

}  // namespace trainq
