#include "agent/results/analysis.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;

BatchProgress MakeBatch(std::vector<double> values, std::string spec_json = "{}",
                        std::string goal = "max") {
  BatchProgress b;
  b.id = 1;
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
  auto r = store.Submit("/repo", c, {s}, kT0);
  REQUIRE(r);
  auto leased = store.Lease("w", kT0, 60'000, static_cast<int>(values.size())).value();
  REQUIRE(leased.size() == values.size());
  for (size_t i = 0; i < leased.size(); ++i) {
    REQUIRE(store.Complete(leased[i].run_id, leased[i].token, kT0, values[leased[i].repeat]));
  }
  return r->front().batch_id;
}

const std::string kParent = "1111111111111111111111111111111111111111";
const std::string kChild = "2222222222222222222222222222222222222222";

}  // namespace

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
  auto runs = store.Runs(id, std::nullopt, 0).value();
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
  auto child = store.Batch(child_id).value().value();
  auto parent = ParentBatch(store, child).value();
  REQUIRE(parent);
  CHECK(parent->id == parent_id);
  auto root = store.Batch(parent_id).value().value();
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
