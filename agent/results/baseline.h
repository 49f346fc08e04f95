// Baselines: which batch a batch of experiment X at commit C is compared with.
//
//   1. X at the base commit (the parent for a push to a branch, the merge
//      base with the target for a pull request or a new branch), when stored;
//   2. else X at the nearest first-parent ancestor of the base whose inputs
//      for X are identical: no commit in between touched X's watch globs, its
//      trainer spec, its trainq.yaml entry or `defaults` (the same rule that
//      decides whether a push runs X, agent/repo/change_detect.h). Such a batch ran
//      the same command on the same files, so its runs are draws from the very
//      distribution X at the base would give, seed for seed;
//   3. else, unless the experiment says `baseline: reuse` or `off`, a batch of
//      X at the base is to be queued with the same seeds, so the comparison
//      pairs.
// PlanBaseline decides and writes nothing; agent/results/submit.h's
// ChooseBaseline queues the missing batch through the one submit path and
// stores the choice on the batch (RunQueue::SetBaseline) with a note saying
// which and why; `trainq show`, `compare`, `gate`, the report, commit statuses
// and adaptive `until: decided` all read it through ParentBatch().
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "agent/repo/git_repo.h"
#include "core/result.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

struct BaselineSearch {
  std::optional<BatchProgress> batch;  // found
  std::string at_sha;                  // the commit of the batch found
  int steps = 0;                       // first-parent steps from the base to it
  std::string stopped;                 // why the walk ended without a batch
};

// Walks from `base_sha` along first parents in `git` (a work tree or a bare
// repository/mirror), at most `max_steps` commits, looking for a stored batch
// of `experiment` of `repo_url` at a commit whose inputs for it equal those
// at the base.
Result<BaselineSearch> FindEquivalentBatch(Store& store, GitRepo& git,
                                           const std::string& repo_url,
                                           const std::string& experiment,
                                           const std::string& base_sha, int max_steps = 200);

// Heads reuse the same rule: the batch that commit `sha` can take as its own
// for the experiment of `spec` instead of queueing runs. That is the batch
// FindEquivalentBatch finds at a first-parent ancestor of `sha` (no commit in
// between touched the experiment's inputs), when it was submitted with the
// same resolved definition (`spec_json`: command or trainer spec, watch
// globs, trainq.yaml entry with defaults, seeds, repeats) and the same first
// seed, and it has not ended with nothing (all cancelled or dead). A batch
// stored at `sha` itself is not a reuse: nullopt then.
struct ReusableBatch {
  BatchProgress batch;  // the batch found (it may itself reuse another)
  std::string at_sha;   // its commit
  int steps = 0;        // first-parent steps from `sha`
};
Result<std::optional<ReusableBatch>> FindReusableBatch(Store& store, GitRepo& git,
                                                       const std::string& repo_url,
                                                       const BatchSpec& spec,
                                                       const std::string& sha,
                                                       int max_steps = 200);

// "reused batch 12 of 1a2b3c4 (same inputs)": what a batch that reuses
// another says about it; "" for one with runs of its own.
std::string ReuseText(const BatchProgress& b);

struct BaselineOptions {
  bool queue_missing = true;  // queue a batch at the base when none is found
  int max_steps = 200;
};

// The baseline of `head` (a stored batch) against `base_sha` ("" = no base:
// nothing to compare with), decided: a stored batch, none, or a batch to
// queue at the base. Writes nothing.
struct BaselinePlan {
  std::optional<std::int64_t> batch_id;  // the batch chosen, when one is stored
  std::string base_sha;                  // the base recorded with the choice
  std::string note;                      // why (when nothing is to be queued)
  // Set: no batch is stored; this one is to be queued at `base` (the head's
  // seeds and repeats, the base's definition and inputs).
  std::optional<BatchSpec> queue;
  std::optional<CommitInfo> base;
};
Result<BaselinePlan> PlanBaseline(Store& store, GitRepo& git, const BatchProgress& head,
                                  const std::string& base_sha, BaselineOptions options = {});

}  // namespace trainq
