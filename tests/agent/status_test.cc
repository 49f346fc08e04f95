// The status document's estimated end of a batch (`trainq status`, --json,
// GET /api/v1/status): from the measured durations of the experiment's runs
// and the slots the batch can use.
#include "agent/results/status.h"

#include <catch2/catch.hpp>
#include <sstream>

#include "agent/cli/cli.h"
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
  auto sub = store.Submit("/srv/model", {std::string(40, 'a'), "", "s", "me", 0}, {spec},
                          clock.Now());
  REQUIRE(sub);
  const std::int64_t batch = sub->front().batch_id;

  auto status = [&] {
    std::ostringstream text;
    REQUIRE(CmdStatus({tmp / "t.db", false, ""}, clock, text));
    auto j = StatusJson(store, tmp / "t.db", clock.Now()).value();
    return std::pair{j["batches"][0], text.str()};
  };
  // Nothing measured: unknown.
  auto leased = store.Lease("local/1", clock.Now(), 600'000, 1).value();
  REQUIRE(leased.size() == 1);
  REQUIRE(store.MarkRunning(leased[0].run_id, leased[0].token, clock.Now(), ""));
  auto [first, first_text] = status();
  CHECK(first["eta_ms"].is_null());
  CHECK(first["eta_measured_runs"] == 0);
  CHECK_THAT(first_text, Catch::Contains("0/4 done, 0 failed, 1 running, eta ?"));

  // The first run took 60 s; the second has run 20 s; two wait. No machine
  // rows: the batch has the one slot it holds, so 40 s + 2 x 60 s are left.
  clock.Advance(60'000);
  REQUIRE(store.Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
  leased = store.Lease("local/1", clock.Now(), 600'000, 1).value();
  REQUIRE(leased.size() == 1);
  REQUIRE(store.MarkRunning(leased[0].run_id, leased[0].token, clock.Now(), ""));
  clock.Advance(20'000);
  auto [second, second_text] = status();
  CHECK(second["id"] == batch);
  CHECK(second["eta_measured_runs"] == 1);
  REQUIRE(second["eta_ms"].is_number());
  CHECK(second["eta_ms"].get<TimeMs>() == clock.Now() + 40'000 + 2 * 60'000);
  CHECK_THAT(second_text, Catch::Contains("1/4 done, 0 failed, 1 running, eta 2m40s"));

  // A later batch of the same experiment starts with the earlier durations.
  auto again = store.Submit("/srv/model", {std::string(40, 'b'), "", "s2", "me", 0}, {spec},
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
  REQUIRE(store.Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
  for (int i = 0; i < 6; ++i) {
    auto l = store.Lease("local/1", clock.Now(), 600'000, 1).value();
    if (l.empty()) break;
    REQUIRE(store.Complete(l[0].run_id, l[0].token, clock.Now(), 0.9));
  }
  auto done = StatusJson(store, tmp / "t.db", clock.Now()).value();
  for (const auto& b : done["batches"]) CHECK(b["eta_ms"].is_null());
}

}  // namespace
}  // namespace trainq
