#include "cloud/autoscaler.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cloud/provider.h"

namespace trainq::cloud {
namespace {

BootSpec SpecFor(const MachineTag& tag) {
  BootSpec s;
  s.tag = tag;
  return s;
}

constexpr TimeMs kNow = 1'000'000'000;
constexpr TimeMs kSec = 1000;
constexpr TimeMs kMin = 60 * kSec;

// gpu: 0..4 machines of 2 slots, idle_grace 2 min, boot_timeout 10 min.
PoolConfig Gpu(int min = 0, int max = 4) {
  PoolConfig c;
  c.name = "gpu";
  c.min = min;
  c.max = max;
  c.slots = 2;
  c.idle_grace_ms = 2 * kMin;
  c.boot_timeout_ms = 10 * kMin;
  return c;
}

Machine Ready(std::string id, int leases, TimeMs idle_for) {
  Machine m;
  m.id = std::move(id);
  m.state = MachineState::kReady;
  m.booted_at = kNow - 3600 * kSec;
  m.ready_at = kNow - 3500 * kSec;
  m.last_busy_at = kNow - idle_for;
  m.live_leases = leases;
  return m;
}

Machine InState(std::string id, MachineState s, TimeMs booted_ago) {
  Machine m;
  m.id = std::move(id);
  m.state = s;
  m.booted_at = kNow - booted_ago;
  return m;
}

// "boot 3, drain m-1": the actions in order, as a test reads them.
std::string Describe(const std::vector<Action>& actions) {
  std::string out;
  for (const Action& a : actions) {
    if (!out.empty()) out += ", ";
    out += std::string(ActionKindName(a.kind));
    if (a.kind == ActionKind::kBoot) {
      out += " " + std::to_string(a.count);
    } else {
      out += " " + (a.machine.empty() ? "#" + std::to_string(a.row) : a.machine);
    }
  }
  return out;
}

// Registered, its worker last heard from `ago` before now.
Machine Silent(Machine m, TimeMs ago, int leases = -1) {
  if (!m.ready_at) m.ready_at = m.booted_at;
  m.last_seen_at = kNow - ago;
  if (leases >= 0) m.live_leases = leases;
  return m;
}

PoolConfig Never(PoolConfig c) {
  c.lost_after_ms = 0;
  return c;
}

Machine Row(std::int64_t row, Machine m) {
  m.row = row;
  return m;
}

struct Case {
  std::string name;
  PoolConfig config;
  int demand;
  std::vector<Machine> machines;
  std::optional<std::vector<std::string>> listing;
  std::string expected;
};

std::vector<std::string> Ids(const std::vector<Machine>& ms) {
  std::vector<std::string> ids;
  for (const auto& m : ms) {
    if (!m.id.empty() && m.state != MachineState::kStopped) ids.push_back(m.id);
  }
  return ids;
}

TEST_CASE("Autoscale: boot, drain, stop and reconcile decisions") {
  const std::vector<Case> cases = {
      {"nothing queued, nothing running", Gpu(), 0, {}, std::nullopt, ""},
      {"5 queued runs on 2-slot machines: 3 machines", Gpu(), 5, {}, std::nullopt, "boot 3"},
      {"demand beyond max is clamped to max", Gpu(), 20, {}, std::nullopt, "boot 4"},
      {"min machines stay up with an empty queue", Gpu(1), 0, {}, std::nullopt, "boot 1"},
      {"live leases count as demand: 1 leased + 3 queued = 2 machines",
       Gpu(),
       3,
       {Ready("m-1", 1, 0)},
       std::nullopt,
       "boot 1"},
      {"a booting machine counts as capacity",
       Gpu(),
       2,
       {InState("m-1", MachineState::kBooting, 30 * kSec)},
       std::nullopt,
       ""},
      {"idle past grace with an empty queue: drained",
       Gpu(),
       0,
       {Ready("m-1", 0, 3 * kMin)},
       std::nullopt,
       "drain m-1"},
      {"idle, but not yet past grace: kept",
       Gpu(),
       0,
       {Ready("m-1", 0, 2 * kMin)},
       std::nullopt,
       ""},
      {"holds a lease: never drained", Gpu(), 0, {Ready("m-1", 1, 3 * kMin)}, std::nullopt, ""},
      {"race: a run is queued in the same tick the machine becomes idle",
       Gpu(),
       1,
       {Ready("m-1", 0, 0)},
       std::nullopt,
       ""},
      {"race: a run is queued in the tick the machine passes its grace",
       Gpu(),
       1,
       {Ready("m-1", 0, 3 * kMin)},
       std::nullopt,
       ""},
      {"never drained below min", Gpu(1), 0, {Ready("m-1", 0, 30 * kMin)}, std::nullopt, ""},
      {"two idle, min 1: the one idle longest goes",
       Gpu(1),
       0,
       {Ready("m-1", 0, 5 * kMin), Ready("m-2", 0, 9 * kMin)},
       std::nullopt,
       "drain m-2"},
      {"idle machines beside busy ones are drained",
       Gpu(),
       0,
       {Ready("m-1", 2, 0), Ready("m-2", 0, 4 * kMin)},
       std::nullopt,
       "drain m-2"},
      {"missed boot_timeout: lost, and not replaced in the same pass (a failed boot: the "
       "boot back-off decides when)",
       Gpu(),
       1,
       {InState("m-1", MachineState::kBooting, 11 * kMin)},
       std::nullopt,
       "lost m-1"},
      {"a ready machine silent past lost_after with runs waiting: lost and replaced",
       Gpu(),
       1,
       {Silent(Ready("m-1", 1, 0), 46 * kSec)},
       std::nullopt,
       "lost m-1, boot 1"},
      {"a ready machine silent for less than lost_after: kept",
       Gpu(),
       1,
       {Silent(Ready("m-1", 1, 0), 44 * kSec)},
       std::nullopt,
       ""},
      {"a silent idle machine with nothing queued: lost, and nothing booted",
       Gpu(),
       0,
       {Silent(Ready("m-1", 0, 0), 10 * kMin)},
       std::nullopt,
       "lost m-1"},
      {"lost_after 0: a silent machine is never lost",
       Never(Gpu()),
       1,
       {Silent(Ready("m-1", 1, 0), 10 * kMin)},
       std::nullopt,
       ""},
      {"a machine whose last call is unknown is never lost for silence",
       Gpu(),
       1,
       {Ready("m-1", 1, 0)},
       std::nullopt,
       ""},
      {"a draining machine still running runs that goes silent: lost, and its run (back in "
       "the queue) gets a machine",
       Gpu(),
       0,
       {Silent(InState("m-1", MachineState::kDraining, kMin), kMin, 1)},
       std::nullopt,
       "lost m-1, boot 1"},
      {"a silent machine missing from the listing: forgotten (the provider lost it), not lost",
       Gpu(),
       0,
       {Silent(Ready("m-1", 1, 0), kMin)},
       std::vector<std::string>{},
       "forget m-1, boot 1"},
      {"a Boot that never answered: forgotten, not replaced in the same pass",
       Gpu(),
       1,
       {Row(7, InState("", MachineState::kRequested, 11 * kMin))},
       std::nullopt,
       "forget #7"},
      {"draining (a crash between drain and stop): stopped",
       Gpu(),
       0,
       {InState("m-1", MachineState::kDraining, kMin)},
       std::nullopt,
       "stop m-1"},
      {"stopping (Stop failed last pass): stopped again",
       Gpu(),
       0,
       {InState("m-1", MachineState::kStopping, kMin)},
       std::nullopt,
       "stop m-1"},
      {"unknown tagged machine while runs wait: adopted, not booted twice",
       Gpu(),
       2,
       {},
       std::vector<std::string>{"m-9"},
       "adopt m-9"},
      {"unknown tagged machine, nothing wanted: stopped",
       Gpu(),
       0,
       {},
       std::vector<std::string>{"m-9"},
       "stop m-9"},
      {"vanished ready machine with a lease: forgotten and replaced",
       Gpu(),
       0,
       {Ready("m-1", 1, 0)},
       std::vector<std::string>{},
       "forget m-1, boot 1"},
      {"a young booting machine missing from the listing is not forgotten yet",
       Gpu(),
       1,
       {InState("m-1", MachineState::kBooting, 20 * kSec)},
       std::vector<std::string>{},
       ""},
      {"stopped in the store but still listed: stopped again",
       Gpu(),
       0,
       {InState("m-1", MachineState::kStopped, kMin)},
       std::vector<std::string>{"m-1"},
       "stop m-1"},
      {"no listing (List failed): nothing adopted or forgotten",
       Gpu(),
       0,
       {Ready("m-1", 1, 0)},
       std::nullopt,
       ""},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    PoolInput in;
    in.config = c.config;
    in.demand = c.demand;
    in.machines = c.machines;
    in.listing = c.listing;
    Decision d = Autoscale({in}, kNow);
    CHECK(Describe(d.actions) == c.expected);
    for (const Action& a : d.actions) CHECK(a.pool == "gpu");
  }
}

TEST_CASE("Autoscale: the listing is the store's own machines when nothing is out of step") {
  PoolInput in;
  in.config = Gpu();
  in.demand = 0;
  in.machines = {Ready("m-1", 2, 0), InState("m-2", MachineState::kBooting, kMin)};
  in.listing = Ids(in.machines);
  in.demand = 2;
  Decision d = Autoscale({in}, kNow);
  CHECK(Describe(d.actions) == "");
  REQUIRE(d.pools.size() == 1);
  CHECK(d.pools[0].needed == 2);
  CHECK(d.pools[0].wanted == 2);
  CHECK(d.pools[0].live == 2);
}

TEST_CASE("Autoscale: pools are decided independently") {
  PoolInput gpu;
  gpu.config = Gpu();
  gpu.demand = 3;
  PoolInput cpu;
  cpu.config = Gpu();
  cpu.config.name = "cpu";
  cpu.config.slots = 8;
  cpu.demand = 9;
  Decision d = Autoscale({gpu, cpu}, kNow);
  REQUIRE(d.actions.size() == 2);
  CHECK(d.actions[0].pool == "gpu");
  CHECK(d.actions[0].count == 2);
  CHECK(d.actions[1].pool == "cpu");
  CHECK(d.actions[1].count == 2);
}

TEST_CASE("Autoscale: a provider backing off gets no provider actions and is reported") {
  PoolInput in;
  in.config = Gpu();
  in.demand = 4;
  in.machines = {InState("m-1", MachineState::kDraining, kMin), Ready("m-2", 0, 10 * kMin)};
  in.health = {3, kNow + 1};
  Decision d = Autoscale({in}, kNow);
  CHECK(Describe(d.actions) == "");
  CHECK(d.pools[0].backing_off);
  CHECK(d.pools[0].failing);

  in.health = {2, kNow};  // the retry time has come; not failing long enough to report
  d = Autoscale({in}, kNow);
  CHECK(Describe(d.actions) == "stop m-1, boot 1");
  CHECK_FALSE(d.pools[0].backing_off);
  CHECK_FALSE(d.pools[0].failing);
}

TEST_CASE("DrainAllowed: the drain transaction rejects a decision that a lease overtook") {
  PoolInput in;
  in.config = Gpu();
  in.machines = {Row(3, Ready("m-1", 0, 5 * kMin))};
  Decision d = Autoscale({in}, kNow);
  REQUIRE(Describe(d.actions) == "drain m-1");
  const Action& drain = d.actions[0];
  CHECK(drain.row == 3);  // the transaction finds the machine by its row
  const DrainCheck unchanged{MachineState::kReady, 0, kNow - 5 * kMin, 0};

  struct Seen {
    std::string name;
    DrainCheck seen;
    bool allowed;
  };
  const std::vector<Seen> rows = {
      {"nothing happened since the decision", unchanged, true},
      {"race: a lease arrived while the drain was decided",
       {MachineState::kReady, 1, kNow, 0},
       false},
      {"a lease arrived; last_busy_at is written only when it ends",
       {MachineState::kReady, 1, kNow - 5 * kMin, 0},
       false},
      {"a lease came and went (its run failed fast)", {MachineState::kReady, 0, kNow, 0}, false},
      {"a run was queued", {MachineState::kReady, 0, kNow - 5 * kMin, 1}, false},
      {"another pass drained it already", {MachineState::kDraining, 0, kNow - 5 * kMin, 0}, false},
      {"it vanished and was forgotten", {MachineState::kStopped, 0, kNow - 5 * kMin, 0}, false},
  };
  for (const Seen& r : rows) {
    INFO(r.name);
    CHECK(DrainAllowed(drain, r.seen) == r.allowed);
  }
  Action boot{ActionKind::kBoot, "gpu", "", 0, 1, "", {}};
  CHECK_FALSE(DrainAllowed(boot, unchanged));
}

TEST_CASE("RecordProviderCall backs off exponentially up to the cap and resets on success") {
  AutoscalerOptions o;  // 5 s base, 5 min cap
  ProviderHealth h;
  std::vector<TimeMs> delays;
  for (int i = 0; i < 9; ++i) {
    h = RecordProviderCall(h, false, kNow, o);
    delays.push_back(h.next_retry_at - kNow);
  }
  CHECK(delays == std::vector<TimeMs>{5 * kSec, 10 * kSec, 20 * kSec, 40 * kSec, 80 * kSec,
                                      160 * kSec, 300 * kSec, 300 * kSec, 300 * kSec});
  CHECK(h.consecutive_failures == 9);
  h = RecordProviderCall(h, true, kNow, o);
  CHECK(h.consecutive_failures == 0);
  CHECK(h.next_retry_at == 0);
}

// A minimal version of the loop that will run the autoscaler: list, decide,
// apply through the provider, record each call's outcome.
struct Loop {
  FakeProvider provider;
  PoolInput in;
  int boot_calls = 0;

  void Pass(TimeMs now) {
    MachineTag tag{in.config.name, "test"};
    if (now >= in.health.next_retry_at) {
      auto listed = provider.List(tag);
      in.health = RecordProviderCall(in.health, listed.has_value(), now);
      in.listing.reset();
      if (listed) {
        in.listing.emplace();
        for (const auto& l : *listed) in.listing->push_back(l.id);
      }
    }
    Decision d = Autoscale({in}, now);
    for (const Action& a : d.actions) {
      if (a.kind == ActionKind::kBoot) {
        for (int i = 0; i < a.count; ++i) {
          ++boot_calls;
          auto id = provider.Boot(SpecFor(tag));
          in.health = RecordProviderCall(in.health, id.has_value(), now);
          if (!id) break;
          Machine m;
          m.id = *id;
          m.state = MachineState::kBooting;
          m.booted_at = now;
          in.machines.push_back(m);
        }
      } else if (a.kind == ActionKind::kAdopt) {
        Machine m;
        m.id = a.machine;
        m.state = MachineState::kBooting;
        m.booted_at = now;
        in.machines.push_back(m);
      }
    }
  }
};

TEST_CASE("A provider that keeps failing is retried with backoff, not hammered") {
  Loop loop;
  loop.in.config = Gpu();
  loop.in.demand = 4;
  loop.provider.FailNext(1000);
  for (TimeMs t = 0; t < 10 * kMin; t += kSec) loop.Pass(kNow + t);
  // One pass a second for 10 minutes: 600 passes, but calls only at
  // 0, 5, 15, 35, 75, 155, 315 s (then the 5 min cap): 7 Lists, no Boot.
  CHECK(loop.provider.calls().size() == 7);
  CHECK(loop.boot_calls == 0);
  CHECK(loop.in.health.consecutive_failures == 7);
  CHECK(Autoscale({loop.in}, kNow + 10 * kMin - kSec).pools[0].failing);

  // It recovers: the next allowed pass boots what is wanted.
  loop.provider.FailNext(0);
  loop.Pass(loop.in.health.next_retry_at);
  CHECK(loop.boot_calls == 2);
  CHECK(loop.provider.running().size() == 2);
  CHECK(loop.in.health.consecutive_failures == 0);
}

TEST_CASE("A crash between Boot and recording: the machine is adopted, not booted twice") {
  Loop loop;
  loop.in.config = Gpu();
  loop.in.demand = 2;  // one machine wanted
  loop.provider.AddOrphan(MachineTag{"gpu", "test"});
  loop.Pass(kNow);
  CHECK(loop.boot_calls == 0);
  REQUIRE(loop.in.machines.size() == 1);
  CHECK(loop.provider.running().size() == 1);
  loop.Pass(kNow + kSec);  // next pass: known now, nothing new
  CHECK(loop.boot_calls == 0);
  CHECK(loop.in.machines.size() == 1);
}

}  // namespace
}  // namespace trainq::cloud

namespace trainq::cloud {
namespace {

TEST_CASE("autoscaler: boot outcomes are judged: never registered, left at once, or worked") {
  AutoscalerOptions o;  // quick_exit 2 min
  Machine m = InState("m-1", MachineState::kBooting, 5 * kMin);
  CHECK(JudgeBoot(m, kNow, o) == BootOutcome::kUndecided);  // still booting
  m.state = MachineState::kStopped;
  m.stopped_at = kNow;
  CHECK(JudgeBoot(m, kNow, o) == BootOutcome::kFailed);  // left, never registered

  Machine r = InState("m-2", MachineState::kReady, 5 * kMin);
  r.ready_at = kNow - 30 * kSec;
  CHECK(JudgeBoot(r, kNow, o) == BootOutcome::kUndecided);  // registered 30 s ago
  Machine left = r;
  left.state = MachineState::kStopped;
  left.stopped_at = kNow;
  CHECK(JudgeBoot(left, kNow, o) == BootOutcome::kFailed);  // left 30 s after registering
  left.last_busy_at = kNow - 10 * kSec;
  CHECK(JudgeBoot(left, kNow, o) == BootOutcome::kSucceeded);  // but it ran something
  CHECK(JudgeBoot(r, kNow + 2 * kMin, o) == BootOutcome::kSucceeded);  // stayed 2 min
}

TEST_CASE("autoscaler: failed boots back off exponentially with a cap, one machine at a time, "
          "and after failing_after the pool boots nothing") {
  PoolConfig c = Gpu();
  c.failing_after = 3;
  c.boot_backoff_ms = kMin;
  AutoscalerOptions o;
  o.boot_backoff_cap_ms = 3 * kMin;

  BootHealth h;
  h = RecordBoot(h, false, kNow, c, o);
  CHECK(h.failed == 1);
  CHECK(h.next_boot_at == kNow + kMin);
  CHECK_FALSE(h.failing);

  PoolInput in;
  in.config = c;
  in.demand = 8;  // wants 4 machines
  in.listing = std::vector<std::string>{};
  in.boot = h;
  // Backing off: nothing booted, and the report says why.
  Decision d = Autoscale({in}, kNow + kMin - 1, o);
  CHECK(d.actions.empty());
  CHECK(d.pools[0].boot_backing_off);
  CHECK(d.pools[0].boots_held == 4);
  // After the back-off: one machine, not four.
  d = Autoscale({in}, kNow + kMin, o);
  CHECK(Describe(d.actions) == "boot 1");
  // While that one boots, no other.
  in.machines = {InState("m-1", MachineState::kBooting, 10 * kSec)};
  in.listing = std::vector<std::string>{"m-1"};
  CHECK(Autoscale({in}, kNow + kMin, o).actions.empty());

  h = RecordBoot(h, false, kNow, c, o);
  CHECK(h.next_boot_at == kNow + 2 * kMin);
  BootHealth capped = RecordBoot(RecordBoot(h, false, kNow, c, o), false, kNow, c, o);
  CHECK(capped.next_boot_at == kNow + 3 * kMin);  // 4 min and 8 min capped at 3
  h = RecordBoot(h, false, kNow, c, o);
  CHECK(h.failed == 3);
  CHECK(h.failing);
  in.machines.clear();
  in.listing = std::vector<std::string>{};
  in.boot = h;
  d = Autoscale({in}, kNow + 24 * 60 * kMin, o);  // a day later: still nothing
  CHECK(d.actions.empty());
  CHECK(d.pools[0].boot_failing);
  // A success clears it all.
  CHECK(RecordBoot(h, true, kNow, c, o).failed == 0);
  in.boot = RecordBoot(h, true, kNow, c, o);
  CHECK(Describe(Autoscale({in}, kNow, o).actions) == "boot 4");
}

TEST_CASE("autoscaler: spend is billed time x hourly cost within the UTC day and month, at "
          "least the minimum bill") {
  // 2026-11-24T05:00:00Z
  const TimeMs t = 1795496400000;
  CHECK(UtcDayStart(t) == 1795478400000);    // 2026-11-24T00:00:00Z
  CHECK(UtcMonthStart(t) == 1793491200000);  // 2026-11-01T00:00:00Z
  const TimeMs h = 3'600'000;
  std::vector<BilledMachine> ms = {
      {t - 2 * h, t - h, 2.0},                // 1 h today: $2
      {UtcDayStart(t) - h, UtcDayStart(t) + h, 2.0},  // 1 h yesterday, 1 h today
      {t - 10'000, std::nullopt, 3.6},        // running 10 s: billed the minimum (60 s)
  };
  CHECK(SpendBetween(ms, UtcDayStart(t), t, 60'000) == Approx(2 + 2 + 0.06));
  CHECK(SpendBetween(ms, UtcMonthStart(t), t, 60'000) == Approx(2 + 4 + 0.06));
}

TEST_CASE("autoscaler: a budget boots nothing whose minimum bill would pass the cap, drains at "
          "the cap when told to, and all pools share the overall cap") {
  PoolConfig c = Gpu();
  c.hourly_cost = 6.0;
  c.min_bill_ms = 10 * kMin;  // each boot costs at least $1
  c.budget_per_day = 10;
  PoolInput in;
  in.config = c;
  in.demand = 8;  // wants 4
  in.listing = std::vector<std::string>{};

  in.spend = {7.5, 7.5};  // room for two more $1 boots
  Decision d = Autoscale({in}, kNow);
  CHECK(Describe(d.actions) == "boot 2");
  CHECK(d.pools[0].boots_held == 2);
  CHECK_THAT(d.pools[0].cap, Catch::Contains("per_day budget $10.00"));

  in.spend = {9.5, 9.5};
  d = Autoscale({in}, kNow);
  CHECK(d.actions.empty());
  CHECK(d.pools[0].cap ==
        "per_day budget $10.00 would be passed ($9.50 spent, a boot costs at least $1.00)");

  // At the cap with drain_at_cap: the ready machines drain at once although
  // runs are queued (the busy one finishes its runs first), the booting one stops.
  in.spend = {10.2, 10.2};
  in.config.drain_at_cap = true;
  in.machines = {Ready("idle", 0, 5 * kSec), Ready("busy", 2, 0),
                 InState("new", MachineState::kBooting, 30 * kSec)};
  in.listing = std::vector<std::string>{"idle", "busy", "new"};
  d = Autoscale({in}, kNow);
  CHECK(Describe(d.actions) == "stop new, drain idle, drain busy");
  CHECK_THAT(d.pools[0].cap, Catch::StartsWith("per_day budget $10.00 reached ($10.20 spent)"));
  const Action& drain = d.actions[1];
  CHECK(drain.guard.at_cap);
  DrainCheck seen;
  seen.runnable_queued = 8;
  seen.last_busy_at = drain.guard.last_busy_at;
  CHECK(DrainAllowed(drain, seen));  // the queue does not call a budget drain off
  seen.live_leases = 2;
  CHECK(DrainAllowed(drain, seen));  // nor do its runs
  // Drained with runs on it: stopped only once they are done.
  Machine draining = InState("busy", MachineState::kDraining, kMin);
  draining.live_leases = 2;
  in.machines = {draining};
  in.listing = std::vector<std::string>{"busy"};
  CHECK(Autoscale({in}, kNow).actions.empty());
  draining.live_leases = 0;
  in.machines = {draining};
  CHECK(Describe(Autoscale({in}, kNow).actions) == "stop busy");
  in.machines = {Ready("idle", 0, 5 * kSec), Ready("busy", 2, 0),
                 InState("new", MachineState::kBooting, 30 * kSec)};
  in.listing = std::vector<std::string>{"idle", "busy", "new"};
  // Without drain_at_cap, machines are left alone; only boots stop.
  in.config.drain_at_cap = false;
  CHECK(Autoscale({in}, kNow).actions.empty());

  // The overall cap: the first pool's boots use the room the second would have.
  PoolInput a, b;
  a.config = Gpu();
  a.config.name = "a";
  a.config.hourly_cost = 6.0;
  a.config.min_bill_ms = 10 * kMin;
  a.demand = 4;  // 2 machines
  a.listing = std::vector<std::string>{};
  b = a;
  b.config.name = "b";
  OverallBudget all;
  all.per_month = 100;
  all.spend = {0, 97};
  d = Autoscale({a, b}, kNow, {}, all);
  REQUIRE(d.actions.size() == 2);
  CHECK((d.actions[0].pool == "a" && d.actions[0].count == 2));
  CHECK((d.actions[1].pool == "b" && d.actions[1].count == 1));
  CHECK_THAT(d.pools[1].cap, Catch::Contains("overall per_month budget $100.00"));
}

TEST_CASE("autoscaler: List() pacing: the active interval, longer when idle, with jitter") {
  PoolConfig c = Gpu();
  CHECK(NextListAt(kNow, false, c, 0.5) == kNow);  // 0: every pass (local pools)
  c.list_interval_ms = 15 * kSec;
  c.list_interval_idle_ms = 2 * kMin;
  CHECK(NextListAt(kNow, true, c, 0.0) == kNow + 12 * kSec);
  CHECK(NextListAt(kNow, true, c, 0.5) == kNow + 15 * kSec);
  CHECK(NextListAt(kNow, true, c, 0.999) < kNow + 18 * kSec);
  CHECK(NextListAt(kNow, false, c, 0.5) == kNow + 2 * kMin);
  CHECK(NextListAt(kNow, false, c, 0.0) == kNow + 96 * kSec);
}

}  // namespace
}  // namespace trainq::cloud

namespace trainq::cloud {
namespace {

TEST_CASE("autoscaler: a gang run boots enough machines for all its nodes at once") {
  PoolInput in;
  in.config = Gpu(0, 8);
  in.demand = 1;  // one gang run: one run, but 3 machines at once
  in.gang_nodes = 3;
  in.machines = {Ready("busy", 2, 0), Ready("idle", 0, 10 * kSec)};
  in.listing = std::vector<std::string>{"busy", "idle"};
  auto d = Autoscale({in}, kNow);
  REQUIRE(d.pools.size() == 1);
  // The busy machine does not count: 1 busy + 3 idle wanted, 2 live.
  CHECK(d.pools[0].needed == 4);
  CHECK(Describe(d.actions) == "boot 2");
  // A pool whose max is below the gang boots up to its max (serve reports the
  // gang unservable).
  in.config = Gpu(0, 2);
  d = Autoscale({in}, kNow);
  CHECK(d.pools[0].wanted == 2);
  CHECK(d.actions.empty());
}

}  // namespace
}  // namespace trainq::cloud
