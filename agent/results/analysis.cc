#include "agent/results/analysis.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "stats/summary.h"

namespace trainq {

int BatchRules::looks() const {
  if (!adaptive() || !until_decided || step <= 0) return 1;
  return 1 + (max_runs - min_runs + step - 1) / step;
}

double BatchRules::alpha() const { return 0.05 / looks(); }

BatchRules RulesOf(const BatchProgress& b) {
  BatchRules r;
  r.goal = b.metric_goal == "min" ? stats::Goal::kMin : stats::Goal::kMax;
  auto j = nlohmann::json::parse(b.spec_json.empty() ? "{}" : b.spec_json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return r;
  if (j.contains("metric") && j["metric"].is_object() && j["metric"].contains("min_effect") &&
      j["metric"]["min_effect"].is_number()) {
    r.min_effect = j["metric"]["min_effect"].get<double>();
  }
  if (j.contains("adaptive") && j["adaptive"].is_object()) {
    const auto& a = j["adaptive"];
    r.min_runs = a.value("min", 0);
    r.max_runs = a.value("max", 0);
    r.step = a.value("step", r.min_runs);
    if (a.contains("until")) {
      if (a["until"].is_string() && a["until"] == "decided") r.until_decided = true;
      if (a["until"].is_object() && a["until"].contains("ci_halfwidth")) {
        r.until_halfwidth = a["until"]["ci_halfwidth"].get<double>();
      }
    }
  }
  return r;
}

BatchComparison CompareBatches(const BatchProgress& a, const BatchProgress& b) {
  BatchComparison out;
  out.a = a;
  out.b = b;
  BatchRules rules = RulesOf(a);
  out.alpha = rules.alpha();
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
  bool same_seeds = va.size() >= 2;
  stats::CompareOptions co;
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
  stats::VerdictOptions vo;
  vo.goal = rules.goal;
  vo.alpha = out.alpha;
  vo.min_effect = rules.min_effect;
  out.verdict = stats::Decide(*cmp, vo);
  return out;
}

std::string SpreadText(const BatchProgress& b) {
  if (b.values.empty()) return b.metric_name + " (no finished runs)";
  auto s = stats::Summarize(b.values);
  if (s.n == 1) return b.metric_name + " " + FormatDouble(s.mean, 4) + " (n=1)";
  return b.metric_name + " " + FormatDouble(s.mean, 4) + " ± " + FormatDouble(s.sd, 4) +
         " (n=" + std::to_string(s.n) + ")";
}

namespace {

std::string Signed(double v, int precision) {
  std::string s = FormatDouble(v, precision);
  return (v >= 0 && s[0] != '-') ? "+" + s : s;
}

std::string PValue(double p) {
  if (p < 0.001) return "p<0.001";
  return "p=" + FormatDouble(p, 3);
}

}  // namespace

std::string ComparisonText(const BatchComparison& c) {
  if (!c.cmp) {
    return "no comparison: " +
           std::string(c.a.values.empty() ? "this batch" : "the other batch") +
           " has no finished runs";
  }
  const auto& cmp = *c.cmp;
  const auto& test = c.paired ? cmp.paired : cmp.welch;
  std::string text = Signed(cmp.diff, 4);
  if (test) {
    text += " (95% CI " + Signed(test->ci95.lo, 4) + ".." + Signed(test->ci95.hi, 4) + ", " +
            (c.paired ? "paired t " : "Welch t ");
    size_t n_max = std::max(c.a.values.size(), c.b.values.size());
    if (c.paired && static_cast<size_t>(c.shared_seeds) < n_max) {
      text += "on " + std::to_string(c.shared_seeds) + " shared seeds, ";
    }
    text += PValue(test->p);
    if (cmp.hedges_g && std::isfinite(*cmp.hedges_g)) {
      text += ", g=" + FormatDouble(*cmp.hedges_g, 2);
    }
    text += ")";
  } else {
    text += " (fewer than 2 runs on a side: no test)";
  }
  text += ": " + std::string(stats::VerdictName(c.verdict));
  if (c.verdict == stats::Verdict::kNegligible) {
    if (auto me = RulesOf(c.a).min_effect) text += " (below min_effect " + FormatDouble(*me, 4) + ")";
  }
  if (c.alpha < 0.05) text += " (alpha " + FormatDouble(c.alpha, 4) + ", adaptive looks)";
  return text;
}

Result<std::optional<BatchProgress>> BatchOfExperimentAt(Store& store, const std::string& repo_url,
                                                         const std::string& experiment,
                                                         const std::string& sha) {
  if (sha.size() < 4) return std::optional<BatchProgress>();
  ASSIGN_OR_RETURN(auto candidates, store.BatchesForCommit(sha));
  for (auto& c : candidates) {
    if (c.experiment == experiment && c.repo_url == repo_url && c.sha == sha) {
      return std::optional<BatchProgress>(std::move(c));
    }
  }
  return std::optional<BatchProgress>();
}

Result<std::optional<BatchProgress>> ParentBatch(Store& store, const BatchProgress& b) {
  if (b.baseline_batch_id) {
    ASSIGN_OR_RETURN(auto chosen, store.Batch(*b.baseline_batch_id));
    if (chosen) return chosen;
  }
  if (!b.base_sha.empty()) return BatchOfExperimentAt(store, b.repo_url, b.experiment, b.base_sha);
  return BatchOfExperimentAt(store, b.repo_url, b.experiment, b.parent_sha);
}

std::string BaselineText(const BatchProgress& b) {
  if (!b.baseline_note.empty()) return b.baseline_note;
  return "the parent commit " + b.parent_sha.substr(0, 7);
}

int RunsToAdd(const BatchProgress& b, const std::optional<BatchProgress>& parent) {
  BatchRules rules = RulesOf(b);
  if (!rules.adaptive() || b.active()) return 0;
  std::int64_t total = 0;
  for (auto c : b.counts) total += c;
  if (total >= rules.max_runs) return 0;
  int room = static_cast<int>(rules.max_runs - total);
  int step = std::min(std::max(rules.step, 1), room);
  if (rules.until_halfwidth) {
    auto s = stats::Summarize(b.values);
    if (s.ci95 && s.ci95->half_width() <= *rules.until_halfwidth) return 0;
    return step;
  }
  if (rules.until_decided) {
    // Without finished parent runs there is nothing to decide against: stop
    // at what was queued rather than spend runs on an unanswerable question.
    if (!parent || parent->values.size() < 2 || parent->active()) return 0;
    auto c = CompareBatches(b, *parent);
    if (c.verdict == stats::Verdict::kBetter || c.verdict == stats::Verdict::kWorse) return 0;
    if ((c.verdict == stats::Verdict::kNoDetectableChange ||
         c.verdict == stats::Verdict::kNegligible) && rules.min_effect) {
      return 0;
    }
    return step;
  }
  return 0;
}

Result<int> ExtendIfNeeded(Store& store, std::int64_t batch_id, TimeMs now) {
  ASSIGN_OR_RETURN(auto batch, store.Batch(batch_id));
  if (!batch || !RulesOf(*batch).adaptive() || batch->active()) return 0;
  ASSIGN_OR_RETURN(auto parent, ParentBatch(store, *batch));
  int add = RunsToAdd(*batch, parent);
  if (add <= 0) return 0;
  ASSIGN_OR_RETURN(int added, store.ExtendBatch(batch_id, batch->repeats + add, now));
  return added;
}

namespace {

nlohmann::json TestJson(const std::optional<stats::TTest>& t) {
  if (!t) return nullptr;
  return {{"t", t->t}, {"df", t->df}, {"p", t->p}, {"ci95", {t->ci95.lo, t->ci95.hi}}};
}

nlohmann::json SideJson(const BatchProgress& b) {
  auto s = stats::Summarize(b.values);
  nlohmann::json j = {{"batch", b.id}, {"commit", b.sha}, {"n", s.n}, {"values", b.values},
            {"seeds", b.seeds}};
  if (s.n) {
    j["mean"] = s.mean;
    j["sd"] = s.n > 1 ? nlohmann::json(s.sd) : nlohmann::json(nullptr);
    j["ci95"] = s.ci95 ? nlohmann::json::array({s.ci95->lo, s.ci95->hi}) : nlohmann::json(nullptr);
  }
  return j;
}

}  // namespace

nlohmann::json ComparisonJson(const BatchComparison& c) {
  nlohmann::json j = {{"experiment", c.a.experiment},
            {"metric", c.a.metric_name},
            {"goal", c.a.metric_goal},
            {"a", SideJson(c.a)},
            {"b", SideJson(c.b)},
            {"paired", c.paired},
            {"shared_seeds", c.shared_seeds},
            {"alpha", c.alpha},
            {"verdict", std::string(stats::VerdictName(c.verdict))}};
  auto rules = RulesOf(c.a);
  j["min_effect"] = rules.min_effect ? nlohmann::json(*rules.min_effect) : nlohmann::json(nullptr);
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
