// The fleet and the commit statuses together: a batch the fleet holds back by
// a pool's budget says so on its commit status (agent/daemon/fleet.cc sets
// the note, agent/triggers/forge_status.cc reports it).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/fleet.h"
#include "agent/triggers/forge_status.h"
#include "cloud/provider.h"
#include "core/http_client.h"
#include "queue/machines.h"
#include "tests/agent/triggers/forge_status_fixture.h"
#include "tests/support/http_server.h"

using nlohmann::json;

namespace trainq {
namespace {

using namespace testing::forge_status;

TEST_CASE("forge status: a batch held back by a budget cap says so, and says queued once the cap "
          "lifts",
          "[forge_status][fleet]") {
  testing::TestHttpServer forge([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, R"({"id": 1})", {}};
  });
  World w(forge.url());
  CurlHttpClient http;
  StatusReporter reporter(w.store, w.config, http, w.clock);
  REQUIRE(reporter.Step().value() == 1);  // "queued: 3 runs"

  // Earlier today the gpu pool ran a machine for 6 h at $10/h: $60 of its $50.
  const TimeMs day = 1'767'225'600'000;  // 2026-01-01 00:00 UTC
  w.clock.Set(day + 3'600'000);
  MachineRow m;
  m.pool = "gpu";
  m.provider = "command";
  m.name = "tq-test-gpu-1";
  m.state = "booting";
  m.hourly_cost = 10.0;
  auto row = w.store.machines().AddMachine(m, w.clock.Now());
  REQUIRE(row);
  w.clock.Advance(6 * 3'600'000);
  REQUIRE(w.store.machines().SetMachineState(*row, "stopped", w.clock.Now()));

  auto make_fleet = [&](double per_day, cloud::FakeProvider*& provider) {
    PoolSpec spec;
    spec.scaling.name = "gpu";
    spec.scaling.max = 2;
    spec.scaling.hourly_cost = 10.0;
    spec.scaling.budget_per_day = per_day;
    spec.provider = "command";
    auto p = std::make_unique<cloud::FakeProvider>();
    provider = p.get();
    std::vector<FleetPool> pools;
    pools.push_back({spec, std::move(p)});
    FleetOptions o;
    o.instance = "test";
    o.server_url = "http://10.0.0.1:8080";
    o.trainq_path = "/usr/bin/trainq";
    o.data_dir = w.tmp / "data";
    return Fleet(w.store, w.clock, std::move(pools), o);
  };
  cloud::FakeProvider* provider = nullptr;
  {
    Fleet capped = make_fleet(50.0, provider);
    REQUIRE(capped.Step());
    CHECK(provider->running().empty());
    auto waiting = w.store.machines().WaitingBatches(w.clock.Now()).value();
    REQUIRE(waiting.size() == 1);
    CHECK(waiting[0].batch_id == w.batch);
    CHECK(waiting[0].note == "pool gpu at its per_day budget $50.00 reached ($60.00 spent)");
  }
  CHECK(reporter.Step().value() == 1);
  auto seen = forge.requests();
  REQUIRE(seen.size() == 2);
  auto held = json::parse(seen[1].body);
  CHECK(held["state"] == "pending");
  CHECK(held["context"] == "trainq/lstm");
  CHECK(held["description"] == "waiting: pool gpu at its per_day budget $50.00 reached ($60.00 "
                               "spent)");
  CHECK(reporter.Step().value() == 0);  // said once

  // The budget is raised (serve restarted with a new config): it boots, and
  // the status no longer says it waits.
  Fleet raised = make_fleet(100.0, provider);
  REQUIRE(raised.Step());
  REQUIRE(raised.AwaitBoots(10'000));  // boots run off the pass
  CHECK(provider->running().size() == 2);
  CHECK(w.store.machines().WaitingBatches(w.clock.Now()).value().empty());
  CHECK(reporter.Step().value() == 1);
  seen = forge.requests();
  REQUIRE(seen.size() == 3);
  auto queued = json::parse(seen[2].body);
  CHECK(queued["state"] == "pending");
  CHECK(queued["description"] == "queued: 3 runs left");
}

}  // namespace
}  // namespace trainq
