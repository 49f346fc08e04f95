// trainq.yaml, version 1: which experiments a repository has and how to run them.
//
// Every error names the file, the line and the key path, e.g.
//   trainq.yaml:12: experiments.lstm.repeats: expected a positive integer, got "ten"
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "queue/types.h"

namespace trainq {

// The file a commit's experiments are read from, at the repository's root.
inline constexpr const char* kManifestName = "trainq.yaml";

struct MetricSpec {
  std::string name = "accuracy";
  std::string goal = "max";  // max | min
  std::string regex;         // applied to the run's output when the metrics file lacks the metric
  std::optional<double> min_effect;  // smallest difference worth calling better/worse
};

// `repeats: {min: 5, max: 30, step: 5, until: {ci_halfwidth: 0.005}}` or
// `until: decided`: start with `min` runs, add `step` more while the rule is
// not met, never beyond `max`. See docs/STATISTICS.md for why this is sound.
struct AdaptiveRepeats {
  int max = 0;
  int step = 0;
  std::optional<double> ci_halfwidth;  // stop once the 95 % interval is this narrow
  bool decided = false;                // stop once the verdict against the parent is decided
  // How `until: decided` spends alpha over its looks (stats/sequential.h):
  // "spending" (Lan-DeMets O'Brien-Fleming, the default) or "bonferroni".
  std::string design = "spending";
};

struct Experiment {
  std::string name;
  std::string command;  // shell command; {seed}, {repeat}, {output_dir}, {run_id} are substituted
  std::string trainer;  // path of a trainq-train spec, relative to the repository root
  std::vector<std::string> watch;
  int repeats = 10;  // with `adaptive`, the first round (`min`)
  std::optional<AdaptiveRepeats> adaptive;
  std::int64_t seed = 1;
  MetricSpec metric;
  int gpus = 0;
  std::string pool;  // resources.pool: the machine pool that runs it; "" = any
  // resources.nodes / processes_per_node: one run is `nodes` machines leased
  // together, each running `processes_per_node` processes with torchrun's
  // variables (a gang). `gang` is true when either key is written.
  bool gang = false;
  int nodes = 1;
  int processes_per_node = 1;
  std::int64_t timeout_s = 7200;
  int max_attempts = 3;
  // `env_passthrough: [WANDB_API_KEY, "HF_*"]`: of the variables the operator
  // lets runs have (the pool's env_passthrough in server.yaml, or serve's and
  // the worker's --env-passthrough), only these; it can only narrow that set,
  // since whoever can push writes this file. nullopt: the operator's set.
  std::optional<std::vector<std::string>> env_passthrough;
  // What a batch of it is compared with when no batch exists at the base
  // commit or an ancestor with the same inputs: "auto" queues one there with
  // the same seeds, "reuse" only uses existing batches, "off" compares nothing.
  std::string baseline = "auto";
  // `defaults: correction: holm | bh | none`: the family correction of the
  // verdicts over the experiments one commit changed (stats/multiple.h).
  std::string correction = "holm";
  // `determinism: check` (on the experiment or in `defaults`): each batch
  // runs its first seed a second time, in a companion batch named
  // "NAME@repro" (ReproSpec), and says whether the two runs agree.
  bool determinism_check = false;
  int line = 0;              // where the experiment is defined
  int command_line = 0;      // where `command` / `trainer` / `watch` are written (0: inherited/none)
  int trainer_line = 0;
  int watch_line = 0;
  std::string definition;    // its YAML, normalised: compared across commits
  // `sweep:` (agent/repo/sweep_spec.h). A swept `command:` has `{name}`
  // placeholders that only a sweep point fills: its plain batch (submit,
  // pushes, baselines) runs the first explicit point of the sweep, filled in
  // here, and without one it has no plain batch. A swept `trainer:` runs its
  // spec as written (the spec is its default point).
  bool swept = false;
  std::string sweep_default_command;

  // Why this experiment gets no plain batch, or nothing when it does.
  std::optional<std::string> NoPlainBatch() const;

  // The shell command a run executes (a trainer experiment runs trainq-train;
  // a swept command its default point).
  std::string ResolvedCommand() const;
  // The batch this experiment becomes at a commit.
  BatchSpec ToBatchSpec(std::string reason) const;
};

// Keys of trainq.yaml that change no run, only whether a seed runs twice and
// how the runs are judged: `correction`, `determinism`, `baseline` and
// `metric.min_effect`. Change detection and the inputs' fingerprint leave
// them out (Experiment::definition, Manifest::defaults_definition), so
// changing them reruns nothing, and a batch is reused across them. Every
// other key (the command, watch, repeats, seed, the metric's name, goal and
// regex, resources, timeout, max_attempts, env_passthrough) is an input.
// A batch's spec_json (ToBatchSpec) less those keys: two batches whose
// RunInputsJson are equal ran the same runs.
std::string RunInputsJson(std::string_view spec_json);

// The determinism check's companion batches: "x@repro" runs seeds of x's
// batch at the same commit again (no baseline, no commit status of its own;
// agent/results/analysis.h compares the two).
inline constexpr std::string_view kReproSuffix = "@repro";
bool IsReproExperiment(std::string_view experiment);
std::string ReproExperimentOf(std::string_view experiment);  // "x" -> "x@repro"
std::string ReproTargetOf(std::string_view repro_experiment);  // "x@repro" -> "x"
// The companion of `of`: `runs` runs from its first seed, with no baseline.
BatchSpec ReproSpec(const BatchSpec& of, int runs);
// `specs` followed by the companion (one run) of each whose experiment asks
// for `determinism: check`.
std::vector<BatchSpec> WithDeterminismChecks(std::vector<BatchSpec> specs);

inline constexpr int kMaxGangNodes = 1024;
inline constexpr int kMaxProcessesPerNode = 256;

struct Manifest {
  int version = 1;
  std::string defaults_definition;  // normalised YAML of `defaults`
  std::vector<Experiment> experiments;  // in file order

  const Experiment* Find(std::string_view name) const;
  std::vector<std::string> Names() const;
};

// The placeholders a command may use: {seed}, {repeat}, {run_id}, {output_dir}.
const std::vector<std::string>& KnownPlaceholders();

// Parses the text of a trainq.yaml; `filename` is used in error messages.
// Besides types and keys it refuses what YAML or the runs would accept
// silently: a key written twice in one mapping (YAML keeps one of them), an
// unknown `{placeholder}` in a command, and a watch glob with characters the
// matcher does not support (`[`, `{`, `\`) or with empty, `.` or `..` parts.
// Checks that need the commit's other files or a shell are in
// agent/repo/manifest_check.h.
Result<Manifest> ParseManifest(std::string_view text, std::string_view filename);

}  // namespace trainq
