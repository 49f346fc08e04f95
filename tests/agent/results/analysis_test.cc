#include "agent/results/analysis.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

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
  CHECK(r.alpha() == Approx(0.05 / 6));
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
  auto clear = MakeBatch({0.90, 0.91, 0.92, 0.90}, spec);
  CHECK(RunsToAdd(clear, parent) == 0);
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
  // until: decided with min 5, max 20, step 5: 4 looks.
  std::string spec = R"({"adaptive":{"min":5,"max":20,"step":5,"until":"decided"}})";
  auto family = TwentyChanged(true, spec);
  auto c = CompareFamily(family, false);
  CHECK(c[1]->looks == 4);
  CHECK(*c[1]->p_adjusted == Approx(20 * 4 * *c[1]->p_raw));
  CHECK(c[1]->verdict == stats::Verdict::kWorse);
  CHECK(c[1]->interval_level == Approx(1 - 0.05 / 4 / 20));
  CHECK(CorrectionText(*c[1]) == "Holm over 20, 4 looks each");
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
