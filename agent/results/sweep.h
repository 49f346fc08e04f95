// Hyperparameter sweeps: what points to try next (a pure function), how a
// point becomes a batch of its experiment, the driver that keeps `parallel`
// points in flight until the budget is spent, and the winner by a lower
// confidence bound. The space and its syntax are in agent/repo/sweep_spec.h; the
// rows in queue/store.h (sweeps section).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "agent/repo/sweep_spec.h"
#include "agent/results/analysis.h"
#include "agent/results/sweep_model.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/store.h"
#include "queue/sweeps.h"

namespace trainq {

// The next `count` points after `existing` (the points suggested so far, in
// order): explicit points first, then grid parameters cycle through every
// combination (the first grid parameter slowest), random ones are drawn from a
// mt19937_64 seeded by (seed, point index), derived expressions last. Past
// the explicit and `initial` points, once two points are measured, bayes and
// tpe parameters are proposed from `history` (agent/results/sweep_model.h);
// the points of one call are in flight for each other. Pure: the same inputs
// give bit-identical points; without models point k never depends on how
// many were asked for at once.
Result<std::vector<nlohmann::json>> SuggestPoints(const SweepSpec& space,
                                                  const std::vector<nlohmann::json>& existing,
                                                  int count, std::uint64_t seed,
                                                  const SweepHistory& history = {});

// The batch that runs `params` of the experiment described by `base` in sweep
// `sweep_id` as point `idx`: experiment "EXP@sweepN.pK"; a `command:` gets its
// `{name}` placeholders replaced by shell-quoted values, a `trainer:` spec
// gets `--set name=value` per parameter.
// Whether a batch's experiment name is a sweep point's ("EXP@sweepN.pK").
bool IsSweepPointExperiment(std::string_view experiment);
Result<BatchSpec> PointBatch(const BatchSpec& base, const nlohmann::json& params,
                             std::int64_t sweep_id, int idx);
std::string PointExperimentName(const std::string& experiment, std::int64_t sweep_id, int idx);

// Starts a sweep of a validated spec; nothing is queued until StepSweep.
nlohmann::json BatchSpecJson(const BatchSpec& b);
Result<BatchSpec> BatchSpecFromJson(const nlohmann::json& j);

// One pass of the driver over sweep `id`: re-submits points written without
// a batch, gives more seeds to finished points that could still be the best
// (adaptive repeats, PointsNeedingSeeds), adds points while fewer than
// `parallel` are in flight and the budget (points, runs) allows, and marks
// the sweep done when nothing is in flight and nothing more may start.
// Restart-safe: everything it needs is in the store. Returns points added
// plus points given more seeds.
Result<int> StepSweep(Store& store, std::int64_t id, TimeMs now);
// StepSweep over every running sweep.
Result<int> StepSweeps(Store& store, TimeMs now);

// What the serve loop calls on every pass: StepSweeps only when something a
// sweep waits for changed (Store::SweepActivity: a run of a running sweep
// ended, a sweep was started or resumed), and at most every kFullPassMs
// otherwise as a safety net. One cheap query per pass instead of reading
// every point of every sweep. Not thread-safe.
class SweepDriver {
 public:
  static constexpr TimeMs kFullPassMs = 30'000;
  Result<int> Step(Store& store, TimeMs now);

 private:
  std::string last_mark_;
  TimeMs next_full_ms_ = 0;
};

struct PointResult {
  int idx = 0;
  nlohmann::json params;
  std::optional<BatchProgress> batch;
  stats::Summary summary;
  std::optional<double> bound;  // the lower (goal max) / upper (min) 95% one-sided bound
  std::string state;            // queued | running | done | failed (no finished run)
  // The point the search picked, given `confirm` fresh seeds after it ended
  // (in fixed repeats, the one batch with more runs than `repeats`):
  // `search` over the seeds it was picked on, `confirmed` over the fresh ones
  // (n < confirm while they run).
  bool confirming = false;
  // The runner-up given the same fresh seeds as the pick (a paired
  // confirmation): `search` and `confirmed` split its seeds the same way.
  bool confirm_baseline = false;
  stats::Summary search;
  stats::Summary confirmed;
};
struct SweepView {
  Sweeps::SweepRow row;
  SweepSpec spec;
  std::string goal = "max";
  std::string metric;
  std::vector<PointResult> points;
  int budget_points = 0;
  int runs_done = 0;
  int runs_total = 0;
};
Result<SweepView> LoadSweepView(Store& store, std::int64_t id);

struct SweepBest {
  const PointResult* winner = nullptr;
  const PointResult* runner_up = nullptr;
  std::optional<BatchComparison> vs_runner_up;  // winner vs runner-up, paired on shared seeds
  // The comparison uses only the confirmation's fresh seeds (both got them).
  bool on_fresh_seeds = false;
  int eligible = 0;  // points with at least two finished seeds
};
// The winner by its lower confidence bound (mean - t * SE for goal max, the
// upper bound for min) among points with at least 2 finished seeds; once the
// search has ended and its pick is being confirmed, that pick (the runner-up
// is the best of the others).
SweepBest PickBest(const SweepView& v);

// "lr=0.03122 width=64": parameters as shown in tables and reports, numbers
// to 4 significant digits (`sweep best --as set|yaml` keeps every digit).
std::string ShortParamsText(const nlohmann::json& params);
// "0.9001 [0.8967, 0.9035]": a point's mean and 95% interval.
std::string PointMeanText(const PointResult& p);
// The winner of `PickBest` in words, for `sweep best` and the report:
// "point 8: lr=0.03122 width=64", "accuracy 0.9001 [0.8967, 0.9035] (mean
// [95% CI], n=6)", with a confirmation "confirmed on 3 fresh seeds: ..."
// and, with a runner-up, "vs point 12 (...): tie: ...".
// Empty when there is no winner yet.
std::vector<std::string> WinnerLines(const SweepView& v, const SweepBest& best);
// `sweep best --as yaml`: what to commit so that plain pushes run the
// winner. `spec` is the experiment's BatchSpec JSON ("command" or
// "trainer"). A trainer experiment: the winning `--set` paths as a nested
// mapping to merge into its spec. A command: the experiment in trainq.yaml
// with the values written into its command. Comment lines say which.
std::string WinnerPatch(const std::string& experiment, const nlohmann::json& spec,
                        const nlohmann::json& params);

}  // namespace trainq
