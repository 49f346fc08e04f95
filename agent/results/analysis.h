// Turning stored batches into statistical answers: batch vs batch comparisons
// with a verdict, the parent batch of a batch, and the adaptive-repeats rule.
// Pure functions over BatchProgress, plus thin store lookups.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "queue/store.h"
#include "queue/types.h"
#include "stats/compare.h"
#include "stats/multiple.h"
#include "stats/sequential.h"
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
  // trainq.yaml `defaults: correction:` (holm when not written).
  stats::Correction correction = stats::Correction::kHolm;
  // How `until: decided` spends alpha over its looks (`repeats: design:`).
  stats::SequentialKind design_kind = stats::SequentialKind::kSpending;
  bool adaptive() const { return max_runs > 0; }
  // How many times the verdict may be looked at: 1, or one per round of an
  // adaptive `until: decided` batch (at min, min + step, ..., max runs).
  int looks() const;
  // The group-sequential design over those looks (stats/sequential.h):
  // information fractions n_k / max. One look: the fixed-sample test.
  stats::SequentialDesign design() const;
  // Which look a batch with `repeats` runs queued is at: its round, 1-based,
  // clamped to 1..looks(). The boundary depends on the look only, never on
  // the data, as the design's guarantee needs.
  int LookAt(int repeats) const;
  // The significance level of look `look` for the batch alone (no family):
  // the design's nominal level at overall alpha 0.05.
  double alpha(int look = 1) const;
};
BatchRules RulesOf(const BatchProgress& b);

// The determinism check of a batch (`determinism: check`, or `trainq repro`):
// its companion batch "x@repro" ran some of its seeds again; a command is
// reproducible when every seed run twice gave the same metric, bit for bit.
struct ReproCheck {
  enum class State { kPending, kReproducible, kNotReproducible };
  State state = State::kPending;
  int seeds_checked = 0;     // seeds with a value on both sides
  std::int64_t seed = 0;     // the first seed that differed (kNotReproducible)
  double first = 0;          // its value in the batch
  double second = 0;         // its value in the companion
  // "reproducible (seed 1 run twice: 0.9012)", "not reproducible (seed 3:
  // 0.9012 vs 0.9034)", "determinism check running".
  std::string text;
};
// Pure: `repro` is the companion batch of `b` (same commit).
ReproCheck CheckRepro(const BatchProgress& b, const BatchProgress& repro);
// The check of `b`, from its companion batch in the store; empty when none.
Result<std::optional<ReproCheck>> ReproOf(Store& store, const BatchProgress& b);

// Noise drift: the batches of one experiment at commits whose inputs for it
// are identical (the same "inputs" fingerprint, agent/repo/change_detect.h)
// are draws from one distribution. A new such batch is tested against the
// earlier ones pooled: its mean (paired t against the per-seed mean of the
// earlier runs on the seeds both have, else Welch) and its spread
// (Brown–Forsythe), Holm over the two tests, drift when an adjusted p < 0.01.
struct DriftCheck {
  bool drift = false;
  int earlier_batches = 0;
  int earlier_n = 0;       // distinct earlier runs (exact repeats of a seed's value count once)
  double mean = 0, earlier_mean = 0, sd = 0, earlier_sd = 0;
  double p_mean = 1, p_spread = 1;  // Holm-adjusted over the two tests
  bool paired = false;
  int shared_seeds = 0;
  std::string text;   // "drift: mean 0.9312 vs 0.9012 ..." or "no drift: ..."
  std::string brief;  // "drift: mean +0.0300 (p<0.001) vs 2 earlier batches, same inputs"
};
inline constexpr double kDriftAlpha = 0.01;
// Pure: `b` against `earlier` (finished batches of its experiment with the
// same inputs at other commits). Empty when there is nothing to test: no
// earlier batch, or fewer than 2 runs on a side.
std::optional<DriftCheck> CheckDrift(const BatchProgress& b,
                                     const std::vector<BatchProgress>& earlier);
// The drift check of `b` against the store's earlier batches (by id) of its
// experiment and repository with the same inputs (a batch reusing another's
// runs is not one more); empty as CheckDrift, or when `b` is still running,
// reuses another's runs, or has no inputs fingerprint (queued before it).
// Looks at the kDriftLookback most recent batches of the experiment; a caller
// checking many batches passes `cache` to read each experiment's once.
inline constexpr int kDriftLookback = 200;
Result<std::optional<DriftCheck>> DriftOf(
    Store& store, const BatchProgress& b,
    std::map<std::string, std::vector<BatchProgress>>* cache = nullptr);

struct BatchComparison {
  BatchProgress a;  // the change
  BatchProgress b;  // what it is compared with (parent, baseline)
  std::optional<stats::Comparison> cmp;  // empty when a side has no finished run
  stats::Verdict verdict = stats::Verdict::kNotEnoughRuns;
  bool paired = false;  // paired on the seeds both sides ran (at least two)
  int shared_seeds = 0;  // how many runs were paired
  double alpha = 0.05;   // the level of this look alone (BatchRules::alpha)
  // The family correction (docs/STATISTICS.md, "Many experiments at once").
  // The verdict is p_adjusted < 0.05, where p_adjusted is the family's
  // adjustment of min(1, looks * p_raw); `interval` is the test's interval
  // at `interval_level`, the width that matches the corrected verdict.
  stats::Correction correction = stats::Correction::kNone;
  int family_size = 1;
  int looks = 1;  // planned looks of A's design
  int look = 1;   // the look A is at (BatchRules::LookAt)
  stats::SequentialKind design = stats::SequentialKind::kSpending;
  std::optional<double> p_raw;       // the test's own two-sided p
  std::optional<double> p_adjusted;  // after looks and the family correction
  double interval_level = 0.95;
  std::optional<stats::Interval> interval;
  // With a min_effect: the equivalence (TOST) interval, at 1 - 2 b with b the
  // design's one-sided level at this look for the family's alpha (90 % for a
  // fixed batch alone); `equivalent` when it lies inside ±min_effect.
  double equivalence_level = 0.90;
  std::optional<stats::Interval> equivalence_interval;
  // Set when a side is not reproducible for a fixed seed: the runs were not
  // paired (Welch instead), and this says why.
  std::string pairing_note;
  // The two sides are the very same runs (SameRuns: a batch that reused,
  // unchanged, the runs its baseline has): nothing was compared (no `cmp`),
  // the verdict is "no detectable change", and the member is no part of its
  // commit's family (docs/STATISTICS.md, "Many experiments at once").
  bool unchanged = false;
};

// Whether `a` and `b` hold the very same runs: the same stored batch, or
// batches reusing one another's runs (BatchProgress::reuses_batch_id).
bool SameRuns(const BatchProgress& a, const BatchProgress& b);

// Compares A against B with A's rules (goal, min_effect, alpha), alone: a
// family of one. `pairing_note` non-empty: pairing is unreliable (a side is
// not reproducible for a fixed seed), so the runs are compared unpaired and
// the note says why.
BatchComparison CompareBatches(const BatchProgress& a, const BatchProgress& b,
                               const std::string& pairing_note = "");

// CompareBatches without the bootstrap interval: the verdict alone, as the
// adaptive rule (PlanTopUp) and bench/bench_verdicts use it many times.
BatchComparison DecideBatches(const BatchProgress& a, const BatchProgress& b);

// The correction a batch asks for (its stored `correction`, holm by default).
stats::Correction CorrectionOf(const BatchProgress& b);

// One member of a family: an experiment's batch at the commit and its baseline.
struct FamilyMember {
  BatchProgress head;
  std::optional<BatchProgress> base;
  std::optional<ReproCheck> repro;       // of head
  std::optional<ReproCheck> base_repro;  // of base
  // The commit did not change the experiment: its batch holds the very runs
  // its baseline has (a reused batch, `trainq submit` gives one to every
  // unchanged experiment). Shown, never counted in the family.
  bool unchanged() const { return base && SameRuns(head, *base); }
};

// The family rule, the same on every path (a push, `trainq submit`, a pull
// request, `trainq gate` with or without -e): the family is what the commit
// changed. Its size counts the members that are not unchanged().
int FamilySize(const std::vector<FamilyMember>& members);

// Compares every member of a family and corrects over it: the experiments a
// commit (or pull request) changed. Every changed member counts in the family
// size; one without a comparison (no baseline, no finished run, or still
// running when `compare_running` is false) counts as p = 1, so the others'
// answer does not depend on which finish first. An unchanged() member gets a
// comparison marked `unchanged` and does not count. The correction is
// `correction`, else that of the first member. The result is aligned with
// `members`.
std::vector<std::optional<BatchComparison>> CompareFamily(
    const std::vector<FamilyMember>& members, bool compare_running,
    std::optional<stats::Correction> correction = std::nullopt);

// Applies the correction to comparisons already made (a family of
// `family_size` >= comparisons.size(); the missing members count as p = 1)
// and decides their verdicts again.
void CorrectFamily(std::vector<BatchComparison*>& comparisons, int family_size,
                   stats::Correction correction);

// "Holm over 20, p=0.007 raw, 0.14 adjusted"-style pieces for other renderers:
// "Holm over 20" ("" for a family of one with no looks to correct).
std::string CorrectionText(const BatchComparison& c);
// "p=0.007" or "p=0.007 raw, p=0.140 adjusted (Holm over 20)".
std::string PText(const BatchComparison& c);
// Runs-needed advice for a comparison that is undecided (not enough runs) or
// negligible, when the experiment has a min_effect:
//   "to detect ±0.005 with power 0.8: about 9 seeds per side (now 5)"
// from the exact noncentral-t power (stats/sample_size.h) of the test the
// verdict uses: paired on the sd of the per-seed differences, else two-sample
// on the sd of A, at the significance level the corrected verdict uses
// (1 - interval_level). "" when not applicable.
std::string RunsNeededText(const BatchComparison& c);
// "95% CI", "97.5% CI", "99.75% CI", "98.33% CI": at most 4 significant
// digits (more only for a level that 4 would round up to 100%).
std::string LevelText(double level);
// Probability of improvement (stats::ProbabilityOfImprovement) in the
// metric's direction, on the runs the verdict compared (the shared seeds
// when paired), with a 95 % bootstrap interval of 2,000 resamples; and as
// words: "P(improvement) 0.83 (95% CI 0.67..1.00, the share of 12 seeds where
// this batch beats the baseline)". Empty / "" without a comparison.
std::optional<stats::Improvement> ImprovementOf(const BatchComparison& c);
std::string ImprovementText(const BatchComparison& c);
// The machine time of both sides: the summed run time of their runs (each
// run's last attempt, from its started/finished times) and that times the
// GPUs each run held, in hours.
struct MachineTime {
  std::int64_t run_ms = 0;
  double gpu_hours = 0;
};
MachineTime MachineTimeOf(const BatchComparison& c);
// "this verdict cost 24 runs (12 here, 12 at the baseline), 2h00m of run time
// (0.40 GPU-hours)" for a decided comparison, "spent so far: ..." otherwise:
// every run of both batches; the time once a run has run, the GPU-hours when
// the runs hold GPUs.
std::string CostText(const BatchComparison& c);
// The verdict as a word: stats::VerdictName, or "unchanged".
std::string VerdictWord(const BatchComparison& c);

// "accuracy 0.9262 ± 0.0096 (n=10)"; "(no finished runs)" when empty.
std::string SpreadText(const BatchProgress& b);

// The test-set noise floor of a batch whose runs reported `eval_examples`
// (stats/noise_floor.h, docs/STATISTICS.md), as every surface shows it:
//   {"eval_examples": 4500, "p": 0.89, "floor": 0.0047, "sd": 0.0042,
//    "sd_ci95": [lo, hi], "ratio": 0.9, "at_floor": true,
//    "short": "floor 0.0047, sd at it", "text": "seed sd 0.0042 sits at ..."}
// with "eval_examples_max" when runs reported different sizes (the floor
// uses the fewest). When the floor cannot be computed (one run; a metric
// outside [0, 1]) "floor" is null and "text" says why. Null when no run
// reported eval_examples.
nlohmann::json NoiseFloorJson(const BatchProgress& b);
// Everything about a comparison, as `trainq compare --json` prints it: the
// one verdict document every surface renders (the CLI's text, the commit
// status, the PR comment, the report and the dashboard's pages). Its
// `correction` object holds what the verdict used: `interval` at
// `interval_level` (`level_text`, "97.5% CI"), `p_adjusted` beside `p_raw`,
// the correction's name (`text`, "Holm over 2") and `p_text` as the CLI
// prints it; `text` is ComparisonText.
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
// The family of the commit `sha` of `repo_url`: its batches that are not
// sweep points, oldest first, each with its baseline (ParentBatch).
Result<std::vector<FamilyMember>> CommitFamily(Store& store, const std::string& repo_url,
                                               const std::string& sha);
// `b` against its baseline, corrected over its commit's family; empty when it
// has no baseline.
Result<std::optional<BatchComparison>> CompareInFamily(
    Store& store, const BatchProgress& b, bool compare_running,
    std::optional<stats::Correction> correction = std::nullopt);

// How the baseline of `b` was chosen, for people: "at the base 1a2b3c4", ...
std::string BaselineText(const BatchProgress& b);

// Adaptive repeats: the next round of `b`, decided only when none of its
// runs is left to finish. `parent` (its baseline) is needed for `until:
// decided`. Paired top-ups (docs/STATISTICS.md): when the comparison pairs by
// seed, the round adds the same new seeds to the baseline too (`base_repeats`:
// the baseline's batch grows to that many), so the extra runs become pairs.
// When the baseline cannot grow (its seeds are numbered differently, a run
// it was given for a top-up is dead, or git said its commit is gone:
// ExtendIfNeeded asks before queuing a top-up there, and notes it in the
// batch's baseline note after kCannotGrowMark), the head grows only up to
// the baseline's number of runs, the most an unpaired test against it can
// use, and `note` says why.
// Added to a batch's baseline note when git says its baseline cannot grow.
inline constexpr std::string_view kCannotGrowMark = " (the baseline cannot grow: ";
struct TopUp {
  int head_add = 0;         // runs to add to `b`
  int base_repeats = 0;     // grow the baseline's batch to this many (0: not)
  bool waiting = false;     // the baseline's runs are still going: decided when they end
  std::string note;         // why it stopped or is limited ("" when nothing to say)
};
TopUp PlanTopUp(const BatchProgress& b, const std::optional<BatchProgress>& parent);
// How many more runs `b` needs now (0: none): PlanTopUp's head_add.
int RunsToAdd(const BatchProgress& b, const std::optional<BatchProgress>& parent);

// Looks at the batch after one of its runs ended and queues the next round of
// an adaptive batch when its rule is not met yet, with its paired top-up of
// the baseline. A batch that is a baseline lets the adaptive batches
// compared with it take their next round too (their round waited for its
// runs). Returns the runs added.
Result<int> ExtendIfNeeded(Store& store, std::int64_t batch_id, TimeMs now);

}  // namespace trainq
