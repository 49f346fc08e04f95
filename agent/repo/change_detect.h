// Change detection: which experiments a commit must run, and why.
//
// A pure function of the paths that changed between two commits and the
// trainq.yaml at both ends. An experiment runs when
//   - a changed path (for a rename: the old or the new path) matches one of its
//     `watch` globs, or its `trainer` spec file changed;
//   - its own entry in trainq.yaml is new or changed;
//   - `defaults` in trainq.yaml changed (then every experiment runs).
// Keys that are no run input (manifest.h, RunInputsJson: correction,
// determinism, baseline, metric.min_effect) change no experiment. One
// exception: an experiment whose `determinism: check` is new, and nothing
// else, is returned with inputs_changed false: its batch is reused and only
// the check runs.
//
// Globs are matched against the whole path from the repository root:
//   `*`  any run of characters inside one path segment (never '/');
//   `?`  one character other than '/';
//   `**` as a whole segment: zero or more segments (`data/**`, `**/*.py`,
//        `models/**/weights.bin`); inside a segment it acts like `*`.
// Every other character matches itself. `*.py` matches `train.py` but not
// `src/train.py`; write `**/*.py` for any depth.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"

namespace trainq {

struct ChangedPath {
  enum class Kind { kAdded, kModified, kDeleted, kRenamed, kCopied, kTypeChanged };
  Kind kind = Kind::kModified;
  std::string old_path;  // same as new_path unless renamed or copied; empty when added
  std::string new_path;  // empty when deleted
};

struct ExperimentTrigger {
  std::string experiment;
  std::vector<std::string> reasons;  // each one line, e.g. "configs/a.yaml matches watch 'configs/*'"
  // False when only a determinism check was asked for: the experiment's runs
  // are the same as before (a batch with its inputs is reused).
  bool inputs_changed = true;
  // The reasons joined with "; " (long lists shortened), for the batch's `reason`.
  std::string Reason() const;
};

bool GlobMatch(std::string_view pattern, std::string_view path);

// `before` is the manifest at the base commit, or nullptr when there was none
// (a first commit, or trainq.yaml was added): then every experiment is new.
// The result follows the order of `after.experiments`.
std::vector<ExperimentTrigger> DetectChanges(const std::vector<ChangedPath>& changes,
                                             const Manifest* before, const Manifest& after);

// A fingerprint of what experiment `e` of `m` reads at a commit, the inputs
// DetectChanges looks at: its trainq.yaml entry, `defaults`, and the path and
// content id of every file of the commit (`files`: GitRepo::TreeFiles) that
// its trainer spec or watch globs name. Equal fingerprints: the same runs.
// Noise drift (agent/results/analysis.h) pools batches with equal ones.
std::string InputsFingerprint(const Manifest& m, const Experiment& e,
                              const std::vector<std::pair<std::string, std::string>>& files);
// Writes the fingerprint of each spec's experiment at `sha` into its
// spec_json ("inputs"); specs of experiments `m` does not define are left alone.
Status AddInputsFingerprints(GitRepo& git, const std::string& sha, const Manifest& m,
                             std::vector<BatchSpec>& specs);

}  // namespace trainq
