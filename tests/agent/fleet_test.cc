// The fleet loop against a recording FakeProvider and a real store file.
#include <catch2/catch.hpp>

#include "agent/fleet.h"
#include "cloud/provider.h"
#include "core/clock.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

struct FleetFixture {
  testing::TempDir tmp;
  FakeClock clock{1'000'000};
  Store store = Store::Open(tmp / "t.db").value();
  cloud::FakeProvider* provider = nullptr;

  Fleet Make() {
    PoolSpec spec;
    spec.scaling.name = "gpu";
    spec.scaling.max = 2;
    spec.provider = "command";
    auto p = std::make_unique<cloud::FakeProvider>();
    provider = p.get();
    std::vector<FleetPool> pools;
    pools.push_back({spec, std::move(p)});
    FleetOptions o;
    o.instance = "test";
    o.server_url = "http://127.0.0.1:1";
    o.trainq_path = "/usr/bin/trainq";
    o.data_dir = tmp / "data";
    return Fleet(store, clock, std::move(pools), o);
  }
};

int Failures(Store& store, const std::string& pool) {
  auto rows = store.PoolHealth();
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
      REQUIRE(fleet.Step());
      f.clock.Advance(10 * 60'000);  // past any backoff
    }
    CHECK(Failures(f.store, "gpu") == 3);
  }
  // A new serve process: its first listing works.
  Fleet again = f.Make();
  REQUIRE(again.Step());
  CHECK(Failures(f.store, "gpu") == 0);
}

TEST_CASE("fleet: an empty queue boots nothing; queued demand without a pool that fits boots "
          "nothing either") {
  FleetFixture f;
  Fleet fleet = f.Make();
  REQUIRE(fleet.Step());
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

TEST_CASE("fleet: a hand-started worker that stops calling is taken for gone; one that calls stays",
          "[fleet]") {
  FleetFixture f;
  Fleet fleet = f.Make();
  Store::WorkerRegistration r;
  r.pool = "gpu";
  r.hostname = "laptop";
  r.pid = 1;
  auto silent = f.store.RegisterWorker(r, f.clock.Now());
  REQUIRE(silent);
  r.pid = 2;
  auto alive = f.store.RegisterWorker(r, f.clock.Now());
  REQUIRE(alive);
  f.clock.Advance(2 * 60'000);
  REQUIRE(f.store.TouchWorker(alive->id, f.clock.Now(), false));
  REQUIRE(fleet.Step());
  CHECK(f.store.Machine(silent->id).value()->state == "ready");  // 2 min: not yet
  f.clock.Advance(90'000);  // silent for 3m30s, alive for 1m30s
  REQUIRE(fleet.Step());
  auto s = f.store.Machine(silent->id).value();
  CHECK(s->state == "stopped");
  CHECK(s->last_error.find("silent for 3m30s") != std::string::npos);
  CHECK(f.store.Machine(alive->id).value()->state == "ready");
  CHECK(f.provider->running().empty());  // no provider call for either
}

}  // namespace
}  // namespace trainq
