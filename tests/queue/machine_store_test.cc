// The machines section of the Store: registration, leasing to a machine, the
// drain transaction, forgetting a machine, history, pools and cost.
#include <catch2/catch.hpp>

#include "cloud/autoscaler.h"
#include "core/clock.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;
constexpr TimeMs kLease = 60'000;

CommitInfo MakeCommit(const std::string& sha = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") {
  CommitInfo c;
  c.sha = sha;
  c.message = "tweak lr";
  c.committed_ms = kT0;
  return c;
}

BatchSpec Spec(const std::string& name, int repeats, int gpus = 0, const std::string& pool = "",
               bool trainer = false) {
  BatchSpec b;
  b.experiment = name;
  b.command = "python train.py --seed {seed}";
  b.repeats = repeats;
  b.gpus = gpus;
  b.pool = pool;
  b.timeout_s = 60;
  if (trainer) b.spec_json = R"({"trainer": "configs/mlp.yaml"})";
  return b;
}

struct Fixture {
  testing::TempDir dir;
  std::string path = testing::StoreLocation(dir, "trainq.db");
  Store store = Store::Open(path).value();
  FakeClock clock{kT0};

  std::int64_t Submit(const BatchSpec& spec) {
    auto r = store.runs().Submit("/repos/demo", MakeCommit(), {spec}, clock.Now());
    REQUIRE(r);
    return r->front().batch_id;
  }
  MachineRow Register(const std::string& pool, const std::string& name, int slots = 2,
                      int gpus = 0) {
    Machines::WorkerRegistration r;
    r.pool = pool;
    r.name = name;
    r.hostname = "node1";
    r.pid = 42;
    r.slots = slots;
    r.gpus = gpus;
    auto m = store.machines().RegisterWorker(r, clock.Now());
    REQUIRE(m);
    return *m;
  }
  std::vector<LeasedRun> Lease(std::int64_t machine, int max_runs, double free_gpus = 0,
                               int runs_per_gpu = 1, int fuse_max = 1) {
    Machines::LeaseLimits l;
    l.max_runs = max_runs;
    l.free_gpus = free_gpus;
    l.runs_per_gpu = runs_per_gpu;
    l.fuse_max = fuse_max;
    auto r = store.machines().LeaseForMachine(machine, l, clock.Now(), kLease);
    REQUIRE(r);
    return *r;
  }
  // The autoscaler's drain proposal, from a snapshot of the machine.
  cloud::Action DrainOf(std::int64_t machine) {
    auto m = store.machines().Machine(machine).value().value();
    cloud::Action a;
    a.kind = cloud::ActionKind::kDrain;
    a.pool = m.pool;
    a.machine = m.provider_id;
    a.row = m.id;
    a.guard.last_busy_at = m.last_busy_ms;
    a.reason = "idle";
    return a;
  }
};

}  // namespace

TEST_CASE("A version 3 store migrates to version 4 and keeps its machines and runs",
          "[sqlite][machines][migration]") {
  testing::TempDir dir;
  std::string path = dir / "v3.db";
  {
    auto db = sql::Db::Open(path, true, 1000).value();
    REQUIRE(ApplyMigrations(db, 0, 3));
    REQUIRE(db.Exec(
        "INSERT INTO repos (url, name, created_ms) VALUES ('/r', 'r', 1);"
        "INSERT INTO commits (repo_id, sha, created_ms) VALUES (1, 'abc', 1);"
        "INSERT INTO batches (commit_id, experiment, command, metric_name, metric_goal, repeats,"
        " seed_start, timeout_s, max_attempts, created_ms) VALUES (1, 'e', 'true', 'accuracy',"
        " 'max', 1, 1, 60, 3, 1);"
        "INSERT INTO runs (batch_id, seed, repeat, state, created_ms, updated_ms)"
        " VALUES (1, 1, 0, 'queued', 1, 1);"
        "INSERT INTO machines (pool, provider, provider_id, state, slots, created_ms,"
        " last_seen_ms) VALUES ('local', 'local', 'host-1', 'ready', 4, 100, 200);"
        "INSERT INTO machines (pool, provider, provider_id, state, slots, created_ms,"
        " last_seen_ms) VALUES ('local', 'local', 'host-2', 'stopped', 4, 100, 300);"));
  }
  auto store = Store::Open(path);
  REQUIRE(store);
  CHECK(store->schema_version() == Store::kSchemaVersion);
  auto machines = store->machines().List(true).value();
  REQUIRE(machines.size() == 2);
  CHECK(machines[0].provider_id == "host-1");
  CHECK(machines[0].state == "ready");
  CHECK(machines[0].slots == 4);
  CHECK(machines[0].created_ms == 100);
  CHECK(machines[0].ready_ms == 100);
  CHECK(machines[0].resources_json == "{}");
  CHECK_FALSE(machines[0].stopped_ms);
  CHECK(machines[1].stopped_ms == 300);
  CHECK(store->machines().RunMachine(1).value() == std::nullopt);
  auto demand = store->machines().RunnableDemand(kT0).value();
  REQUIRE(demand.size() == 1);
  CHECK(demand[0].pool.empty());  // the new batches.pool column defaults to any pool
  CHECK(demand[0].runnable == 1);
  // The executor's upsert still works on the rebuilt table.
  MachineRow m;
  m.pool = "local";
  m.provider = "local";
  m.provider_id = "host-1";
  m.state = "ready";
  m.slots = 8;
  CHECK(store->machines().UpsertMachine(m, 500).value() == machines[0].id);
  CHECK(store->machines().Machine(machines[0].id).value()->slots == 8);
}

TEST_CASE("RegisterWorker: a booted machine becomes ready, a hand-started one gets a row",
          "[machines]") {
  Fixture f;
  MachineRow boot;
  boot.pool = "gpu";
  boot.provider = "slurm";
  boot.name = "tq-1-gpu-1";
  boot.hourly_cost = 2.0;
  auto id = f.store.machines().AddMachine(boot, f.clock.Now()).value();
  CHECK(f.store.machines().Machine(id).value()->state == "requested");
  REQUIRE(f.store.machines().SetMachineProviderId(id, "job-17", f.clock.Now()));
  CHECK(f.store.machines().Machine(id).value()->state == "booting");

  f.clock.Advance(90'000);
  auto m = f.Register("gpu", "tq-1-gpu-1", 2, 1);
  CHECK(m.id == id);
  CHECK(m.state == "ready");
  CHECK(m.ready_ms == f.clock.Now());
  CHECK(m.hostname == "node1");
  CHECK(m.slots == 2);
  CHECK(m.gpus == 1);
  CHECK(m.provider_id == "job-17");

  SECTION("registering again keeps it ready") {
    CHECK(f.Register("gpu", "tq-1-gpu-1").id == id);
  }
  SECTION("a draining or stopped machine is refused") {
    for (const char* state : {"draining", "stopping", "stopped", "failed"}) {
      REQUIRE(f.store.machines().SetMachineState(id, state, f.clock.Now()));
      Machines::WorkerRegistration r;
      r.pool = "gpu";
      r.name = "tq-1-gpu-1";
      auto again = f.store.machines().RegisterWorker(r, f.clock.Now());
      REQUIRE_FALSE(again);
      CHECK(again.error().kind == ErrorKind::kConflict);
    }
  }
  SECTION("a machine of another pool is refused") {
    Machines::WorkerRegistration r;
    r.pool = "cpu";
    r.name = "tq-1-gpu-1";
    auto other = f.store.machines().RegisterWorker(r, f.clock.Now());
    REQUIRE_FALSE(other);
    CHECK(other.error().kind == ErrorKind::kInvalidArgument);
  }
  SECTION("an unnamed worker gets a manual row named after its host and pid") {
    auto manual = f.Register("gpu", "");
    CHECK(manual.id != id);
    CHECK(manual.provider == "manual");
    CHECK(manual.name == "node1-42");
    CHECK(manual.state == "ready");
    auto named = f.Register("gpu", "my-box");
    CHECK(named.name == "my-box");
    CHECK(named.provider == "manual");
    CHECK(f.store.machines().MachineByName("my-box").value()->id == named.id);
  }
}

TEST_CASE("LeaseForMachine leases only to a ready machine", "[machines][lease]") {
  Fixture f;
  f.Submit(Spec("mlp", 3));
  auto m = f.Register("local", "w1");
  REQUIRE(f.store.machines().SetMachineState(m.id, "draining", f.clock.Now()));
  Machines::LeaseLimits l;
  l.max_runs = 2;
  auto r = f.store.machines().LeaseForMachine(m.id, l, f.clock.Now(), kLease);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kConflict);
  CHECK(r.error().message.find("draining") != std::string::npos);
  CHECK(f.store.runs().Runs(std::nullopt, RunState::kQueued, 0).value().size() == 3);
}

TEST_CASE("LeaseForMachine fits runs into the free GPUs", "[machines][lease]") {
  Fixture f;
  f.Submit(Spec("big", 1, 2));     // run 1: 2 GPUs
  f.Submit(Spec("small", 4, 1));   // runs 2-5: 1 GPU each
  f.Submit(Spec("cpu", 1, 0));     // run 6: no GPU
  auto m = f.Register("local", "w1", 8, 2);

  SECTION("one free GPU: the 2-GPU run is skipped, one 1-GPU run and the CPU run fit") {
    auto got = f.Lease(m.id, 8, 1.0);
    REQUIRE(got.size() == 2);
    CHECK(got[0].experiment == "small");
    CHECK(got[0].gpus == 1);
    CHECK(got[1].experiment == "cpu");
  }
  SECTION("runs_per_gpu 2 packs two 1-GPU runs on one GPU") {
    auto got = f.Lease(m.id, 8, 1.0, 2);
    REQUIRE(got.size() == 3);
    CHECK(got[0].experiment == "small");
    CHECK(got[1].experiment == "small");
    CHECK(got[2].experiment == "cpu");
  }
  SECTION("two free GPUs take the 2-GPU run first, oldest first") {
    auto got = f.Lease(m.id, 8, 2.0);
    REQUIRE(got.size() == 2);
    CHECK(got[0].experiment == "big");
    CHECK(got[1].experiment == "cpu");
  }
  SECTION("max_runs bounds the slots") {
    auto got = f.Lease(m.id, 1, 2.0);
    REQUIRE(got.size() == 1);
    CHECK(got[0].experiment == "big");
  }
  SECTION("leased runs remember the machine, and the machine its last lease") {
    auto got = f.Lease(m.id, 1, 2.0);
    CHECK(f.store.machines().RunMachine(got[0].run_id).value() == m.id);
    auto row = f.store.machines().Machine(m.id).value().value();
    CHECK(row.last_busy_ms == f.clock.Now());
    CHECK(row.live_leases == 1);
    CHECK(f.store.runs().Run(got[0].run_id).value()->worker == "w1");
  }
}

TEST_CASE("LeaseForMachine serves a batch's pool only to that pool's machines",
          "[machines][lease]") {
  Fixture f;
  f.Submit(Spec("on-gpu", 2, 0, "gpu"));
  f.Submit(Spec("anywhere", 1, 0, ""));
  auto cpu = f.Register("cpu", "c1", 4);
  auto gpu = f.Register("gpu", "g1", 4);
  auto c = f.Lease(cpu.id, 4);
  REQUIRE(c.size() == 1);
  CHECK(c[0].experiment == "anywhere");
  auto g = f.Lease(gpu.id, 4);
  REQUIRE(g.size() == 2);
  CHECK(g[0].experiment == "on-gpu");
  CHECK(g[1].experiment == "on-gpu");
  auto demand = f.store.machines().RunnableDemand(f.clock.Now()).value();
  CHECK(demand.empty());
}

TEST_CASE("RunnableDemand groups runnable runs by pool and GPUs", "[machines]") {
  Fixture f;
  f.Submit(Spec("a", 3, 1, "gpu"));
  f.Submit(Spec("b", 2, 0, ""));
  auto d = f.store.machines().RunnableDemand(f.clock.Now()).value();
  REQUIRE(d.size() == 2);
  CHECK(d[0].pool == "");
  CHECK(d[0].gpus == 0);
  CHECK(d[0].runnable == 2);
  CHECK(d[1].pool == "gpu");
  CHECK(d[1].gpus == 1);
  CHECK(d[1].runnable == 3);
}

TEST_CASE("LeaseForMachine fuses seeds of a trainer experiment into one slot",
          "[machines][lease]") {
  Fixture f;
  auto fused = f.Submit(Spec("fused", 5, 1, "", true));
  f.Submit(Spec("plain", 2, 1));
  auto m = f.Register("local", "w1", 2, 1);
  auto got = f.Lease(m.id, 2, 1.0, 1, 3);
  // Slot 1: three seeds of the trainer batch (one GPU); slot 2 has no GPU left.
  REQUIRE(got.size() == 3);
  for (const auto& r : got) {
    CHECK(r.batch_id == fused);
    CHECK(r.trainer == "configs/mlp.yaml");
    CHECK(r.group == got[0].run_id);
  }
  CHECK(got[0].seed == 1);
  CHECK(got[1].seed == 2);
  CHECK(got[2].seed == 3);
  // Without fusing, a plain run has no group.
  auto m2 = f.Register("local", "w2", 1, 1);
  auto plain = f.Lease(m2.id, 1, 1.0, 1, 1);
  REQUIRE(plain.size() == 1);
  CHECK(plain[0].group == 0);
  CHECK(plain[0].trainer == "configs/mlp.yaml");  // the fused batch's remaining seed, unfused
}

TEST_CASE("DrainMachine applies the drain contract", "[machines][drain]") {
  Fixture f;
  auto m = f.Register("local", "w1", 1);

  SECTION("an idle machine with an empty queue is drained") {
    auto a = f.DrainOf(m.id);
    CHECK(f.store.machines().DrainMachine(a, f.clock.Now()).value());
    CHECK(f.store.machines().Machine(m.id).value()->state == "draining");
    Machines::LeaseLimits l;
    CHECK_FALSE(f.store.machines().LeaseForMachine(m.id, l, f.clock.Now(), kLease));
  }
  SECTION("refused while it holds a lease") {
    f.Submit(Spec("mlp", 1));
    auto leased = f.Lease(m.id, 1);
    REQUIRE(leased.size() == 1);
    auto a = f.DrainOf(m.id);  // even a snapshot taken after the lease
    CHECK_FALSE(f.store.machines().DrainMachine(a, f.clock.Now()).value());
    CHECK(f.store.machines().Machine(m.id).value()->state == "ready");
  }
  SECTION("refused while a run it could take is queued") {
    f.Submit(Spec("mlp", 1));
    auto a = f.DrainOf(m.id);
    CHECK_FALSE(f.store.machines().DrainMachine(a, f.clock.Now()).value());
    CHECK(f.store.machines().Machine(m.id).value()->state == "ready");
  }
  SECTION("a queued run of another pool does not keep it") {
    f.Submit(Spec("elsewhere", 1, 0, "gpu"));
    CHECK(f.store.machines().DrainMachine(f.DrainOf(m.id), f.clock.Now()).value());
  }
  SECTION("refused when it was busy since the decision") {
    auto a = f.DrainOf(m.id);
    f.clock.Advance(1000);
    REQUIRE(f.store.machines().TouchWorker(m.id, f.clock.Now(), true));
    CHECK_FALSE(f.store.machines().DrainMachine(a, f.clock.Now()).value());
  }
  SECTION("refused when the machine is not ready") {
    REQUIRE(f.store.machines().SetMachineState(m.id, "stopping", f.clock.Now()));
    CHECK_FALSE(f.store.machines().DrainMachine(f.DrainOf(m.id), f.clock.Now()).value());
  }
}

TEST_CASE("A lease that arrives while a drain is decided wins, and the drain is refused",
          "[machines][drain][race]") {
  Fixture f;
  auto m = f.Register("local", "w1", 1);
  // The autoscaler's snapshot: idle, nothing queued -> drain.
  auto decided = f.DrainOf(m.id);
  // Between the snapshot and the drain transaction: a submit and a lease.
  f.clock.Advance(10);
  f.Submit(Spec("mlp", 1));
  auto leased = f.Lease(m.id, 1);
  REQUIRE(leased.size() == 1);
  f.clock.Advance(10);
  CHECK_FALSE(f.store.machines().DrainMachine(decided, f.clock.Now()).value());
  CHECK(f.store.machines().Machine(m.id).value()->state == "ready");
  // The run finishes: even with no lease left, the old decision is stale
  // (last_busy moved), so a fresh pass must decide again.
  REQUIRE(f.store.runs().Complete(leased[0].run_id, leased[0].token, f.clock.Now(), 0.9));
  CHECK_FALSE(f.store.machines().DrainMachine(decided, f.clock.Now()).value());
  CHECK(f.store.machines().DrainMachine(f.DrainOf(m.id), f.clock.Now()).value());
}

TEST_CASE("A drain that commits first makes the following lease refuse",
          "[machines][drain][race]") {
  Fixture f;
  auto m = f.Register("local", "w1", 1);
  auto decided = f.DrainOf(m.id);
  CHECK(f.store.machines().DrainMachine(decided, f.clock.Now()).value());
  f.Submit(Spec("mlp", 1));  // queued just after the drain committed
  Machines::LeaseLimits l;
  auto r = f.store.machines().LeaseForMachine(m.id, l, f.clock.Now(), kLease);
  REQUIRE_FALSE(r);
  CHECK(r.error().kind == ErrorKind::kConflict);
  CHECK(f.store.runs().Runs(std::nullopt, RunState::kQueued, 0).value().size() == 1);
  // The history shows the machine held no lease when it was drained.
  auto h = f.store.machines().MachineHistory(m.id).value();
  REQUIRE(h.size() == 2);
  CHECK(h[1].state == "draining");
  CHECK(h[1].live_leases == 0);
}

TEST_CASE("ForgetMachine returns its leases to the queue without using an attempt, a late "
          "success of the old holder stands unless the run was leased again",
          "[machines]") {
  Fixture f;
  f.Submit(Spec("mlp", 3));
  auto m = f.Register("local", "w1", 2);
  auto leased = f.Lease(m.id, 2);
  REQUIRE(leased.size() == 2);
  REQUIRE(f.store.runs().MarkRunning(leased[0].run_id, leased[0].token, f.clock.Now(), ""));
  f.clock.Advance(5000);
  CHECK(f.store.machines().ForgetMachine(m.id, f.clock.Now(), "preempted").value() == 2);
  for (const auto& l : leased) {
    auto run = f.store.runs().Run(l.run_id).value().value();
    CHECK(run.state == RunState::kQueued);
    CHECK(run.attempts == 0);
    CHECK(run.last_error.find("preempted") != std::string::npos);
  }
  auto row = f.store.machines().Machine(m.id).value().value();
  CHECK(row.state == "stopped");
  CHECK(row.stopped_ms == f.clock.Now());
  CHECK(row.live_leases == 0);
  auto h = f.store.machines().MachineHistory(m.id).value();
  REQUIRE(h.size() == 2);
  CHECK(h[1].state == "stopped");
  CHECK(h[1].live_leases == 0);  // counted after the leases went back
  // The old holder comes back with a success for a run nobody leased again:
  // the command's success stands (as after a lease expiry).
  REQUIRE(f.store.runs().Complete(leased[0].run_id, leased[0].token, f.clock.Now(), 0.5));
  CHECK(f.store.runs().Run(leased[0].run_id).value()->state == RunState::kSucceeded);
  // The attempt that succeeded did run: it counts again (not "succeeded, 0
  // attempts").
  CHECK(f.store.runs().Run(leased[0].run_id).value()->attempts == 1);
  // The others are leased again elsewhere, the attempt counting from 1; the
  // old holder's result for one of them is then refused.
  auto other = f.Register("local", "w2", 4);
  auto again = f.Lease(other.id, 4);
  REQUIRE(again.size() == 2);
  CHECK(again[0].attempt == 1);
  auto late = f.store.runs().Complete(leased[1].run_id, leased[1].token, f.clock.Now(), 0.5);
  REQUIRE_FALSE(late);
  CHECK(late.error().kind == ErrorKind::kConflict);
  CHECK(f.store.runs().Run(leased[1].run_id).value()->state == RunState::kLeased);
}

TEST_CASE("MachineHistory records every state change with its live leases", "[machines]") {
  Fixture f;
  MachineRow boot;
  boot.pool = "local";
  boot.provider = "local";
  boot.name = "tq-local-1";
  auto id = f.store.machines().AddMachine(boot, f.clock.Now()).value();
  REQUIRE(f.store.machines().SetMachineProviderId(id, "pid-7", f.clock.Now()));
  f.Register("local", "tq-local-1", 1);
  f.Submit(Spec("mlp", 1));
  auto leased = f.Lease(id, 1);
  REQUIRE(leased.size() == 1);
  // A stop while a lease is live is recorded with it (tests assert on this).
  REQUIRE(f.store.machines().SetMachineState(id, "stopping", f.clock.Now(), "operator"));
  REQUIRE(f.store.machines().SetMachineState(id, "failed", f.clock.Now(), "disk full"));
  auto h = f.store.machines().MachineHistory(id).value();
  REQUIRE(h.size() == 5);
  CHECK(h[0].state == "requested");
  CHECK(h[1].state == "booting");
  CHECK(h[2].state == "ready");
  CHECK(h[2].live_leases == 0);
  CHECK(h[3].state == "stopping");
  CHECK(h[3].live_leases == 1);
  CHECK(h[3].note == "operator");
  CHECK(h[4].state == "failed");
  auto row = f.store.machines().Machine(id).value().value();
  CHECK(row.last_error == "disk full");
  CHECK(row.stopped_ms == f.clock.Now());
  CHECK(f.store.machines().MachineHistory(std::nullopt).value().size() == 5);
}

TEST_CASE("A stopped machine's provider id can be reused, a live machine's cannot",
          "[machines]") {
  // A warm EC2 pool (on_stop: stop) starts a stopped instance again, under a
  // new name but with its old instance id.
  Fixture f;
  auto add = [&](const std::string& name) {
    MachineRow m;
    m.pool = "gpu";
    m.provider = "ec2";
    m.name = name;
    return f.store.machines().AddMachine(m, f.clock.Now()).value();
  };
  auto first = add("tq-gpu-1");
  REQUIRE(f.store.machines().SetMachineProviderId(first, "i-0abc", f.clock.Now()));
  REQUIRE(f.store.machines().SetMachineState(first, "stopped", f.clock.Now()));

  auto second = add("tq-gpu-2");
  REQUIRE(f.store.machines().SetMachineProviderId(second, "i-0abc", f.clock.Now()));
  CHECK(f.store.machines().Machine(second).value().value().state == "booting");
  auto ready = f.Register("gpu", "tq-gpu-2", 1);
  CHECK(ready.id == second);
  CHECK(ready.state == "ready");
  f.Submit(Spec("mlp", 1));
  CHECK(f.Lease(second, 1).size() == 1);
  // Adopting a listed machine also records a row under a stopped one's id.
  REQUIRE(f.store.machines().SetMachineState(second, "stopped", f.clock.Now()));
  MachineRow adopted;
  adopted.pool = "gpu";
  adopted.provider = "ec2";
  adopted.provider_id = "i-0abc";
  adopted.state = "booting";
  auto third = f.store.machines().AddMachine(adopted, f.clock.Now());
  REQUIRE(third);

  // Two live machines of a pool never share an id.
  auto fourth = add("tq-gpu-4");
  auto clash = f.store.machines().SetMachineProviderId(fourth, "i-0abc", f.clock.Now());
  REQUIRE_FALSE(clash);
  CHECK(clash.error().kind == ErrorKind::kConflict);
  CHECK(f.store.machines().Machine(fourth).value().value().provider_id.empty());
  auto twice = f.store.machines().AddMachine(adopted, f.clock.Now());
  REQUIRE_FALSE(twice);
  CHECK(twice.error().kind == ErrorKind::kConflict);
  // Another pool may hold the same id.
  adopted.pool = "cpu";
  CHECK(f.store.machines().AddMachine(adopted, f.clock.Now()));
}

TEST_CASE("Pool health and pool token hashes are stored", "[machines]") {
  Fixture f;
  REQUIRE(f.store.machines().SetPoolHealth({"gpu", 3, kT0 + 20'000, "quota exceeded"}, f.clock.Now()));
  REQUIRE(f.store.machines().SetPoolHealth({"gpu", 4, kT0 + 40'000, "quota exceeded"}, f.clock.Now()));
  auto h = f.store.machines().PoolHealth().value();
  REQUIRE(h.size() == 1);
  CHECK(h[0].consecutive_failures == 4);
  CHECK(h[0].next_retry_ms == kT0 + 40'000);
  CHECK(h[0].last_error == "quota exceeded");

  std::string a(64, 'a'), b(64, 'b');
  REQUIRE(f.store.machines().SetPoolTokenHash("gpu", a, f.clock.Now()));
  REQUIRE(f.store.machines().SetPoolTokenHash("cpu", b, f.clock.Now()));
  CHECK(f.store.machines().PoolForTokenHash(a).value() == "gpu");
  CHECK(f.store.machines().PoolForTokenHash(b).value() == "cpu");
  CHECK(f.store.machines().PoolForTokenHash(std::string(64, 'c')).value() == std::nullopt);
  CHECK(f.store.machines().PoolForTokenHash("").value() == std::nullopt);
  CHECK(f.store.machines().PoolForTokenHash(a.substr(0, 10)).value() == std::nullopt);
}

TEST_CASE("Costs: billed machine time against busy time, per pool and per batch",
          "[machines][cost]") {
  Fixture f;
  auto batch = f.Submit(Spec("mlp", 2));
  MachineRow boot;
  boot.pool = "gpu";
  boot.provider = "local";
  boot.name = "g1";
  boot.hourly_cost = 3.0;
  boot.state = "booting";
  auto id = f.store.machines().AddMachine(boot, f.clock.Now()).value();
  f.clock.Advance(60'000);  // one minute to boot
  f.Register("gpu", "g1", 2);
  auto leased = f.Lease(id, 2);
  REQUIRE(leased.size() == 2);
  for (const auto& l : leased) {
    REQUIRE(f.store.runs().MarkRunning(l.run_id, l.token, f.clock.Now(), ""));
  }
  f.clock.Advance(30 * 60'000);  // both run 30 minutes
  for (const auto& l : leased) {
    REQUIRE(f.store.runs().Complete(l.run_id, l.token, f.clock.Now(), 0.9));
  }
  f.clock.Advance(29 * 60'000);  // idle, then stopped: 1 h billed in all
  REQUIRE(f.store.machines().SetMachineState(id, "stopped", f.clock.Now()));
  f.clock.Advance(3'600'000);    // time after the stop is not billed

  auto pools = f.store.machines().Costs(f.clock.Now(), false).value();
  REQUIRE(pools.size() == 1);
  CHECK(pools[0].pool == "gpu");
  CHECK(pools[0].machines == 1);
  CHECK(pools[0].billed_ms == 3'600'000);
  CHECK(pools[0].busy_ms == 2 * 30 * 60'000);
  CHECK(pools[0].cost == Approx(3.0));

  auto batches = f.store.machines().Costs(f.clock.Now(), true).value();
  REQUIRE(batches.size() == 1);
  CHECK(batches[0].batch_id == batch);
  CHECK(batches[0].busy_ms == 2 * 30 * 60'000);
  CHECK(batches[0].billed_ms == 30 * 60'000);  // two runs sharing a 2-slot machine
  CHECK(batches[0].cost == Approx(1.5));
  CHECK(batches[0].machines == 1);

  auto row = f.store.machines().Machine(id).value().value();
  CHECK(row.runs_done == 2);
  CHECK(row.busy_ms == 2 * 30 * 60'000);
}

TEST_CASE("Machines() counts a running run's time up to now", "[machines][cost]") {
  Fixture f;
  f.Submit(Spec("mlp", 1));
  auto m = f.Register("local", "w1", 1);
  auto leased = f.Lease(m.id, 1);
  REQUIRE(f.store.runs().MarkRunning(leased[0].run_id, leased[0].token, f.clock.Now(), ""));
  f.clock.Advance(10'000);
  auto rows = f.store.machines().List(false, f.clock.Now()).value();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].busy_ms == 10'000);
  CHECK(rows[0].live_leases == 1);
}

namespace trainq {
namespace {

TEST_CASE("pool state: boot and budget columns are written apart, and a reset clears only the "
          "boots", "[machines]") {
  testing::TempDir dir;
  Store store = Store::Open(testing::StoreLocation(dir, "trainq.db")).value();
  Machines::PoolStateRow boots;
  boots.pool = "gpu";
  boots.failed_boots = 3;
  boots.next_boot_ms = 5000;
  boots.failing = true;
  boots.boot_error = "tq-1: no worker registered within boot_timeout (10m00s)";
  boots.log_tail = "cannot reach the server\n";
  boots.config_hash = "abc";
  REQUIRE(store.machines().SetPoolBoots(boots, 1000));
  Machines::PoolStateRow budget;
  budget.pool = "gpu";
  budget.spent_day = 12.5;
  budget.spent_month = 100;
  budget.budget_per_day = 50;
  budget.cap = "";
  REQUIRE(store.machines().SetPoolBudget(budget, 2000));  // leaves the boot columns alone
  auto rows = store.machines().PoolStates().value();
  REQUIRE(rows.size() == 1);
  CHECK(rows[0].failing);
  CHECK(rows[0].failed_boots == 3);
  CHECK(rows[0].log_tail == "cannot reach the server\n");
  CHECK(rows[0].spent_day == 12.5);
  CHECK(rows[0].budget_per_day == 50);
  CHECK(store.machines().ResetPoolBoots("gpu", 3000).value());
  CHECK_FALSE(store.machines().ResetPoolBoots("gpu", 3000).value());   // nothing left to reset
  CHECK_FALSE(store.machines().ResetPoolBoots("other", 3000).value());  // no such row
  rows = store.machines().PoolStates().value();
  CHECK_FALSE(rows[0].failing);
  CHECK(rows[0].failed_boots == 0);
  CHECK(rows[0].next_boot_ms == 0);
  CHECK(rows[0].spent_day == 12.5);
  CHECK(rows[0].boot_error == boots.boot_error);  // kept for the record
}

TEST_CASE("NoteMachine sets a machine's last error without changing its state", "[machines]") {
  testing::TempDir dir;
  Store store = Store::Open(testing::StoreLocation(dir, "trainq.db")).value();
  MachineRow m;
  m.pool = "gpu";
  m.provider = "ec2";
  m.state = "booting";
  m.name = "tq-1";
  auto row = store.machines().AddMachine(m, 1000).value();
  REQUIRE(store.machines().NoteMachine(row, "its worker token was refused (HTTP 401)", 2000));
  auto after = store.machines().Machine(row).value();
  CHECK(after->state == "booting");
  CHECK(after->last_error == "its worker token was refused (HTTP 401)");
  auto history = store.machines().MachineHistory(row).value();
  CHECK(history.back().note == "its worker token was refused (HTTP 401)");
  CHECK(store.machines().NoteMachine(row + 100, "x", 3000).error().kind == ErrorKind::kNotFound);
}

}  // namespace
}  // namespace trainq

// ---- scale (issue 30): reads bounded by live work, counted in VM steps ------

TEST_CASE("LeaseForMachine, RunnableDemand, WaitingBatches and MayLease do not read the whole "
          "queue",
          "[sqlite][machines][scale]") {
  // A count of SQLite VM steps (sql::VmSteps), not a timing: reading every
  // queued run would take 20x the steps with 20x the queue.
  Fixture f;
  auto m = f.Register("cpu", "w1", 4);
  REQUIRE(f.store.machines().SetWaitingNotes({{"gpu", 1, "no pool has GPUs", 0}}, f.clock.Now()));
  auto measure = [&] {
    std::int64_t s0 = sql::VmSteps();
    auto leased = f.Lease(m.id, 2);
    REQUIRE(leased.size() == 2);
    for (const auto& l : leased) {
      REQUIRE(f.store.runs().Complete(l.run_id, l.token, f.clock.Now(), 0.5));
    }
    std::int64_t lease = sql::VmSteps() - s0;
    s0 = sql::VmSteps();
    auto demand = f.store.machines().RunnableDemand(f.clock.Now());
    REQUIRE(demand);
    auto waiting = f.store.machines().WaitingBatches(f.clock.Now());
    REQUIRE(waiting);
    REQUIRE(f.store.machines().MayLease(m.id, f.clock.Now()).value());
    return std::pair(lease, sql::VmSteps() - s0);
  };
  f.Submit(Spec("small", 1000));
  f.Submit(Spec("gpu", 10, /*gpus=*/1, "gpu"));
  auto [lease_small, reads_small] = measure();
  // 20 times the queue, behind and after the runs leased first.
  auto commit = MakeCommit("cccccccccccccccccccccccccccccccccccccccc");
  REQUIRE(f.store.runs().Submit("/repos/demo", commit, {Spec("deep", 20'000)}, f.clock.Now()));
  auto [lease_deep, reads_deep] = measure();
  INFO("lease+complete steps " << lease_small << " -> " << lease_deep << "; demand reads "
                               << reads_small << " -> " << reads_deep);
  CHECK(lease_deep < lease_small * 3 / 2);
  CHECK(reads_deep < reads_small * 3 / 2);
  // And what they read is right.
  auto demand = f.store.machines().RunnableDemand(f.clock.Now()).value();
  std::int64_t runnable = 0;
  for (const auto& d : demand) runnable += d.runnable;
  CHECK(runnable == 1000 + 10 + 20'000 - 4);
  auto waiting = f.store.machines().WaitingBatches(f.clock.Now()).value();
  REQUIRE(waiting.size() == 1);
  CHECK(waiting[0].runs == 10);
}

TEST_CASE("LeaseForMachine pages past runs that do not fit to one that does", "[machines][scale]") {
  // 600 one-GPU runs (more than a page of candidates) before a CPU run: a
  // machine without free GPUs still finds the CPU run.
  Fixture f;
  auto m = f.Register("", "w1", 4);
  f.Submit(Spec("gpu", 600, /*gpus=*/1));
  auto commit = MakeCommit("cccccccccccccccccccccccccccccccccccccccc");
  REQUIRE(f.store.runs().Submit("/repos/demo", commit, {Spec("cpu", 1)}, f.clock.Now()));
  auto leased = f.Lease(m.id, 4, /*free_gpus=*/0);
  REQUIRE(leased.size() == 1);
  CHECK(leased[0].experiment == "cpu");
}
