#include "agent/results/submit.h"

#include "agent/repo/manifest.h"
#include "agent/results/analysis.h"
#include "core/strings.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

// Step 3: the limits on what is queued, then one Submit.
Result<std::vector<SubmitResult>> Queue(Store& store, const std::string& repo_url,
                                        const CommitInfo& commit,
                                        const std::vector<BatchSpec>& specs,
                                        const SubmitLimits* limits, const std::string& where,
                                        TimeMs now, const std::string& ref = "") {
  if (specs.empty()) return std::vector<SubmitResult>{};
  if (limits) TRY(CheckSubmitLimits(specs, where, *limits));
  return store.runs().Submit(repo_url, commit, specs, now, ref);
}

// Step 1 for one spec: its batch when it needs no queueing (the commit's own
// reusing batch, or an ancestor's taken now), else nullopt.
Result<std::optional<SubmittedBatch>> Reuse(Store& store, GitRepo& git,
                                            const SubmitRequest& req, const BatchSpec& spec,
                                            TimeMs now) {
  const std::string& repo = git.location();
  const std::string& sha = req.commit.sha;
  ASSIGN_OR_RETURN(auto here, BatchOfExperimentAt(store, repo, spec.experiment, sha));
  SubmittedBatch out;
  out.spec = spec;
  if (here && here->reuses_batch_id) {
    if (req.rerun) {
      TRY(store.runs().StopReusing(here->id));
      return std::optional<SubmittedBatch>();
    }
    out.result = SubmitResult{here->id, spec.experiment, false, 0, here->reuses_batch_id};
    out.already_reusing = true;
    return std::optional<SubmittedBatch>(std::move(out));
  }
  if (here || req.rerun) return std::optional<SubmittedBatch>();
  ASSIGN_OR_RETURN(auto found, FindReusableBatch(store, git, repo, spec, sha));
  if (!found) return std::optional<SubmittedBatch>();
  ASSIGN_OR_RETURN(out.result,
                   store.runs().ReuseBatch(repo, req.commit, spec.experiment, found->batch.id,
                                           "reused batch " + std::to_string(found->batch.id) +
                                               " of " + ShortSha(found->at_sha) +
                                               ": same inputs; " + spec.reason,
                                           now, req.ref));
  out.reused = std::move(found);
  return std::optional<SubmittedBatch>(std::move(out));
}

}  // namespace

Result<std::vector<SubmittedBatch>> SubmitCommit(Store& store, GitRepo& git,
                                                 const SubmitRequest& req, TimeMs now) {
  std::vector<SubmittedBatch> out;
  std::vector<BatchSpec> to_queue;
  for (const auto& spec : req.specs) {
    ASSIGN_OR_RETURN(auto reused, Reuse(store, git, req, spec, now));
    if (reused) {
      out.push_back(std::move(*reused));
    } else {
      to_queue.push_back(spec);
    }
  }
  if (req.determinism_checks) to_queue = WithDeterminismChecks(std::move(to_queue));
  ASSIGN_OR_RETURN(auto queued, Queue(store, git.location(), req.commit, to_queue, req.limits,
                                      req.limits_where, now, req.ref));
  for (size_t i = 0; i < queued.size(); ++i) {
    SubmittedBatch b;
    b.spec = to_queue[i];
    b.result = queued[i];
    out.push_back(std::move(b));
  }
  // The specs' order, companions last: what a caller prints follows it.
  std::vector<SubmittedBatch> ordered;
  for (const auto& spec : req.specs) {
    for (auto& b : out) {
      if (!b.spec.experiment.empty() && b.spec.experiment == spec.experiment) {
        ordered.push_back(std::move(b));
        b.spec.experiment.clear();
        break;
      }
    }
  }
  for (auto& b : out) {
    if (!b.spec.experiment.empty()) ordered.push_back(std::move(b));
  }
  // Step 4: a determinism check's companion is read with its experiment's
  // batch, so it has no baseline of its own.
  for (auto& b : ordered) {
    if (!req.base_sha || IsReproExperiment(b.result.experiment)) continue;
    ASSIGN_OR_RETURN(auto batch, store.runs().Batch(b.result.batch_id));
    if (!batch || !batch->base_sha.empty()) continue;
    auto note = ChooseBaseline(store, git, *batch, *req.base_sha, now, req.baseline);
    if (!note) {
      b.baseline_error = note.error();
      continue;
    }
    b.baseline = std::move(*note);
    ASSIGN_OR_RETURN(batch, store.runs().Batch(b.result.batch_id));
    b.baseline_batch = batch && batch->baseline_batch_id.has_value();
  }
  return ordered;
}

Result<std::string> ChooseBaseline(Store& store, GitRepo& git, const BatchProgress& head,
                                   const std::string& base_sha, TimeMs now,
                                   BaselineOptions options) {
  ASSIGN_OR_RETURN(auto plan, PlanBaseline(store, git, head, base_sha, options));
  if (plan.queue) {
    ASSIGN_OR_RETURN(auto queued,
                     Queue(store, head.repo_url, *plan.base, {*plan.queue}, nullptr, "", now));
    if (queued.empty()) return Fail(ErrorKind::kInternal, "baseline batch not created");
    const std::int64_t id = queued.front().batch_id;
    // The baseline batch itself is compared with nothing.
    TRY(store.runs().SetBaseline(id, "", std::nullopt,
                                 "baseline queued for batch " + std::to_string(head.id)));
    plan.batch_id = id;
    plan.note = "batch " + std::to_string(id) + " queued at the base " +
                ShortSha(base_sha, kReportShaChars) + " with the same seeds";
  }
  TRY(store.runs().SetBaseline(head.id, plan.base_sha, plan.batch_id, plan.note));
  return plan.note;
}

}  // namespace trainq
