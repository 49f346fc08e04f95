// Store: trainq's durable state in one SQLite file.
//
// Holds repositories, commits, batches (one per commit x experiment), runs (one
// per batch x seed), metrics, machines and webhook deliveries, and implements
// the lease protocol:
//
//   queued -> leased -> running -> succeeded | failed | cancelled
//   failed -> (after backoff) leased again ... -> dead after max_attempts
//
// A lease carries an expiry and a fencing token (incremented on every lease of
// the run). Heartbeats extend the expiry; a write that carries a stale token is
// refused with ErrorKind::kConflict. ExpireLeases() puts runs whose holder went
// silent back in the queue (that counts as an attempt).
//
// Every write runs in BEGIN IMMEDIATE with a busy timeout; the file uses WAL
// and synchronous=FULL, so an acknowledged write survives a power cut.
// Threading: a Store is one connection; use one per thread. Several processes
// may open the same file (the daemon writes, `trainq status` reads).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cloud/autoscaler.h"
#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"
#include "queue/types.h"

namespace trainq {

// The SQL expression of a run's next lease (fencing) token: larger than the
// last one (a stale token stays stale) by 1 + a random 32-bit step from
// SQLite's random() (seeded from the OS's randomness), and never below 2^32.
// The pool token is all a machine of a pool shows on run routes, so the lease
// token is what keeps one machine from acting on another's lease: it must
// not be guessable (a counter from 1 was). Stays below 2^53 for any real
// number of leases of one run (2^20 of them), exact in any JSON reader.
inline constexpr const char* kNextLeaseToken =
    "max(lease_token, 4294967296) + 1 + (random() & 4294967295)";

struct StoreOptions {
  int busy_timeout_ms = 5000;
  TimeMs backoff_base_ms = 10'000;    // first retry after 10 s, then 20 s, 40 s ...
  TimeMs backoff_cap_ms = 15 * 60'000;
  bool create = true;                 // create the file when missing
  // Write the schema into a file that exists but holds none (0 bytes, or an
  // empty SQLite file). Only `trainq init` sets it: otherwise such a file is
  // refused, since a database emptied by a bad restore or an interrupted
  // copy must not silently become an empty queue.
  bool initialize_existing = false;
  bool read_only_ok = false;          // reserved
};

class Store {
 public:
  static inline constexpr int kSchemaVersion = 13;

  static Result<Store> Open(const std::string& path, StoreOptions options = {});
  // PRAGMA quick_check: "ok", or the problems it lists (at most `max_lines`).
  Result<std::vector<std::string>> QuickCheck(int max_lines = 20);
  Store(Store&&) = default;
  Store& operator=(Store&&) = default;

  const std::string& path() const { return db_.path(); }
  int schema_version();

  // Submission: all batches of one submission are written in one transaction.
  // Idempotent: an existing (commit, experiment) batch is kept, and only seeds
  // it lacks are added (a larger `repeats` tops a batch up).
  Result<std::vector<SubmitResult>> Submit(const std::string& repo_url, const CommitInfo& commit,
                                           const std::vector<BatchSpec>& batches, TimeMs now);

  // Records that `commit` runs experiment `experiment` as batch `source`
  // did (its inputs for it are the same): a batch at `commit` that reuses
  // `source`'s runs (or, when `source` reuses another, that one's), queueing
  // nothing. Keeps the batch `commit` has already, reusing or not. The
  // SubmitResult's reuses_batch_id is set when the kept or new batch reuses.
  Result<SubmitResult> ReuseBatch(const std::string& repo_url, const CommitInfo& commit,
                                  const std::string& experiment, std::int64_t source,
                                  const std::string& reason, TimeMs now);
  // The batch of (commit, experiment) runs its own runs again (`submit
  // --rerun`): it stops reusing; the next Submit queues its seeds. False when
  // it reused nothing.
  Result<bool> StopReusing(std::int64_t batch_id);

  // Grows a batch to `repeats` runs, adding the next seeds. Returns runs added.
  Result<int> ExtendBatch(std::int64_t batch_id, int repeats, TimeMs now);

  // The lease protocol.
  Result<std::vector<LeasedRun>> Lease(const std::string& worker, TimeMs now, TimeMs lease_ms,
                                       int max_runs);
  Status MarkRunning(std::int64_t run_id, std::int64_t token, TimeMs now,
                     const std::string& log_path);
  Result<TimeMs> Heartbeat(std::int64_t run_id, std::int64_t token, TimeMs now, TimeMs lease_ms);
  // Runs `fn` in one write transaction: the Store calls it makes join it, and
  // commit together (or roll back together when fn fails).
  template <typename Fn>
  auto InWriteTransaction(Fn&& fn) -> decltype(fn()) {
    return sql::WithWriteTransaction(db_, std::forward<Fn>(fn));
  }
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
  Result<int> CancelRun(std::int64_t run_id, TimeMs now);

  // Reads.
  Result<std::array<std::int64_t, kRunStateCount>> CountByState();
  // Batches, newest first. only_active: those with runs left; limit 0 = all.
  Result<std::vector<BatchProgress>> Batches(bool only_active, int limit);
  Result<std::optional<BatchProgress>> Batch(std::int64_t batch_id);
  // How many batches have runs left (queued, leased, running or failed).
  Result<std::int64_t> CountActiveBatches();
  // Batches of the commits whose sha starts with `sha_prefix` (>= 4 hex digits).
  Result<std::vector<BatchProgress>> BatchesForCommit(const std::string& sha_prefix);
  // Batches created at or after `since`, newest first.
  Result<std::vector<BatchProgress>> BatchesSince(TimeMs since);
  // The batches of `experiment` (any repository), newest first; at most
  // `limit` of them (0: all).
  Result<std::vector<BatchProgress>> BatchesOfExperiment(const std::string& experiment,
                                                         int limit = 0);
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
  Result<std::vector<MetricPoint>> Metrics(std::int64_t run_id);
  Result<std::int64_t> MetricCount(std::int64_t run_id);

  // Machines (the local executor registers itself as one). Implemented in
  // queue/machine_store.cc with the rest of the machines section below.
  Result<std::int64_t> UpsertMachine(const MachineRow& m, TimeMs now);
  Status TouchMachine(std::int64_t id, TimeMs now, const std::string& state);
  // `now` counts running runs into busy_ms up to now; without it, up to their
  // last heartbeat.
  Result<std::vector<MachineRow>> Machines(bool include_stopped,
                                           std::optional<TimeMs> now = std::nullopt);

  // Webhook deliveries. Returns false when (forge, delivery_id) was seen before.
  Result<bool> RecordDelivery(const DeliveryRow& d, TimeMs now);

  TimeMs BackoffMs(int attempt) const;

 private:
  Store(sql::Db db, StoreOptions options) : db_(std::move(db)), options_(options) {}
  Status Migrate();
  static Status CreateWhole(const std::string& path, const StoreOptions& options);
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

  sql::Db db_;
  StoreOptions options_;

  // ==== Commit triggers: pushes, ref heads, commit statuses ==================
  // Webhooks and polls record pushes here; a background worker turns them into
  // batches and reports commit statuses back to the forge. Implemented in
  // queue/push_store.cc; tables from schema version 3.
 public:
  struct Push {
    std::int64_t id = 0;
    std::string source;               // github | gitlab | gitea | poll
    std::string delivery_id;          // unique per source
    std::string repo_url;             // the repository as configured (not the mirror)
    std::string ref;                  // refs/heads/main
    std::string before_sha;           // all zeros: a new branch
    std::string after_sha;            // all zeros: a deleted branch
    std::string default_branch;       // as the payload named it; "" unknown
    std::int64_t pr_number = 0;       // > 0: a pull/merge request's head (ref refs/pull/N/head)
    std::string target_branch;        // a pull request's target branch
    std::string state = "pending";    // pending | done | skipped | failed
    int attempts = 0;                 // failed processing attempts so far
    TimeMs not_before_ms = 0;         // next attempt not before
    std::string result;               // what was queued, or why nothing
    std::string error;                // the last error (fetch, trainq.yaml)
    TimeMs received_ms = 0;
    TimeMs updated_ms = 0;
  };
  // Writes the delivery (deliveries table) and its push in one transaction and
  // moves the ref head of (repo_url, ref) to after_sha. nullopt: (source,
  // delivery_id) was recorded before, and nothing was written.
  Result<std::optional<std::int64_t>> RecordPush(const Push& push, TimeMs now);
  // Pending pushes whose not_before_ms has passed, oldest first.
  Result<std::vector<Push>> DuePushes(TimeMs now, int limit);
  // The earliest not_before_ms among pending pushes.
  Result<std::optional<TimeMs>> NextPushDue();
  Status FinishPush(std::int64_t id, const std::string& state, const std::string& result,
                    const std::string& error, TimeMs now);
  // A failed attempt: attempts + 1, error kept, tried again at not_before.
  Status RetryPush(std::int64_t id, const std::string& error, TimeMs not_before, TimeMs now);
  Result<std::optional<Push>> GetPush(std::int64_t id);
  Result<std::vector<Push>> RecentPushes(int limit);  // newest first
  Result<std::vector<std::pair<std::string, std::int64_t>>> CountPushesByState();
  // Pushes whose after_sha starts with `sha_prefix` (hex), newest first.
  Result<std::vector<Push>> PushesForCommit(const std::string& sha_prefix);
  // The last head recorded for (repo_url, ref) by a webhook or a poll.
  Result<std::vector<std::pair<std::string, std::string>>> RefHeads(const std::string& repo_url);
  // Sets a head without a push (a poller's first look at a repository).
  Status SetRefHead(const std::string& repo_url, const std::string& ref, const std::string& sha,
                    TimeMs now);

  struct CommitStatus {
    std::int64_t batch_id = 0;     // the batch it reports on; 0 for a push's status
    std::int64_t push_id = 0;      // a failed push's status (no batch); 0 for a batch's
    std::string repo_url;          // the repository as configured
    std::string sha;
    std::string context;           // "trainq/<experiment>"
    std::string state;             // wanted: pending | success | failure | error
    std::string description;
    std::string posted_state;      // what the forge last accepted; "" nothing yet
    std::string posted_description;  // with that description
    int attempts = 0;              // failed posts of the wanted state
    TimeMs not_before_ms = 0;
    bool gave_up = false;
    std::string last_error;
  };
  // Wants the status for a batch (kept as is when the batch has one already).
  Status AddCommitStatus(const CommitStatus& s, TimeMs now);
  // Batches whose wanted status is still pending but whose runs have all ended.
  Result<std::vector<std::int64_t>> FinishedPendingStatuses(int limit);
  // Batches' statuses wanted `pending` whose description starts with `prefix`.
  Result<std::vector<CommitStatus>> PendingCommitStatuses(const std::string& prefix);
  // Sets the wanted (final) state; attempts start over.
  Status SetCommitStatusWanted(std::int64_t batch_id, const std::string& state,
                               const std::string& description, TimeMs now);
  // Wants the status of a push that failed before queueing anything (push_id
  // set, batch_id 0); kept as is when the push has one already.
  Status AddPushStatus(const CommitStatus& s, TimeMs now);
  // Wanted differs from posted, not given up, due; oldest first; batches'
  // and failed pushes' statuses together.
  Result<std::vector<CommitStatus>> DueCommitStatuses(TimeMs now, int limit);
  // `s` names the status by its batch_id or push_id.
  Status CommitStatusPosted(const CommitStatus& s, const std::string& state,
                            const std::string& description, TimeMs now);
  Status CommitStatusFailed(const CommitStatus& s, const std::string& error, TimeMs not_before,
                            bool give_up, TimeMs now);
  Result<std::optional<CommitStatus>> GetCommitStatus(std::int64_t batch_id);
  Result<std::optional<CommitStatus>> GetPushStatus(std::int64_t push_id);
  // A push's statuses, one per context (a commit with nothing to judge has
  // one per experiment).
  Result<std::vector<CommitStatus>> GetPushStatuses(std::int64_t push_id);

  // A processed push found nothing to judge at `sha` (its change touched no
  // experiment): decided, and `trainq gate` passes it. Kept as first recorded.
  struct QuietCommit {
    std::string repo_url;
    std::string sha;
    std::int64_t push_id = 0;
    std::string note;  // "no watched path or experiment changed"
  };
  Status AddQuietCommit(const QuietCommit& q, TimeMs now);
  // Quiet commits whose sha starts with `sha_prefix` (hex, >= 4 digits).
  Result<std::vector<QuietCommit>> QuietCommits(const std::string& sha_prefix);

  // Pull request comments (schema 5): one per (repository, pull request).
  struct PrComment {
    std::string repo_url;       // the repository as configured
    std::int64_t pr_number = 0;
    std::string head_sha;       // the head the body was rendered for
    std::string comment_id;     // the forge's id; "" until created
    std::string body;           // wanted
    std::string body_sha256;    // of body
    std::string posted_sha256;  // of the body the forge last accepted
    bool settled = false;       // everything the body shows has ended
    int attempts = 0;           // failed posts of the wanted body
    TimeMs not_before_ms = 0;
    bool gave_up = false;
    std::string last_error;
    TimeMs posted_ms = 0;
  };
  // The newest processed (done) push of each pull request whose comment is
  // missing, rendered for another head, or not settled; oldest first.
  Result<std::vector<Push>> PullRequestsToRender(int limit);
  Result<std::optional<PrComment>> GetPrComment(const std::string& repo_url,
                                                std::int64_t pr_number);
  // Sets the wanted body (creating the row). A body that differs from the
  // wanted one starts its attempts over.
  Status SetPrCommentWanted(const std::string& repo_url, std::int64_t pr_number,
                            const std::string& head_sha, const std::string& body,
                            const std::string& body_sha256, bool settled, TimeMs now);
  // Wanted body not empty and not posted, not given up, due; oldest first.
  Result<std::vector<PrComment>> DuePrComments(TimeMs now, int limit);
  Status PrCommentPosted(const std::string& repo_url, std::int64_t pr_number,
                         const std::string& comment_id, const std::string& body_sha256,
                         TimeMs now);
  Status PrCommentFailed(const std::string& repo_url, std::int64_t pr_number,
                         const std::string& error, TimeMs not_before, bool give_up, TimeMs now);
  // The forge lost the comment (deleted by hand): the next post creates one.
  Status ForgetPrCommentId(const std::string& repo_url, std::int64_t pr_number, TimeMs now);

  // Waits for a busy write lock in steps of at most 1 ms (up to the store's
  // busy timeout) instead of SQLite's default back-off, whose sleeps grow to
  // 100 ms: for connections that answer webhooks while other threads write.
  void UseFineBusyWait();
  // ==== end of commit triggers ================================================

  // ==== Machines: workers over HTTP, providers, the autoscaler ===============
  // Implemented in queue/machine_store.cc; tables from schema version 4.
  // Every machine state change writes a machine_events row holding the number
  // of live leases (leased/running runs with that machine_id) counted in the
  // same transaction: the recorded history that shows no machine was stopped
  // while it held a lease.
  //
  // Machine states: requested | booting | ready | draining | stopping | stopped | failed.
 public:
  // state "requested" (no provider id yet) or "booting"; booted_ms = now.
  Result<std::int64_t> AddMachine(const MachineRow& m, TimeMs now);
  // The provider answered Boot: -> booting. kConflict when a live machine of
  // the pool has that id (a stopped one's id may be reused).
  Status SetMachineProviderId(std::int64_t row, const std::string& provider_id, TimeMs now);
  // "stopped" sets stopped_ms; "failed" stores `note` as last_error.
  Status SetMachineState(std::int64_t row, std::string_view state, TimeMs now,
                         const std::string& note = "");
  // THE DRAIN TRANSACTION (cloud/autoscaler.h, drain contract): in one BEGIN
  // IMMEDIATE reads the machine's state, live leases and last_busy_ms and the
  // runnable runs it could serve, asks cloud::DrainAllowed(); true: the machine
  // is `draining` (+event) and committed; false: nothing is written.
  Result<bool> DrainMachine(const cloud::Action& drain, TimeMs now);
  // The machine vanished (provider lost it) or was killed: `stopped`, and its
  // live leases go back to the queue without using an attempt. Returns how many.
  Result<int> ForgetMachine(std::int64_t row, TimeMs now, const std::string& reason);
  // The machine is lost (cloud::ActionKind::kLost: its worker went silent, or
  // never registered): `failed`, last_error "lost: <reason>". Its live leases
  // go back to the queue without using an attempt, and so do its runs whose
  // lease expired after the machine last called (ExpireLeases charged them
  // for the machine's silence), unless not re-leased since. A run already
  // interrupted max_attempts times is the likelier cause (it takes its host
  // down): its attempt counts (failed after a backoff, or dead). Returns how
  // many runs went back. The caller stops the machine through its provider.
  Result<int> LoseMachine(std::int64_t row, TimeMs now, const std::string& reason);

  struct WorkerRegistration {
    std::string pool, name, hostname, resources_json = "{}";
    int pid = 0;
    int slots = 1;
    int gpus = 0;
  };
  // A named machine of that pool in requested/booting/ready becomes ready
  // (ready_ms = now; hostname, resources, slots, gpus updated). A named machine
  // that is draining/stopping/stopped/failed: kConflict. A named machine of
  // another pool: kInvalidArgument. An unknown name, or "": a new ready row,
  // provider "manual", named "<hostname>-<pid>" when "".
  Result<MachineRow> RegisterWorker(const WorkerRegistration& r, TimeMs now);

  struct LeaseLimits {
    int max_runs = 1;     // slots free on the worker
    double free_gpus = 0;
    int runs_per_gpu = 1;
    int fuse_max = 1;
  };
  // Leases to a machine; kConflict "machine N is draining" (or its state)
  // unless it is ready. Picks runnable runs (queued, or failed past their
  // backoff) oldest first whose batch pool is "" or the machine's pool and
  // whose GPU cost fits the free GPUs (a 1-GPU run costs 1/runs_per_gpu, a
  // g-GPU run g, a 0-GPU run 0), skipping those that do not fit. fuse_max > 1:
  // a picked run of a `trainer:` experiment brings up to fuse_max - 1 more runs
  // of its batch (by seed) into the same slot; they share `group`. Sets
  // runs.machine_id, machines.last_busy_ms (when anything was leased) and
  // last_seen_ms.
  Result<std::vector<LeasedRun>> LeaseForMachine(std::int64_t machine, const LeaseLimits& limits,
                                                 TimeMs now, TimeMs lease_ms);

  // A read, no write: whether LeaseForMachine could answer something now (the
  // machine is not ready, or a runnable run of its pool exists, fitting or
  // not). Lets a waiting lease poll re-check without a write transaction.
  Result<bool> MayLease(std::int64_t machine, TimeMs now);

  struct DemandRow {
    std::string pool;  // the batch's pool, "" = any
    int gpus = 0;
    int nodes = 0;     // > 0: gang runs needing that many machines at once
    std::int64_t runnable = 0;
  };
  // Runnable runs (queued, or failed past backoff) by (batch pool, batch gpus).
  Result<std::vector<DemandRow>> RunnableDemand(TimeMs now);

  Result<std::optional<MachineRow>> Machine(std::int64_t row,
                                            std::optional<TimeMs> now = std::nullopt);
  Result<std::optional<MachineRow>> MachineByName(const std::string& name);
  // Machines marked lost (LoseMachine) at or after `since`, newest first.
  Result<std::vector<MachineRow>> LostMachines(TimeMs since);
  // The machine a run is (or was last) leased to.
  Result<std::optional<std::int64_t>> RunMachine(std::int64_t run_id);
  // Checks that run_id is held under `token` (leased or running); kConflict when stale.
  Status CheckRunLease(std::int64_t run_id, std::int64_t token);
  // A worker called: last_seen_ms = now, and last_busy_ms = now when `busy`
  // (a heartbeat or a completion: the machine worked until now).
  Status TouchWorker(std::int64_t machine, TimeMs now, bool busy);

  // Sets a machine's last_error (and records an event) without changing its
  // state: why a booting machine will not work (its token was refused).
  Status NoteMachine(std::int64_t row, const std::string& note, TimeMs now);

  struct MachineEvent {
    std::int64_t machine_id = 0;
    TimeMs at_ms = 0;
    std::string state;
    int live_leases = 0;
    std::string note;
  };
  // Oldest first; one machine's, or all.
  Result<std::vector<MachineEvent>> MachineHistory(std::optional<std::int64_t> machine);

  // Why runnable runs of batches with this (pool, gpus) cannot start; the
  // whole set is replaced at once (an empty set: nothing is stuck).
  struct WaitingNote {
    std::string pool;
    int gpus = 0;
    std::string note;
    int nodes = 0;  // gang runs needing that many machines (0: not a gang)
    bool operator==(const WaitingNote&) const = default;
  };
  Status SetWaitingNotes(const std::vector<WaitingNote>& notes, TimeMs now);
  // Per batch: its runnable runs that match a note, and the note.
  struct WaitingBatch {
    std::int64_t batch_id = 0;
    std::int64_t runs = 0;
    std::string note;
  };
  Result<std::vector<WaitingBatch>> WaitingBatches(TimeMs now);

  struct PoolHealthRow {
    std::string pool;
    int consecutive_failures = 0;
    TimeMs next_retry_ms = 0;
    std::string last_error;
  };
  Status SetPoolHealth(const PoolHealthRow& h, TimeMs now);
  Result<std::vector<PoolHealthRow>> PoolHealth();

  // How a pool's boots went and what its budget holds back (the fleet writes
  // it, `trainq status`, /metrics and `trainq pools reset` read or clear it).
  // Pool "*" holds the overall budget.
  struct PoolStateRow {
    std::string pool;
    int failed_boots = 0;
    TimeMs next_boot_ms = 0;
    bool failing = false;
    std::string boot_error;  // why the last boot failed
    std::string log_tail;    // the end of that machine's console / worker log
    std::string config_hash;
    double spent_day = 0;
    double spent_month = 0;
    double budget_per_day = 0;  // 0: none
    double budget_per_month = 0;
    std::string cap;  // "" or the cap holding boots back
    TimeMs updated_ms = 0;
  };
  Result<std::vector<PoolStateRow>> PoolStates();
  // The boot columns only (a budget write never undoes a reset).
  Status SetPoolBoots(const PoolStateRow& s, TimeMs now);
  // The budget columns only.
  Status SetPoolBudget(const PoolStateRow& s, TimeMs now);
  // `trainq pools reset`: failed boots forgotten, the pool boots again. False
  // when the pool had nothing to reset.
  Result<bool> ResetPoolBoots(const std::string& pool, TimeMs now);

  // Only the SHA-256 hex of a pool's worker token is stored.
  Status SetPoolTokenHash(const std::string& pool, const std::string& sha256_hex, TimeMs now);
  // The pool whose token hash this is (compared in constant time).
  Result<std::optional<std::string>> PoolForTokenHash(const std::string& sha256_hex);

  struct CostRow {
    std::string pool;          // per pool; "" in per-batch rows
    std::int64_t batch_id = 0; // per batch; 0 in per-pool rows
    TimeMs billed_ms = 0;      // pool: sum of (stopped or now) - booted; batch: run time / slots
    TimeMs busy_ms = 0;        // run time on the machines
    double cost = 0;           // pool: billed hours x hourly_cost; batch: run hours x cost / slots
    int machines = 0;
  };
  Result<std::vector<CostRow>> Costs(TimeMs now, bool per_batch);

 private:
  // Inside a write transaction: one machine_events row with the live leases.
  Status RecordMachineEvent(std::int64_t machine, std::string_view state, TimeMs now,
                            const std::string& note);
  Result<int> LiveLeases(std::int64_t machine);
  Result<std::vector<MachineRow>> SelectMachines(const std::string& where,
                                                 const std::vector<std::string>& args,
                                                 std::optional<TimeMs> now);
  // ==== end of machines ========================================================

  // ==== Gangs: one run over several machines (queue/gang_store.cc) ===========
  // A batch whose spec_json has resources.nodes is a gang: each run is leased
  // to `nodes` machines of one pool at once, in ONE transaction, or not at
  // all, so no machine is held for a gang that cannot start and two gangs can
  // never wait on each other. A gang_members row (schema 11) per node records
  // the machine, the lease token of that attempt, the member's own expiry and,
  // for node 0, the rendezvous address. The run's lease_expires_ms is the
  // earliest member expiry, so ExpireLeases fails the whole run when any member
  // goes silent; the run's token is shared by its members, so once the run has
  // failed every member's next call is refused (kConflict) and its worker
  // stops its processes. A member is live while its token is the run's and the
  // run is leased or running; a machine with a live member leases nothing else.
 public:
  struct GangMember {
    std::int64_t run_id = 0;
    int node_rank = 0;
    std::int64_t token = 0;
    std::int64_t machine_id = 0;
    std::string state;  // assigned | running | done
    TimeMs expires_ms = 0;
    std::string master_addr;  // node 0's row: where rank 0 listens
    int master_port = 0;
  };
  // The members of the run's current attempt, by node rank (empty: none live
  // or not a gang).
  Result<std::vector<GangMember>> GangMembers(std::int64_t run_id);
  // The member row of node `node_rank` of the run's latest attempt, live or
  // not (its token names the attempt): a member may still send its logs
  // after the run failed.
  Result<std::optional<GangMember>> GangMemberOf(std::int64_t run_id, int node_rank);
  // All live members (leased or running runs), for tests and status.
  Result<std::vector<GangMember>> LiveGangMembers();
  struct GangView {
    std::string master_addr;  // "" until node 0 has said where it listens
    int master_port = 0;
    TimeMs expires_ms = 0;
  };
  // A member's heartbeat: its expiry moves to now + lease_ms (and the run's to
  // the earliest of its members'); node 0 may set the rendezvous address;
  // `started` marks the member running. kConflict when the token is stale or
  // the member is not on `machine`.
  Result<GangView> GangBeat(std::int64_t run_id, std::int64_t token, int node_rank,
                            std::int64_t machine, TimeMs now, TimeMs lease_ms, bool started,
                            const std::string& master_addr, int master_port);
  // A member's processes all exited 0 (node 0 brings rank 0's metric): the
  // member is done; once every member is, the run is Complete()d with node
  // 0's metric. Returns true when the run completed.
  Result<bool> GangMemberSucceeded(std::int64_t run_id, std::int64_t token, int node_rank,
                                   std::int64_t machine, TimeMs now,
                                   std::optional<double> metric_value);

 private:
  // Inside LeaseForMachine's transaction: the machine's undelivered members
  // (marked delivered), and whether it holds a live member at all (then it
  // leases nothing else).
  Result<std::pair<std::vector<LeasedRun>, bool>> DeliverGangMembers(std::int64_t machine,
                                                                     TimeMs now);
  // Inside LeaseForMachine's transaction: leases gang run `run_id` to `machine`
  // (node 0) and nodes - 1 other idle, ready machines of its pool heard from
  // within lease_ms, all or nothing. Empty when the gang cannot form now.
  Result<std::vector<LeasedRun>> FormGang(std::int64_t run_id, std::int64_t machine,
                                          const std::string& pool, const std::string& worker,
                                          TimeMs now, TimeMs lease_ms);
  // ==== end of gangs ===========================================================

  // ==== Sweeps: hyperparameter searches (agent/results/sweep.h) =======================
  // Implemented in queue/sweep_store.cc; tables from schema version 7. A point
  // is written before its batch is submitted (Submit is idempotent per commit
  // and experiment), so a driver killed between the two re-submits the same
  // batch and never a second one.
 public:
  struct SweepRow {
    std::int64_t id = 0;
    std::string repo_url;
    std::string commit_json;  // the CommitInfo, as JSON
    std::string experiment;
    std::string spec_json;    // SweepSpec::ToJson()
    std::string batch_json;   // the experiment's BatchSpec, as JSON
    std::string state = "running";  // running | stopped | done
    TimeMs created_ms = 0;
    TimeMs updated_ms = 0;
  };
  struct SweepPointRow {
    std::int64_t sweep_id = 0;
    int idx = 0;                        // 0, 1, ... in the order suggested
    std::string params_json = "{}";
    std::optional<std::int64_t> batch_id;  // empty until its batch is submitted
    TimeMs created_ms = 0;
  };
  Result<std::int64_t> AddSweep(const SweepRow& s, TimeMs now);
  Result<std::optional<SweepRow>> GetSweep(std::int64_t id);
  Result<std::vector<SweepRow>> Sweeps(const std::string& state = "");  // "" = all; newest first
  Status SetSweepState(std::int64_t id, const std::string& state, TimeMs now);
  // Writes point (sweep_id, idx) unless it exists; returns the stored point.
  Result<SweepPointRow> AddSweepPoint(const SweepPointRow& p, TimeMs now);
  Status SetSweepPointBatch(std::int64_t sweep_id, int idx, std::int64_t batch_id);
  Result<std::vector<SweepPointRow>> SweepPoints(std::int64_t sweep_id);  // by idx
  // A short text that changes whenever a running sweep may have something to
  // do: a sweep starts, resumes or stops, a point lacks its batch, or a run
  // of a running sweep's point ends. One indexed query (the serve loop's poll).
  Result<std::string> SweepActivity();
  // ==== end of sweeps =========================================================
};

// Applies migrations [from, to) to a raw connection. Exposed for the migration test.
Status ApplyMigrations(sql::Db& db, int from, int to);

}  // namespace trainq
