// Fleet: the thin loop around the pure autoscaler (cloud/autoscaler.h) that
// `trainq serve` runs every few seconds.
//
// One Step():
//   1. returns expired leases to the queue;
//   2. per pool, reads the machines and the runnable demand from the store and,
//      unless the pool's provider is backing off, the provider's List();
//   3. calls cloud::Autoscale() and applies its actions in order:
//        forget  -> Store::ForgetMachine (its leases back to the queue, no attempt used)
//        lost    -> Store::LoseMachine (`failed`, "lost: why"; its leases back
//                   to the queue, no attempt used), then Provider::Stop
//        ended   -> the provider lists it but reports it over (a pod whose
//                   image cannot be pulled: `failed`, a failed boot; one
//                   preempted or evicted: lost; a registered one whose worker
//                   exited: `stopped`), no attempt used, then Provider::Stop
//        stop    -> Provider::Stop, then the machine is `stopped`
//        adopt   -> the listed machine is recorded as `booting`
//        drain   -> Store::DrainMachine (the drain transaction: refused when a
//                   lease or a queued run appeared since the decision), and
//                   only when it committed, Provider::Stop
//        boot    -> a `requested` row first (so a crash leaves a trace), then
//                   the Provider::Boot call goes to the fleet's boot threads
//                   (below); the pass does not wait for it;
//   4. records each provider call's outcome in the pool's health (backoff,
//      `trainq status` reports a pool that keeps failing).
// Boots off the pass: at most FleetOptions::boot_threads Provider::Boot calls
// run at once (all pools together), in the order asked; the others wait in
// a queue (no longer than the pools' max machines). A later pass, on the
// loop thread, takes the finished ones first thing and records them (the
// rows of a pass's boots, and the answers, in one write transaction per 500):
// the provider's id (`booting`), or `failed` and the pool's health (backoff;
// successes are recorded first and one failure per pool and pass counts, so
// the backoff doubles per failed pass as when boots were synchronous), and
// then the pool's boots not yet started are called off (`stopped`, never
// booted), as one failed boot ended a pass's boots. The store is only
// written from the loop thread. A machine with its boot in flight is
// `requested` to the autoscaler (also when its worker registered before the
// answer was recorded): it counts live (no second boot for the same demand)
// and is forgotten ("boot never answered") past boot_timeout; a boot
// answering after that, or after StopAll gave up on it, is stopped at once. While a pool has boots
// not recorded, its listing leaves out the tagged machines the store does not know that bear one of
// their names (or no name): they are being booted, not orphans to adopt or stop. A crash with boots
// in flight leaves `requested` rows and tagged machines: a listed machine bearing such a row's name
// becomes that row's (RecordUnansweredBoots: the boot answered, the answer was never recorded; this
// is also what a replica taking over the duties finds), others are adopted or stopped by reconcile,
// as before. Provider::Stop stays on the loop thread. Around that, per pool: every machine is
// judged once (cloud::JudgeBoot): a machine that left before its worker registered, or whose worker
// left at once, is a failed boot; the boot health (back-off, `failing`) lives in the store's
// pool_state row, so `trainq pools reset` (another process) clears it and the next Step sees that.
// The spend of the UTC day and month (billed time x hourly_cost) is computed from the machine rows
// when a budget is set. List() is called at the pace of cloud::NextListAt, not every pass. A
// machine becomes `ready` when its worker registers (Server), and leaves the fleet when its worker
// exits: the provider no longer lists it.
//
// Which pool serves a run: the batch's `resources.pool` when set, else the
// first pool (config order) whose machines have at least the GPUs it needs.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "agent/triggers/server_config.h"
#include "cloud/autoscaler.h"
#include "cloud/provider.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/result.h"
#include "queue/machines.h"
#include "queue/store.h"

namespace trainq {

struct FleetOptions {
  std::string instance;     // this installation's id (tags every machine)
  std::string server_url;   // what workers on this host connect to (http://127.0.0.1:PORT)
  std::string trainq_path;  // the trainq binary workers run
  std::string data_dir;     // serve's data dir (tokens/, machines/)
  // What runs of local workers must not see besides their worker's own files
  // (the worker's --sandbox-hide): serve's database, config, `{file:}`
  // secrets and data dir.
  std::vector<std::string> sandbox_hide;
  cloud::AutoscalerOptions autoscaler;
  // A worker started by hand (no provider) that has not called for this long
  // is taken for gone: its machine is stopped in the store, its runs queued.
  // Idle workers call at least every lease poll (20 s).
  TimeMs manual_silence_ms = 3 * 60'000;
  // A pass this long after the previous one means serve answered nobody
  // meanwhile (stopped, stalled): the silence of provider machines (pool
  // lost_after) counts from that pass, not from their last call.
  TimeMs stall_ms = 30'000;
  cloud::OverallBudget budget;  // all pools together (server config `budget:`)
  std::uint32_t seed = 0;       // List() jitter; 0 = random
  // Provider::Boot calls at once, all pools together (threads of the fleet,
  // started as boots come).
  int boot_threads = 8;
  // How long StopAll and the fleet's destruction wait for boots in flight to
  // answer before giving up on them (a boot answering later is stopped).
  TimeMs boot_wait_ms = 30'000;
  std::size_t log_tail_bytes = 2000;
};

struct FleetPool {
  PoolSpec spec;
  std::unique_ptr<cloud::Provider> provider;
};

// The pool that serves a run needing `gpus` GPUs and naming `pool` ("" = any).
// nullptr when none can.
// A gang (nodes > 0) needs a pool whose max_machines is at least `nodes`.
const PoolSpec* PoolForDemand(const std::vector<FleetPool>& pools, const std::string& pool,
                              int gpus, int nodes = 0);
// Why runs of `pool` wait while a budget cap holds its boots back, from the
// autoscaler's cap text: "pool gpu at its per_day budget $50.00 reached
// ($50.12 spent)".
std::string BudgetNote(const std::string& pool, const std::string& cap);
// Why no pool serves batches of (pool, gpus): "no pool has 1 GPU (the most is 0)".
std::string UnservableReason(const std::vector<FleetPool>& pools, const std::string& pool,
                             int gpus, int nodes = 0);

class Fleet {
 public:
  Fleet(Store& store, const Clock& clock, std::vector<FleetPool> pools, FleetOptions options);
  // Calls off the boots not started, waits up to boot_wait_ms for those in
  // flight and records them; the boot threads are joined (each provider
  // call is bounded by the provider's own timeout).
  ~Fleet();
  Fleet(Fleet&&);

  // One pass. Provider failures are recorded, not returned; an Error means the
  // store failed.
  Status Step();
  // Machines of this fleet that are not stopped (requested .. stopping).
  Result<int> LiveMachines();
  // Stops every machine now. Default (serve --until-idle at exit): only
  // machines the drain transaction finds idle. local_only (serve stopped by a
  // signal): this host's worker processes, busy or not; their runs go back to
  // the queue without using an attempt.
  Status StopAll(bool local_only = false);

  // Waits (real time, up to wait_ms) until no boot is queued or in flight;
  // false when boots still were. The next Step records them. For tests and
  // measurements; Step never waits.
  bool AwaitBoots(TimeMs wait_ms);
  // AwaitBoots, then records the finished boots as the next Step would.
  Result<bool> SettleBoots(TimeMs wait_ms);
  // Boots asked for and not recorded yet (queued, in flight or finished).
  int BootsPending() const;

  const std::vector<FleetPool>& pools() const { return pools_; }
  const cloud::Decision& last_decision() const { return last_; }
  // Provider List() calls made by this fleet, per pool (for measurements).
  const std::map<std::string, int>& list_calls() const { return list_calls_; }
  // The argv that starts a worker for machine `name` of `pool`.
  std::vector<std::string> WorkerArgv(const PoolSpec& pool, const std::string& name) const;

 private:
  // Step's parts, in its order: gather, decide, apply.
  using ListedNames = std::map<std::string, std::map<std::string, std::string>>;  // pool -> id -> name
  struct Demand {
    std::map<std::string, int> runs;        // runnable runs per serving pool
    std::map<std::string, int> gang_nodes;  // the largest gang of each pool
    std::vector<Machines::WaitingNote> notes;  // why runs wait
    std::vector<std::pair<Machines::WaitingNote, std::string>> served;  // demand key -> its pool
  };
  Status ForgetSilentWorkers(const std::vector<MachineRow>& machines, TimeMs now);
  Result<std::map<std::string, Machines::PoolStateRow>> PoolStates(TimeMs now);
  Result<Demand> ReadDemand(TimeMs now);
  Result<std::vector<cloud::PoolInput>> Inputs(const std::vector<MachineRow>& machines,
                                       const std::map<std::string, Machines::PoolStateRow>& states,
                                       Demand& demand, TimeMs now, ListedNames& listed);
  Status NoteWaiting(Demand& demand, TimeMs now);
  void PaceListing(const std::vector<cloud::PoolInput>& inputs, TimeMs now);
  Status Apply(const cloud::Action& a, const ListedNames& listed);
  Status ApplyLost(FleetPool& pool, const cloud::Action& a, TimeMs now);

  Status Boot(FleetPool& pool, int count);
  // The boot threads (fleet_internal.h, fleet_boot.cc).
  class BootThreads;
  struct BootJob;
  // fleet_boot.cc: records the boots that finished (on the loop thread).
  Status HarvestBoots();
  // In the caller's write transaction; machines to stop (pool, id) into
  // `stop`, for after it. A boot the provider refused is left for
  // JudgeBoots to count as a failed boot.
  Status RecordBoot(BootJob& job, std::vector<std::pair<std::string, std::string>>& stop);
  // Calls off the pool's ("" = every pool's) boots not started yet: their
  // machines are `stopped`, never booted.
  Status CallOffBoots(const std::string& pool, const std::string& why);
  // The listing without the machines being booted (see above).
  void HideBooting(FleetPool& pool, const std::vector<MachineRow>& machines,
                   std::vector<cloud::ListedMachine>& listing) const;
  // Rows whose boot answered a process that stopped before recording it
  // get the listed machine of their name (fleet.cc).
  Status RecordUnansweredBoots(FleetPool& pool, const std::vector<MachineRow>& machines,
                               const std::vector<cloud::ListedMachine>& listing,
                               cloud::PoolInput& in);
  Status StopMachine(FleetPool& pool, std::int64_t row, const std::string& id);
  // Provider::Stop of `id`, its outcome into the pool's health; a failure is
  // logged ("stop of <what><id> failed: <error><then>") for a later pass to
  // try again. True when the provider stopped it.
  bool CallStop(FleetPool& pool, const std::string& id, std::string_view what,
                std::string_view then);
  // CallStop, unless the pool's provider is backing off (the machine stays
  // listed and a later pass stops it).
  void StopUnlessBackingOff(FleetPool& pool, const std::string& id, TimeMs now,
                            std::string_view what);
  void Record(const std::string& pool, bool ok, const std::string& error);
  // Judges machines whose boot outcome is pending; records failures and
  // successes in the pool's boot health.
  Status JudgeBoots(const std::vector<MachineRow>& live,
                    std::map<std::string, Machines::PoolStateRow>& states);
  Status RecordBootOutcome(const MachineRow& m, bool ok,
                           std::map<std::string, Machines::PoolStateRow>& states);
  // Spend per pool and overall, into `inputs`; writes the pool_state budget
  // columns when they change.
  Status ComputeSpend(std::vector<cloud::PoolInput>& inputs, cloud::OverallBudget& overall,
                      TimeMs now);
  void ReportBudget(const cloud::Decision& d, const std::vector<cloud::PoolInput>& inputs,
                    const cloud::OverallBudget& overall, TimeMs now);
  FleetPool* FindPool(const std::string& name);
  // What the provider's listing says beyond the ids (cloud::ListedMachine
  // note and ended; kubernetes).
  Status NoteListed(FleetPool& pool, const std::vector<MachineRow>& machines,
                    const std::vector<cloud::ListedMachine>& listing);
  Status EndMachine(FleetPool& pool, const cloud::Action& a);

  Store& store_;
  const Clock& clock_;
  std::vector<FleetPool> pools_;
  FleetOptions options_;
  std::map<std::string, cloud::ProviderHealth> health_;
  std::set<std::string> health_written_;  // pools whose health row this process wrote
  cloud::Decision last_;
  std::optional<std::vector<Machines::WaitingNote>> last_notes_;  // as last written
  // Boot outcomes: machines seen live and not judged yet; machines the fleet
  // stopped on purpose (idle, budget), which are no failed boots; why a
  // machine was stopped, for the message.
  std::set<std::int64_t> watched_;
  std::set<std::int64_t> judged_;
  std::set<std::int64_t> deliberate_;
  std::map<std::int64_t, std::string> stop_reason_;
  std::unique_ptr<BootThreads> boots_;
  // Machines whose boot was given up while it was in flight (forgotten past
  // boot_timeout, or StopAll): stopped when the boot answers.
  std::set<std::int64_t> given_up_;
  bool config_checked_ = false;
  // Provider machines' silence counts from heard_since_ at the earliest (see
  // FleetOptions::stall_ms).
  TimeMs heard_since_ = 0;
  TimeMs last_step_ms_ = 0;
  // List() pacing.
  std::map<std::string, TimeMs> next_list_at_;
  std::map<std::string, int> last_demand_;
  std::map<std::string, int> list_calls_;
  std::uint64_t rng_state_ = 0;
  double NextUnit();
  // Lines a pass would repeat while nothing changes (a drain called off, a
  // machine that holds work): at most one each per 10 s.
  LogLimiter repeats_{10'000};
  // Budget reporting: what was last written / logged per pool ("*" overall).
  std::map<std::string, std::string> cap_logged_;
  std::map<std::string, TimeMs> budget_written_at_;
};

// A digest of what a pool's boots depend on (provider, parameters, image,
// URL, token source...): a changed config forgets the pool's failed boots.
std::string PoolConfigHash(const PoolSpec& spec, const std::string& server_url);

// This installation's id: <data_dir>/instance-id, created (8 hex digits) on
// first use.
Result<std::string> InstanceId(const std::string& data_dir);

}  // namespace trainq
