// The sweep suggester (a pure function), point batches, the driver over a real
// SQLite store (restart-safe), and the winner by a confidence bound.
#include "agent/results/sweep.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "queue/sweeps.h"

#include <boost/math/distributions/chi_squared.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

using nlohmann::json;

constexpr TimeMs kT0 = 1'700'000'000'000;

SweepSpec Space(const std::string& params, const std::string& extra = "      budget: {points: 50}\n") {
  std::string text = "version: 1\nexperiments:\n  m:\n    trainer: a.yaml\n    sweep:\n" + extra +
                     "      parameters:\n" + params;
  auto s = LoadSweep(text, "trainq.yaml", "m");
  INFO((s ? "" : s.error().message));
  REQUIRE(s.has_value());
  return *s;
}

TEST_CASE("sweep suggest: the same inputs give bit-identical points, however asked", "[sweep]") {
  auto space = Space(
      "        lr: {log_uniform: [1.0e-5, 1]}\n        wd: {uniform: [-1, 1]}\n"
      "        w: {int: [1, 1000], log: true}\n        o: {choice: [a, b, c]}\n"
      "        bs: {values: [16, 32]}\n        min_lr: {expr: \"lr / 100\"}\n");
  auto all = SuggestPoints(space, {}, 20, 42);
  REQUIRE(all.has_value());
  REQUIRE(all->size() == 20);
  auto again = SuggestPoints(space, {}, 20, 42);
  CHECK(again->front().dump() == all->front().dump());
  CHECK(*again == *all);
  // Point k does not depend on how many were asked for at once.
  std::vector<json> stepwise;
  for (int i = 0; i < 20; ++i) {
    auto one = SuggestPoints(space, stepwise, 1, 42);
    stepwise.push_back(one->at(0));
  }
  CHECK(stepwise == *all);
  for (size_t i = 0; i < all->size(); ++i) {
    CHECK(stepwise[i].dump() == (*all)[i].dump());  // bit-identical doubles
  }
  // Another seed: other points.
  auto other = SuggestPoints(space, {}, 20, 43);
  CHECK(*other != *all);
  // Derived last, from the point's own values.
  for (const auto& p : *all) {
    CHECK(p["min_lr"].get<double>() == Approx(p["lr"].get<double>() / 100));
  }
}

TEST_CASE("sweep suggest: explicit points first, then every grid combination once", "[sweep]") {
  auto space = Space("        a: {values: [1, 2, 3]}\n        b: {choice: [x, y], strategy: grid}\n"
                     "        c: {value: 7}\n        d: {expr: \"a * c\"}\n",
                     "      points:\n        - {a: 9, b: z}\n");
  CHECK(space.PointBudget() == 7);
  auto pts = SuggestPoints(space, {}, space.PointBudget(), 1);
  REQUIRE(pts.has_value());
  CHECK((*pts)[0] == json{{"a", 9}, {"b", "z"}, {"c", 7}, {"d", 63}});
  std::set<std::string> combos;
  for (size_t i = 1; i < pts->size(); ++i) {
    const auto& p = (*pts)[i];
    combos.insert(p["a"].dump() + p["b"].dump());
    CHECK(p["c"] == 7);
    CHECK(p["d"] == p["a"].get<int>() * 7);
  }
  CHECK(combos.size() == 6);  // 3 x 2, each once
  CHECK((*pts)[1] == json{{"a", 1}, {"b", "x"}, {"c", 7}, {"d", 7}});
  CHECK((*pts)[2] == json{{"a", 1}, {"b", "y"}, {"c", 7}, {"d", 7}});
}

TEST_CASE("sweep suggest: draws stay in bounds, log_uniform is uniform in log space",
          "[sweep]") {
  auto space = Space("        lr: {log_uniform: [1.0e-4, 1]}\n        u: {uniform: [2, 3]}\n"
                     "        i: {int: [-3, 4]}\n        w: {int: [8, 64], log: true}\n"
                     "        o: {choice: [p, q]}\n");
  const int n = 4000;
  auto pts = SuggestPoints(space, {}, n, 2024);
  REQUIRE(pts.has_value());
  const int bins = 20;
  std::vector<int> counts(bins, 0);
  std::set<std::int64_t> ints;
  std::map<std::string, int> choices;
  for (const auto& p : *pts) {
    double lr = p["lr"].get<double>();
    REQUIRE(lr >= 1e-4);
    REQUIRE(lr <= 1);
    double u = p["u"].get<double>();
    REQUIRE(u >= 2);
    REQUIRE(u <= 3);
    REQUIRE(p["i"].is_number_integer());
    REQUIRE(p["i"].get<std::int64_t>() >= -3);
    REQUIRE(p["i"].get<std::int64_t>() <= 4);
    ints.insert(p["i"].get<std::int64_t>());
    REQUIRE(p["w"].get<std::int64_t>() >= 8);
    REQUIRE(p["w"].get<std::int64_t>() <= 64);
    choices[p["o"].get<std::string>()]++;
    int bin = std::min(bins - 1, static_cast<int>((std::log10(lr) + 4) / 4 * bins));
    counts[static_cast<size_t>(bin)]++;
  }
  CHECK(ints.size() == 8);  // both ends reached
  CHECK(choices.size() == 2);
  double expected = static_cast<double>(n) / bins, chi2 = 0;
  for (int c : counts) chi2 += (c - expected) * (c - expected) / expected;
  boost::math::chi_squared dist(bins - 1);
  double p = 1 - boost::math::cdf(dist, chi2);
  INFO("chi2 " << chi2 << " p " << p);
  CHECK(p > 0.001);
  // A log-uniform draw is NOT uniform on the raw scale: most mass below 0.1.
  int below = 0;
  for (const auto& pt : *pts) below += pt["lr"].get<double>() < 0.1 ? 1 : 0;
  CHECK(below > n * 0.7);
}

BatchSpec BaseSpec(const std::string& command, const std::string& trainer = "") {
  BatchSpec b;
  b.experiment = "m";
  b.command = command.empty() ? "trainq-train " + ShellQuote(trainer) : command;
  b.repeats = 2;
  b.seed_start = 5;
  b.spec_json = json{{"command", command}, {"trainer", trainer}, {"adaptive", {{"min", 2}}}}.dump();
  return b;
}

TEST_CASE("sweep point batch: quoted placeholders for a command, --set for a trainer",
          "[sweep]") {
  json params = {{"lr", 0.001}, {"name", "it's"}, {"n", 3}};
  auto cmd = PointBatch(BaseSpec("python3 t.py --lr {lr} --name {name} --n {n} --seed {seed}"),
                        params, 3, 7);
  REQUIRE(cmd.has_value());
  CHECK(cmd->experiment == "m@sweep3.p7");
  CHECK(cmd->command == "python3 t.py --lr '0.001' --name 'it'\\''s' --n '3' --seed {seed}");
  CHECK(cmd->seed_start == 5);
  auto spec = json::parse(cmd->spec_json);
  CHECK(spec["sweep"]["point"] == 7);
  CHECK_FALSE(spec.contains("adaptive"));
  CHECK(spec["baseline"] == "off");

  auto tr = PointBatch(BaseSpec("", "configs/a.yaml"), params, 3, 0);
  REQUIRE(tr.has_value());
  CHECK(tr->command ==
        "trainq-train 'configs/a.yaml' --set 'lr=0.001' --set 'n=3' --set 'name=it'\\''s'");
  auto trs = json::parse(tr->spec_json);
  CHECK_FALSE(trs.contains("trainer"));  // never fused with plain trainer runs
  CHECK(trs["sweep_trainer"] == "configs/a.yaml");

  auto bad = PointBatch(BaseSpec("python3 t.py {lr} {momentum}"), params, 1, 0);
  REQUIRE_FALSE(bad.has_value());
  CHECK_THAT(bad.error().message, Catch::Contains("{momentum}"));
}

CommitInfo Commit() {
  CommitInfo c;
  c.sha = std::string(40, 'a');
  c.message = "sweep me";
  c.committed_ms = kT0;
  return c;
}

std::int64_t AddSweep(Store& store, const SweepSpec& spec, const BatchSpec& base) {
  Sweeps::SweepRow row;
  row.repo_url = "/repo";
  row.commit_json = json{{"sha", Commit().sha}, {"message", "sweep me"}}.dump();
  row.experiment = base.experiment;
  row.spec_json = spec.ToJson().dump();
  row.batch_json = BatchSpecJson(base).dump();
  auto id = store.sweeps().AddSweep(row, kT0);
  REQUIRE(id.has_value());
  return *id;
}

// Finishes every queued run; value(batch experiment, seed) is its metric.
template <typename F>
int FinishAll(Store& store, TimeMs now, F value) {
  auto leased = store.runs().Lease("w", now, 60'000, 1000);
  REQUIRE(leased.has_value());
  for (const auto& r : *leased) {
    REQUIRE(store.runs().Complete(r.run_id, r.token, now, value(r.experiment, r.seed)));
  }
  return static_cast<int>(leased->size());
}

TEST_CASE("sweep driver: keeps `parallel` points in flight until the budget, restart-safe",
          "[sweep]") {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  auto spec = Space("        lr: {uniform: [0, 1]}\n",
                    "      budget: {points: 5}\n      parallel: 2\n      repeats: 2\n"
                    "      confirm: 0\n");
  BatchSpec base = BaseSpec("python3 t.py {lr} --seed {seed}");
  auto id = AddSweep(store, spec, base);

  REQUIRE(*StepSweep(store, id, kT0) == 2);
  REQUIRE(*StepSweep(store, id, kT0) == 0);  // both in flight
  auto points = *store.sweeps().SweepPoints(id);
  REQUIRE(points.size() == 2);
  auto b0 = *store.runs().Batch(*points[0].batch_id);
  CHECK(b0->experiment == "m@sweep1.p0");
  CHECK(b0->seeds.empty());
  CHECK(b0->count(RunState::kQueued) == 2);

  // A driver killed after writing point 2 but before submitting its batch:
  // the next step submits exactly one batch for it.
  auto pts = *SuggestPoints(spec, {json::parse(points[0].params_json),
                                   json::parse(points[1].params_json)}, 1, spec.seed);
  Sweeps::SweepPointRow orphan;
  orphan.sweep_id = id;
  orphan.idx = 2;
  orphan.params_json = pts[0].dump();
  REQUIRE(store.sweeps().AddSweepPoint(orphan, kT0));
  // ... or killed after Submit but before recording the batch id.
  REQUIRE(store.runs().Submit("/repo", Commit(), {*PointBatch(base, pts[0], id, 2)}, kT0));
  FinishAll(store, kT0 + 1, [](const std::string&, std::int64_t s) { return 0.1 * s; });
  REQUIRE(*StepSweep(store, id, kT0 + 2) == 1);  // point 2 re-submitted (same batch) + point 3
  points = *store.sweeps().SweepPoints(id);
  REQUIRE(points.size() == 4);
  for (const auto& p : points) REQUIRE(p.batch_id.has_value());
  auto batches = *store.runs().Batches(false, 0);
  CHECK(batches.size() == 4);  // no second batch for point 2

  // Same point values whether the driver ran step by step or not.
  auto fresh = *SuggestPoints(spec, {}, 4, spec.seed);
  for (size_t i = 0; i < 4; ++i) CHECK(json::parse(points[i].params_json) == fresh[i]);

  int runs = 0;
  for (int round = 0; round < 10; ++round) {
    runs += FinishAll(store, kT0 + 10 + round, [](const std::string&, std::int64_t s) {
      return 0.1 * s;
    });
    REQUIRE(StepSweep(store, id, kT0 + 10 + round));
  }
  CHECK((*store.sweeps().GetSweep(id))->state == "done");
  points = *store.sweeps().SweepPoints(id);
  CHECK(points.size() == 5);
  auto all_runs = *store.runs().Runs(std::nullopt, std::nullopt, 0);
  CHECK(all_runs.size() == 10);  // 5 points x 2 seeds, none twice
  std::map<std::int64_t, std::set<std::int64_t>> seeds;
  for (const auto& r : all_runs) {
    CHECK(r.state == RunState::kSucceeded);
    seeds[r.batch_id].insert(r.seed);
  }
  for (const auto& [b, s] : seeds) CHECK(s == std::set<std::int64_t>{5, 6});  // paired seeds
  CHECK(*StepSweep(store, id, kT0 + 100) == 0);

  // Stopped: no new points.
  auto id2 = AddSweep(store, spec, base);
  REQUIRE(store.sweeps().SetSweepState(id2, "stopped", kT0));
  CHECK(*StepSweeps(store, kT0) == 0);
  CHECK(store.sweeps().SweepPoints(id2)->empty());
}

TEST_CASE("sweep confirm: the search's pick gets fresh seeds, which are its claimed value",
          "[sweep]") {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  // 6 grid points x 2 seeds; confirm defaults to repeats (2).
  auto spec = Space("        lr: {values: [1, 2, 3, 4, 5, 6]}\n",
                    "      parallel: 3\n      repeats: 2\n");
  REQUIRE(spec.ConfirmSeeds() == 2);
  BatchSpec base = BaseSpec("python3 t.py {lr} --seed {seed}");
  base.seed_start = 1;
  auto id = AddSweep(store, spec, base);
  // Point k is worth 0.80 + 0.01 k; point 2's two search seeds were lucky
  // (0.95): it wins the search, and its fresh seeds say what it is worth.
  auto value = [](const std::string& exp, std::int64_t seed) {
    int k = exp.back() - '0';
    double noise = 0.001 * static_cast<double>(seed % 2);
    if (k == 2 && seed <= 2) return 0.95 + noise;
    return 0.80 + 0.01 * k + noise;
  };
  int runs = 0;
  for (int round = 0; round < 20 && (*store.sweeps().GetSweep(id))->state != "done"; ++round) {
    REQUIRE(StepSweep(store, id, kT0 + round));
    // A restarted driver decides the same: nothing more while runs are queued.
    REQUIRE(*StepSweep(store, id, kT0 + round) == 0);
    runs += FinishAll(store, kT0 + round, value);
  }
  REQUIRE((*store.sweeps().GetSweep(id))->state == "done");
  // 6 points x 2 seeds, 2 fresh seeds for the pick and the same 2 for the
  // runner-up (a paired confirmation).
  CHECK(runs == 6 * 2 + 2 + 2);
  CHECK(*StepSweep(store, id, kT0 + 100) == 0);  // done: never extended twice

  auto view = *LoadSweepView(store, id);
  CHECK(view.runs_total == 16);
  CHECK(view.runs_done == 16);
  auto best = PickBest(view);
  REQUIRE(best.winner != nullptr);
  CHECK(best.winner->idx == 2);
  CHECK(best.winner->confirming);
  CHECK(best.winner->batch->seeds == std::vector<std::int64_t>{1, 2, 3, 4});
  CHECK(best.winner->search.n == 2);
  CHECK(best.winner->search.mean == Approx(0.9505));
  CHECK(best.winner->confirmed.n == 2);
  CHECK(best.winner->confirmed.mean == Approx(0.8205));
  for (const auto& p : view.points) {
    if (p.idx != 2) CHECK_FALSE(p.confirming);
  }
  auto lines = WinnerLines(view, best);
  REQUIRE(lines.size() >= 3);
  INFO(lines[2]);
  CHECK_THAT(lines[2], Catch::StartsWith("confirmed on 2 fresh seeds: 0.8205 ["));
  CHECK_THAT(lines[2], Catch::EndsWith("the 2 seeds it was picked on read 0.9505 (-0.13 fresh)"));

  // Without confirmation (confirm: 0), and with adaptive repeats (which give
  // the leaders fresh seeds already), nothing is added.
  CHECK(Space("        lr: {values: [1, 2, 3]}\n", "      confirm: 0\n").ConfirmSeeds() == 0);
  CHECK(Space("        lr: {values: [1, 2, 3]}\n", "      repeats: {min: 2, max: 6}\n")
            .ConfirmSeeds() == 0);
  // A budget of runs keeps room for them.
  auto runs_budget = Space("        lr: {uniform: [0, 1]}\n", "      budget: {runs: 20}\n      repeats: 3\n");
  CHECK(runs_budget.ConfirmSeeds() == 3);
  CHECK(runs_budget.PairedConfirm());
  CHECK(runs_budget.ConfirmRuns() == 6);  // the pick's 3 and the runner-up's same 3
  CHECK(runs_budget.PointBudget() == 5);  // (20 - 6) / 3 rounded up
  // A budget too small for two points and both confirmations: the pick alone.
  auto tight = Space("        lr: {uniform: [0, 1]}\n",
                     "      budget: {runs: 9}\n      repeats: 3\n      confirm: 2\n");
  CHECK_FALSE(tight.PairedConfirm());
  CHECK(tight.ConfirmRuns() == 2);
}

TEST_CASE(
    "sweep confirm, paired: the runner-up gets the pick's fresh seeds, marked in the "
    "store, and the two are compared on those seeds alone",
    "[sweep][topup]") {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  auto spec = Space("        lr: {values: [1, 2, 3, 4]}\n",
                    "      parallel: 4\n      repeats: 3\n      confirm: 3\n");
  REQUIRE(spec.PairedConfirm());
  BatchSpec base = BaseSpec("python3 t.py {lr} --seed {seed}");
  base.seed_start = 1;
  base.repeats = 3;  // as `sweep start` gives each point the sweep's repeats
  auto id = AddSweep(store, spec, base);
  // Point k (0-based) is worth 0.80 + 0.01 k; point 1 was lucky on the
  // search's seeds 1..3 (0.95), so it is the pick; point 3 is the runner-up.
  auto value = [](const std::string& exp, std::int64_t seed) {
    int k = exp.back() - '0';
    double noise = 0.001 * static_cast<double>((seed * k) % 4);
    if (k == 1 && seed <= 3) return 0.95 + noise;
    return 0.80 + 0.01 * k + noise;
  };
  int runs = 0;
  for (int round = 0; round < 20 && (*store.sweeps().GetSweep(id))->state != "done"; ++round) {
    REQUIRE(StepSweep(store, id, kT0 + round));
    REQUIRE(*StepSweep(store, id, kT0 + round) == 0);  // a restarted driver does nothing more
    runs += FinishAll(store, kT0 + round, value);
  }
  REQUIRE((*store.sweeps().GetSweep(id))->state == "done");
  CHECK(runs == 4 * 3 + 3 + 3);

  // The marks: the pick and the runner-up, and nothing else.
  std::map<int, std::string> roles;
  auto marked = *store.sweeps().SweepPoints(id);
  for (const auto& p : marked) roles[p.idx] = p.role;
  CHECK(roles ==
        std::map<int, std::string>{{0, ""}, {1, "confirm"}, {2, ""}, {3, "confirm_baseline"}});

  auto view = *LoadSweepView(store, id);
  CHECK(view.runs_total == 18);
  CHECK(view.runs_done == 18);
  auto best = PickBest(view);
  REQUIRE(best.winner != nullptr);
  REQUIRE(best.runner_up != nullptr);
  CHECK(best.winner->idx == 1);
  CHECK(best.winner->confirming);
  CHECK(best.runner_up->idx == 3);
  CHECK(best.runner_up->confirm_baseline);
  const std::vector<std::int64_t> six = {1, 2, 3, 4, 5, 6};
  CHECK(best.winner->batch->seeds == six);
  CHECK(best.runner_up->batch->seeds == six);  // the same fresh seeds
  CHECK(view.points[0].batch->seeds.size() == 3);
  CHECK(best.runner_up->confirmed.n == 3);
  CHECK(best.runner_up->confirmed.mean == Approx(0.8317).epsilon(1e-3));
  // Compared on the fresh seeds alone: 0.811 vs 0.8317, paired on 4, 5, 6.
  REQUIRE(best.vs_runner_up);
  CHECK(best.on_fresh_seeds);
  CHECK(best.vs_runner_up->paired);
  CHECK(best.vs_runner_up->shared_seeds == 3);
  CHECK(best.vs_runner_up->verdict == stats::Verdict::kWorse);
  auto lines = WinnerLines(view, best);
  REQUIRE(lines.size() == 4);
  INFO(lines[3]);
  CHECK_THAT(lines[3], Catch::StartsWith("vs point 3 ("));
  CHECK_THAT(lines[3], Catch::Contains(", n=6) on the 3 fresh seeds both ran: "));
  CHECK_THAT(lines[3], Catch::Contains("worse"));

  // A driver cut after marking the confirmation but before growing its
  // batches grows them on its next step, and only then is done.
  auto id2 = AddSweep(store, spec, base);
  REQUIRE(*StepSweep(store, id2, kT0) == 4);
  FinishAll(store, kT0, value);
  REQUIRE(store.sweeps().SetConfirmRoles(id2, 1, 3));  // what the cut step wrote
  REQUIRE(*StepSweep(store, id2, kT0 + 1) == 2);       // both batches grow
  CHECK((*store.sweeps().GetSweep(id2))->state == "running");
  CHECK(FinishAll(store, kT0 + 2, value) == 6);
  REQUIRE(*StepSweep(store, id2, kT0 + 3) == 0);
  CHECK((*store.sweeps().GetSweep(id2))->state == "done");
  auto view2 = *LoadSweepView(store, id2);
  CHECK(view2.points[1].batch->seeds == six);
  CHECK(view2.points[3].batch->seeds == six);
  CHECK(view2.points[0].batch->seeds.size() == 3);
}

// A 1-D search whose runs die above lr 0.6 and improve with lr below it.
// Returns how many of its points landed where runs die.
int PointsWhereRunsDie(const std::string& failed_points) {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  auto spec = Space("        lr: {uniform: [0, 1]}\n",
                    "      budget: {points: 16}\n      parallel: 1\n      repeats: 2\n"
                    "      strategy: bayes\n      initial: 4\n      seed: 3\n" +
                        (failed_points.empty() ? "" : "      failed_points: " + failed_points + "\n"));
  CHECK(spec.failed_worst == (failed_points == "worst"));
  auto id = AddSweep(store, spec, BaseSpec("python3 t.py {lr} --seed {seed}"));
  for (int round = 0; round < 40 && (*store.sweeps().GetSweep(id))->state != "done"; ++round) {
    REQUIRE(StepSweep(store, id, kT0 + round));
    auto points = *store.sweeps().SweepPoints(id);
    auto leased = *store.runs().Lease("w", kT0 + round, 60'000, 1000);
    for (const auto& r : leased) {
      int idx = std::stoi(r.experiment.substr(r.experiment.rfind('p') + 1));
      double lr = json::parse(points[static_cast<std::size_t>(idx)].params_json)["lr"].get<double>();
      if (lr > 0.6) {
        REQUIRE(store.runs().FailRun(r.run_id, r.token, kT0 + round, "CUDA out of memory", 1, false));
      } else {
        REQUIRE(store.runs().Complete(r.run_id, r.token, kT0 + round, lr + 0.01 * static_cast<double>(r.seed)));
      }
    }
  }
  REQUIRE((*store.sweeps().GetSweep(id))->state == "done");
  auto view = *LoadSweepView(store, id);
  REQUIRE(view.points.size() == 16);
  int dead = 0;
  for (const auto& p : view.points) {
    if (p.params["lr"].get<double>() > 0.6) {
      ++dead;
      CHECK(p.state == "failed");
    }
  }
  auto best = PickBest(view);
  REQUIRE(best.winner != nullptr);
  CHECK(best.winner->params["lr"].get<double>() <= 0.6);  // a dead point never wins
  return dead;
}

TEST_CASE("sweep failed_points: worst steers the model away from where runs die, exclude does not",
          "[sweep]") {
  int excluded = PointsWhereRunsDie("");
  int worst = PointsWhereRunsDie("worst");
  INFO("points where runs die: exclude " << excluded << ", worst " << worst);
  CHECK(PointsWhereRunsDie("exclude") == excluded);  // the default
  CHECK(worst < excluded);
}

TEST_CASE("sweep best: a lucky one-seed point loses to the better 10-seed mean", "[sweep]") {
  testing::TempDir tmp;
  auto store = std::move(*Store::Open(tmp / "t.db"));
  auto spec = Space("        lr: {values: [1, 2, 3, 4]}\n", "      repeats: 10\n");
  BatchSpec base = BaseSpec("python3 t.py {lr} --seed {seed}");
  base.seed_start = 1;
  auto id = AddSweep(store, spec, base);
  // Point 0: one seed, the best single value (0.97). Point 1: mean 0.90.
  // Point 2: mean 0.85 (paired with point 1: same seed effects). Point 3: mean 0.899.
  std::map<std::string, std::pair<int, double>> plan = {
      {"m@sweep1.p0", {1, 0.97}}, {"m@sweep1.p1", {10, 0.90}},
      {"m@sweep1.p2", {10, 0.85}}, {"m@sweep1.p3", {10, 0.899}}};
  int idx = 0;
  for (const auto& [name, what] : plan) {
    json params = {{"lr", idx + 1}};
    auto b = *PointBatch(base, params, id, idx);
    b.repeats = what.first;
    auto res = store.runs().Submit("/repo", Commit(), {b}, kT0);
    REQUIRE(res.has_value());
    Sweeps::SweepPointRow p;
    p.sweep_id = id;
    p.idx = idx++;
    p.params_json = params.dump();
    p.batch_id = res->at(0).batch_id;
    REQUIRE(store.sweeps().AddSweepPoint(p, kT0));
  }
  // Seed effect shared across points (+-0.02), point noise small.
  auto seed_effect = [](std::int64_t s) { return 0.02 * std::sin(static_cast<double>(s) * 1.7); };
  FinishAll(store, kT0 + 1, [&](const std::string& exp, std::int64_t s) {
    double noise = 0.003 * std::cos(static_cast<double>(s) * 3.1 + static_cast<double>(exp.back()));
    return exp == "m@sweep1.p0" ? 0.97 : plan[exp].second + seed_effect(s) + noise;
  });
  auto view = LoadSweepView(store, id);
  REQUIRE(view.has_value());
  auto best = PickBest(*view);
  CHECK(best.eligible == 3);
  REQUIRE(best.winner != nullptr);
  CHECK(best.winner->idx == 1);
  CHECK(best.winner->summary.n == 10);
  CHECK(best.winner->summary.mean == Approx(0.90).margin(0.005));
  REQUIRE(best.winner->summary.ci95.has_value());
  CHECK(view->points[0].summary.max > best.winner->summary.max);  // the lucky single run
  REQUIRE(best.runner_up != nullptr);
  CHECK(best.runner_up->idx == 3);
  REQUIRE(best.vs_runner_up.has_value());
  CHECK(best.vs_runner_up->paired);
  CHECK(best.vs_runner_up->shared_seeds == 10);
  // 0.001 apart with point noise 0.003: not separated.
  CHECK(best.vs_runner_up->verdict != stats::Verdict::kBetter);
}

}  // namespace
}  // namespace trainq
