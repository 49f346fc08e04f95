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

// Whether `sha` was the head of an earlier push to push.ref, and whether
// something else still names it: a push to another ref, or a newer push.
struct Naming {
  bool earlier_head = false;
  bool named_elsewhere = false;
};

Result<Naming> NamesOf(Store& store, const Pushes::Push& push, const std::string& sha) {
  Naming out;
  ASSIGN_OR_RETURN(auto pushes, store.pushes().PushesForCommit(sha));
  for (const auto& p : pushes) {
    if (p.repo_url != push.repo_url || p.after_sha != sha || p.id == push.id) continue;
    if (p.ref == push.ref && p.id < push.id) {
      out.earlier_head = true;
    } else {
      out.named_elsewhere = true;
    }
  }
  return out;
}

}  // namespace

Result<CoalesceOutcome> CoalesceSuperseded(Store& store, const RepoConfig& repo,
                                           const Pushes::Push& push,
                                           const std::string& batches_repo, TimeMs now) {
  CoalesceOutcome out;
  if (!Coalesces(repo, push) || IsZeroSha(push.after_sha)) return out;
  // What this ref's pushes queued that still waits.
  ASSIGN_OR_RETURN(auto waiting, store.runs().WaitingBatchesOfRef(batches_repo, push.ref));
  if (waiting.empty()) return out;

  // What the new push's batches stand on.
  std::set<std::string> kept_shas = {push.after_sha, push.before_sha};
  std::set<std::int64_t> kept_batches;
  ASSIGN_OR_RETURN(auto fresh, store.runs().BatchesForCommit(push.after_sha));
  for (const auto& b : fresh) {
    if (b.repo_url != batches_repo) continue;
    kept_shas.insert(b.base_sha);
    kept_shas.insert(b.parent_sha);
    if (b.baseline_batch_id) kept_batches.insert(*b.baseline_batch_id);
    if (b.reuses_batch_id) kept_batches.insert(*b.reuses_batch_id);
  }
  for (const auto& b : waiting) {
    if (kept_shas.contains(b.sha) || kept_batches.contains(b.id)) continue;
    ASSIGN_OR_RETURN(Naming naming, NamesOf(store, push, b.sha));
    if (!naming.earlier_head || naming.named_elsewhere) continue;
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
  return out;
}

}  // namespace trainq
