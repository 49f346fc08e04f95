// RunQueue: the store's batches and runs, and the lease protocol (a part of
// Store, queue/store.h, over its one SQLite connection; `store.runs()`).
//
//   queued -> leased -> running -> succeeded | failed | cancelled
//   failed -> (after backoff) leased again ... -> dead after max_attempts
//
// A lease carries an expiry and a fencing token (incremented on every lease of
// the run). Heartbeats extend the expiry; a write that carries a stale token is
// refused with ErrorKind::kConflict. ExpireLeases() puts runs whose holder went
// silent back in the queue (that counts as an attempt).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"
#include "queue/types.h"
#include <array>

namespace trainq {

struct StoreParts;

// The name the store gives a repository (its url's last part without
// ".git"): batches' `repo`.
std::string RepoName(const std::string& url);

class RunQueue {
 public:
  // Submission: all batches of one submission are written in one transaction.
  // Idempotent: an existing (commit, experiment) batch is kept, and only seeds
  // it lacks are added (a larger `repeats` tops a batch up).
  // `ref`: the ref whose push queues them (refs/heads/feature), recorded on
  // the batches this call creates ("" none: never coalesced, coalesce.h).
  Result<std::vector<SubmitResult>> Submit(const std::string& repo_url, const CommitInfo& commit,
                                           const std::vector<BatchSpec>& batches, TimeMs now,
                                           std::string_view ref = {});

  // Records that `commit` runs experiment `experiment` as batch `source`
  // did (its inputs for it are the same): a batch at `commit` that reuses
  // `source`'s runs (or, when `source` reuses another, that one's), queueing
  // nothing. Keeps the batch `commit` has already, reusing or not. The
  // SubmitResult's reuses_batch_id is set when the kept or new batch reuses.
  // `spec_json`, when given, is the new batch's (how `commit`'s trainq.yaml
  // judges the runs: correction, min_effect ...); else the source's.
  Result<SubmitResult> ReuseBatch(const std::string& repo_url, const CommitInfo& commit,
                                  const std::string& experiment, std::int64_t source,
                                  const std::string& reason, TimeMs now,
                                  std::string_view ref = {},
                                  const std::optional<std::string>& spec_json = std::nullopt);
  // The batch of (commit, experiment) runs its own runs again (`submit
  // --rerun`): it stops reusing; the next Submit queues its seeds. False when
  // it reused nothing.
  Result<bool> StopReusing(std::int64_t batch_id);

  // Grows a batch to `repeats` runs, adding the next seeds. Returns runs added.
  Result<int> ExtendBatch(std::int64_t batch_id, int repeats, TimeMs now);

  // The lease protocol. Lease hands the oldest runnable runs to a named
  // worker with no machine row, pool or GPU fit: the tests' and benchmarks'
  // "a worker takes it". serve leases through Machines::LeaseForMachine
  // (queue/machines.h); folding the two into one pure pick is issue 39's
  // next step.
  Result<std::vector<LeasedRun>> Lease(const std::string& worker, TimeMs now, TimeMs lease_ms,
                                       int max_runs);
  Status MarkRunning(std::int64_t run_id, std::int64_t token, TimeMs now,
                     const std::string& log_path);
  Result<TimeMs> Heartbeat(std::int64_t run_id, std::int64_t token, TimeMs now, TimeMs lease_ms);
  Status AddMetrics(std::int64_t run_id, std::int64_t token, const std::vector<MetricPoint>& points,
                    TimeMs now);
  // A success from the run's lease. Also accepted after that lease expired,
  // as long as the run was not leased again (the same token): a command known
  // to have succeeded is never made failed or dead by an expiry (nor by its
  // machine being taken for lost, LoseMachine / ForgetMachine). A success
  // for a run already leased again is refused (kConflict), naming whether the
  // other holder already completed it.
  Status Complete(std::int64_t run_id, std::int64_t token, TimeMs now, double metric_value,
                  int exit_code = 0);
  // Records a failed attempt: back to the queue after a backoff, or dead when
  // the attempts are used up or `retry` is false (a configuration error that
  // would fail the same way again). Returns the new state.
  Result<RunState> FailRun(std::int64_t run_id, std::int64_t token, TimeMs now,
                           const std::string& error, std::optional<int> exit_code,
                           bool retry = true);
  // The run was stopped from outside (preemption, daemon shutdown): back to the
  // queue at once, without using up an attempt.
  Status Interrupt(std::int64_t run_id, std::int64_t token, TimeMs now, const std::string& reason);
  // Runs whose lease expired go back to the queue (or die). Returns how many.
  // An expiry the coordinator caused (see GraceLeases) uses no attempt.
  Result<int> ExpireLeases(TimeMs now);
  // Leases that expired before `expired_before` while no heartbeat could be
  // accepted (trainq serve was down, restarting or stalled) get one more
  // lease from `now`, so that workers still running them can come back; if
  // they do not, the later expiry returns the run to the queue without using
  // an attempt. Returns how many.
  Result<int> GraceLeases(TimeMs expired_before, TimeMs now, TimeMs lease_ms,
                          const std::string& reason);
  Result<int> CancelBatch(std::int64_t batch_id, TimeMs now);
  // The batches of `repo_url` that pushes to `ref` queued (Submit's `ref`)
  // and that still have runs waiting (queued, or failed and waiting for
  // their retry), leaving out those that a batch of another ref, or of none,
  // reuses or is compared with. Oldest first. What coalescing may cancel
  // (agent/triggers/coalesce.h); it reads only batches with waiting runs.
  struct RefBatch {
    std::int64_t id = 0;
    std::string sha;
  };
  Result<std::vector<RefBatch>> WaitingBatchesOfRef(const std::string& repo_url,
                                                    const std::string& ref);
  Result<int> CancelRun(std::int64_t run_id, TimeMs now);
  // Puts a dead or cancelled run back in the queue with a fresh round of
  // the batch's max_attempts (its attempts count from 0 again). The round it
  // ends (state, attempts, exit code, last error) is kept in its retry
  // history (Retries) and its last error reads "retried by WHO; was dead
  // after N attempt(s): ..." until the run ends again. A final commit status
  // of its batch is wanted pending again. kNotFound for no such run;
  // kConflict for a run that succeeded (its result stands) or is still in
  // the queue (queued, leased, running, failed and waiting for its retry).
  Status RetryRun(std::int64_t run_id, TimeMs now, const std::string& who);
  // The run's retry history, oldest first.
  Result<std::vector<RunRetry>> Retries(std::int64_t run_id);

  // Reads.
  Result<std::array<std::int64_t, kRunStateCount>> CountByState();
  // Batches, newest first. only_active: those with runs left; limit 0 = all.
  Result<std::vector<BatchProgress>> Batches(bool only_active, int limit);
  Result<std::optional<BatchProgress>> Batch(std::int64_t batch_id);
  // The batches whose chosen baseline is `batch_id` or a batch reusing its
  // runs (paired top-ups: a baseline's round ending lets them decide).
  Result<std::vector<BatchProgress>> BatchesComparedWith(std::int64_t batch_id);
  // How many batches have runs left (queued, leased, running or failed).
  Result<std::int64_t> CountActiveBatches();
  // Batches of the commits whose sha starts with `sha_prefix` (>= 4 hex digits).
  Result<std::vector<BatchProgress>> BatchesForCommit(const std::string& sha_prefix);
  // The newest batch of `experiment` at the commit `sha` (all 40 digits) of
  // the repository at `repo_url`: one lookup on commits_by_sha, and the one
  // batch's runs read (BatchesForCommit reads every batch of the commit).
  Result<std::optional<BatchProgress>> BatchAt(const std::string& repo_url, const std::string& sha,
                                               const std::string& experiment);
  // Batches created at or after `since`, newest first.
  Result<std::vector<BatchProgress>> BatchesSince(TimeMs since);
  // The batches of `experiment` (any repository), newest first; at most
  // `limit` of them (0: all).
  Result<std::vector<BatchProgress>> BatchesOfExperiment(const std::string& experiment,
                                                         int limit = 0);
  // The newest `limit` (> 0) batches of `experiments` (empty: of all),
  // newest first: a walk down batches' ids (per experiment, down
  // batches_by_experiment) that stops after `limit`, whatever the history.
  Result<std::vector<BatchProgress>> NewestBatches(const std::vector<std::string>& experiments,
                                                   int limit);
  // The batches of `experiment`, newest first, as keys only: id, commit,
  // repository, creation time. One walk of batches_by_experiment and no run
  // is read (the experiment page orders these along a branch, then reads
  // the page it shows).
  struct BatchKey {
    std::int64_t id = 0;
    std::string sha, repo_url;
    TimeMs created_ms = 0;
    std::optional<std::int64_t> reuses_batch_id;  // BatchProgress::reuses_batch_id
  };
  Result<std::vector<BatchKey>> ExperimentBatchKeys(const std::string& experiment);
  // Whether `experiment` has any batch (one probe of batches_by_experiment).
  Result<bool> HasExperiment(const std::string& experiment);
  // Every experiment that has a batch, by name (reads the whole index: for
  // the message that names the known ones).
  Result<std::vector<std::string>> ExperimentNames();
  // Per (repo name, experiment), by repo then experiment: how many batches,
  // and the newest one. Reads the batches, never their runs (the dashboard's
  // overview; it read every run's value of every batch).
  struct ExperimentSummary {
    std::string repo, experiment;
    std::int64_t batches = 0;
    BatchProgress latest;
  };
  Result<std::vector<ExperimentSummary>> ExperimentSummaries();
  // Records which batch `batch_id` is compared with (see BatchProgress).
  Status SetBaseline(std::int64_t batch_id, const std::string& base_sha,
                     std::optional<std::int64_t> baseline_batch_id, const std::string& note);
  Result<std::vector<RunRow>> Runs(std::optional<std::int64_t> batch_id,
                                   std::optional<RunState> state, int limit);
  Result<std::optional<RunRow>> Run(std::int64_t run_id);
  // How long the last `limit` succeeded runs of experiment `experiment` in
  // the repository of batch `batch_id` took (their last attempt), newest
  // first: what `trainq status` estimates a batch's end from. At most 50
  // (the store keeps that many per repository and experiment).
  Result<std::vector<TimeMs>> RecentRunDurations(std::int64_t batch_id, int limit);
  // Runs that ended an attempt (succeeded, failed, dead) or were cancelled after the cursor
  // (finished_ms, id), oldest first: `trainq serve` logs each outcome once,
  // whichever worker reported it.
  Result<std::vector<RunRow>> RunsFinishedAfter(TimeMs finished_ms, std::int64_t run_id,
                                                int limit);
  // `leases`, when given, gets each point's attempt: the lease token that
  // sent it (points of one attempt share it; absent for points stored
  // before schema 18), aligned with the points.
  Result<std::vector<MetricPoint>> Metrics(
      std::int64_t run_id, std::vector<std::optional<std::int64_t>>* leases = nullptr);
  // Whether `token` is the lease of the attempt a cancel ended: the run is
  // cancelled and that lease was its last. Its worker may still send the
  // output the attempt wrote (agent/daemon/worker_api.h, the log route).
  Result<bool> IsCancelledLease(std::int64_t run_id, std::int64_t token);
  Result<std::int64_t> MetricCount(std::int64_t run_id);

 private:
  friend struct StoreParts;
  friend class Machines;
  friend class Gangs;
  explicit RunQueue(StoreParts& parts);
  RunQueue(const RunQueue&) = delete;
  RunQueue& operator=(const RunQueue&) = delete;

  // Inside a write transaction: the repository and commit rows (created
  // when missing); returns the commit's id.
  Result<std::int64_t> UpsertCommit(const std::string& repo_url, const CommitInfo& commit,
                                    TimeMs now);
  Result<std::vector<BatchProgress>> SelectBatches(const std::string& where,
                                                   const std::vector<std::string>& args,
                                                   int limit);
  // Checks that run_id is held under `token` in one of the live states.
  Status CheckLease(std::int64_t run_id, std::int64_t token, std::string_view action);
  // What a lease hands out about run `id` (Lease and LeaseForMachine):
  // kLeasedRunSelect bound to the run id, read into a LeasedRun.
  static const char* const kLeasedRunSelect;
  static Result<LeasedRun> ReadLeasedRun(sql::Stmt& info, std::int64_t id, TimeMs expires_ms);

  StoreParts& parts_;  // the Store's connection, options and the other concerns
  sql::Db& db_;        // parts_.db
};

}  // namespace trainq
