#include "agent/triggers/coalesce.h"

#include <set>
#include <string>

#include "agent/triggers/forge.h"
#include "queue/run_queue.h"

namespace trainq {

namespace {

bool Coalesces(const RepoConfig& repo, const Pushes::Push& push) {
  if (repo.coalesce == RepoConfig::Coalesce::kOff) return false;
  if (push.ref.starts_with("refs/tags/")) return false;  // a tag is never superseded
  if (repo.coalesce == RepoConfig::Coalesce::kAll) return true;
  std::string default_branch =
      !repo.default_branch.empty() ? repo.default_branch : push.default_branch;
  // Not knowing the default branch, only a pull request's head is surely not it.
  if (default_branch.empty()) return push.pr_number > 0;
  return push.ref != "refs/heads/" + default_branch;
}

}  // namespace

Result<CoalesceOutcome> CoalesceSuperseded(Store& store, const RepoConfig& repo,
                                           const Pushes::Push& push,
                                           const std::string& batches_repo, TimeMs now,
                                           int history) {
  CoalesceOutcome out;
  if (!Coalesces(repo, push) || IsZeroSha(push.after_sha)) return out;
  ASSIGN_OR_RETURN(auto pushes, store.pushes().RecentPushes(history));
  // The heads older pushes to this ref left, and the heads something else
  // still names: another ref's push, or a push newer than this one.
  std::set<std::string> superseded, named;
  for (const auto& p : pushes) {
    if (p.repo_url != push.repo_url || IsZeroSha(p.after_sha)) continue;
    bool older_same_ref = p.ref == push.ref && p.id < push.id && p.state == "done";
    if (older_same_ref) {
      superseded.insert(p.after_sha);
    } else {
      named.insert(p.after_sha);
    }
  }
  superseded.erase(push.after_sha);
  if (superseded.empty()) return out;

  // What the new push's batches stand on.
  std::set<std::string> kept_shas = {push.before_sha};
  std::set<std::int64_t> kept_batches;
  ASSIGN_OR_RETURN(auto fresh, store.runs().BatchesForCommit(push.after_sha));
  for (const auto& b : fresh) {
    if (b.repo_url != batches_repo) continue;
    kept_shas.insert(b.base_sha);
    kept_shas.insert(b.parent_sha);
    if (b.baseline_batch_id) kept_batches.insert(*b.baseline_batch_id);
    if (b.reuses_batch_id) kept_batches.insert(*b.reuses_batch_id);
  }
  for (const auto& sha : superseded) {
    if (named.contains(sha) || kept_shas.contains(sha)) continue;
    ASSIGN_OR_RETURN(auto batches, store.runs().BatchesForCommit(sha));
    for (const auto& b : batches) {
      if (b.repo_url != batches_repo || b.sha != sha || kept_batches.contains(b.id)) continue;
      int cancelled = 0;
      // Waiting runs only: queued, or failed and waiting for their retry.
      for (RunState state : {RunState::kQueued, RunState::kFailed}) {
        ASSIGN_OR_RETURN(auto runs, store.runs().Runs(b.id, state, 1'000'000));
        for (const auto& r : runs) {
          ASSIGN_OR_RETURN(int n, store.runs().CancelRun(r.id, now));
          cancelled += n;
        }
      }
      if (cancelled > 0) {
        ++out.batches;
        out.runs += cancelled;
      }
    }
  }
  return out;
}

}  // namespace trainq
