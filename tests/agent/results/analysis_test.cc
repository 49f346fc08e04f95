#include "agent/results/analysis.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <set>

#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

BatchProgress MakeBatch(std::vector<double> values, std::string spec_json = "{}",
                        std::string goal = "max") {
  // Each its own batch, as in a store (the same id would be the same runs:
  // SameRuns, never compared).
  static std::int64_t next_id = 0;
  BatchProgress b;
  b.id = ++next_id;
  b.experiment = "e";
  b.metric_name = "accuracy";
  b.metric_goal = std::move(goal);
  b.spec_json = std::move(spec_json);
  b.values = std::move(values);
  for (size_t i = 0; i < b.values.size(); ++i) b.seeds.push_back(1 + static_cast<int>(i));
  b.counts[static_cast<int>(RunState::kSucceeded)] = static_cast<std::int64_t>(b.values.size());
  b.repeats = static_cast<int>(b.values.size());
  return b;
}

// Submits a batch at `sha` (parent `parent`) and completes its runs with `values`.
std::int64_t Run(Store& store, const std::string& sha, const std::string& parent,
                 const std::vector<double>& values, const std::string& spec_json = "{}") {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  BatchSpec s;
  s.experiment = "e";
  s.command = "true";
  s.repeats = static_cast<int>(values.size());
  s.spec_json = spec_json;
  auto r = store.runs().Submit("/repo", c, {s}, kT0);
  REQUIRE(r);
  auto leased = store.runs().Lease("w", kT0, 60'000, static_cast<int>(values.size())).value();
  REQUIRE(leased.size() == values.size());
  for (size_t i = 0; i < leased.size(); ++i) {
    REQUIRE(store.runs().Complete(leased[i].run_id, leased[i].token, kT0, values[leased[i].repeat]));
  }
  return r->front().batch_id;
}

const std::string kParent = "1111111111111111111111111111111111111111";
const std::string kChild = "2222222222222222222222222222222222222222";

}  // namespace

// Issue 38.9: a family of 3 printed "98.3333% CI".
TEST_CASE("analysis: interval levels print with at most 4 significant digits", "[analysis]") {
  const std::pair<double, const char*> cases[] = {
      {0.95, "95% CI"},          {1 - 0.05 / 2, "97.5% CI"},   {1 - 0.05 / 3, "98.33% CI"},
      {1 - 0.05 / 20, "99.75% CI"}, {1 - 0.05 / 6, "99.17% CI"}, {1 - 0.05 / 60, "99.92% CI"},
      {0.99999, "99.999% CI"}, {0.9, "90% CI"},           {0.5, "50% CI"},
  };
  for (const auto& [level, text] : cases) {
    INFO(level);
    CHECK(LevelText(level) == text);
  }
}

TEST_CASE("CompareBatches pairs runs by seed when both ran the same seeds", "[analysis]") {
  // Every seed gains exactly 0.01 while seeds differ by a lot: only a paired
  // test sees it. (Differences all equal 0.01: sd of the differences is 0.)
  auto a = MakeBatch({0.71, 0.61, 0.81, 0.66});
  auto b = MakeBatch({0.70, 0.60, 0.80, 0.65});
  auto c = CompareBatches(a, b);
  REQUIRE(c.cmp);
  CHECK(c.paired);
  CHECK(c.cmp->diff == Approx(0.01));
  CHECK(c.verdict == stats::Verdict::kBetter);
  // Shuffle B's seeds: no pairing, and Welch cannot tell 0.01 from seed noise.
  b.seeds = {5, 6, 7, 8};
  auto u = CompareBatches(a, b);
  CHECK_FALSE(u.paired);
  CHECK(u.verdict == stats::Verdict::kNoDetectableChange);
}

TEST_CASE("The goal decides which direction is better", "[analysis]") {
  auto a = MakeBatch({0.50, 0.51, 0.52, 0.50}, "{}", "min");
  auto b = MakeBatch({0.60, 0.61, 0.62, 0.60}, "{}", "min");
  CHECK(CompareBatches(a, b).verdict == stats::Verdict::kBetter);
  CHECK(CompareBatches(b, a).verdict == stats::Verdict::kWorse);
}

TEST_CASE("A side without finished runs gives no comparison", "[analysis]") {
  auto a = MakeBatch({});
  auto b = MakeBatch({0.5, 0.6});
  auto c = CompareBatches(a, b);
  CHECK_FALSE(c.cmp);
  CHECK(c.verdict == stats::Verdict::kNotEnoughRuns);
  CHECK(ComparisonText(c).find("no finished runs") != std::string::npos);
}

TEST_CASE("RulesOf reads min_effect and the adaptive rule from the stored definition",
          "[analysis]") {
  auto b = MakeBatch({}, R"({"metric": {"min_effect": 0.01},
      "adaptive": {"min": 5, "max": 30, "step": 5, "until": "decided"}})");
  auto r = RulesOf(b);
  CHECK(r.min_effect.value() == Approx(0.01));
  CHECK(r.adaptive());
  CHECK(r.until_decided);
  CHECK(r.looks() == 6);  // 5, 10, ..., 30
  CHECK(r.design_kind == stats::SequentialKind::kSpending);
  // O'Brien-Fleming spending: strict at the first look, near 0.05 at the last.
  CHECK(r.alpha(1) < 1e-4);
  CHECK(r.alpha(6) > 0.04);
  CHECK(r.LookAt(5) == 1);
  CHECK(r.LookAt(10) == 2);
  CHECK(r.LookAt(12) == 3);  // a round not yet full counts as the next look
  CHECK(r.LookAt(30) == 6);
  CHECK(r.LookAt(40) == 6);
  auto bonf = RulesOf(MakeBatch({}, R"({"adaptive": {"min": 5, "max": 30, "step": 5,
      "until": "decided", "design": "bonferroni"}})"));
  CHECK(bonf.design_kind == stats::SequentialKind::kBonferroni);
  CHECK(bonf.alpha(3) == Approx(0.05 / 6));
  CHECK(RulesOf(MakeBatch({})).looks() == 1);
  CHECK(RulesOf(MakeBatch({})).alpha() == Approx(0.05));
}

TEST_CASE("RunsToAdd: ci_halfwidth adds a round until the interval is narrow", "[analysis]") {
  std::string spec =
      R"({"adaptive": {"min": 3, "max": 9, "step": 3, "until": {"ci_halfwidth": 0.01}}})";
  // Wide: sd 0.05 with n=3 gives a half-width of about 0.124.
  auto wide = MakeBatch({0.60, 0.65, 0.70}, spec);
  CHECK(RunsToAdd(wide, std::nullopt) == 3);
  // Narrow: all within 0.001.
  auto narrow = MakeBatch({0.650, 0.651, 0.6505}, spec);
  CHECK(RunsToAdd(narrow, std::nullopt) == 0);
  // Never beyond max.
  auto full = MakeBatch({0.6, 0.7, 0.6, 0.7, 0.6, 0.7, 0.6, 0.7, 0.6}, spec);
  CHECK(RunsToAdd(full, std::nullopt) == 0);
  auto almost = MakeBatch({0.6, 0.7, 0.6, 0.7, 0.6, 0.7, 0.6, 0.7}, spec);
  CHECK(RunsToAdd(almost, std::nullopt) == 1);
  // Nothing while runs are still going.
  wide.counts[static_cast<int>(RunState::kRunning)] = 1;
  CHECK(RunsToAdd(wide, std::nullopt) == 0);
  // A fixed batch never grows.
  CHECK(RunsToAdd(MakeBatch({0.1, 0.9}), std::nullopt) == 0);
}

TEST_CASE("RunsToAdd: until decided stops on a verdict or without parent runs", "[analysis]") {
  std::string spec = R"({"adaptive": {"min": 4, "max": 12, "step": 4, "until": "decided"}})";
  auto parent = MakeBatch({0.60, 0.70, 0.65, 0.62});
  auto undecided = MakeBatch({0.61, 0.69, 0.66, 0.61}, spec);
  CHECK(RunsToAdd(undecided, parent) == 4);
  CHECK(RunsToAdd(undecided, std::nullopt) == 0);
  // O'Brien-Fleming spends almost nothing at look 1 of 3 (p < 0.0002): a
  // gain of about 0.26 on 4 seeds (p = 0.0008) waits for the next look ...
  auto likely = MakeBatch({0.90, 0.91, 0.92, 0.90}, spec);
  CHECK(RunsToAdd(likely, parent) == 4);
  // ... the same seeds each up by exactly 0.3 (p = 0) are decided at once.
  auto clear = MakeBatch({0.90, 1.00, 0.95, 0.92}, spec);
  CHECK(RunsToAdd(clear, parent) == 0);
}

TEST_CASE("PlanTopUp: a paired comparison grows the baseline with the same seeds",
          "[analysis][topup]") {
  std::string spec = R"({"adaptive": {"min": 4, "max": 12, "step": 4, "until": "decided"}})";
  auto parent = MakeBatch({0.60, 0.70, 0.65, 0.62});
  auto head = MakeBatch({0.61, 0.69, 0.66, 0.61}, spec);
  auto plan = PlanTopUp(head, parent);
  CHECK(plan.head_add == 4);
  CHECK(plan.base_repeats == 8);
  CHECK(plan.note.empty());
  // The baseline's runs still going: the round waits for them.
  auto busy = parent;
  busy.counts[static_cast<int>(RunState::kQueued)] = 4;
  auto wait = PlanTopUp(head, busy);
  CHECK(wait.waiting);
  CHECK(wait.head_add == 0);
  // A baseline whose top-up runs died cannot grow: the head stops at the
  // baseline's 4 runs, and says why.
  auto dead = parent;
  dead.counts[static_cast<int>(RunState::kDead)] = 4;
  dead.repeats = 8;
  auto stop = PlanTopUp(head, dead);
  CHECK(stop.head_add == 0);
  CHECK(stop.base_repeats == 0);
  CHECK(stop.note.find("the baseline cannot grow (4 of its runs are dead") != std::string::npos);
  // Seeds numbered from another start cannot be paired by growing it.
  auto other = parent;
  other.seed_start = 101;
  auto other_plan = PlanTopUp(head, other);
  CHECK(other_plan.head_add == 0);
  CHECK(other_plan.note.find("its seeds start at 101") != std::string::npos);
}

TEST_CASE("the cost of a verdict: runs and machine time from the runs' started and finished times",
          "[analysis][cost]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  // Each run holds 2 GPUs and runs 30 minutes (started at lease + 1 min).
  auto batch = [&](const std::string& sha, const std::string& parent,
                   const std::vector<double>& values) {
    BatchSpec s;
    s.experiment = "e";
    s.command = "true";
    s.repeats = static_cast<int>(values.size());
    s.gpus = 2;
    auto r = store.runs().Submit("/repo", {sha, parent, "", "", 0}, {s}, kT0);
    REQUIRE(r);
    auto leased = store.runs().Lease("w", kT0, 3'600'000, 100).value();
    REQUIRE(leased.size() == values.size());
    for (const auto& l : leased) {
      REQUIRE(store.runs().MarkRunning(l.run_id, l.token, kT0 + 60'000, ""));
      REQUIRE(store.runs().Complete(l.run_id, l.token, kT0 + 60'000 + 1'800'000, values[l.repeat]));
    }
    return r->front().batch_id;
  };
  auto base_id = batch(kParent, "", {0.70, 0.60, 0.80, 0.65});
  auto head_id = batch(kChild, kParent, {0.71, 0.61, 0.81, 0.66});
  auto head = store.runs().Batch(head_id).value().value();
  auto base = store.runs().Batch(base_id).value().value();
  CHECK(head.run_ms == 4 * 1'800'000);
  CHECK(head.gpus == 2);
  auto c = CompareBatches(head, base);
  REQUIRE(c.verdict == stats::Verdict::kBetter);
  // 8 runs x 30 min = 4 h of run time, x 2 GPUs = 8 GPU-hours.
  CHECK(MachineTimeOf(c).run_ms == 8 * 1'800'000);
  CHECK(MachineTimeOf(c).gpu_hours == Approx(8.0));
  CHECK(CostText(c) ==
        "this verdict cost 8 runs (4 here, 4 at the baseline), 4h00m00s of run time (8.00 GPU-hours)");
  auto j = ComparisonJson(c);
  CHECK(j["cost"]["run_ms"] == 8 * 1'800'000);
  CHECK(j["cost"]["run_ms_here"] == 4 * 1'800'000);
  CHECK(j["cost"]["gpu_hours"] == Approx(8.0));
  // A run that never started has no time; runs without GPUs: no GPU-hours.
  auto plain_a = MakeBatch({0.71, 0.61, 0.81, 0.66});
  auto plain_b = MakeBatch({0.70, 0.60, 0.80, 0.65});
  plain_a.run_ms = 90'000;
  CHECK(CostText(CompareBatches(plain_a, plain_b)) ==
        "this verdict cost 8 runs (4 here, 4 at the baseline), 1m30s of run time");
}

TEST_CASE("ExtendIfNeeded: paired top-ups on both sides, the head decides when the baseline's round ends",
          "[analysis][topup]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  std::string spec = R"({"adaptive": {"min": 4, "max": 12, "step": 4, "until": "decided"}})";
  auto base_id = Run(store, kParent, "", {0.60, 0.70, 0.65, 0.62});
  // +0.05 on every seed, but at look 1 of 3 O'Brien-Fleming asks p < 0.0002
  // and 4 pairs give p = 0.0012.
  auto head_id = Run(store, kChild, kParent, {0.65, 0.76, 0.69, 0.67}, spec);
  REQUIRE(store.runs().SetBaseline(head_id, kParent, base_id, "at the parent"));
  // Undecided at 4 pairs: 4 more seeds on each side, the same ones.
  CHECK(ExtendIfNeeded(store, head_id, kT0).value() == 8);
  auto head_runs = store.runs().Runs(head_id, std::nullopt, 0).value();
  auto base_runs = store.runs().Runs(base_id, std::nullopt, 0).value();
  REQUIRE(head_runs.size() == 8);
  REQUIRE(base_runs.size() == 8);
  std::set<std::int64_t> head_seeds, base_seeds;
  for (const auto& r : head_runs) head_seeds.insert(r.seed);
  for (const auto& r : base_runs) base_seeds.insert(r.seed);
  CHECK(head_seeds == base_seeds);
  // Both rounds finish, the head's first: it waits for the baseline's.
  auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
  REQUIRE(leased.size() == 8);
  for (const auto& l : leased) {
    if (l.batch_id != head_id) continue;
    REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, 0.7 + 0.001 * l.seed));
  }
  CHECK(ExtendIfNeeded(store, head_id, kT0).value() == 0);
  for (const auto& l : leased) {
    if (l.batch_id != base_id) continue;
    REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, 0.65 + 0.001 * l.seed));
  }
  // The baseline's round ended: the head is decided (better), nothing added.
  CHECK(ExtendIfNeeded(store, base_id, kT0).value() == 0);
  auto head = store.runs().Batch(head_id).value().value();
  auto base = store.runs().Batch(base_id).value().value();
  auto c = CompareBatches(head, base);
  CHECK(c.shared_seeds == 8);
  CHECK(c.verdict == stats::Verdict::kBetter);
}

TEST_CASE("ExtendIfNeeded: an undecided head's next round starts when its baseline's round ends",
          "[analysis][topup]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  std::string spec = R"({"adaptive": {"min": 4, "max": 12, "step": 4, "until": "decided"}})";
  auto base_id = Run(store, kParent, "", {0.60, 0.70, 0.65, 0.62});
  auto head_id = Run(store, kChild, kParent, {0.61, 0.69, 0.66, 0.61}, spec);
  REQUIRE(store.runs().SetBaseline(head_id, kParent, base_id, "at the parent"));
  REQUIRE(ExtendIfNeeded(store, head_id, kT0).value() == 8);
  // Noise on both sides again: still undecided after 8 pairs.
  auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
  for (const auto& l : leased) {
    double v = 0.6 + 0.01 * (l.seed % 3) + (l.batch_id == head_id ? 0.004 * (l.seed % 2) : 0.0);
    REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, v));
  }
  // Called for the baseline (its run ended last): both grow to 12.
  CHECK(ExtendIfNeeded(store, base_id, kT0).value() == 8);
  CHECK(store.runs().Runs(head_id, std::nullopt, 0).value().size() == 12);
  CHECK(store.runs().Runs(base_id, std::nullopt, 0).value().size() == 12);
}

TEST_CASE("ExtendIfNeeded queues the next seeds of an adaptive batch", "[analysis]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  std::string spec =
      R"({"adaptive": {"min": 3, "max": 6, "step": 3, "until": {"ci_halfwidth": 0.001}}})";
  auto id = Run(store, kChild, kParent, {0.6, 0.7, 0.8}, spec);
  CHECK(ExtendIfNeeded(store, id, kT0).value() == 3);
  auto runs = store.runs().Runs(id, std::nullopt, 0).value();
  REQUIRE(runs.size() == 6);
  CHECK(runs[5].seed == 6);
  CHECK(runs[5].state == RunState::kQueued);
  // The new runs are not finished: nothing more is added now.
  CHECK(ExtendIfNeeded(store, id, kT0).value() == 0);
}

TEST_CASE("ParentBatch finds the same experiment at the parent commit", "[analysis]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  auto parent_id = Run(store, kParent, "", {0.6, 0.7});
  auto child_id = Run(store, kChild, kParent, {0.65, 0.75});
  auto child = store.runs().Batch(child_id).value().value();
  auto parent = ParentBatch(store, child).value();
  REQUIRE(parent);
  CHECK(parent->id == parent_id);
  auto root = store.runs().Batch(parent_id).value().value();
  CHECK_FALSE(ParentBatch(store, root).value());
}

TEST_CASE("ComparisonJson carries the tests and the verdict", "[analysis]") {
  auto c = CompareBatches(MakeBatch({0.71, 0.61, 0.81, 0.66}), MakeBatch({0.70, 0.60, 0.80, 0.65}));
  auto j = ComparisonJson(c);
  CHECK(j["verdict"] == "better");
  CHECK(j["paired"] == true);
  CHECK(j["diff"].get<double>() == Approx(0.01));
  CHECK(j["a"]["n"] == 4);
  CHECK(j["paired_test"].is_object());
  CHECK(j["welch"]["df"].get<double>() > 0);
}

TEST_CASE("trainq show compares each batch with the parent commit", "[analysis][show]") {
  testing::TempDir dir;
  {
    auto store = Store::Open(dir / "t.db").value();
    Run(store, kParent, "", {0.70, 0.60, 0.80, 0.65});
    Run(store, kChild, kParent, {0.71, 0.61, 0.81, 0.66});
  }
  std::string out;
  int code = testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + (dir / "t.db") +
                                   " show 2222",
                               &out);
  INFO(out);
  CHECK(code == 0);
  // Issue 27: one word, "baseline:", whether it is the parent or not.
  CHECK(out.find("baseline: accuracy 0.6875 ± 0.0854 (n=4) (batch 1: the parent commit "
                 "1111111)") != std::string::npos);
  CHECK(out.find("parent: ") == std::string::npos);
  CHECK(out.find("paired t") != std::string::npos);
  CHECK(out.find(": better") != std::string::npos);
  code = testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + (dir / "t.db") +
                               " show 1111 --json",
                           &out);
  CHECK(code == 0);
  auto j = nlohmann::json::parse(out);
  CHECK_FALSE(j["batches"][0].contains("vs_parent"));
  // 1111 is a root commit: there is no parent to speak of.
  code = testing::RunShell(std::string(TRAINQ_BINARY) + " --db " + (dir / "t.db") + " show 1111",
                           &out);
  INFO(out);
  CHECK(code == 0);
  CHECK(out.find("no baseline (a root commit: nothing before it to compare with)") !=
        std::string::npos);
  CHECK(out.find("at the parent commit") == std::string::npos);
}

namespace {

// Twenty experiments changed by one commit, with fixed per-seed values: at
// every seed s (1..10) the baseline is 0.90 + 0.002 s and the change adds
// mean_k + 0.003 z_s, z = (1, -1, 2, -2, .5, -.5, 1.5, -1.5, .25, -.25)
// (mean 0, so the per-seed differences have sd 0.0038891 whatever mean_k).
// Paired t on 10 seeds: t = mean_k sqrt(10) / 0.0038891.
//   noisy    mean -0.0043: t = -3.496, p = 0.0068 (~0.007)
//   broken   mean -0.03:   t = -24.4,  p < 1e-7
//   the rest mean 0.0001 ((k % 11) - 5): |t| <= 0.41, p > 0.35
constexpr double kZ[10] = {1, -1, 2, -2, 0.5, -0.5, 1.5, -1.5, 0.25, -0.25};

std::vector<double> BaseValues() {
  std::vector<double> v;
  for (int s = 1; s <= 10; ++s) v.push_back(0.90 + 0.002 * s);
  return v;
}

std::vector<double> Shifted(double mean) {
  auto v = BaseValues();
  for (int i = 0; i < 10; ++i) v[i] += mean + 0.003 * kZ[i];
  return v;
}

// Experiment k's change: 0 is `noisy`, 1 is `broken` when `with_broken`.
double MeanOf(int k, bool with_broken) {
  if (k == 0) return -0.0043;
  if (k == 1 && with_broken) return -0.03;
  return 0.0001 * ((k % 11) - 5);
}

std::vector<FamilyMember> TwentyChanged(bool with_broken, const std::string& spec = "{}") {
  std::vector<FamilyMember> family;
  for (int k = 0; k < 20; ++k) {
    FamilyMember m;
    m.head = MakeBatch(Shifted(MeanOf(k, with_broken)), spec);
    m.head.id = 100 + k;
    m.head.experiment = "e" + std::to_string(k);
    m.base = MakeBatch(BaseValues(), spec);
    m.base->id = 200 + k;
    family.push_back(std::move(m));
  }
  return family;
}

}  // namespace

TEST_CASE("twenty changed experiments: Holm calls p=0.007 noise and p<1e-7 worse", "[analysis][family]") {
  auto family = TwentyChanged(/*with_broken=*/true);
  auto c = CompareFamily(family, false);
  REQUIRE(c.size() == 20);
  for (const auto& x : c) REQUIRE(x);
  // The fixed values give the p-values the table says.
  CHECK(*c[0]->p_raw == Approx(0.0068).margin(0.0005));
  CHECK(*c[1]->p_raw < 1e-7);
  for (int k = 2; k < 20; ++k) CHECK(*c[k]->p_raw > 0.35);
  // Holm over 20: the smallest p times 20, the next times 19, ...
  CHECK(c[1]->correction == stats::Correction::kHolm);
  CHECK(c[1]->family_size == 20);
  CHECK(*c[1]->p_adjusted == Approx(20 * *c[1]->p_raw));
  CHECK(*c[0]->p_adjusted == Approx(19 * *c[0]->p_raw));
  CHECK(c[0]->verdict == stats::Verdict::kNoDetectableChange);
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  for (int k = 2; k < 20; ++k) CHECK(c[k]->verdict == stats::Verdict::kNoDetectableChange);
  // Bonferroni-width interval: 1 - 0.05/20 = 99.75 %, wider than the 95 % one,
  // and it covers 0 for the noise verdict.
  CHECK(c[0]->interval_level == Approx(0.9975));
  REQUIRE(c[0]->interval);
  CHECK(c[0]->interval->lo < c[0]->cmp->paired->ci95.lo);
  CHECK(c[0]->interval->lo < 0);
  CHECK(c[0]->interval->hi > 0);
  CHECK(c[0]->cmp->paired->ci95.hi < 0);  // the uncorrected interval excludes 0
  // Every text says which correction, over how many, with the raw p beside
  // the adjusted one.
  std::string text = ComparisonText(*c[0]);
  CHECK(text.find("99.75% CI") != std::string::npos);
  CHECK(text.find("p=0.007 raw, p=0.128 adjusted (Holm over 20)") != std::string::npos);
  CHECK(text.ends_with(": no detectable change"));
  auto j = ComparisonJson(*c[0]);
  CHECK(j["correction"]["method"] == "holm");
  CHECK(j["correction"]["family_size"] == 20);
  CHECK(j["correction"]["text"] == "Holm over 20");
  CHECK(j["correction"]["p_raw"].get<double>() == Approx(*c[0]->p_raw));
  CHECK(j["correction"]["p_adjusted"].get<double>() == Approx(*c[0]->p_adjusted));
  CHECK(j["verdict"] == "no detectable change");
}

TEST_CASE("twenty changed experiments: correction none restores the uncorrected verdicts", "[analysis][family]") {
  auto family = TwentyChanged(/*with_broken=*/true, R"({"correction":"none"})");
  CHECK(CorrectionOf(family[0].head) == stats::Correction::kNone);
  auto c = CompareFamily(family, false);
  CHECK(c[0]->verdict == stats::Verdict::kWorse);
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  CHECK(*c[0]->p_adjusted == Approx(*c[0]->p_raw));
  CHECK(c[0]->interval_level == Approx(0.95));
  CHECK(c[0]->interval->lo == Approx(c[0]->cmp->paired->ci95.lo));
  // The same answer as each comparison on its own.
  for (int k = 0; k < 20; ++k) {
    CHECK(c[k]->verdict == CompareBatches(family[k].head, *family[k].base).verdict);
  }
  CHECK(ComparisonText(*c[0]).find("(no correction, family of 20)") != std::string::npos);
  // An explicit correction wins over the stored one.
  auto holm = CompareFamily(family, false, stats::Correction::kHolm);
  CHECK(holm[0]->verdict == stats::Verdict::kNoDetectableChange);
}

TEST_CASE("twenty changed experiments: BH also calls p=0.007 noise", "[analysis][family]") {
  auto c = CompareFamily(TwentyChanged(true), false, stats::Correction::kBh);
  // BH: 0.0068 * 20 / 2 = 0.068 > 0.05.
  CHECK(*c[0]->p_adjusted == Approx(10 * *c[0]->p_raw));
  CHECK(c[0]->verdict == stats::Verdict::kNoDetectableChange);
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  // One rejection: the false-coverage-rate interval is at 1 - 1 * 0.05 / 20.
  CHECK(c[1]->interval_level == Approx(0.9975));
  CHECK(ComparisonText(*c[0]).find("adjusted (BH over 20)") != std::string::npos);
}

TEST_CASE("a family member without a comparison counts as p = 1", "[analysis][family]") {
  auto family = TwentyChanged(true);
  family[5].base.reset();                                               // no baseline
  family[6].head.counts[static_cast<int>(RunState::kRunning)] = 1;     // still running
  auto c = CompareFamily(family, /*compare_running=*/false);
  CHECK_FALSE(c[5]);
  CHECK_FALSE(c[6]);
  CHECK(c[1]->family_size == 20);
  CHECK(*c[1]->p_adjusted == Approx(20 * *c[1]->p_raw));
  // Compared alone, a batch is a family of one: no correction text at all.
  auto alone = CompareBatches(family[0].head, *family[0].base);
  CHECK(alone.family_size == 1);
  CHECK(alone.verdict == stats::Verdict::kWorse);
  CHECK(ComparisonText(alone).find("over") == std::string::npos);
}

TEST_CASE("adaptive looks and the family: looks * p is corrected", "[analysis][family]") {
  // until: decided with min 5, max 20, step 5: 4 looks, the even split.
  std::string spec =
      R"({"adaptive":{"min":5,"max":20,"step":5,"until":"decided","design":"bonferroni"}})";
  auto family = TwentyChanged(true, spec);
  auto c = CompareFamily(family, false);
  CHECK(c[1]->looks == 4);
  CHECK(*c[1]->p_adjusted == Approx(20 * 4 * *c[1]->p_raw));
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  CHECK(c[1]->interval_level == Approx(1 - 0.05 / 4 / 20));
  CHECK(CorrectionText(*c[1]) == "Holm over 20, 4 looks each");
}

TEST_CASE("spending looks and the family: the repeated p-value is corrected", "[analysis][family]") {
  // The same family under O'Brien-Fleming spending: 10 runs of 5..20 is look 2 of 4.
  std::string spec = R"({"adaptive":{"min":5,"max":20,"step":5,"until":"decided"}})";
  auto family = TwentyChanged(true, spec);
  auto c = CompareFamily(family, false);
  CHECK(c[1]->looks == 4);
  CHECK(c[1]->look == 2);
  const int at[] = {5, 10, 15, 20};
  auto design = stats::DesignForLooks(stats::SequentialKind::kSpending, at);
  double repeated = stats::RepeatedP(design, 2, *c[1]->p_raw);
  CHECK(repeated > *c[1]->p_raw);
  CHECK(*c[1]->p_adjusted == Approx(std::min(1.0, 20 * repeated)));
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  // The repeated confidence interval at Holm's Bonferroni level for look 2.
  CHECK(c[1]->interval_level == Approx(1 - stats::NominalLevel(design, 2, 0.05 / 20)));
  CHECK(CorrectionText(*c[1]) == "Holm over 20, 4 looks each (O'Brien-Fleming spending)");
  auto j = ComparisonJson(*c[1]);
  CHECK(j["correction"]["design"] == "spending");
  CHECK(j["correction"]["look"] == 2);
}

TEST_CASE("no correction under a spending design: the text shows the repeated p the verdict used",
          "[analysis][family]") {
  std::string spec = R"({"adaptive":{"min":5,"max":20,"step":5,"until":"decided"}})";
  auto family = TwentyChanged(true, spec);
  auto c = CompareFamily(family, false, stats::Correction::kNone);
  REQUIRE(c[0]);
  REQUIRE(c[0]->p_adjusted);
  CHECK(*c[0]->p_adjusted > *c[0]->p_raw);  // look 2 of 4: the repeated p is larger
  std::string text = ComparisonText(*c[0]);
  CHECK(text.find("p=0.007 raw, p=") != std::string::npos);
  CHECK(text.find(" used (repeated p at look 2 of 4; no correction, family of 20, 4 looks each") !=
        std::string::npos);
  // A fixed batch with no correction: the raw p is the one used, shown once.
  auto fixed = CompareFamily(TwentyChanged(true), false, stats::Correction::kNone);
  std::string plain = ComparisonText(*fixed[0]);
  CHECK(plain.find("p=0.007 (no correction, family of 20)") != std::string::npos);
  CHECK(plain.find(" used (") == std::string::npos);
}

TEST_CASE("the TOST interval prints enough decimals that an end just inside the margin is not the margin",
          "[analysis][equivalence]") {
  std::string spec = R"({"metric": {"min_effect": 0.003}})";
  std::vector<double> base = {0.90, 0.91, 0.92, 0.93, 0.94, 0.95};
  std::vector<double> head = {0.9005, 0.9095, 0.9205, 0.9295, 0.9405, 0.9495};
  auto c = CompareBatches(MakeBatch(head, spec), MakeBatch(base, spec));
  REQUIRE(c.verdict == stats::Verdict::kEquivalent);
  // An end 4e-7 inside the margin: up to 6 decimals it would read as the margin.
  c.equivalence_interval = stats::Interval{-0.0012, 0.0029996};
  std::string text = ComparisonText(c);
  CHECK(text.find("-0.0012000..+0.0029996 inside ±0.0030000)") != std::string::npos);
  // Far from the margin: 4 decimals.
  c.equivalence_interval = stats::Interval{-0.0012, 0.0021};
  CHECK(ComparisonText(c).find("-0.0012..+0.0021 inside ±0.0030)") != std::string::npos);
}

TEST_CASE("equivalent within min_effect: TOST at the design's level, on every field",
          "[analysis][equivalence]") {
  // Per-seed differences of +-0.0005 around 0 with margin 0.003: the 90 %
  // TOST interval lies well inside; the verdict says so in one phrase.
  std::string spec = R"({"metric": {"min_effect": 0.003}})";
  std::vector<double> base = {0.90, 0.91, 0.92, 0.93, 0.94, 0.95};
  std::vector<double> head = {0.9005, 0.9095, 0.9205, 0.9295, 0.9405, 0.9495};
  auto c = CompareBatches(MakeBatch(head, spec), MakeBatch(base, spec));
  REQUIRE(c.paired);
  CHECK(c.verdict == stats::Verdict::kEquivalent);
  CHECK(VerdictWord(c) == "equivalent within ±0.003");
  CHECK(c.equivalence_level == Approx(0.90));
  REQUIRE(c.equivalence_interval);
  std::string text = ComparisonText(c);
  CHECK(text.find(": equivalent within ±0.003 (TOST: 90% CI ") != std::string::npos);
  auto j = ComparisonJson(c);
  CHECK(j["verdict"] == "equivalent within ±0.003");
  CHECK(j["verdict_name"] == "equivalent");
  CHECK(j["decided"] == true);
  CHECK(j["equivalence"]["inside"] == true);
  CHECK(j["equivalence"]["margin"] == 0.003);
  // Without a min_effect there is nothing to be equivalent within.
  auto plain = CompareBatches(MakeBatch(head), MakeBatch(base));
  CHECK(plain.verdict == stats::Verdict::kNoDetectableChange);
  CHECK_FALSE(plain.equivalence_interval);
  // A wide spread cannot show equivalence: not enough runs.
  std::vector<double> noisy = {0.905, 0.905, 0.925, 0.925, 0.945, 0.945};
  auto wide = CompareBatches(MakeBatch(noisy, spec), MakeBatch(base, spec));
  CHECK(wide.verdict == stats::Verdict::kNotEnoughRuns);
}

TEST_CASE("equivalence at an early look of a spending design needs a narrower interval",
          "[analysis][equivalence]") {
  // The same runs are equivalent with a fixed batch, but at look 1 of 6 the
  // design spends almost nothing: the TOST interval is far wider.
  std::string fixed = R"({"metric": {"min_effect": 0.003}})";
  std::string seq = R"({"metric": {"min_effect": 0.003},
      "adaptive": {"min": 6, "max": 36, "step": 6, "until": "decided"}})";
  std::vector<double> base = {0.90, 0.91, 0.92, 0.93, 0.94, 0.95};
  std::vector<double> head = {0.9010, 0.9090, 0.9210, 0.9290, 0.9410, 0.9490};
  CHECK(CompareBatches(MakeBatch(head, fixed), MakeBatch(base, fixed)).verdict ==
        stats::Verdict::kEquivalent);
  auto early = CompareBatches(MakeBatch(head, seq), MakeBatch(base, seq));
  CHECK(early.look == 1);
  CHECK(early.equivalence_level > 0.999);
  CHECK(early.verdict == stats::Verdict::kNotEnoughRuns);
}

TEST_CASE("CheckDrift: a moved mean is drift, the same numbers are not", "[analysis][drift]") {
  auto earlier = MakeBatch({0.901, 0.902, 0.903, 0.904, 0.905});
  auto same = MakeBatch({0.901, 0.902, 0.903, 0.904, 0.905});
  auto moved = MakeBatch({0.904, 0.905, 0.906, 0.907, 0.908});
  auto none = CheckDrift(same, {earlier, earlier});
  REQUIRE(none);
  CHECK_FALSE(none->drift);
  CHECK(none->earlier_batches == 2);
  CHECK(none->earlier_n == 5);  // a seed's value repeated exactly counts once
  CHECK(none->paired);
  CHECK(none->p_mean == 1);
  auto d = CheckDrift(moved, {earlier, earlier});
  REQUIRE(d);
  CHECK(d->drift);
  CHECK(d->p_mean < 0.001);
  CHECK(d->brief == "drift: mean +0.0030 (p<0.001) vs 2 earlier batches, same inputs");
  CHECK(d->text.starts_with("drift: mean 0.9060 vs 0.9030 (paired t on 5 seeds, p<0.001)"));
  // The spread alone: same mean, ten times the spread, unpaired seeds.
  // Brown-Forsythe p = 9.5e-6 against the five earlier runs (SciPy's
  // levene(center="median")); the mean is the same 0.903.
  auto wide = MakeBatch({0.883, 0.923, 0.878, 0.928, 0.873, 0.933, 0.868, 0.938, 0.888, 0.918});
  for (auto& s : wide.seeds) s += 100;
  auto spread = CheckDrift(wide, {earlier});
  REQUIRE(spread);
  CHECK_FALSE(spread->paired);
  CHECK(spread->p_spread < 0.01);
  CHECK(spread->drift);
  CHECK(spread->brief.starts_with("drift: sd "));
  // Nothing to test against.
  CHECK_FALSE(CheckDrift(moved, {}));
}

TEST_CASE("CheckRepro: bit-identical values are reproducible", "[analysis][determinism]") {
  auto b = MakeBatch({0.9012, 0.9020, 0.9031});
  auto same = MakeBatch({0.9012});
  auto r = CheckRepro(b, same);
  CHECK(r.state == ReproCheck::State::kReproducible);
  CHECK(r.text == "reproducible (seed 1 run twice: 0.9012)");
  auto other = MakeBatch({0.9012, 0.9034});  // seeds 1, 2
  r = CheckRepro(b, other);
  CHECK(r.state == ReproCheck::State::kNotReproducible);
  CHECK(r.text == "not reproducible (seed 2: 0.9020 vs 0.9034)");
  auto close = MakeBatch({0.90120001});
  CHECK(CheckRepro(b, close).text == "not reproducible (seed 1: 0.90120000 vs 0.90120001)");
  auto running = MakeBatch({});
  running.counts[static_cast<int>(RunState::kQueued)] = 1;
  CHECK(CheckRepro(b, running).text == "determinism check running");
}

// The floor's words (docs/STATISTICS.md, "When the seed sd sits at the
// floor"): at it when the sd's interval reaches the floor, below it when even
// its top is under the floor, a ratio when its bottom is above it.
TEST_CASE("noise floor words: below it, at it, or the ratio to the floor", "[floor]") {
  auto words = [](std::vector<double> values, double examples) {
    BatchProgress b;
    b.metric_name = "accuracy";
    b.values = std::move(values);
    b.eval_examples_min = b.eval_examples_max = examples;
    return NoiseFloorJson(b);
  };
  // 10 seeds, sd about 0.0026 at p 0.98 on 359 examples: floor 0.0074, the
  // sd's interval tops out near 0.0047, under it.
  auto below = words({0.978, 0.981, 0.983, 0.984, 0.986, 0.980, 0.982, 0.985, 0.979, 0.987}, 359);
  CHECK(below["at_floor"] == true);
  CHECK(below["short"].get<std::string>().ends_with(", sd below it"));
  CHECK(below["text"].get<std::string>().find("is below the evaluation floor") !=
        std::string::npos);
  // The same spread on 20,000 examples: the floor 0.0010 is far under it.
  auto above = words({0.978, 0.981, 0.983, 0.984, 0.986, 0.980, 0.982, 0.985, 0.979, 0.987}, 20000);
  CHECK(above["at_floor"] == false);
  CHECK(above["short"].get<std::string>().ends_with("x"));
  // An sd a little above a floor of 0.0074: its interval reaches down to it.
  auto at = words({0.970, 0.982, 0.990, 0.978, 0.992, 0.975, 0.985, 0.968, 0.988, 0.982}, 359);
  CHECK(at["at_floor"] == true);
  CHECK(at["short"].get<std::string>().ends_with(", sd at it"));
  CHECK(at["text"].get<std::string>().find("sits at the evaluation floor") != std::string::npos);
}
