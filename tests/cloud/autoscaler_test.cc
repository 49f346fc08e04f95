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
      {"missed boot_timeout: stopped and replaced",
       Gpu(),
       1,
       {InState("m-1", MachineState::kBooting, 11 * kMin)},
       std::nullopt,
       "stop m-1, boot 1"},
      {"a Boot that never answered: forgotten and replaced",
       Gpu(),
       1,
       {Row(7, InState("", MachineState::kRequested, 11 * kMin))},
       std::nullopt,
       "forget #7, boot 1"},
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
