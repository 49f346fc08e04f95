// `trainq status`'s text (CmdStatus, RenderStatusText in agent/cli/cmd_status.cc)
// over the status document of agent/results/status.cc: the estimated end of a
// batch as the text shows it, and a deep queue cut to the newest 20.
#include <catch2/catch.hpp>
#include <sstream>

#include "agent/cli/cli.h"
#include "agent/results/status.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

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
