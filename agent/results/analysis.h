// Turning stored batches into statistical answers: batch vs batch comparisons
// with a verdict, the parent batch of a batch, and the adaptive-repeats rule.
// Pure functions over BatchProgress, plus thin store lookups.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "queue/store.h"
#include "stats/compare.h"
#include "stats/verdict.h"

namespace trainq {

// Statistical settings of a batch, read from its stored definition.
struct BatchRules {
  stats::Goal goal = stats::Goal::kMax;
  std::optional<double> min_effect;
  // Adaptive repeats (absent: a fixed number of runs).
  int min_runs = 0;
  int max_runs = 0;
  int step = 0;
  std::optional<double> until_halfwidth;
  bool until_decided = false;
  bool adaptive() const { return max_runs > 0; }
  // How many times the verdict may be looked at: 1, or one per round of an
  // adaptive `until: decided` batch.
  int looks() const;
  // The per-look significance level: alpha / looks (Bonferroni over the
  // planned looks, so stopping when decided keeps the false-positive rate <= alpha).
  double alpha() const;
};
BatchRules RulesOf(const BatchProgress& b);

struct BatchComparison {
  BatchProgress a;  // the change
  BatchProgress b;  // what it is compared with (parent, baseline)
  std::optional<stats::Comparison> cmp;  // empty when a side has no finished run
  stats::Verdict verdict = stats::Verdict::kNotEnoughRuns;
  bool paired = false;  // paired on the seeds both sides ran (at least two)
  int shared_seeds = 0;  // how many runs were paired
  double alpha = 0.05;
};

// Compares A against B with A's rules (goal, min_effect, alpha).
BatchComparison CompareBatches(const BatchProgress& a, const BatchProgress& b);

// "accuracy 0.9262 ± 0.0096 (n=10)"; "(no finished runs)" when empty.
std::string SpreadText(const BatchProgress& b);
// Everything about a comparison, as `trainq compare --json` prints it.
nlohmann::json ComparisonJson(const BatchComparison& c);
// Lines such as
//   +0.0140 (95% CI +0.0061..+0.0219, paired t p=0.004, g=1.32): better
std::string ComparisonText(const BatchComparison& c);

// The batch of `experiment` at exactly commit `sha` of `repo_url`, if stored.
Result<std::optional<BatchProgress>> BatchOfExperimentAt(Store& store, const std::string& repo_url,
                                                         const std::string& experiment,
                                                         const std::string& sha);
// The batch `b` is compared with: its stored baseline (agent/results/baseline.h:
// at its base commit, at an ancestor with the same inputs, or queued for
// it), else the same experiment at its base commit, else at its parent.
Result<std::optional<BatchProgress>> ParentBatch(Store& store, const BatchProgress& b);
inline Result<std::optional<BatchProgress>> BaselineBatch(Store& store, const BatchProgress& b) {
  return ParentBatch(store, b);
}
// How the baseline of `b` was chosen, for people: "at the base 1a2b3c4", ...
std::string BaselineText(const BatchProgress& b);

// Adaptive repeats: how many more runs `b` needs now (0: none). Decided only
// when none of its runs is left to finish. `parent` is needed for `until: decided`.
int RunsToAdd(const BatchProgress& b, const std::optional<BatchProgress>& parent);

// Looks at the batch after one of its runs ended and queues the next round of
// an adaptive batch when its rule is not met yet. Returns the runs added.
Result<int> ExtendIfNeeded(Store& store, std::int64_t batch_id, TimeMs now);

}  // namespace trainq
