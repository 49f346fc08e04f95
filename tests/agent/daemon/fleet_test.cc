// The fleet loop against a recording FakeProvider and a real store file.
#include "agent/daemon/fleet.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>

#include "cloud/provider.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/fake_ec2.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

struct FleetFixture {
  testing::TempDir tmp;
  FakeClock clock{1'000'000};
  Store store = Store::Open(testing::StoreLocation(tmp, "t.db")).value();
  cloud::FakeProvider* provider = nullptr;

  Fleet Make(std::function<void(PoolSpec&)> tweak = {}, FleetOptions o = {}) {
    auto p = std::make_unique<cloud::FakeProvider>();
    provider = p.get();
    return MakeWith(std::move(p), std::move(tweak), std::move(o));
  }

  Fleet MakeWith(std::unique_ptr<cloud::Provider> p, std::function<void(PoolSpec&)> tweak = {},
                 FleetOptions o = {}) {
    PoolSpec spec;
    spec.scaling.name = "gpu";
    spec.scaling.max = 2;
    spec.provider = "command";
    if (tweak) tweak(spec);
    std::vector<FleetPool> pools;
    pools.push_back({spec, std::move(p)});
    o.instance = "test";
    o.server_url = "http://127.0.0.1:1";
    o.trainq_path = "/usr/bin/trainq";
    o.data_dir = tmp / "data";
    return Fleet(store, clock, std::move(pools), o);
  }

  void Queue(int runs) {
    BatchSpec b;
    b.experiment = "mlp";
    b.command = "true";
    b.repeats = runs;
    CommitInfo c;
    c.sha = std::string(40, 'a');
    c.message = "m";
    REQUIRE(store.runs().Submit("/repos/demo", c, {b}, clock.Now()));
  }

  std::optional<Machines::PoolStateRow> State(const std::string& pool) {
    auto rows = store.machines().PoolStates();
    REQUIRE(rows);
    for (const auto& r : *rows) {
      if (r.pool == pool) return r;
    }
    return std::nullopt;
  }
};

// One pass, then until the boots it asked for have answered and are
// recorded (boots run off the pass, on the fleet's threads; the next pass
// would record them): what one pass did when boots were synchronous.
Status StepSettled(Fleet& fleet) {
  TRY(fleet.Step());
  ASSIGN_OR_RETURN(bool settled, fleet.SettleBoots(10'000));
  if (!settled) return Fail(ErrorKind::kTimeout, "boots still in flight after 10 s");
  return {};
}

// Steps `fleet` every `step` of fake time for `span`.
void Run(FleetFixture& f, Fleet& fleet, TimeMs span, TimeMs step = 1000) {
  for (TimeMs t = 0; t < span; t += step) {
    REQUIRE(StepSettled(fleet));
    f.clock.Advance(step);
  }
}

int Failures(Store& store, const std::string& pool) {
  auto rows = store.machines().PoolHealth();
  REQUIRE(rows);
  for (const auto& h : *rows) {
    if (h.pool == pool) return h.consecutive_failures;
  }
  return -1;
}

TEST_CASE("fleet: a provider failing is recorded, and a later serve that finds it working "
          "clears the record") {
  FleetFixture f;
  {
    Fleet fleet = f.Make();
    f.provider->FailNext(3);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(StepSettled(fleet));
      f.clock.Advance(10 * 60'000);  // past any backoff
    }
    CHECK(Failures(f.store, "gpu") == 3);
  }
  // A new serve process: its first listing works.
  Fleet again = f.Make();
  REQUIRE(StepSettled(again));
  CHECK(Failures(f.store, "gpu") == 0);
}

TEST_CASE("fleet: an empty queue boots nothing, queued demand without a pool that fits boots "
          "nothing either") {
  FleetFixture f;
  Fleet fleet = f.Make();
  REQUIRE(StepSettled(fleet));
  CHECK(f.provider->running().empty());
  CHECK(PoolForDemand(fleet.pools(), "", 0) != nullptr);
  CHECK(PoolForDemand(fleet.pools(), "", 1) == nullptr);     // needs a GPU; the pool has none
  CHECK(PoolForDemand(fleet.pools(), "other", 0) == nullptr);  // names a pool that is not there
  CHECK(PoolForDemand(fleet.pools(), "gpu", 0) != nullptr);
}

TEST_CASE("fleet: a booted worker is told its pool's dead-man switch before it ever registers",
          "[fleet]") {
  FleetFixture f;
  Fleet fleet = f.Make();
  PoolSpec spec;
  spec.scaling.name = "gpu";
  spec.scaling.slots = 2;
  spec.gpus = 1;
  spec.provider = "ec2";
  spec.orphan_timeout_ms = 90'000;
  spec.self_stop = "sudo shutdown -h now";
  auto argv = fleet.WorkerArgv(spec, "tq-test-gpu-1");
  auto after = [&](const std::string& flag) -> std::string {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == flag) return argv[i + 1];
    }
    return "(absent)";
  };
  CHECK(argv.at(0) == "/usr/bin/trainq");
  CHECK(argv.at(1) == "worker");
  CHECK(after("--server") == "http://127.0.0.1:1");
  CHECK(after("--machine") == "tq-test-gpu-1");
  CHECK(after("--slots") == "2");
  CHECK(after("--gpus") == "auto");
  CHECK(after("--orphan-timeout") == "90");
  CHECK(after("--self-stop") == "sudo shutdown -h now");
  CHECK(after("--data-dir") == "(absent)");  // a cloud machine keeps the worker's default
  CHECK(after("--fuse-max") == "(absent)");  // 1: the worker's default
  spec.self_stop.clear();
  spec.fuse_max = 10;
  argv = fleet.WorkerArgv(spec, "tq-test-gpu-2");
  CHECK(after("--self-stop") == "(absent)");
  CHECK(after("--fuse-max") == "10");
}

TEST_CASE("fleet: a hand-started worker that stops calling is taken for gone, one that calls stays",
          "[fleet]") {
  FleetFixture f;
  Fleet fleet = f.Make();
  Machines::WorkerRegistration r;
  r.pool = "gpu";
  r.hostname = "laptop";
  r.pid = 1;
  auto silent = f.store.machines().RegisterWorker(r, f.clock.Now());
  REQUIRE(silent);
  r.pid = 2;
  auto alive = f.store.machines().RegisterWorker(r, f.clock.Now());
  REQUIRE(alive);
  f.clock.Advance(2 * 60'000);
  REQUIRE(f.store.machines().TouchWorker(alive->id, f.clock.Now(), false));
  REQUIRE(StepSettled(fleet));
  CHECK(f.store.machines().Machine(silent->id).value()->state == "ready");  // 2 min: not yet
  f.clock.Advance(90'000);  // silent for 3m30s, alive for 1m30s
  REQUIRE(StepSettled(fleet));
  auto s = f.store.machines().Machine(silent->id).value();
  CHECK(s->state == "stopped");
  CHECK(s->last_error.find("silent for 3m30s") != std::string::npos);
  CHECK(f.store.machines().Machine(alive->id).value()->state == "ready");
  CHECK(f.provider->running().empty());  // no provider call for either
}

TEST_CASE("fleet: machines that never register back off, one at a time, and the pool ends "
          "failing with the reason and the machine's log, billed time is bounded",
          "[fleet]") {
  FleetFixture f;
  Fleet fleet = f.Make([](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.boot_timeout_ms = 10 * 60'000;  // the README's example
    p.scaling.hourly_cost = 1.0;
  });
  f.Queue(8);
  auto boots = [&] {
    int n = 0;
    for (const auto& c : f.provider->calls()) n += c.kind == cloud::FakeProvider::Call::Kind::kBoot;
    return n;
  };
  auto give_logs = [&] {
    for (const auto& id : f.provider->running()) {
      f.provider->SetLog(id, "cloud-init: ok\nworker: cannot reach http://127.0.0.1:8080\n");
    }
  };
  // Two hours at serve's pace (a pass a second); no machine ever registers.
  // Boot at 0, stopped at 10 min; back-off 1 min, boot, stopped; back-off
  // 2 min, boot, stopped: failing after 3, 33 minutes in.
  for (int i = 0; i < 2 * 3600; ++i) {
    REQUIRE(StepSettled(fleet));
    give_logs();
    f.clock.Advance(1000);
  }
  auto state = f.State("gpu");
  REQUIRE(state);
  CHECK(state->failing);
  CHECK(state->failed_boots == 3);
  CHECK_THAT(state->boot_error, Catch::Contains("no worker registered within boot_timeout (10m00s)"));
  CHECK_THAT(state->log_tail, Catch::Contains("worker: cannot reach http://127.0.0.1:8080"));
  CHECK(boots() == 3);
  auto costs = f.store.machines().Costs(f.clock.Now(), false);
  REQUIRE(costs);
  REQUIRE(costs->size() == 1);
  // 3 x 10 min of machine time, and nothing after (before: 12 boots, 2 h).
  CHECK(costs->front().billed_ms <= 31 * 60'000);
  CHECK(f.provider->running().empty());
  TimeMs billed = costs->front().billed_ms;
  Run(f, fleet, 3'600'000, 10'000);
  CHECK(f.store.machines().Costs(f.clock.Now(), false)->front().billed_ms == billed);
  CHECK(boots() == 3);

  // `trainq pools reset` (the store's side): the pool boots again.
  REQUIRE(f.store.machines().ResetPoolBoots("gpu", f.clock.Now()).value());
  REQUIRE(StepSettled(fleet));
  CHECK(f.provider->running().size() == 1);
  Run(f, fleet, 11 * 60'000);  // that one fails too
  CHECK(f.State("gpu")->failed_boots == 1);
  CHECK_FALSE(f.State("gpu")->failing);
  Run(f, fleet, 2 * 60'000);  // after the back-off, the next boot
  REQUIRE(f.provider->running().size() == 1);
  // Its worker registers and stays: the failures are forgotten.
  auto live = f.store.machines().List(false);
  REQUIRE(live);
  REQUIRE(live->size() == 1);
  Machines::WorkerRegistration r;
  r.pool = "gpu";
  r.name = live->front().name;
  r.hostname = "gpu-host";
  auto registered = f.store.machines().RegisterWorker(r, f.clock.Now());
  REQUIRE(registered);
  for (int i = 0; i < 18; ++i) {  // 3 minutes, calling as an idle worker does
    REQUIRE(f.store.machines().TouchWorker(registered->id, f.clock.Now(), false));
    Run(f, fleet, 10'000);
  }
  CHECK(f.State("gpu")->failed_boots == 0);
  CHECK(f.store.machines().Machine(registered->id).value()->state == "ready");
}

TEST_CASE("fleet: a changed pool config forgets its failed boots", "[fleet]") {
  FleetFixture f;
  Machines::PoolStateRow row;
  row.pool = "gpu";
  row.failed_boots = 3;
  row.failing = true;
  row.config_hash = "an older config";
  REQUIRE(f.store.machines().SetPoolBoots(row, f.clock.Now()));
  f.Queue(1);
  Fleet fleet = f.Make();
  REQUIRE(StepSettled(fleet));
  CHECK_FALSE(f.State("gpu")->failing);
  CHECK(f.provider->running().size() == 1);
}

TEST_CASE("fleet: a budget boots nothing past the cap and drains at it when told to", "[fleet]") {
  FleetFixture f;
  FleetOptions o;
  Fleet fleet = f.Make(
      [](PoolSpec& p) {
        p.scaling.max = 2;
        p.scaling.hourly_cost = 6.0;
        p.scaling.min_bill_ms = 10 * 60'000;  // a boot costs at least $1
        p.scaling.budget_per_day = 2.5;
        p.scaling.drain_at_cap = true;
        p.scaling.lost_after_ms = 0;  // the workers below register, then never call
      },
      o);
  f.Queue(4);
  REQUIRE(StepSettled(fleet));
  CHECK(f.provider->running().size() == 2);  // $2 of minimum bills: within $2.50
  auto st = f.State("gpu");
  REQUIRE(st);
  CHECK(st->cap.empty());
  // Both register and work; at $6/h each, the $2.50 is spent after 12.5 min.
  auto live = f.store.machines().List(false);
  REQUIRE(live);
  for (const auto& m : *live) {
    Machines::WorkerRegistration r;
    r.pool = "gpu";
    r.name = m.name;
    r.hostname = m.name;
    REQUIRE(f.store.machines().RegisterWorker(r, f.clock.Now()));
  }
  Run(f, fleet, 13 * 60'000, 5000);
  st = f.State("gpu");
  CHECK_THAT(st->cap, Catch::StartsWith("per_day budget $2.50 reached"));
  CHECK(st->spent_day >= 2.5);
  // drain_at_cap: the idle machines were drained although runs are queued.
  CHECK(f.provider->running().empty());
  CHECK(f.store.machines().List(false)->empty());
  const double spent = st->spent_day;
  Run(f, fleet, 60 * 60'000, 10'000);
  CHECK(f.provider->running().empty());  // nothing more today
  // Stopped growing: an hour more of two machines would be $12.
  CHECK(f.State("gpu")->spent_day == Approx(spent).margin(0.05));
}

TEST_CASE("fleet: provider List() calls per hour, idle and booting, before and after pacing",
          "[fleet]") {
  auto calls_per_hour = [](bool booting, TimeMs interval, TimeMs idle_interval) {
    FleetFixture f;
    FleetOptions o;
    o.seed = 42;
    Fleet fleet = f.Make(
        [&](PoolSpec& p) {
          p.scaling.boot_timeout_ms = 2 * 3'600'000;  // booting all hour long
          p.scaling.list_interval_ms = interval;
          p.scaling.list_interval_idle_ms = idle_interval;
        },
        o);
    if (booting) f.Queue(1);
    Run(f, fleet, 3'600'000);  // serve's pace: a pass a second
    auto it = fleet.list_calls().find("gpu");
    return it == fleet.list_calls().end() ? 0 : it->second;
  };
  // Before: every pass lists.
  const int idle_before = calls_per_hour(false, 0, 0);
  const int booting_before = calls_per_hour(true, 0, 0);
  CHECK(idle_before == 3600);
  CHECK(booting_before == 3600);
  // After, with the ec2/command defaults (15 s while changing, 2 min idle, +-20%).
  const int idle_after = calls_per_hour(false, 15'000, 120'000);
  const int booting_after = calls_per_hour(true, 15'000, 120'000);
  CHECK(idle_after <= 40);
  CHECK(idle_after >= 25);
  CHECK(booting_after <= 300);
  CHECK(booting_after >= 200);
}

TEST_CASE("fleet over the EC2 API: instances that never register are lost and terminated, back "
          "off, the pool ends failing with their console output, DescribeInstances is paced, "
          "billed time bounded",
          "[fleet][ec2][lost]") {
  // The real Fleet and the real EC2 provider against a loopback fake of EC2's
  // API (its XML, SigV4 checked), two hours at serve's pace on a fake clock.
  testing::FakeEc2 ec2;
  ec2.console_output =
      "[   12.3] cloud-init[812]: running user data\n"
      "trainq worker: cannot reach http://10.0.0.1:8080/api/v1/workers/register: "
      "connection timed out\n";
  FleetFixture f;
  REQUIRE(WriteFile(f.tmp / "credentials",
                    "[trainq]\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = "
                    "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY\n"));
  CurlHttpClient http;
  PoolSpec spec;
  spec.scaling.name = "gpu";
  spec.scaling.max = 2;
  spec.scaling.slots = 1;
  spec.scaling.boot_timeout_ms = 10 * 60'000;
  spec.scaling.hourly_cost = 1.0;
  spec.scaling.list_interval_ms = 15'000;  // the ec2 defaults
  spec.scaling.list_interval_idle_ms = 120'000;
  spec.provider = "ec2";
  spec.token.value = "tq-secret-token-123";
  spec.params = {{"region", "us-east-1"},           {"image", "ami-0abcdef1234567890"},
                 {"instance_type", "g5.xlarge"},    {"endpoint", ec2.url()},
                 {"credentials_file", f.tmp / "credentials"}, {"profile", "trainq"}};
  // The provider signs with the real time (the fake checks the skew); the
  // fleet runs on the fake clock.
  auto provider = cloud::MakeProvider(
      "ec2", spec.params, cloud::ProviderDeps{nullptr, &http, &SystemClock::Get(), f.tmp / "p"});
  REQUIRE(provider);
  std::vector<FleetPool> pools;
  pools.push_back({spec, std::move(*provider)});
  FleetOptions o;
  o.instance = "tq1";
  o.server_url = "http://10.0.0.1:8080";
  o.trainq_path = "/usr/bin/trainq";
  o.data_dir = f.tmp / "data";
  o.seed = 7;
  Fleet fleet(f.store, f.clock, std::move(pools), o);
  f.Queue(4);  // runs wait all along

  const TimeMs t0 = f.clock.Now();
  Run(f, fleet, 2 * 3'600'000);
  INFO(ec2.last_rejection());
  auto state = f.State("gpu");
  REQUIRE(state);
  CHECK(state->failing);
  CHECK(state->failed_boots >= 3);
  CHECK_THAT(state->boot_error,
             Catch::Contains("no worker registered within boot_timeout (10m00s)"));
  CHECK_THAT(state->log_tail, Catch::Contains("trainq worker: cannot reach http://10.0.0.1:8080"));
  auto actions = ec2.actions();
  const auto boots = std::count(actions.begin(), actions.end(), "RunInstances");
  // Two at first (max 2), both fail at 10 min; then one at a time after the
  // back-off: failing after the third. Without the back-off: a new pair every
  // 10 min, 24 boots in 2 h.
  CHECK(boots == 3);
  CHECK(std::count(actions.begin(), actions.end(), "TerminateInstances") == boots);
  CHECK(std::count(actions.begin(), actions.end(), "GetConsoleOutput") == boots);
  for (const auto& i : ec2.instances()) CHECK(i.state == "shutting-down");
  // Each is marked lost, by the instance the provider booted; the runs were
  // never leased: still queued, no attempt used.
  auto machines = f.store.machines().List(true);
  REQUIRE(machines);
  REQUIRE(machines->size() == static_cast<std::size_t>(boots));
  for (const auto& m : *machines) {
    CHECK(m.lost());
    CHECK_THAT(m.last_error,
               Catch::Contains("lost: no worker registered within boot_timeout (10m00s)"));
  }
  auto lost = f.store.machines().LostMachines(0);
  REQUIRE(lost);
  CHECK(lost->size() == static_cast<std::size_t>(boots));
  auto runs = f.store.runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  for (const auto& r : *runs) {
    CHECK(r.state == RunState::kQueued);
    CHECK(r.attempts == 0);
  }
  auto costs = f.store.machines().Costs(f.clock.Now(), false);
  REQUIRE(costs);
  REQUIRE(costs->size() == 1);
  CHECK(costs->front().billed_ms <= 3 * 10 * 60'000 + 3 * 2000);
  // Paced: 15 s while booting, 2 min once nothing changes (unpaced: 7200, one a pass).
  const auto describes = std::count(actions.begin(), actions.end(), "DescribeInstances");
  CHECK(describes < 200);
  CHECK(fleet.list_calls().at("gpu") == describes);
  CHECK(f.clock.Now() - t0 == 2 * 3'600'000);
}

// A machine of the fixture's pool that registered (by the name the fleet gave
// it) and leased one run.
struct Registered {
  MachineRow machine;
  LeasedRun run;
};
Registered RegisterAndLease(FleetFixture& f, TimeMs lease_ms) {
  auto live = f.store.machines().List(false);
  REQUIRE(live);
  REQUIRE(live->size() == 1);
  Machines::WorkerRegistration r;
  r.pool = "gpu";
  r.name = live->front().name;
  r.hostname = "gpu-host";
  auto m = f.store.machines().RegisterWorker(r, f.clock.Now());
  REQUIRE(m);
  auto leased = f.store.machines().LeaseForMachine(m->id, {}, f.clock.Now(), lease_ms);
  REQUIRE(leased);
  REQUIRE(leased->size() == 1);
  return {*m, leased->front()};
}

TEST_CASE("fleet: a machine whose worker goes silent is lost, stopped through its provider, "
          "its run back in the queue with no attempt used, and replaced",
          "[fleet][lost]") {
  FleetFixture f;
  Fleet fleet = f.Make([](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.lost_after_ms = 45'000;
  });
  f.Queue(2);
  REQUIRE(StepSettled(fleet));
  REQUIRE(f.provider->running().size() == 1);
  const std::string first = f.provider->running().front();
  // The lease (20 s) expires before the machine is taken for lost (45 s):
  // the expiry charges an attempt, the loss gives it back.
  auto [machine, run] = RegisterAndLease(f, 20'000);
  Run(f, fleet, 30'000);
  CHECK(f.store.runs().Run(run.run_id).value()->state == RunState::kFailed);
  CHECK(f.store.machines().Machine(machine.id).value()->state == "ready");  // 30 s: not yet
  Run(f, fleet, 17'000);
  auto m = f.store.machines().Machine(machine.id).value();
  CHECK(m->state == "failed");
  CHECK(m->lost());
  CHECK_THAT(m->last_error, Catch::Contains("lost: worker silent for 4"));
  auto r = f.store.runs().Run(run.run_id).value();
  CHECK(r->state == RunState::kQueued);
  CHECK(r->attempts == 0);
  CHECK_THAT(r->last_error, Catch::Contains("machine lost: worker silent"));
  // Stopped through the provider, and a new machine booted for the queue.
  bool stopped = false;
  for (const auto& c : f.provider->calls()) {
    stopped = stopped || (c.kind == cloud::FakeProvider::Call::Kind::kStop && c.arg == first);
  }
  CHECK(stopped);
  REQUIRE(f.provider->running().size() == 1);
  CHECK(f.provider->running().front() != first);
  auto lost = f.store.machines().LostMachines(0);
  REQUIRE(lost);
  REQUIRE(lost->size() == 1);
  CHECK(lost->front().id == machine.id);
  // A late success from the lost machine's worker (it came back) still counts,
  // since nobody leased the run again.
  REQUIRE(f.store.runs().Complete(run.run_id, run.token, f.clock.Now(), 0.9));
  CHECK(f.store.runs().Run(run.run_id).value()->state == RunState::kSucceeded);
}

TEST_CASE("fleet: a worker that keeps calling is never lost, and silence while serve was stalled "
          "does not count",
          "[fleet][lost]") {
  FleetFixture f;
  Fleet fleet = f.Make([](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.lost_after_ms = 45'000;
    // Once the stall has let its lease expire the machine is idle: not drained
    // meanwhile, so that only its silence can end it.
    p.scaling.idle_grace_ms = 3'600'000;
  });
  f.Queue(1);
  REQUIRE(StepSettled(fleet));
  auto [machine, run] = RegisterAndLease(f, 60'000);
  for (int i = 0; i < 20; ++i) {  // 200 s, a heartbeat every 10 s
    REQUIRE(f.store.runs().Heartbeat(run.run_id, run.token, f.clock.Now(), 60'000));
    REQUIRE(f.store.machines().TouchWorker(machine.id, f.clock.Now(), true));
    Run(f, fleet, 10'000);
  }
  CHECK(f.store.machines().Machine(machine.id).value()->state == "ready");
  // serve stalls for 10 minutes (no pass, no request answered) ...
  f.clock.Advance(600'000);
  Run(f, fleet, 40'000);
  // ... so the worker's silence counts from serve's return, not from its last call.
  CHECK(f.store.machines().Machine(machine.id).value()->state == "ready");
  Run(f, fleet, 10'000);
  CHECK(f.store.machines().Machine(machine.id).value()->lost());
}

TEST_CASE("fleet: a run that has lost max_attempts machines is charged for the next one",
          "[fleet][lost]") {
  FleetFixture f;
  Fleet fleet = f.Make([](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.lost_after_ms = 45'000;
  });
  BatchSpec b;
  b.experiment = "crashes-its-host";
  b.command = "true";
  b.repeats = 1;
  b.max_attempts = 2;
  CommitInfo c;
  c.sha = std::string(40, 'b');
  c.message = "m";
  REQUIRE(f.store.runs().Submit("/repos/demo", c, {b}, f.clock.Now()));
  std::int64_t run_id = 0;
  for (int round = 1; round <= 4; ++round) {
    INFO("machine " << round);
    // Past any boot back-off, until the replacement is up.
    for (int i = 0; i < 600 && f.provider->running().empty(); ++i) Run(f, fleet, 1000);
    auto [machine, run] = RegisterAndLease(f, 600'000);
    run_id = run.run_id;
    Run(f, fleet, 47'000);  // the last pass 46 s after the worker's last call: past lost_after
    REQUIRE(f.store.machines().Machine(machine.id).value()->lost());
    auto r = f.store.runs().Run(run_id).value();
    if (round <= 2) {
      CHECK(r->state == RunState::kQueued);
      CHECK(r->attempts == 0);
    } else if (round == 3) {
      CHECK(r->state == RunState::kFailed);
      CHECK(r->attempts == 1);
      CHECK_THAT(r->last_error, Catch::Contains("has now lost 3 machines: this attempt counts"));
      f.clock.Advance(60'000);  // past the retry back-off
    } else {
      CHECK(r->state == RunState::kDead);
      CHECK(r->attempts == 2);
    }
  }
}

// A provider whose Boot creates the machine (it is listed from then on, as
// an EC2 instance is once RunInstances ran) and then blocks until the test
// lets it answer: a cloud API that takes its time. Over the recording
// FakeProvider.
class GatedProvider final : public cloud::Provider {
 public:
  Result<std::string> Boot(const cloud::BootSpec& spec) override {
    auto id = inner.Boot(spec);
    std::unique_lock lock(mu_);
    ++entered_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return permits_ > 0; });
    --permits_;
    if (fail_) {
      lock.unlock();
      if (id) (void)inner.Stop(*id);
      return Fail(ErrorKind::kUnavailable, "gated: no capacity in the region");
    }
    return id;
  }
  Result<std::vector<cloud::ListedMachine>> List(const cloud::MachineTag& tag) override {
    return inner.List(tag);
  }
  Status Stop(const std::string& id) override { return inner.Stop(id); }

  // Lets `n` boots answer: failing ones when `fail`.
  void Let(int n, bool fail = false) {
    std::lock_guard lock(mu_);
    permits_ += n;
    fail_ = fail;
    changed_.notify_all();
  }
  // Until `n` boots have been called, for at most 10 s.
  bool WaitEntered(int n) {
    std::unique_lock lock(mu_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] { return entered_ >= n; });
  }
  int entered() {
    std::lock_guard lock(mu_);
    return entered_;
  }

  cloud::FakeProvider inner;

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int entered_ = 0;
  int permits_ = 0;
  bool fail_ = false;
};

// fleet.Step() on another thread: true when it returned within 10 s (the
// gate is opened otherwise, so that the pass can end).
bool StepReturns(Fleet& fleet, GatedProvider& gate) {
  auto pass = std::async(std::launch::async, [&] { return fleet.Step(); });
  if (pass.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    gate.Let(1000);
    pass.wait();
    return false;
  }
  auto st = pass.get();
  if (!st) FAIL_CHECK("Step: " << st.error().message);
  return st.has_value();
}

std::vector<MachineRow> Machines(Store& store) {
  auto rows = store.machines().List(true);
  REQUIRE(rows);
  return *rows;
}

TEST_CASE("fleet: a boot that blocks in the provider does not hold up the pass: its machine is "
          "requested meanwhile, booted once, and a later pass records the provider's id",
          "[fleet][boots]") {
  FleetFixture f;
  auto owned = std::make_unique<GatedProvider>();
  GatedProvider& gate = *owned;
  Fleet fleet = f.MakeWith(std::move(owned), [](PoolSpec& p) { p.scaling.max = 1; });
  f.Queue(3);  // one machine's worth: max 1

  REQUIRE(StepReturns(fleet, gate));
  REQUIRE(gate.WaitEntered(1));  // the boot is in the provider, blocked
  auto rows = Machines(f.store);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].state == "requested");
  CHECK(rows[0].provider_id.empty());
  const std::string name = rows[0].name;

  // Passes go on while the boot is blocked: the machine counts for the
  // demand (no second boot), and the provider's listing of it (unknown to
  // the store yet) is neither adopted nor stopped.
  for (int i = 0; i < 5; ++i) {
    f.clock.Advance(1000);
    REQUIRE(StepReturns(fleet, gate));
  }
  CHECK(fleet.list_calls().at("gpu") >= 5);
  CHECK(gate.entered() == 1);
  CHECK(fleet.BootsPending() == 1);
  rows = Machines(f.store);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].state == "requested");
  CHECK(gate.inner.running().size() == 1);
  CHECK(gate.inner.stopped().empty());

  // It answers; the next pass records it.
  gate.Let(1);
  REQUIRE(fleet.AwaitBoots(10'000));
  CHECK(Machines(f.store)[0].state == "requested");  // not before a pass
  f.clock.Advance(1000);
  REQUIRE(StepReturns(fleet, gate));
  rows = Machines(f.store);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].state == "booting");
  CHECK(rows[0].name == name);
  CHECK(rows[0].provider_id == gate.inner.running().at(0));
  CHECK(fleet.BootsPending() == 0);
  CHECK(gate.entered() == 1);
  CHECK(Failures(f.store, "gpu") == 0);
}

TEST_CASE("fleet: a boot that fails in the provider is recorded by a later pass, and the pool "
          "backs off before it boots again",
          "[fleet][boots]") {
  FleetFixture f;
  auto owned = std::make_unique<GatedProvider>();
  GatedProvider& gate = *owned;
  Fleet fleet = f.MakeWith(std::move(owned), [](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.boot_backoff_ms = 5'000;
  });
  f.Queue(1);

  REQUIRE(StepReturns(fleet, gate));
  REQUIRE(gate.WaitEntered(1));
  gate.Let(1, /*fail=*/true);
  REQUIRE(fleet.AwaitBoots(10'000));
  f.clock.Advance(1000);
  REQUIRE(StepReturns(fleet, gate));
  auto rows = Machines(f.store);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].state == "failed");
  CHECK_THAT(rows[0].last_error, Catch::Contains("boot: gated: no capacity in the region"));
  // A provider refusing a boot is a failed boot (issue 38.10), as a machine
  // that never registers: the pool's boot record, not the provider's health
  // (which its next working List cleared, so it never passed 1).
  auto state = f.State("gpu");
  REQUIRE(state);
  CHECK(state->failed_boots == 1);
  CHECK_FALSE(state->failing);
  CHECK_THAT(state->boot_error, Catch::Contains("gated: no capacity in the region"));

  // Within the backoff (boot_backoff, 5 s, after one failure): no boot.
  for (int i = 0; i < 3; ++i) {
    f.clock.Advance(1000);
    REQUIRE(StepReturns(fleet, gate));
  }
  CHECK(fleet.BootsPending() == 0);
  CHECK(gate.entered() == 1);
  CHECK(Machines(f.store).size() == 1);

  // After it: the next boot, which works and clears the record.
  f.clock.Advance(5000);
  REQUIRE(StepReturns(fleet, gate));
  REQUIRE(gate.WaitEntered(2));
  gate.Let(1);
  REQUIRE(fleet.AwaitBoots(10'000));
  REQUIRE(StepReturns(fleet, gate));
  rows = Machines(f.store);
  REQUIRE(rows.size() == 2);
  CHECK(rows[1].state == "booting");
  CHECK(Failures(f.store, "gpu") == 0);
}

// Issue 38.10: a `command` pool whose boot command always fails booted every
// 5-10 s for as long as serve ran, its failures counted as the provider's
// health, which the next working `list` cleared: never past 1, never failing.
TEST_CASE("fleet: a command pool whose boot command always fails backs off longer each time and "
          "turns failing after failing_after, like every provider",
          "[fleet][boots]") {
  for (int failing_after : {2, 4}) {
    CAPTURE(failing_after);
    FleetFixture f;
    PosixProcessRunner runner;
    const std::string boots_file = f.tmp / ("boots-" + std::to_string(failing_after));
    cloud::ProviderDeps deps;
    deps.runner = &runner;
    deps.clock = &f.clock;
    deps.state_dir = f.tmp / "providers";
    auto provider = cloud::MakeProvider(
        "command",
        {{"boot", "echo {name} >> " + ShellQuote(boots_file) + "; false"},
         {"list", "true"},
         {"stop", "true"}},
        deps);
    REQUIRE(provider);
    Fleet fleet = f.MakeWith(std::move(*provider), [&](PoolSpec& p) {
      p.provider = "command";
      p.scaling.max = 1;
      p.scaling.failing_after = failing_after;
      p.scaling.boot_backoff_ms = 1'000;
    });
    f.Queue(1);
    auto boots = [&] {
      auto text = ReadFile(boots_file);
      return text ? static_cast<int>(Split(Trim(*text), '\n').size()) : 0;
    };
    // A minute at serve's pace (a pass a second): the passes each boot began at.
    std::vector<int> boot_passes;
    for (int pass = 0; pass < 60; ++pass) {
      const int before = boots();
      REQUIRE(StepSettled(fleet));
      if (boots() > before) boot_passes.push_back(pass);
      f.clock.Advance(1000);
    }
    auto state = f.State("gpu");
    REQUIRE(state);
    CHECK(state->failing);
    CHECK(state->failed_boots == failing_after);
    CHECK_THAT(state->boot_error, Catch::Contains("command failed (exit code 1)"));
    // One boot per failure counted, and nothing after the pool turned failing.
    REQUIRE(static_cast<int>(boot_passes.size()) == failing_after);
    // The back-off doubles from boot_backoff (1 s, 2 s, 4 s): the gaps grow.
    for (std::size_t i = 2; i < boot_passes.size(); ++i) {
      CHECK(boot_passes[i] - boot_passes[i - 1] > boot_passes[i - 1] - boot_passes[i - 2]);
    }
    if (failing_after == 4) CHECK(boot_passes == std::vector<int>{0, 2, 5, 10});
  }
}

TEST_CASE("fleet: boots not started when one fails are called off, and a boot still in flight when "
          "serve stops is waited for and its machine stopped",
          "[fleet][boots]") {
  FleetFixture f;
  auto owned = std::make_unique<GatedProvider>();
  GatedProvider& gate = *owned;
  FleetOptions o;
  o.boot_threads = 1;  // one boot at a time: the others wait in the queue
  Fleet fleet = f.MakeWith(std::move(owned), [](PoolSpec& p) { p.scaling.max = 3; }, o);
  f.Queue(3);

  REQUIRE(StepReturns(fleet, gate));
  REQUIRE(gate.WaitEntered(1));
  CHECK(Machines(f.store).size() == 3);  // three rows, one boot in the provider
  gate.Let(1, /*fail=*/true);
  REQUIRE(gate.WaitEntered(2));  // the thread took the second boot
  f.clock.Advance(1000);
  REQUIRE(StepReturns(fleet, gate));  // records the failure: the third is called off
  auto rows = Machines(f.store);
  REQUIRE(rows.size() == 3);
  CHECK(rows[0].state == "failed");
  CHECK(rows[1].state == "requested");  // in flight
  CHECK(rows[2].state == "stopped");
  CHECK_THAT(rows[2].last_error, Catch::Contains("never booted: an earlier boot of the pool failed"));
  CHECK(fleet.BootsPending() == 1);

  // serve stops (StopAll): the boot in flight answers within the wait, and
  // its machine is stopped through the provider.
  auto stop = std::async(std::launch::async, [&] { return fleet.StopAll(); });
  gate.Let(1);
  REQUIRE(stop.wait_for(std::chrono::seconds(20)) == std::future_status::ready);
  REQUIRE(stop.get());
  rows = Machines(f.store);
  CHECK(rows[1].state == "stopped");
  CHECK_FALSE(rows[1].provider_id.empty());
  CHECK(gate.inner.running().empty());
  CHECK(gate.entered() == 2);
}

TEST_CASE("fleet: a boot that answers after boot_timeout forgot its machine is stopped at once",
          "[fleet][boots]") {
  FleetFixture f;
  auto owned = std::make_unique<GatedProvider>();
  GatedProvider& gate = *owned;
  Fleet fleet = f.MakeWith(std::move(owned), [](PoolSpec& p) {
    p.scaling.max = 1;
    p.scaling.boot_timeout_ms = 60'000;
  });
  f.Queue(1);
  REQUIRE(StepReturns(fleet, gate));
  REQUIRE(gate.WaitEntered(1));
  f.clock.Advance(61'000);
  REQUIRE(StepReturns(fleet, gate));  // "boot never answered": forgotten
  auto rows = Machines(f.store);
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].state == "stopped");
  CHECK(rows[0].provider_id.empty());
  gate.Let(1);
  REQUIRE(fleet.AwaitBoots(10'000));
  REQUIRE(StepReturns(fleet, gate));
  CHECK(gate.inner.running().empty());  // stopped through the provider
  CHECK(gate.inner.stopped().size() == 1);
  rows = Machines(f.store);
  CHECK(rows[0].state == "stopped");
  CHECK(fleet.BootsPending() == 0);
}

}  // namespace
}  // namespace trainq
