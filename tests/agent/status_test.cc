// The status document's estimated end of a batch (`trainq status`, --json,
// GET /api/v1/status): from the measured durations of the experiment's runs
// and the slots the batch can use.
#include "agent/results/status.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "agent/cli/cli.h"
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

TEST_CASE("status eta: a batch's estimated end from its own finished runs, and eta ? before "
          "any run of the experiment ended",
          "[status][eta]") {
  testing::TempDir tmp;
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  BatchSpec spec;
  spec.experiment = "mlp";
  spec.command = "true";
  spec.repeats = 4;
  auto sub = store.runs().Submit("/srv/model", {std::string(40, 'a'), "", "s", "me", 0}, {spec},
                          clock.Now());
  REQUIRE(sub);
  const std::int64_t batch = sub->front().batch_id;

  auto status = [&] {
    std::ostringstream text;
    StatusOptions o;
    o.db = tmp / "t.db";
    REQUIRE(CmdStatus(o, clock, text));
    auto j = StatusJson(store, tmp / "t.db", clock.Now()).value();
    return std::pair{j["batches"][0], text.str()};
  };
  // Nothing measured: unknown.
  auto leased = store.runs().Lease("local/1", clock.Now(), 600'000, 1).value();
  REQUIRE(leased.size() == 1);
  REQUIRE(store.runs().MarkRunning(leased[0].run_id, leased[0].token, clock.Now(), ""));
  auto [first, first_text] = status();
  CHECK(first["eta_ms"].is_null());
  CHECK(first["eta_measured_runs"] == 0);
  CHECK_THAT(first_text, Catch::Contains("0/4 done, 0 failed, 1 running, eta ?"));

  // The first run took 60 s; the second has run 20 s; two wait. No machine
  // rows: the batch has the one slot it holds, so 40 s + 2 x 60 s are left.
  clock.Advance(60'000);
  REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
  leased = store.runs().Lease("local/1", clock.Now(), 600'000, 1).value();
  REQUIRE(leased.size() == 1);
  REQUIRE(store.runs().MarkRunning(leased[0].run_id, leased[0].token, clock.Now(), ""));
  clock.Advance(20'000);
  auto [second, second_text] = status();
  CHECK(second["id"] == batch);
  CHECK(second["eta_measured_runs"] == 1);
  REQUIRE(second["eta_ms"].is_number());
  CHECK(second["eta_ms"].get<TimeMs>() == clock.Now() + 40'000 + 2 * 60'000);
  CHECK_THAT(second_text, Catch::Contains("1/4 done, 0 failed, 1 running, eta 2m40s"));

  // A later batch of the same experiment starts with the earlier durations.
  auto again = store.runs().Submit("/srv/model", {std::string(40, 'b'), "", "s2", "me", 0}, {spec},
                            clock.Now());
  REQUIRE(again);
  auto j = StatusJson(store, tmp / "t.db", clock.Now()).value();
  bool found = false;
  for (const auto& b : j["batches"]) {
    if (b["id"] != again->front().batch_id) continue;
    found = true;
    CHECK(b["eta_measured_runs"] == 1);
    // Its 4 runs wait; the only slot is held by the other batch: unknown.
    CHECK(b["eta_ms"].is_null());
  }
  CHECK(found);

  // A finished batch has no estimate.
  clock.Advance(40'000);
  REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
  for (int i = 0; i < 6; ++i) {
    auto l = store.runs().Lease("local/1", clock.Now(), 600'000, 1).value();
    if (l.empty()) break;
    REQUIRE(store.runs().Complete(l[0].run_id, l[0].token, clock.Now(), 0.9));
  }
  auto done = StatusJson(store, tmp / "t.db", clock.Now()).value();
  for (const auto& b : done["batches"]) CHECK(b["eta_ms"].is_null());
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


TEST_CASE("status text reads the newest 20 active batches of a deep queue and counts the rest",
          "[status][scale]") {
  testing::TempDir tmp;
  FakeClock clock;
  const std::string path = tmp / "t.db";
  Store store = Store::Open(path).value();
  auto queue = [&](int batches) {
    static int next = 0;
    for (int i = 0; i < batches; ++i, ++next) {
      char sha[41];
      std::snprintf(sha, sizeof sha, "%040x", 0x2000 + next);
      BatchSpec spec;
      spec.experiment = "exp";
      spec.command = "true";
      spec.repeats = 5;
      REQUIRE(store.runs().Submit("/srv/model", {sha, "", "s", "me", 0}, {spec}, clock.Now()));
    }
  };
  auto steps = [&](int max_active) {
    std::int64_t s0 = sql::VmSteps();
    auto j = StatusJson(store, path, clock.Now(), max_active);
    REQUIRE(j);
    return std::pair(sql::VmSteps() - s0, *j);
  };
  queue(30);
  auto [small, j30] = steps(20);
  CHECK(j30["batches"].size() == 20);
  CHECK(j30["batches_total"] == 30);
  CHECK(j30["batches"][0]["id"].get<std::int64_t>() > j30["batches"][19]["id"].get<std::int64_t>());
  queue(270);
  auto [large, j300] = steps(20);
  CHECK(j300["batches"].size() == 20);
  CHECK(j300["batches_total"] == 300);
  // Finding and counting the active batches is an index range (a few steps
  // per batch); reading each one's runs, values and ETA costs hundreds.
  auto [all, j_all] = steps(0);  // all of them (--json, the read API)
  CHECK(j_all["batches"].size() == 300);
  INFO("VM steps with 30 active batches: " << small << ", with 300: " << large
                                           << ", with 300 and no limit: " << all);
  CHECK((large - small) / 270 < 25);
  CHECK(all > 3 * large);  // the limit is what keeps it flat
  // The text says how many are not shown.
  StatusOptions so;
  so.db = path;
  std::ostringstream out;
  REQUIRE(CmdStatus(so, clock, out));
  CHECK_THAT(out.str(), Catch::Contains("... and 280 more"));
}

}  // namespace
}  // namespace trainq
