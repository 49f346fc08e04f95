// The autoscaler: a pure function from (pools, demand, machines, provider
// listing and health, now) to actions. It reads no clock and calls nothing;
// the thin loop that runs it (later: inside `trainq serve`) gathers the input
// from the store and the providers, and applies the actions.
//
// Rules, per pool:
//   needed = ceil(demand_slots / slots), demand_slots = runnable queued runs +
//   live leases; wanted = clamp(min, needed, max). Boot wanted - live machines
//   (live = requested, booting, ready).
//   A machine that has not become ready within boot_timeout of its boot is
//   lost (kLost: marked lost in the store, then stopped); it is a failed boot
//   (below), so its replacement waits for the boot back-off: nothing is
//   booted in the pass that loses it.
//   A registered machine (ready, or draining with runs) whose worker has not
//   called for lost_after is lost too: its worker is stopped (SIGSTOP, a
//   hung host), partitioned away, or points at another server. It no longer
//   counts as live, so the same pass boots its replacement when work remains.
//   A ready machine is drained only when it holds no live lease, the pool has
//   no runnable queued run, and it has been idle (since max(ready_at,
//   last_busy_at)) longer than idle_grace; never below `min` live machines.
//   A draining machine is stopped (also on a later pass, when its Stop failed
//   or the loop crashed between drain and stop).
//   Reconcile with the provider's List(): a tagged machine unknown to the store
//   (a crash between Boot and recording it) is adopted while the pool wants
//   more machines, else stopped; a known machine that the listing no longer
//   has (preempted, killed) is forgotten: the caller marks it stopped and
//   returns its leases to the queue.
//   Boot outcomes (a Boot that the provider accepted but that never yields a
//   working worker: bad image, firewall, unreachable server URL, refused
//   token, a worker that exits at once): the caller judges each machine with
//   JudgeBoot() and records it with RecordBoot(). After a failed boot the
//   pool boots one machine at a time, not before health.boot.next_boot_at
//   (exponential, capped); after `failing_after` failed boots in a row it is
//   `failing` and boots nothing until reset (config change, `trainq pools
//   reset`, or a worker of the pool registering and staying).
//   Budgets: a pool (and all pools together) with a per_day / per_month cap
//   boots no machine whose minimum bill (hourly_cost x min_bill) would take
//   the spend of the UTC day / month over the cap. At the cap, with
//   drain_at_cap, ready machines are drained at once (regardless of min,
//   idle_grace and the queue; a busy one leases nothing more, finishes its
//   runs, and is stopped once it holds none) and booting ones stopped.
//   A machine the provider still lists but reports over (PoolInput::ended:
//   a pod whose image cannot be pulled, one preempted or evicted) ends at
//   once (kEnded), without waiting for boot_timeout; a disrupted one is no
//   failed boot. An unknown listed machine that is over is stopped, never
//   adopted.
//   Provider errors: the caller records each provider call's outcome with
//   RecordProviderCall(); while health.next_retry_at is in the future the pool
//   gets no provider action (Boot, Stop), and after `report_after` consecutive
//   failures the pool is reported as failing (`trainq status`), still retried
//   only at the backed-off pace.
//
// THE DRAIN CONTRACT (the invariant users care most about: never stop a
// machine that just took a job). A Drain action is a proposal computed from a
// snapshot; between the snapshot and the write a lease may be granted. The
// caller must apply it inside ONE store transaction (BEGIN IMMEDIATE) that
//   1. reads the machine's state, live leases and last_busy_at, and the pool's
//      runnable queued runs, fills a DrainCheck and calls DrainAllowed(); only
//      when it returns true
//   2. sets the machine's state to `draining`, and commits.
// Lease() must refuse a machine whose state is not `ready` in its own
// transaction; both write transactions are serialized by SQLite, so either the
// lease comes first (the drain sees it and is rejected) or the drain does (the
// lease sees `draining` and is refused). Only after the commit may the caller
// call Provider::Stop.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/clock.h"

namespace trainq::cloud {

enum class MachineState { kRequested, kBooting, kReady, kDraining, kStopping, kStopped, kFailed };
std::string_view MachineStateName(MachineState s);

struct PoolConfig {
  std::string name;
  int min = 0;
  int max = 1;
  int slots = 1;  // runs per machine at once
  TimeMs idle_grace_ms = 2 * 60'000;
  TimeMs boot_timeout_ms = 10 * 60'000;
  double hourly_cost = 0;  // per machine; for reports and budgets
  TimeMs min_bill_ms = 60'000;  // the least a boot is billed (EC2: 60 s)
  int failing_after = 3;        // failed boots in a row before the pool is failing
  TimeMs boot_backoff_ms = 60'000;  // after a failed boot; doubles, up to boot_backoff_cap_ms
  // Spend caps; 0 = none. Windows are the UTC day and month.
  double budget_per_day = 0;
  double budget_per_month = 0;
  bool drain_at_cap = false;
  // A registered machine whose worker has not called for this long is lost
  // (0 = never). Idle workers call at least every lease poll (20 s), busy ones
  // every heartbeat (10 s).
  TimeMs lost_after_ms = 45'000;
  // Provider List() pacing (see NextListAt); 0 = every pass.
  TimeMs list_interval_ms = 0;
  TimeMs list_interval_idle_ms = 0;
};

// How the pool's boots went (see JudgeBoot / RecordBoot).
struct BootHealth {
  int failed = 0;           // failed boots in a row
  TimeMs next_boot_at = 0;  // no Boot before this
  bool failing = false;     // no Boot at all until reset
};

// What has been spent in the current UTC day and month (billed time x
// hourly_cost, running machines up to now).
struct Spend {
  double day = 0;
  double month = 0;
};

// All pools together (server config `budget:`).
struct OverallBudget {
  double per_day = 0;  // 0 = none
  double per_month = 0;
  bool drain_at_cap = false;
  Spend spend;
};

struct Machine {
  std::int64_t row = 0;  // the caller's own key (the store's machines.id); copied into actions
  std::string id;        // the provider's id; empty while the Boot call has not answered
  MachineState state = MachineState::kRequested;
  TimeMs booted_at = 0;                // when Boot was called (or the machine adopted)
  std::optional<TimeMs> ready_at;      // when its worker registered
  std::optional<TimeMs> last_busy_at;  // when it last held a lease
  std::optional<TimeMs> stopped_at;    // when it left (stopped / failed)
  // When its worker last called (or when the caller started listening, if
  // later: silence while nobody could answer is not the machine's); nullopt:
  // unknown, never lost for silence.
  std::optional<TimeMs> last_seen_at;
  int live_leases = 0;
};

struct ProviderHealth {
  int consecutive_failures = 0;
  TimeMs next_retry_at = 0;  // no provider call before this
};

struct PoolInput {
  PoolConfig config;
  int demand = 0;  // runnable queued runs this pool can serve (backoff passed)
  // The most machines one runnable gang run of this pool needs at once
  // (resources.nodes; 0 = none): the pool wants that many idle machines
  // besides the busy ones, so the gang can form.
  int gang_nodes = 0;
  std::vector<Machine> machines;
  // The ids List() reported this pass; nullopt when List() was not called or
  // failed (nothing is adopted or forgotten then).
  std::optional<std::vector<std::string>> listing;
  // Listed machines the provider reports over (ListedMachine::ended), by id.
  struct Ended {
    std::string reason;
    bool disrupted = false;
  };
  std::map<std::string, Ended> ended;
  ProviderHealth health;
  BootHealth boot;
  Spend spend;  // this pool's
};

struct AutoscalerOptions {
  TimeMs backoff_base_ms = 5'000;  // 5 s, 10 s, 20 s, ... after consecutive failures
  TimeMs backoff_cap_ms = 5 * 60'000;
  int report_after = 3;  // consecutive failures before the pool is reported failing
  // A machine booted less than this long ago may be missing from an eventually
  // consistent listing (EC2); it is not forgotten yet.
  TimeMs listing_lag_ms = 60'000;
  // Failed boots: boot_backoff (1 min), 2 min, 4 min ... between boots, at most 30 min.
  TimeMs boot_backoff_cap_ms = 30 * 60'000;
  // A worker that leaves within this long of registering, having run
  // nothing, was a failed boot; one registered this long is a success.
  TimeMs quick_exit_ms = 2 * 60'000;
};

enum class ActionKind {
  kBoot,    // call Provider::Boot `count` times, record each machine `booting`
  kDrain,   // conditional: see the drain contract above; then Stop
  kStop,    // call Provider::Stop(machine), record it `stopping`, `stopped` on success
  kAdopt,   // record the listed machine as `booting` (booted_at = now)
  kForget,  // mark `stopped`, return its leases to the queue (attempt refunded)
  kLost,    // mark `failed` ("lost: <reason>"), its leases back to the queue
            // (attempt refunded), then Provider::Stop when the provider is not
            // backing off (else the "stopped but still listed" rule stops it)
  kEnded,   // the provider reports the machine over though it still lists it
            // (PoolInput::ended): disrupted -> as kLost; else a machine that
            // never registered is `failed` ("boot: <reason>", a failed boot)
            // and a registered one `stopped`; its leases back to the queue
            // (attempt refunded); then Provider::Stop as for kLost
};
std::string_view ActionKindName(ActionKind k);

// What the drain decision saw; the caller's transaction re-checks it.
struct DrainGuard {
  std::optional<TimeMs> last_busy_at;
  bool at_cap = false;  // a budget drain: runs still queued do not call it off
  // The pool's max: a queued gang run of more machines than this can never
  // use the machine, so it does not call the drain off (0: every run does).
  int max_nodes = 0;
};

struct Action {
  ActionKind kind = ActionKind::kBoot;
  std::string pool;
  std::string machine;   // the provider's id; empty for kBoot (and a Boot that never answered)
  std::int64_t row = 0;  // Machine::row of the machine acted on; 0 for kBoot and kAdopt
  int count = 0;         // kBoot only
  std::string reason;    // one line for the log
  DrainGuard guard;      // kDrain only
  bool disrupted = false;  // kEnded only: the cluster took the machine away

  friend bool operator==(const Action& a, const Action& b) {
    return a.kind == b.kind && a.pool == b.pool && a.machine == b.machine && a.row == b.row &&
           a.count == b.count;
  }
};

struct PoolReport {
  std::string pool;
  int needed = 0;
  int wanted = 0;
  int live = 0;              // requested + booting + ready, after this pass's actions
  bool backing_off = false;  // provider actions held back this pass
  bool failing = false;      // consecutive failures >= report_after
  bool boot_backing_off = false;  // a failed boot's back-off holds boots back
  bool boot_failing = false;      // failed boots in a row >= failing_after: no boot
  int boots_held = 0;             // machines wanted but not booted (back-off, failing, budget)
  std::string cap;  // "" or which cap holds boots back ("per_day budget $50.00 reached")
};

struct Decision {
  std::vector<Action> actions;
  std::vector<PoolReport> pools;
};

Decision Autoscale(const std::vector<PoolInput>& pools, TimeMs now,
                   const AutoscalerOptions& options = {}, const OverallBudget& overall = {});

// What the drain transaction reads, at the moment it would write `draining`.
struct DrainCheck {
  MachineState state = MachineState::kReady;
  int live_leases = 0;
  std::optional<TimeMs> last_busy_at;
  int runnable_queued = 0;  // in the machine's pool
};
// True when `drain` may still be applied: the machine is ready, holds no
// lease, has had no lease since the decision, and the pool has nothing queued.
// A budget drain (guard.at_cap) needs only the machine to be ready.
bool DrainAllowed(const Action& drain, const DrainCheck& seen);

// The health after one provider call that succeeded (ok) or failed at `now`.
ProviderHealth RecordProviderCall(const ProviderHealth& h, bool ok, TimeMs now,
                                  const AutoscalerOptions& options = {});

enum class BootOutcome { kUndecided, kSucceeded, kFailed };
// How machine `m`'s boot went, judged at `now`. Failed: it left (stopped_at
// set, or `ended`) before its worker registered, or its worker left within
// quick_exit of registering having run nothing. Succeeded: its worker has been
// registered for quick_exit, or has run something. Else undecided.
BootOutcome JudgeBoot(const Machine& m, TimeMs now, const AutoscalerOptions& options = {});

// The pool's boot health after one judged boot. A success clears it; a
// failure backs the next boot off and, at `failing_after`, marks it failing.
BootHealth RecordBoot(const BootHealth& h, bool ok, TimeMs now, const PoolConfig& pool,
                      const AutoscalerOptions& options = {});

// Billing of one machine, for Spend.
struct BilledMachine {
  TimeMs start = 0;
  std::optional<TimeMs> end;  // running: up to `now`
  double hourly_cost = 0;
};
// The cost of `machines` within [from, to): the overlap of each one's billed
// time with the window, a machine that started in the window billed at least
// min_bill_ms.
double SpendBetween(const std::vector<BilledMachine>& machines, TimeMs from, TimeMs to,
                    TimeMs min_bill_ms);
// Start of the UTC day and month that hold `now` (ms since the epoch).
TimeMs UtcDayStart(TimeMs now);
TimeMs UtcMonthStart(TimeMs now);

// When to call the pool's provider List() next, after a call at `now`:
// list_interval while something is changing (`active`: machines booting or
// stopping, demand changed, actions this pass), list_interval_idle otherwise,
// each scaled by a jitter in [0.8, 1.2) from `unit` in [0, 1) so that pools
// (and trainq installations) do not call in step. 0 = the next pass.
TimeMs NextListAt(TimeMs now, bool active, const PoolConfig& c, double unit);

}  // namespace trainq::cloud
