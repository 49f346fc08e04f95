#include "agent/results/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/results/sweep.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "stats/noise_floor.h"
#include "stats/sample_size.h"
#include "stats/summary.h"

namespace trainq {

int BatchRules::looks() const {
  if (!adaptive() || !until_decided || step <= 0) return 1;
  return 1 + (max_runs - min_runs + step - 1) / step;
}

stats::SequentialDesign BatchRules::design() const {
  const int k_looks = looks();
  if (k_looks <= 1) return {};
  std::vector<int> at;
  for (int k = 0; k < k_looks; ++k) at.push_back(std::min(max_runs, min_runs + k * step));
  return stats::DesignForLooks(design_kind, at);
}

int BatchRules::LookAt(int repeats) const {
  const int k_looks = looks();
  if (k_looks <= 1 || repeats <= min_runs) return 1;
  return std::clamp(1 + (repeats - min_runs + step - 1) / step, 1, k_looks);
}

double BatchRules::alpha(int look) const { return stats::NominalLevel(design(), look, 0.05, 2); }

BatchRules RulesOf(const BatchProgress& b) {
  BatchRules r;
  r.goal = b.metric_goal == "min" ? stats::Goal::kMin : stats::Goal::kMax;
  auto j = nlohmann::json::parse(b.spec_json.empty() ? "{}" : b.spec_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return r;
  if (j.contains("metric") && j["metric"].is_object() && j["metric"].contains("min_effect") &&
      j["metric"]["min_effect"].is_number()) {
    r.min_effect = j["metric"]["min_effect"].get<double>();
  }
  if (j.contains("correction") && j["correction"].is_string()) {
    if (auto c = stats::ParseCorrection(j["correction"].get<std::string>())) r.correction = *c;
  }
  if (j.contains("adaptive") && j["adaptive"].is_object()) {
    const auto& a = j["adaptive"];
    r.min_runs = a.value("min", 0);
    r.max_runs = a.value("max", 0);
    r.step = a.value("step", r.min_runs);
    if (a.contains("until")) {
      if (a["until"].is_string() && a["until"] == "decided") r.until_decided = true;
      if (a.contains("design") && a["design"].is_string()) {
        if (auto k = stats::ParseSequentialKind(a["design"].get<std::string>())) r.design_kind = *k;
      }
      if (a["until"].is_object() && a["until"].contains("ci_halfwidth")) {
        r.until_halfwidth = a["until"]["ci_halfwidth"].get<double>();
      }
    }
  }
  return r;
}

bool SameRuns(const BatchProgress& a, const BatchProgress& b) {
  // Id 0: a batch not from the store (made up by a caller): never the same.
  const std::int64_t runs_a = a.reuses_batch_id.value_or(a.id);
  return runs_a != 0 && runs_a == b.reuses_batch_id.value_or(b.id);
}

namespace {

BatchComparison CompareBatchesWith(const BatchProgress& a, const BatchProgress& b,
                                   const std::string& pairing_note, bool bootstrap);

}  // namespace

BatchComparison CompareBatches(const BatchProgress& a, const BatchProgress& b,
                               const std::string& pairing_note) {
  return CompareBatchesWith(a, b, pairing_note, true);
}

BatchComparison DecideBatches(const BatchProgress& a, const BatchProgress& b) {
  return CompareBatchesWith(a, b, "", false);
}

namespace {

BatchComparison CompareBatchesWith(const BatchProgress& a, const BatchProgress& b,
                                   const std::string& pairing_note, bool bootstrap) {
  BatchComparison out;
  out.pairing_note = pairing_note;
  out.a = a;
  out.b = b;
  BatchRules rules = RulesOf(a);
  out.alpha = rules.alpha(rules.LookAt(a.repeats));
  if (SameRuns(a, b)) {
    // Runs compared with themselves say nothing: the experiment did not
    // change between the two sides.
    out.unchanged = true;
    out.verdict = stats::Verdict::kNoDetectableChange;
    out.correction = rules.correction;
    return out;
  }
  if (a.values.empty() || b.values.empty()) return out;

  // Pair the runs on the seeds both sides ran (at least two): per-seed
  // differences cancel the part of the noise that comes from the seed. A
  // side topped up with more seeds still pairs on the shared ones.
  std::map<std::int64_t, double> by_seed_b;
  for (size_t i = 0; i < b.values.size() && i < b.seeds.size(); ++i) by_seed_b[b.seeds[i]] = b.values[i];
  std::vector<double> va, vb;
  std::map<std::int64_t, double> by_seed_a;
  for (size_t i = 0; i < a.values.size() && i < a.seeds.size(); ++i) by_seed_a[a.seeds[i]] = a.values[i];
  for (const auto& [seed, v] : by_seed_a) {
    auto it = by_seed_b.find(seed);
    if (it == by_seed_b.end()) continue;
    va.push_back(v);
    vb.push_back(it->second);
  }
  bool same_seeds = va.size() >= 2 && pairing_note.empty();
  stats::CompareOptions co;
  if (!bootstrap) co.bootstrap.resamples = 0;
  if (same_seeds) {
    co.paired = true;
    out.shared_seeds = static_cast<int>(va.size());
  } else {
    va = a.values;
    vb = b.values;
  }
  auto cmp = stats::Compare(va, vb, co);
  if (!cmp) return out;
  out.paired = same_seeds;
  out.cmp = *cmp;
  std::vector<BatchComparison*> alone = {&out};
  CorrectFamily(alone, 1, rules.correction);
  return out;
}

}  // namespace

namespace {

const std::optional<stats::TTest>& TestOf(const BatchComparison& c) {
  return c.paired ? c.cmp->paired : c.cmp->welch;
}

}  // namespace

void CorrectFamily(std::vector<BatchComparison*>& comparisons, int family_size,
                   stats::Correction correction) {
  const int m = std::max<int>(family_size, static_cast<int>(comparisons.size()));
  // Each member's p is the repeated p-value of its design at the look it is
  // at: a valid p-value whatever the stopping rule did (docs/STATISTICS.md),
  // so the family correction can take it as it is.
  std::vector<double> p(static_cast<size_t>(m), 1.0);
  for (size_t i = 0; i < comparisons.size(); ++i) {
    BatchComparison& c = *comparisons[i];
    if (c.unchanged) continue;  // never passed by CompareFamily; no test to correct
    BatchRules rules = RulesOf(c.a);
    c.looks = rules.looks();
    c.look = rules.LookAt(c.a.repeats);
    c.design = rules.design_kind;
    c.correction = correction;
    c.family_size = m;
    c.p_raw.reset();
    c.p_adjusted.reset();
    c.interval.reset();
    if (!c.cmp || !TestOf(c)) continue;
    c.p_raw = TestOf(c)->p;
    p[i] = stats::RepeatedP(rules.design(), c.look, *c.p_raw);
  }
  auto adjusted = stats::Adjust(correction, p);
  int rejections = 0;
  for (double q : adjusted) rejections += q < 0.05 ? 1 : 0;
  for (size_t i = 0; i < comparisons.size(); ++i) {
    BatchComparison& c = *comparisons[i];
    if (c.unchanged) continue;
    BatchRules rules = RulesOf(c.a);
    const stats::SequentialDesign design = rules.design();
    // The family's level (alpha / m for Holm, the false-coverage level for
    // BH), then the design's share of it at this look: the repeated
    // confidence interval, two-sided, and the equivalence interval (two
    // one-sided tests at the one-sided boundary).
    const double family_alpha = 1 - stats::IntervalLevel(correction, 0.05, m, rejections);
    c.interval_level = 1 - stats::NominalLevel(design, c.look, family_alpha, 2);
    c.equivalence_level = 1 - 2 * stats::NominalLevel(design, c.look, family_alpha, 1);
    c.equivalence_interval.reset();
    if (!c.cmp) {
      c.verdict = stats::Verdict::kNotEnoughRuns;
      continue;
    }
    const auto& test = TestOf(c);
    if (test) {
      c.p_adjusted = adjusted[i];
      c.interval = stats::TInterval(*test, c.interval_level);
      if (rules.min_effect) c.equivalence_interval = stats::TInterval(*test, c.equivalence_level);
    }
    stats::VerdictOptions vo;
    vo.goal = rules.goal;
    vo.alpha = 0.05;
    vo.min_effect = rules.min_effect;
    vo.adjusted_p = c.p_adjusted;
    vo.interval_level = c.interval_level;
    vo.equivalence_level = c.equivalence_level;
    c.verdict = stats::Decide(test, vo);
  }
}

stats::Correction CorrectionOf(const BatchProgress& b) { return RulesOf(b).correction; }

int FamilySize(const std::vector<FamilyMember>& members) {
  int n = 0;
  for (const auto& m : members) n += m.unchanged() ? 0 : 1;
  return n;
}

std::vector<std::optional<BatchComparison>> CompareFamily(
    const std::vector<FamilyMember>& members, bool compare_running,
    std::optional<stats::Correction> correction) {
  std::vector<std::optional<BatchComparison>> out(members.size());
  std::vector<BatchComparison*> made;
  for (size_t i = 0; i < members.size(); ++i) {
    const auto& m = members[i];
    if (!m.base) continue;
    if (m.unchanged()) {
      // Shown (the same runs as the baseline), never counted.
      out[i] = CompareBatches(m.head, *m.base);
      continue;
    }
    if (!compare_running && (m.head.active() || m.base->active())) continue;
    std::string note;
    for (const auto* r : {&m.repro, &m.base_repro}) {
      if (*r && (*r)->state == ReproCheck::State::kNotReproducible && note.empty()) {
        note = std::string(r == &m.repro ? "this batch" : "the baseline") + " is " + (*r)->text;
      }
    }
    out[i] = CompareBatches(m.head, *m.base, note);
    made.push_back(&*out[i]);
  }
  stats::Correction c = correction.value_or(
      members.empty() ? stats::Correction::kHolm : CorrectionOf(members.front().head));
  // The members without a comparison are the family's p = 1 members.
  CorrectFamily(made, FamilySize(members), c);
  for (auto& o : out) {
    if (o && o->unchanged) o->correction = c;
  }
  return out;
}

std::string RunsNeededText(const BatchComparison& c) {
  if (c.unchanged) return "";
  if (c.verdict != stats::Verdict::kNotEnoughRuns && c.verdict != stats::Verdict::kNegligible) {
    return "";
  }
  auto min_effect = RulesOf(c.a).min_effect;
  if (!min_effect || !(*min_effect > 0) || !c.cmp) return "";
  const auto& test = TestOf(c);
  double sd = 0;
  int now = 0;
  if (c.paired && test) {
    now = c.shared_seeds;
    sd = test->se * std::sqrt(static_cast<double>(now));
  } else if (c.cmp->a.n >= 2) {
    now = static_cast<int>(c.cmp->a.n);
    sd = c.cmp->a.sd;
  } else {
    return "";
  }
  double alpha = std::clamp(1 - c.interval_level, 1e-12, 0.5);
  auto k = c.paired ? stats::PairsForDifference(sd, *min_effect, 0.8, alpha)
                    : stats::RunsPerSideForDifference(sd, *min_effect, 0.8, alpha);
  std::string head = "to detect ±" + FormatDouble(*min_effect, 4) + " with power 0.8: ";
  if (!k) return head + "more than " + std::to_string(stats::kMaxAdvisedRuns) + " seeds per side";
  return head + "about " + std::to_string(*k) + " seeds per side (now " + std::to_string(now) + ")";
}

ReproCheck CheckRepro(const BatchProgress& b, const BatchProgress& repro) {
  ReproCheck r;
  std::map<std::int64_t, double> first;
  for (size_t i = 0; i < b.values.size() && i < b.seeds.size(); ++i) first[b.seeds[i]] = b.values[i];
  std::map<std::int64_t, double> second;
  for (size_t i = 0; i < repro.values.size() && i < repro.seeds.size(); ++i) {
    second[repro.seeds[i]] = repro.values[i];
  }
  for (const auto& [seed, v] : second) {
    auto it = first.find(seed);
    if (it == first.end()) continue;
    ++r.seeds_checked;
    // Bit for bit: a deterministic command prints the same number twice.
    if (it->second != v && r.state != ReproCheck::State::kNotReproducible) {
      r.state = ReproCheck::State::kNotReproducible;
      r.seed = seed;
      r.first = it->second;
      r.second = v;
    }
  }
  if (r.state == ReproCheck::State::kNotReproducible) {
    // Four decimals, more when four do not show where they differ.
    int d = 4;
    while (d < 12 && FormatDouble(r.first, d) == FormatDouble(r.second, d)) ++d;
    std::string a = FormatDouble(r.first, d), b2 = FormatDouble(r.second, d);
    r.text = "not reproducible (seed " + std::to_string(r.seed) + ": " + a + " vs " + b2 + ")";
    return r;
  }
  if (b.active() || repro.active() || r.seeds_checked == 0) {
    r.state = ReproCheck::State::kPending;
    r.text = (b.active() || repro.active()) ? "determinism check running"
                                            : "determinism check: no seed finished twice";
    return r;
  }
  r.state = ReproCheck::State::kReproducible;
  r.text = "reproducible (" +
           (r.seeds_checked == 1
                ? "seed " + std::to_string(second.begin()->first) + " run twice: " +
                      FormatDouble(first[second.begin()->first], 4)
                : std::to_string(r.seeds_checked) + " seeds run twice, identical") +
           ")";
  return r;
}

Result<std::optional<ReproCheck>> ReproOf(Store& store, const BatchProgress& b) {
  if (IsReproExperiment(b.experiment)) return std::optional<ReproCheck>();
  ASSIGN_OR_RETURN(auto companion,
                   BatchOfExperimentAt(store, b.repo_url, ReproExperimentOf(b.experiment), b.sha));
  if (!companion) return std::optional<ReproCheck>();
  return std::optional<ReproCheck>(CheckRepro(b, *companion));
}

std::optional<DriftCheck> CheckDrift(const BatchProgress& b,
                                     const std::vector<BatchProgress>& earlier) {
  if (b.values.size() < 2 || earlier.empty()) return std::nullopt;
  // Earlier runs, each distinct (seed, value) once: a deterministic command
  // gives the same value for a seed at every such commit, and repeating it
  // adds no information.
  std::map<std::int64_t, std::vector<double>> by_seed;
  std::vector<double> pooled;
  for (const auto& e : earlier) {
    for (size_t i = 0; i < e.values.size() && i < e.seeds.size(); ++i) {
      auto& seen = by_seed[e.seeds[i]];
      if (std::find(seen.begin(), seen.end(), e.values[i]) != seen.end()) continue;
      seen.push_back(e.values[i]);
      pooled.push_back(e.values[i]);
    }
  }
  if (pooled.size() < 2) return std::nullopt;
  DriftCheck d;
  d.earlier_batches = static_cast<int>(earlier.size());
  d.earlier_n = static_cast<int>(pooled.size());
  auto now = stats::Summarize(b.values), then = stats::Summarize(pooled);
  d.mean = now.mean;
  d.sd = now.sd;
  d.earlier_mean = then.mean;
  d.earlier_sd = then.sd;
  // The mean: per seed against the earlier runs' mean at that seed.
  std::vector<double> va, vb;
  for (size_t i = 0; i < b.values.size() && i < b.seeds.size(); ++i) {
    auto it = by_seed.find(b.seeds[i]);
    if (it == by_seed.end()) continue;
    double s = 0;
    for (double v : it->second) s += v;
    va.push_back(b.values[i]);
    vb.push_back(s / static_cast<double>(it->second.size()));
  }
  std::optional<stats::TTest> mean_test;
  if (va.size() >= 2) {
    mean_test = stats::PairedTTest(va, vb);
    d.paired = true;
    d.shared_seeds = static_cast<int>(va.size());
  } else {
    mean_test = stats::WelchTTest(b.values, pooled);
  }
  auto spread_test = stats::BrownForsytheTest(b.values, pooled);
  std::vector<double> p = {mean_test ? mean_test->p : 1.0, spread_test ? spread_test->p : 1.0};
  auto adj = stats::HolmAdjust(p);
  d.p_mean = adj[0];
  d.p_spread = adj[1];
  d.drift = d.p_mean < kDriftAlpha || d.p_spread < kDriftAlpha;
  auto pv = [](double v) { return v < 0.001 ? std::string("p<0.001") : "p=" + FormatDouble(v, 3); };
  std::string batches = std::to_string(d.earlier_batches) + " earlier batch" +
                        (d.earlier_batches == 1 ? "" : "es");
  d.text = std::string(d.drift ? "drift" : "no drift") + ": mean " + FormatDouble(d.mean, 4) +
           " vs " + FormatDouble(d.earlier_mean, 4) + " (" +
           (d.paired ? "paired t on " + std::to_string(d.shared_seeds) + " seeds" : "Welch t") +
           ", " + pv(d.p_mean) + "), sd " + FormatDouble(d.sd, 4) + " vs " +
           FormatDouble(d.earlier_sd, 4) + " (Brown-Forsythe, " + pv(d.p_spread) + ") against " +
           batches + " (n=" + std::to_string(d.earlier_n) +
           ") with the same inputs; Holm over the 2 tests, alpha " + FormatDouble(kDriftAlpha, 2);
  std::string what = d.p_mean < kDriftAlpha
                         ? "mean " + std::string(d.mean >= d.earlier_mean ? "+" : "") +
                               FormatDouble(d.mean - d.earlier_mean, 4) + " (" + pv(d.p_mean) + ")"
                         : "sd " + FormatDouble(d.sd, 4) + " vs " + FormatDouble(d.earlier_sd, 4) +
                               " (" + pv(d.p_spread) + ")";
  d.brief = d.drift ? "drift: " + what + " vs " + batches + ", same inputs" : "";
  return d;
}

Result<std::optional<DriftCheck>> DriftOf(Store& store, const BatchProgress& b,
                                          std::map<std::string, std::vector<BatchProgress>>* cache) {
  auto inputs_of = [](const BatchProgress& x) {
    auto j = nlohmann::json::parse(x.spec_json.empty() ? "{}" : x.spec_json, nullptr, false);
    return j.is_object() && j.contains("inputs") && j["inputs"].is_string()
               ? j["inputs"].get<std::string>()
               : std::string();
  };
  std::string inputs = inputs_of(b);
  // A batch that reuses another's runs has none of its own to test.
  if (inputs.empty() || b.active() || b.reuses_batch_id) return std::optional<DriftCheck>();
  std::vector<BatchProgress> loaded;
  const std::vector<BatchProgress>* all = &loaded;
  if (cache && cache->count(b.experiment)) {
    all = &(*cache)[b.experiment];
  } else {
    ASSIGN_OR_RETURN(loaded, store.runs().BatchesOfExperiment(b.experiment, kDriftLookback));
    if (cache) all = &((*cache)[b.experiment] = std::move(loaded));
  }
  std::vector<BatchProgress> earlier;
  for (const auto& x : *all) {
    if (x.id >= b.id || x.repo_url != b.repo_url || x.sha == b.sha || x.active()) continue;
    if (x.reuses_batch_id) continue;  // the runs of a batch that is counted already
    if (inputs_of(x) != inputs) continue;
    earlier.push_back(x);
  }
  return CheckDrift(b, earlier);
}

std::string LevelText(double level) {
  const double pct = level * 100;
  // At most 4 significant digits (97.5%, 99.75%, 98.33%, never 98.3333%);
  // more only where 4 would round a level below 100% up to 100% (99.995%).
  const int before = pct >= 1 ? static_cast<int>(std::floor(std::log10(pct))) + 1 : 1;
  int decimals = std::max(0, 4 - before);
  std::string text = FormatDouble(pct, decimals);
  while (pct < 100 && std::strtod(text.c_str(), nullptr) >= 100 && decimals < 8) {
    text = FormatDouble(pct, ++decimals);
  }
  if (text.find('.') != std::string::npos) {
    while (text.ends_with('0')) text.pop_back();
    if (text.ends_with('.')) text.pop_back();
  }
  return text + "% CI";
}

std::optional<stats::Improvement> ImprovementOf(const BatchComparison& c) {
  if (c.unchanged || !c.cmp) return std::nullopt;
  std::vector<double> va, vb;
  if (c.paired) {
    std::map<std::int64_t, double> by_seed_b;
    for (size_t i = 0; i < c.b.values.size() && i < c.b.seeds.size(); ++i) {
      by_seed_b[c.b.seeds[i]] = c.b.values[i];
    }
    for (size_t i = 0; i < c.a.values.size() && i < c.a.seeds.size(); ++i) {
      auto it = by_seed_b.find(c.a.seeds[i]);
      if (it == by_seed_b.end()) continue;
      va.push_back(c.a.values[i]);
      vb.push_back(it->second);
    }
  } else {
    va = c.a.values;
    vb = c.b.values;
  }
  // Improvement is in the metric's direction: lower is better for goal min.
  stats::BootstrapOptions bo;
  bo.resamples = 2000;
  if (RulesOf(c.a).goal == stats::Goal::kMin) return stats::ProbabilityOfImprovement(vb, va, c.paired, bo);
  return stats::ProbabilityOfImprovement(va, vb, c.paired, bo);
}

std::string ImprovementText(const BatchComparison& c) {
  auto p = ImprovementOf(c);
  if (!p) return "";
  std::string text = "P(improvement) " + FormatDouble(p->estimate, 2);
  if (p->interval) {
    text += " (95% CI " + FormatDouble(p->interval->lo, 2) + ".." + FormatDouble(p->interval->hi, 2);
  } else {
    text += " (no interval";
  }
  if (p->paired) {
    return text + ", the share of " + std::to_string(c.shared_seeds) +
           " seeds where this batch beats the baseline)";
  }
  return text + ", Mann-Whitney: a run here beats a run of the baseline)";
}

MachineTime MachineTimeOf(const BatchComparison& c) {
  MachineTime t;
  t.run_ms = c.a.run_ms + (c.unchanged ? 0 : c.b.run_ms);
  t.gpu_hours = (static_cast<double>(c.a.run_ms) * c.a.gpus +
                 (c.unchanged ? 0.0 : static_cast<double>(c.b.run_ms) * c.b.gpus)) /
                3'600'000.0;
  return t;
}

std::string CostText(const BatchComparison& c) {
  auto runs_of = [](const BatchProgress& b) {
    std::int64_t n = 0;
    for (auto k : b.counts) n += k;
    return n;
  };
  std::int64_t here = runs_of(c.a), there = c.unchanged ? 0 : runs_of(c.b);
  std::string what = !c.unchanged && stats::Decided(c.verdict) ? "this verdict cost " : "spent so far: ";
  std::string text = what + std::to_string(here + there) + " runs (" + std::to_string(here) +
                     " here, " + std::to_string(there) + " at the baseline)";
  const MachineTime t = MachineTimeOf(c);
  if (t.run_ms > 0) {
    text += ", " + FormatDuration(t.run_ms) + " of run time";
    if (t.gpu_hours > 0) text += " (" + FormatDouble(t.gpu_hours, t.gpu_hours < 10 ? 2 : 1) + " GPU-hours)";
  }
  return text;
}

std::string VerdictWord(const BatchComparison& c) {
  return c.unchanged ? std::string("unchanged")
                     : stats::VerdictPhrase(c.verdict, RulesOf(c.a).min_effect);
}

std::string CorrectionText(const BatchComparison& c) {
  if (c.unchanged || c.family_size <= 1) return "";
  std::string looks = c.looks > 1 ? ", " + std::to_string(c.looks) + " looks each" +
                                        (c.design == stats::SequentialKind::kSpending
                                             ? " (O'Brien-Fleming spending)"
                                             : "")
                                  : "";
  if (c.correction == stats::Correction::kNone) {
    return "no correction, family of " + std::to_string(c.family_size) + looks;
  }
  return std::string(stats::CorrectionTitle(c.correction)) + " over " +
         std::to_string(c.family_size) + looks;
}

std::string SpreadText(const BatchProgress& b) {
  if (b.values.empty()) return b.metric_name + " (no finished runs)";
  auto s = stats::Summarize(b.values);
  if (s.n == 1) return b.metric_name + " " + FormatDouble(s.mean, 4) + " (n=1)";
  // The test-set noise floor next to the sd, when the runs reported it.
  std::string floor;
  if (auto f = NoiseFloorJson(b); f.is_object() && f["floor"].is_number()) {
    floor = "; " + f["short"].get<std::string>();
  }
  return b.metric_name + " " + FormatDouble(s.mean, 4) + " ± " + FormatDouble(s.sd, 4) +
         " (n=" + std::to_string(s.n) + floor + ")";
}

namespace {

std::string Signed(double v, int precision) {
  std::string s = FormatDouble(v, precision);
  return (v >= 0 && s[0] != '-') ? "+" + s : s;
}

// The fewest decimals (4 at least, 10 at most) at which neither end of an
// equivalence interval prints as the margin: inside and outside stay visible.
int MarginDecimals(const stats::Interval& ci, double margin) {
  int d = 4;
  for (; d < 10; ++d) {
    std::string m = FormatDouble(std::abs(margin), d);
    if (FormatDouble(std::abs(ci.lo), d) != m && FormatDouble(std::abs(ci.hi), d) != m) break;
  }
  return d;
}

std::string PValue(double p) {
  if (p < 0.001) return "p<0.001";
  return "p=" + FormatDouble(p, 3);
}

}  // namespace

std::string PText(const BatchComparison& c) {
  if (!c.p_raw) return "";
  std::string raw = PValue(*c.p_raw);
  std::string corr = CorrectionText(c);
  if (!corr.empty() && c.correction != stats::Correction::kNone && c.p_adjusted) {
    return raw + " raw, " + PValue(*c.p_adjusted) + " adjusted (" + corr + ")";
  }
  // No family correction, but a sequential design still decides on its
  // repeated p-value: show the p the verdict used whenever it is not the raw one.
  if (c.p_adjusted && PValue(*c.p_adjusted) != raw) {
    std::string why = "repeated p at look " + std::to_string(c.look) + " of " +
                      std::to_string(c.looks);
    return raw + " raw, " + PValue(*c.p_adjusted) + " used (" + why +
           (corr.empty() ? "" : "; " + corr) + ")";
  }
  return corr.empty() ? raw : raw + " (" + corr + ")";
}

std::string ComparisonText(const BatchComparison& c) {
  if (c.unchanged) {
    return "unchanged: the same runs as the baseline (batch " +
           std::to_string(c.a.reuses_batch_id.value_or(c.a.id)) + " at " +
           ShortSha(c.a.reused_from_sha.empty() ? c.a.sha : c.a.reused_from_sha,
                    kReportShaChars) +
           "), not compared and not counted in the family";
  }
  if (!c.cmp) {
    return "no comparison: " +
           std::string(c.a.values.empty() ? "this batch" : "the other batch") +
           " has no finished runs";
  }
  const auto& cmp = *c.cmp;
  const auto& test = c.paired ? cmp.paired : cmp.welch;
  std::string text = Signed(cmp.diff, 4);
  if (test) {
    stats::Interval ci = c.interval.value_or(test->ci95);
    text += " (" + LevelText(c.interval ? c.interval_level : 0.95) + " " + Signed(ci.lo, 4) +
            ".." + Signed(ci.hi, 4) + ", " + (c.paired ? "paired t " : "Welch t ");
    size_t n_max = std::max(c.a.values.size(), c.b.values.size());
    if (c.paired && static_cast<size_t>(c.shared_seeds) < n_max) {
      text += "on " + std::to_string(c.shared_seeds) + " shared seeds, ";
    }
    text += PText(c);
    if (cmp.hedges_g && std::isfinite(*cmp.hedges_g)) {
      text += ", g=" + FormatDouble(*cmp.hedges_g, 2);
    }
    text += ")";
  } else {
    text += " (fewer than 2 runs on a side: no test)";
  }
  text += ": " + VerdictWord(c);
  if (!c.pairing_note.empty()) {
    text += " (pairing unreliable: " + c.pairing_note + "; unpaired Welch t used)";
  }
  auto me = RulesOf(c.a).min_effect;
  if (c.verdict == stats::Verdict::kNegligible && me) {
    text += " (below min_effect " + FormatDouble(*me, 4) + ")";
  }
  if ((c.verdict == stats::Verdict::kEquivalent || c.verdict == stats::Verdict::kNegligible) &&
      c.equivalence_interval) {
    // As many decimals as it takes for an end just inside the margin not to
    // print as the margin itself ("+0.0030 inside ±0.0030").
    int d = MarginDecimals(*c.equivalence_interval, *me);
    text += " (TOST: " + LevelText(c.equivalence_level) + " " +
            Signed(c.equivalence_interval->lo, d) + ".." + Signed(c.equivalence_interval->hi, d) +
            " inside ±" + FormatDouble(*me, d) + ")";
  }
  if (c.looks > 1 && c.family_size <= 1) {
    text += " (look " + std::to_string(c.look) + " of " + std::to_string(c.looks) + ", " +
            std::string(stats::SequentialKindTitle(c.design)) + ": alpha " +
            FormatDouble(c.alpha, 4) + " at this look)";
  }
  return text;
}

Result<std::optional<BatchProgress>> BatchOfExperimentAt(Store& store, const std::string& repo_url,
                                                         const std::string& experiment,
                                                         const std::string& sha) {
  if (sha.size() < 4) return std::optional<BatchProgress>();
  return store.runs().BatchAt(repo_url, sha, experiment);
}

Result<std::optional<BatchProgress>> ParentBatch(Store& store, const BatchProgress& b) {
  if (b.baseline_batch_id) {
    ASSIGN_OR_RETURN(auto chosen, store.runs().Batch(*b.baseline_batch_id));
    if (chosen) return chosen;
  }
  ASSIGN_OR_RETURN(auto found,
                   BatchOfExperimentAt(store, b.repo_url, b.experiment,
                                       b.base_sha.empty() ? b.parent_sha : b.base_sha));
  // A batch that reuses the runs found there is unchanged (SameRuns): the
  // readers show it so and never compare it.
  return found;
}

Result<std::vector<FamilyMember>> CommitFamily(Store& store, const std::string& repo_url,
                                               const std::string& sha) {
  ASSIGN_OR_RETURN(auto batches, store.runs().BatchesForCommit(sha));
  std::sort(batches.begin(), batches.end(),
            [](const BatchProgress& x, const BatchProgress& y) { return x.id < y.id; });
  std::vector<FamilyMember> out;
  for (auto& b : batches) {
    if (b.sha != sha || b.repo_url != repo_url || IsSweepPointExperiment(b.experiment)) continue;
    if (IsReproExperiment(b.experiment)) continue;
    FamilyMember m;
    ASSIGN_OR_RETURN(m.base, ParentBatch(store, b));
    ASSIGN_OR_RETURN(m.repro, ReproOf(store, b));
    if (m.base) {
      ASSIGN_OR_RETURN(m.base_repro, ReproOf(store, *m.base));
    }
    m.head = std::move(b);
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::optional<BatchComparison>> CompareInFamily(Store& store, const BatchProgress& b,
                                                       bool compare_running,
                                                       std::optional<stats::Correction> correction) {
  ASSIGN_OR_RETURN(auto family, CommitFamily(store, b.repo_url, b.sha));
  auto comparisons = CompareFamily(family, compare_running, correction);
  for (size_t i = 0; i < family.size(); ++i) {
    if (family[i].head.id == b.id) return comparisons[i];
  }
  // Not one of its commit's family (a sweep point): alone.
  ASSIGN_OR_RETURN(auto base, ParentBatch(store, b));
  if (!base) return std::optional<BatchComparison>();
  return std::optional<BatchComparison>(CompareBatches(b, *base));
}

std::string BaselineText(const BatchProgress& b) {
  if (!b.baseline_note.empty()) return b.baseline_note;
  return "the parent commit " + ShortSha(b.parent_sha, kReportShaChars);
}

TopUp PlanTopUp(const BatchProgress& b, const std::optional<BatchProgress>& parent) {
  TopUp out;
  BatchRules rules = RulesOf(b);
  if (!rules.adaptive() || b.active()) return out;
  std::int64_t total = 0;
  for (auto c : b.counts) total += c;
  if (total >= rules.max_runs) return out;
  int room = static_cast<int>(rules.max_runs - total);
  int step = std::min(std::max(rules.step, 1), room);
  if (rules.until_halfwidth) {
    auto s = stats::Summarize(b.values);
    if (s.ci95 && s.ci95->half_width() <= *rules.until_halfwidth) return out;
    out.head_add = step;
    return out;
  }
  if (!rules.until_decided) return out;
  // Without finished parent runs there is nothing to decide against: stop
  // at what was queued rather than spend runs on an unanswerable question.
  if (!parent || parent->values.size() < 2) {
    out.note = "stopped: the baseline has fewer than 2 finished runs to decide against";
    return out;
  }
  if (parent->active()) {
    // Its top-up round is still running: the round ending there decides.
    out.waiting = true;
    out.note = "waiting for the baseline's runs";
    return out;
  }
  // Decided: better, worse, or with a min_effect negligible or equivalent.
  auto c = DecideBatches(b, *parent);
  if (stats::Decided(c.verdict)) return out;
  if (SameRuns(b, *parent)) return out;
  const int base_n = static_cast<int>(parent->values.size());
  if (c.paired) {
    // The same new seeds at the baseline: b's seeds are seed_start + i, and
    // growing the baseline's batch to the same count adds the same seeds
    // when it numbers them from the same start.
    std::string why;
    if (auto at = b.baseline_note.find(kCannotGrowMark); at != std::string::npos) {
      // Git said so when the last round was planned (ExtendIfNeeded).
      why = b.baseline_note.substr(at + kCannotGrowMark.size());
      if (why.ends_with(")")) why.pop_back();
    } else if (parent->seed_start != b.seed_start) {
      why = "its seeds start at " + std::to_string(parent->seed_start) + ", this batch's at " +
            std::to_string(b.seed_start);
    } else if (parent->count(RunState::kDead) > 0) {
      why = std::to_string(parent->count(RunState::kDead)) +
            " of its runs are dead (its commit or inputs cannot be run)";
    }
    if (why.empty()) {
      out.head_add = step;
      out.base_repeats = std::max(parent->repeats, b.repeats + step);
      if (out.base_repeats <= parent->repeats) out.base_repeats = 0;
      return out;
    }
    // Unpaired from here: more head runs than the baseline has add little.
    out.head_add = std::clamp(base_n - static_cast<int>(total), 0, step);
    if (out.head_add == 0) {
      out.note = "stopped at " + std::to_string(total) + " runs: the baseline cannot grow (" + why +
                 "), and an unpaired test against its " + std::to_string(base_n) +
                 " runs gains little from more runs here";
    }
    return out;
  }
  out.head_add = step;
  return out;
}

int RunsToAdd(const BatchProgress& b, const std::optional<BatchProgress>& parent) {
  return PlanTopUp(b, parent).head_add;
}

namespace {

// Why git cannot run a baseline's top-up: "" when its commit (the reused
// batch's, when it reuses one) is in its repository, or when that
// repository cannot be opened here (its runs then say whether they can run).
std::string BaselineCommitGone(const BatchProgress& parent) {
  const std::string& sha = parent.reused_from_sha.empty() ? parent.sha : parent.reused_from_sha;
  auto repo = GitRepo::Open(parent.repo_url);
  if (!repo || repo->HasCommit(sha)) return "";
  return "its commit " + ShortSha(sha, kReportShaChars) + " is no longer in the repository";
}

// The adaptive round of one batch and its baseline's paired top-up.
Result<int> ExtendOne(Store& store, const BatchProgress& batch, TimeMs now) {
  if (!RulesOf(batch).adaptive() || batch.active()) return 0;
  ASSIGN_OR_RETURN(auto parent, ParentBatch(store, batch));
  TopUp plan = PlanTopUp(batch, parent);
  if (plan.base_repeats > 0 && parent) {
    // Git first: runs queued at a commit that is gone would only die, and
    // the head's would have no pairs.
    if (std::string gone = BaselineCommitGone(*parent); !gone.empty()) {
      BatchProgress noted = batch;
      noted.baseline_note = BaselineText(batch) + std::string(kCannotGrowMark) + gone + ")";
      // Kept with the batch, so every reader's PlanTopUp (status, show,
      // --json's top_up) says why it stopped.
      TRY(store.runs().SetBaseline(batch.id, batch.base_sha, batch.baseline_batch_id,
                                   noted.baseline_note));
      plan = PlanTopUp(noted, parent);
    }
  }
  int added = 0;
  if (plan.base_repeats > 0 && parent) {
    // The baseline first: its runs are queued before the head's, so that
    // the pairs finish together.
    ASSIGN_OR_RETURN(int n, store.runs().ExtendBatch(parent->id, plan.base_repeats, now));
    added += n;
  }
  if (plan.head_add > 0) {
    ASSIGN_OR_RETURN(int n, store.runs().ExtendBatch(batch.id, batch.repeats + plan.head_add, now));
    added += n;
  }
  return added;
}

}  // namespace

Result<int> ExtendIfNeeded(Store& store, std::int64_t batch_id, TimeMs now) {
  ASSIGN_OR_RETURN(auto batch, store.runs().Batch(batch_id));
  if (!batch) return 0;
  int added = 0;
  if (!batch->active()) {
    // A baseline whose round ended: the batches compared with it that
    // waited for it decide now.
    ASSIGN_OR_RETURN(auto heads, store.runs().BatchesComparedWith(batch->reuses_batch_id.value_or(batch->id)));
    for (const auto& h : heads) {
      if (h.id == batch->id) continue;
      ASSIGN_OR_RETURN(int n, ExtendOne(store, h, now));
      added += n;
    }
  }
  ASSIGN_OR_RETURN(int n, ExtendOne(store, *batch, now));
  return added + n;
}

namespace {

nlohmann::json TestJson(const std::optional<stats::TTest>& t) {
  if (!t) return nullptr;
  return {{"t", t->t}, {"df", t->df}, {"p", t->p}, {"ci95", {t->ci95.lo, t->ci95.hi}}};
}

nlohmann::json SideJson(const BatchProgress& b) {
  nlohmann::json floor = NoiseFloorJson(b);
  auto s = stats::Summarize(b.values);
  nlohmann::json j = {{"batch", b.id}, {"commit", b.sha}, {"n", s.n}, {"values", b.values},
            {"seeds", b.seeds}};
  if (s.n) {
    j["mean"] = s.mean;
    j["sd"] = s.n > 1 ? nlohmann::json(s.sd) : nlohmann::json(nullptr);
    j["ci95"] = s.ci95 ? nlohmann::json::array({s.ci95->lo, s.ci95->hi}) : nlohmann::json(nullptr);
  }
  if (!floor.is_null()) j["noise_floor"] = std::move(floor);
  return j;
}

// "4500", "4000..4500" for the examples the runs reported.
std::string ExamplesText(const BatchProgress& b) {
  auto whole = [](double v) { return FormatDouble(v, v == std::floor(v) ? 0 : 1); };
  std::string t = whole(*b.eval_examples_min);
  if (*b.eval_examples_max != *b.eval_examples_min) t += ".." + whole(*b.eval_examples_max);
  return t;
}

}  // namespace

nlohmann::json NoiseFloorJson(const BatchProgress& b) {
  if (!b.eval_examples_min) return nullptr;
  nlohmann::json j = {{"eval_examples", *b.eval_examples_min}};
  if (*b.eval_examples_max != *b.eval_examples_min) j["eval_examples_max"] = *b.eval_examples_max;
  const std::string n = ExamplesText(b);
  const std::string fewest = *b.eval_examples_max != *b.eval_examples_min
                                 ? " (the runs report different sizes: the floor uses the fewest)"
                                 : "";
  auto f = stats::EvalNoiseFloor(b.values, *b.eval_examples_min);
  if (!f) {
    j["floor"] = nullptr;
    bool proportion =
        std::all_of(b.values.begin(), b.values.end(), [](double v) { return v >= 0 && v <= 1; });
    j["short"] = "no floor";
    j["text"] =
        !proportion
            ? "no evaluation floor: the runs report " + n + " eval examples, but " + b.metric_name +
                  " is not a share of examples (a value outside 0..1)"
            : "no evaluation floor yet: " + n + " eval examples, and fewer than 2 finished runs";
    return j;
  }
  auto d4 = [](double v) { return FormatDouble(v, 4); };
  j["p"] = f->p;
  j["floor"] = f->floor;
  j["sd"] = f->sd;
  j["seeds"] = f->seeds;
  j["sd_ci95"] = {f->sd_lo, f->sd_hi};
  j["ratio"] = std::isfinite(f->ratio) ? nlohmann::json(f->ratio) : nlohmann::json(nullptr);
  j["at_floor"] = f->at_floor;
  const std::string ratio = std::isfinite(f->ratio) ? FormatDouble(f->ratio, 1) + "x" : "above";
  // Below: even the top of the sd's interval is under the floor. The runs
  // then agree on which examples they get right more than independent
  // scoring would, so "about as much as" would overstate the seed spread.
  const bool below = f->at_floor && f->sd_hi < f->floor;
  j["short"] = "floor " + d4(f->floor) +
               (below         ? ", sd below it"
                : f->at_floor ? ", sd at it"
                              : ", sd " + ratio);
  std::string where = "(" + b.metric_name + " " + FormatDouble(f->p, 4) + " on " + n +
                      " eval examples; the sd's 95% interval over " + std::to_string(f->seeds) +
                      " seeds is " + d4(f->sd_lo) + ".." + d4(f->sd_hi) + ")" + fewest;
  if (below) {
    j["text"] =
        "seed sd " + d4(f->sd) + " is below the evaluation floor " + d4(f->floor) + " " + where +
        ": the runs mostly agree on which of the " + n +
        " examples they get right, so they differ less than independent scoring would; "
        "more seeds will not narrow that spread, and what this accuracy says about new data "
        "is uncertain by about the floor, which a larger evaluation set narrows (4x the "
        "examples halves it)";
  } else if (f->at_floor) {
    j["text"] = "seed sd " + d4(f->sd) + " sits at the evaluation floor " + d4(f->floor) + " " +
                where + ": the seeds differ about as much as scoring " + n +
                " examples alone makes them differ; more seeds will not narrow that spread, a "
                "larger evaluation set will (4x the examples halves the floor)";
  } else {
    j["text"] = "seed sd " + d4(f->sd) + " is " + ratio + " the evaluation floor " + d4(f->floor) +
                " " + where +
                ": training, not the evaluation set, makes most of the spread; more seeds help";
  }
  return j;
}

nlohmann::json ComparisonJson(const BatchComparison& c) {
  nlohmann::json j = {{"experiment", c.a.experiment},
            {"metric", c.a.metric_name},
            {"goal", c.a.metric_goal},
            {"a", SideJson(c.a)},
            {"b", SideJson(c.b)},
            {"paired", c.paired},
            {"shared_seeds", c.shared_seeds},
            {"alpha", c.alpha},
            {"verdict", VerdictWord(c)},
            {"unchanged", c.unchanged},
            {"text", ComparisonText(c)},
            {"pairing_unreliable", c.pairing_note.empty() ? nlohmann::json(nullptr)
                                                          : nlohmann::json(c.pairing_note)},
            {"runs_needed", RunsNeededText(c).empty() ? nlohmann::json(nullptr)
                                                      : nlohmann::json(RunsNeededText(c))},
            {"correction", {{"method", std::string(stats::CorrectionName(c.correction))},
                            {"family_size", c.family_size},
                            {"looks", c.looks},
                            {"look", c.look},
                            {"design", std::string(stats::SequentialKindName(c.design))},
                            {"design_text", c.looks > 1 ? nlohmann::json(std::string(
                                                              stats::SequentialKindTitle(c.design)))
                                                        : nlohmann::json(nullptr)},
                            {"text", CorrectionText(c)},
                            {"p_raw", c.p_raw ? nlohmann::json(*c.p_raw) : nlohmann::json(nullptr)},
                            {"p_adjusted", c.p_adjusted ? nlohmann::json(*c.p_adjusted)
                                                        : nlohmann::json(nullptr)},
                            {"interval_level", c.interval_level},
                            {"level_text", LevelText(c.interval_level)},
                            {"p_text", PText(c)},
                            {"interval", c.interval ? nlohmann::json::array(
                                                          {c.interval->lo, c.interval->hi})
                                                    : nlohmann::json(nullptr)}}}};
  auto rules = RulesOf(c.a);
  j["min_effect"] = rules.min_effect ? nlohmann::json(*rules.min_effect) : nlohmann::json(nullptr);
  j["verdict_name"] = c.unchanged ? std::string("unchanged") : std::string(stats::VerdictName(c.verdict));
  // What the verdict cost: the runs on both sides (queued, running and
  // failed ones included: they are spent or about to be).
  auto runs_of = [](const BatchProgress& b) {
    std::int64_t n = 0;
    for (auto k : b.counts) n += k;
    return n;
  };
  j["cost"] = {{"runs", runs_of(c.a) + (c.unchanged ? 0 : runs_of(c.b))},
               {"runs_here", runs_of(c.a)},
               {"runs_baseline", c.unchanged ? 0 : runs_of(c.b)},
               {"run_ms", MachineTimeOf(c).run_ms},
               {"run_ms_here", c.a.run_ms},
               {"run_ms_baseline", c.unchanged ? 0 : c.b.run_ms},
               {"gpu_hours", MachineTimeOf(c).gpu_hours},
               {"text", CostText(c)}};
  if (auto poi = ImprovementOf(c)) {
    j["probability_of_improvement"] = {
        {"estimate", poi->estimate},
        {"interval", poi->interval ? nlohmann::json::array({poi->interval->lo, poi->interval->hi})
                                   : nlohmann::json(nullptr)},
        {"paired", poi->paired},
        {"text", ImprovementText(c)}};
  } else {
    j["probability_of_improvement"] = nullptr;
  }
  // Why an adaptive batch stopped short of max, or waits.
  std::string top_up = rules.until_decided && !c.unchanged ? PlanTopUp(c.a, c.b).note : "";
  j["top_up"] = top_up.empty() ? nlohmann::json(nullptr) : nlohmann::json(top_up);
  j["decided"] = !c.unchanged && stats::Decided(c.verdict);
  if (c.equivalence_interval && rules.min_effect) {
    j["equivalence"] = {{"margin", *rules.min_effect},
                        {"level", c.equivalence_level},
                        {"level_text", LevelText(c.equivalence_level)},
                        {"interval", {c.equivalence_interval->lo, c.equivalence_interval->hi}},
                        {"inside", -*rules.min_effect < c.equivalence_interval->lo &&
                                       c.equivalence_interval->hi < *rules.min_effect}};
  } else {
    j["equivalence"] = nullptr;
  }
  if (c.cmp) {
    j["diff"] = c.cmp->diff;
    j["welch"] = TestJson(c.cmp->welch);
    j["paired_test"] = TestJson(c.cmp->paired);
    j["hedges_g"] = c.cmp->hedges_g ? nlohmann::json(*c.cmp->hedges_g) : nlohmann::json(nullptr);
    j["p_a_gt_b"] = c.cmp->mann_whitney ? nlohmann::json(c.cmp->mann_whitney->p_a_gt_b) : nlohmann::json(nullptr);
    j["bootstrap_ci95"] = c.cmp->bootstrap_ci95
                              ? nlohmann::json::array({c.cmp->bootstrap_ci95->lo, c.cmp->bootstrap_ci95->hi})
                              : nlohmann::json(nullptr);
  }
  return j;
}

}  // namespace trainq
