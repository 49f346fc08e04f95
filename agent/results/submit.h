// The one way a commit's batches enter the queue, for `trainq submit` and for
// a push alike (agent/cli/cmd_submit.cc CmdSubmit, agent/triggers/
// push_pipeline.cc QueueTriggered). SubmitCommit, in order:
//   1. each spec: the commit's own batch when it has one (topped up to the
//      spec's repeats; one that reuses another's runs stays so unless
//      `rerun`), else an ancestor's batch with the same inputs, taken as this
//      commit's (baseline.h FindReusableBatch; not with `rerun`), else queued;
//   2. the determinism checks' companions of the specs being queued;
//   3. the limits, checked on what is queued; then one RunQueue::Submit;
//   4. each batch whose baseline is not chosen yet gets one (ChooseBaseline):
//      a stored batch, or a batch queued at the base through step 3 again; a
//      failure here is kept on the batch's entry, not returned, since its
//      batch is queued already.
// The repository is read through one GitRepo; batches are keyed by its
// location().
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/repo/git_repo.h"
#include "agent/repo/manifest_check.h"
#include "agent/results/baseline.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/store.h"
#include "queue/types.h"

namespace trainq {

struct SubmitRequest {
  CommitInfo commit;
  // One per experiment, with its inputs' fingerprint (AddInputsFingerprints);
  // determinism-check companions the caller wants (--runs) may be among them.
  std::vector<BatchSpec> specs;
  bool rerun = false;               // queue even when an ancestor's batch has the same inputs
  bool determinism_checks = true;   // add the companions of the queued specs that ask for one
  const SubmitLimits* limits = nullptr;  // checked on what is queued
  std::string limits_where;              // "trainq.yaml at 1a2b3c4d5e", for the message
  // The base each new batch is compared at ("" = none: recorded as such);
  // nullopt: no baseline is chosen now.
  std::optional<std::string> base_sha;
  BaselineOptions baseline;
  // The ref whose push submits (refs/heads/feature), recorded on the batches
  // created for `commit` ("" none: `trainq submit`); baselines queued at the
  // base get none. Coalescing cancels only a ref's own (coalesce.h).
  std::string ref;
};

struct SubmittedBatch {
  BatchSpec spec;
  SubmitResult result;
  // Taken now from an ancestor with the same inputs: that batch and commit.
  std::optional<ReusableBatch> reused;
  // The commit's batch reused another's runs already (an earlier submission).
  bool already_reusing = false;
  // The baseline chosen now (ChooseBaseline's note), "" when none was.
  std::string baseline;
  bool baseline_batch = false;  // the note names a batch it is compared with
  // Choosing the baseline failed (the batch is queued all the same; a later
  // submission of the commit chooses again).
  std::optional<Error> baseline_error;
};

Result<std::vector<SubmittedBatch>> SubmitCommit(Store& store, GitRepo& git,
                                                 const SubmitRequest& request, TimeMs now);

// Chooses and records the baseline of `head` against `base_sha` (baseline.h
// PlanBaseline), queueing a missing one at the base with the head's seeds.
// Returns the note stored.
Result<std::string> ChooseBaseline(Store& store, GitRepo& git, const BatchProgress& head,
                                   const std::string& base_sha, TimeMs now,
                                   BaselineOptions options = {});

}  // namespace trainq
