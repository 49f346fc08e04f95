// The status document's estimated end of a batch (`trainq status`, --json,
// GET /api/v1/status): from the measured durations of the experiment's runs
// and the slots the batch can use.
#include "agent/results/status.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

TEST_CASE("status eta: the waiting runs go to the earliest free slot", "[status][eta]") {
  struct Row {
    const char* what;
    std::vector<TimeMs> durations;
    std::vector<TimeMs> running;
    std::int64_t waiting;
    int slots;
    std::optional<TimeMs> expected;
  };
  const Row rows[] = {
      {"nothing measured yet", {}, {10}, 3, 2, std::nullopt},
      {"no slot and runs waiting (machines booting)", {60}, {}, 3, 0, std::nullopt},
      {"nothing left", {60}, {}, 0, 0, 0},
      {"one slot, three waiting", {60}, {}, 3, 1, 180},
      {"two slots, three waiting", {60}, {}, 3, 2, 120},
      {"a running run's rest comes first", {60}, {20}, 1, 1, 40 + 60},
      {"a run past the typical time is taken to end now", {60}, {90}, 1, 1, 60},
      {"two running on two slots, two waiting", {60}, {50, 10}, 2, 2, 50 + 60},
      {"the slots it holds count when fewer are free", {60}, {0, 0}, 2, 0, 120},
      {"the median of the measured, not the mean", {10, 20, 30, 1000}, {}, 1, 1, 25},
  };
  for (const auto& r : rows) {
    INFO(r.what);
    CHECK(EstimateRemaining(r.durations, r.running, r.waiting, r.slots) == r.expected);
  }
}


// ---- scale (issue 30) ---------------------------------------------------------

// History: `batches` more batches of 100 runs, each done on its own machine
// (stopped since), written through the Store and finished with one bulk
// UPDATE (the triggers see it as they see the lease path's updates).
void AddHistory(Store& store, const std::string& db_path, int batches, TimeMs now) {
  static int next = 0;
  auto db = sql::Db::Open(db_path, false, 5000).value();
  for (int i = 0; i < batches; ++i, ++next) {
    char sha[41];
    std::snprintf(sha, sizeof sha, "%040x", 0x1000 + next);
    BatchSpec spec;
    spec.experiment = "exp" + std::to_string(next % 3);
    spec.command = "true";
    spec.repeats = 100;
    auto sub = store.runs().Submit("/srv/model", {sha, "", "s", "me", 0}, {spec}, now - 3'600'000);
    REQUIRE(sub);
    MachineRow m;
    m.pool = "cpu";
    m.provider = "fake";
    m.provider_id = "old-" + std::to_string(next);
    m.slots = 4;
    m.hourly_cost = 1.0;
    auto id = store.machines().AddMachine(m, now - 3'600'000);
    REQUIRE(id);
    REQUIRE(store.machines().SetMachineState(*id, "stopped", now - 1'800'000));
    auto u = db.Prepare("UPDATE runs SET state = 'succeeded', machine_id = ?1, attempts = 1, "
                        "started_ms = ?2, finished_ms = ?2 + 60000, metric_value = 0.9, "
                        "updated_ms = ?2 + 60000 WHERE batch_id = ?3");
    REQUIRE(u);
    REQUIRE(u->Bind(1, *id).Bind(2, now - 3'000'000).Bind(3, sub->front().batch_id).Run());
  }
}

TEST_CASE("status reads about the same rows with ten times the history", "[status][scale]") {
  // A count of SQLite VM steps (sql::VmSteps), not a timing: counting runs,
  // finding active batches, the ETA's durations, machines' run time and the
  // pools' costs each read every finished run before schema 12.
  testing::TempDir tmp;
  FakeClock clock;
  const std::string path = tmp / "t.db";
  Store store = Store::Open(path).value();
  // Live work: a batch of 10 on a registered worker, 2 leased, 1 running.
  BatchSpec spec;
  spec.experiment = "exp0";
  spec.command = "true";
  spec.repeats = 10;
  REQUIRE(store.runs().Submit("/srv/model", {std::string(40, 'a'), "", "s", "me", 0}, {spec},
                       clock.Now()));
  Machines::WorkerRegistration w;
  w.pool = "cpu";
  w.name = "live";
  w.slots = 2;
  auto m = store.machines().RegisterWorker(w, clock.Now());
  REQUIRE(m);
  Machines::LeaseLimits lim;
  lim.max_runs = 2;
  auto leased = store.machines().LeaseForMachine(m->id, lim, clock.Now(), 60'000);
  REQUIRE(leased);
  REQUIRE(leased->size() == 2);
  REQUIRE(store.runs().MarkRunning((*leased)[0].run_id, (*leased)[0].token, clock.Now(), ""));
  clock.Advance(30'000);

  auto steps = [&] {
    std::int64_t s0 = sql::VmSteps();
    auto j = StatusJson(store, path, clock.Now());
    REQUIRE(j);
    return std::pair(sql::VmSteps() - s0, *j);
  };
  AddHistory(store, path, 10, clock.Now());
  auto [small, before] = steps();
  AddHistory(store, path, 90, clock.Now());
  auto [large, after] = steps();
  INFO("VM steps with 1,000 finished runs: " << small << ", with 10,000: " << large);
  CHECK(large < small * 6 / 5);

  // What it counted is what the runs hold.
  CHECK(after["counts"]["succeeded"] == 10'000);
  CHECK(after["counts"]["queued"] == 8);
  CHECK(after["counts"]["running"] == 1);
  CHECK(after["counts"]["leased"] == 1);
  REQUIRE(after["batches"].size() >= 1);
  CHECK(after["batches"][0]["counts"]["queued"] == 8);
  // exp0's ETA: from the newest finished runs of exp0 (60 s each).
  CHECK(after["batches"][0]["eta_measured_runs"] == 20);
  // Costs: 100 stopped machines of an hour's billing each... booted 1 h before
  // the first history was added; plus the live worker.
  bool found = false;
  for (const auto& p : after["pools"]) {
    if (p["pool"] != "cpu") continue;
    found = true;
    CHECK(p["machines_booted"] == 101);
    // 10,000 runs of 60 s, and the running one's 30 s so far.
    CHECK(p["busy_ms"] == 10'000 * 60'000LL + 30'000);
  }
  CHECK(found);
  REQUIRE(after["machines"].size() == 1);
  CHECK(after["machines"][0]["busy_ms"] == 30'000);
}


}  // namespace
}  // namespace trainq
