// Machines: workers over HTTP, providers, the autoscaler's pools, budgets and
// costs (a part of Store, queue/store.h, over its one SQLite connection;
// `store.machines()`). Tables from schema version 4.
// Every machine state change writes a machine_events row holding the number
// of live leases (leased/running runs with that machine_id) counted in the
// same transaction: the recorded history that shows no machine was stopped
// while it held a lease. LeaseForMachine and DrainMachine read and write the
// run queue's tables in the same transaction (the drain contract,
// cloud/autoscaler.h).
//
// Machine states: requested | booting | ready | draining | stopping | stopped | failed.
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

#include "cloud/autoscaler.h"

namespace trainq {

struct StoreParts;

class Machines {
 public:
  // The local executor registers itself as a machine.
  Result<std::int64_t> UpsertMachine(const MachineRow& m, TimeMs now);
  Status TouchMachine(std::int64_t id, TimeMs now, const std::string& state);
  // `now` counts running runs into busy_ms up to now; without it, up to their
  // last heartbeat.
  Result<std::vector<MachineRow>> List(bool include_stopped,
                                       std::optional<TimeMs> now = std::nullopt);

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
  // per_batch: the newest `batch_limit` batches only (0: every batch, which
  // reads every run ever done on a machine).
  Result<std::vector<CostRow>> Costs(TimeMs now, bool per_batch, int batch_limit = 0);

 private:
  friend struct StoreParts;
  friend class Gangs;
  explicit Machines(StoreParts& parts);
  Machines(const Machines&) = delete;
  Machines& operator=(const Machines&) = delete;

  // Inside a write transaction: one machine_events row with the live leases.
  Status RecordMachineEvent(std::int64_t machine, std::string_view state, TimeMs now,
                            const std::string& note);
  Result<int> LiveLeases(std::int64_t machine);
  Result<std::vector<MachineRow>> SelectMachines(const std::string& where,
                                                 const std::vector<std::string>& args,
                                                 std::optional<TimeMs> now);

  StoreParts& parts_;  // the Store's connection, options and the other concerns
  sql::Db& db_;        // parts_.db
};

}  // namespace trainq
