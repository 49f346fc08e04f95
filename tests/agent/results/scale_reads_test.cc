// Issue 30: `trainq show`, `trainq report` (without --since, with
// --experiment) and `trainq machines --batches` read what they show, not the
// whole history. Each test counts SQLite VM steps (sql::VmSteps) with ten
// times the history, never a time: reading every batch or every run again
// fails it.
#include <catch2/catch.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/results/commit_view.h"
#include "agent/results/report.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

constexpr TimeMs kNow = 1'700'000'000'000;

// `batches` more finished batches of 20 runs each (experiments exp0..exp2,
// one commit each, each batch done on its own stopped machine), finished in
// one UPDATE per batch.
void AddHistory(Store& store, const std::string& db_path, int batches) {
  static int next = 0;
  auto db = sql::Db::Open(db_path, false, 5000).value();
  for (int i = 0; i < batches; ++i, ++next) {
    char sha[41];
    std::snprintf(sha, sizeof sha, "%040x", 0x1000 + next);
    BatchSpec spec;
    spec.experiment = "exp" + std::to_string(next % 3);
    spec.command = "true";
    spec.repeats = 20;
    auto sub = store.runs().Submit("/srv/model", {sha, "", "s", "me", 0}, {spec}, kNow - 3'600'000);
    REQUIRE(sub);
    MachineRow m;
    m.pool = "cpu";
    m.provider = "fake";
    m.provider_id = "old-" + std::to_string(next);
    m.slots = 4;
    m.hourly_cost = 1.0;
    auto id = store.machines().AddMachine(m, kNow - 3'600'000);
    REQUIRE(id);
    REQUIRE(store.machines().SetMachineState(*id, "stopped", kNow - 1'800'000));
    auto u = db.Prepare("UPDATE runs SET state = 'succeeded', machine_id = ?1, attempts = 1, "
                        "started_ms = ?2, finished_ms = ?2 + 60000, metric_value = 0.9 + repeat / "
                        "1000.0, updated_ms = ?2 + 60000 WHERE batch_id = ?3");
    REQUIRE(u);
    REQUIRE(u->Bind(1, *id).Bind(2, kNow - 3'000'000).Bind(3, sub->front().batch_id).Run());
  }
}

template <typename Fn>
std::int64_t Steps(Fn&& fn) {
  std::int64_t s0 = sql::VmSteps();
  fn();
  return sql::VmSteps() - s0;
}

struct Fixture {
  testing::TempDir tmp;
  std::string path = tmp / "t.db";
  Store store = Store::Open(path).value();
  std::string head = std::string(40, 'c');
  std::string parent = std::string(40, 'b');
  Fixture() {
    // The commit shown: exp0 at `head`, compared with exp0 at `parent`, each
    // 5 runs done.
    for (const auto& [sha, par] : {std::pair(parent, std::string()), std::pair(head, parent)}) {
      BatchSpec spec;
      spec.experiment = "exp0";
      spec.command = "true";
      spec.repeats = 5;
      REQUIRE(store.runs().Submit("/srv/model", {sha, par, "s", "me", 0}, {spec}, kNow));
      auto leased = store.runs().Lease("w", kNow, 60'000, 5).value();
      REQUIRE(leased.size() == 5);
      for (const auto& l : leased) {
        REQUIRE(store.runs().Complete(l.run_id, l.token, kNow + 1, sha == head ? 0.8 : 0.7));
      }
    }
  }
};

TEST_CASE("show reads one commit's batches whatever the history", "[show][scale]") {
  Fixture f;
  AddHistory(f.store, f.path, 10);
  json before;
  auto small = Steps([&] { before = LoadCommitView(f.store, f.head.substr(0, 8)).value(); });
  AddHistory(f.store, f.path, 90);
  json after;
  auto large = Steps([&] { after = LoadCommitView(f.store, f.head.substr(0, 8)).value(); });
  INFO("VM steps with 10 history batches: " << small << ", with 100: " << large);
  // Before the fix show read every batch with its runs' values (~30x here).
  CHECK(large < small * 6 / 5);
  // And it still shows the commit, compared with its parent.
  CHECK(after == before);
  REQUIRE(after["batches"].size() == 1);
  CHECK(after["batches"][0]["vs_parent"]["parent_batch"].is_number());
  CHECK(after["commit"] == f.head);
  // An unknown or ambiguous prefix is still told apart.
  CHECK_FALSE(LoadCommitView(f.store, "dddd0000"));
  CHECK(LoadCommitView(f.store, "0000").error().message.find("ambiguous") != std::string::npos);
}

TEST_CASE("report without --since reads the newest batches it lists", "[report][scale]") {
  Fixture f;
  AddHistory(f.store, f.path, 10);
  ReportQuery table{"", {}, "table", 5};
  // 2 (and 1 more, to know of older ones) of exp1's 3 batches in the
  // smaller history: both read as many.
  ReportQuery one{"", {"exp1"}, "table", 2};
  std::string t_small, e_small;
  auto small = Steps([&] { t_small = ReportBytes(f.store, table, kNow).value(); });
  auto small_e = Steps([&] {
    REQUIRE(CheckReportExperiments(f.store, one.experiments, "--experiment", "t.db"));
    e_small = ReportBytes(f.store, one, kNow).value();
  });
  AddHistory(f.store, f.path, 90);
  std::string t_large, e_large;
  auto large = Steps([&] { t_large = ReportBytes(f.store, table, kNow).value(); });
  auto large_e = Steps([&] {
    REQUIRE(CheckReportExperiments(f.store, one.experiments, "--experiment", "t.db"));
    e_large = ReportBytes(f.store, one, kNow).value();
  });
  INFO("table: " << small << " -> " << large << " VM steps; --experiment exp1: " << small_e
                 << " -> " << large_e);
  CHECK(large < small * 6 / 5);
  CHECK(large_e < small_e * 6 / 5);
  // The newest 5 batches, newest first, and a line saying there are more.
  CHECK_THAT(t_large, Catch::Contains("(the newest 5 batches; older ones: --limit N for more, "
                                      "--limit 0 for all)"));
  CHECK(std::count(t_large.begin(), t_large.end(), '\n') == 1 + 5 + 1);
  CHECK_THAT(e_large, Catch::Contains("exp1"));
  CHECK_THAT(e_large, !Catch::Contains("exp0"));
  // The default: the table 50, JSON everything; --limit 0 all.
  CHECK(ReportLimit({"", {}, "table", std::nullopt}) == kReportTableLimit);
  CHECK(ReportLimit({"", {}, "batches", std::nullopt}) == 0);
  auto all = json::parse(ReportBytes(f.store, {"", {}, "batches", std::nullopt}, kNow).value());
  CHECK(all.size() == 102);
  auto full = ReportBytes(f.store, {"", {}, "table", 0}, kNow).value();
  CHECK_THAT(full, !Catch::Contains("the newest"));
  CHECK(std::count(full.begin(), full.end(), '\n') == 1 + 102);
  // A misspelt experiment is still an error naming the known ones.
  auto bad = CheckReportExperiments(f.store, {"exp9"}, "--experiment", "t.db");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("known: exp0, exp1, exp2"));
  CHECK_FALSE(ParseReportLimit("-1"));
  CHECK_FALSE(ParseReportLimit("5x"));
  CHECK(ParseReportLimit("0").value() == 0);
}

TEST_CASE("per-batch costs read the newest batches' runs only", "[machines][scale]") {
  Fixture f;
  AddHistory(f.store, f.path, 10);
  std::vector<Machines::CostRow> before, after;
  auto small = Steps([&] { before = f.store.machines().Costs(kNow, true, 5).value(); });
  AddHistory(f.store, f.path, 90);
  auto large = Steps([&] { after = f.store.machines().Costs(kNow, true, 5).value(); });
  INFO("VM steps with 10 history batches: " << small << ", with 100: " << large);
  CHECK(large < small * 6 / 5);
  // The newest 5 batches' costs (the 5 newest history batches; the fixture's
  // two ran on no machine): 20 runs of 60 s on a 4-slot machine at 1/h.
  REQUIRE(after.size() == 5);
  for (const auto& c : after) {
    CHECK(c.busy_ms == 20 * 60'000);
    CHECK(c.cost == Approx(20 * 60.0 / 3600 / 4));
  }
  CHECK(after.back().batch_id > before.back().batch_id);
  // Without a limit, every batch that ran on a machine (as before).
  CHECK(f.store.machines().Costs(kNow, true).value().size() == 100);
}

// serve's outcome log asks each loop for the runs that ended since its last
// look (RunQueue::RunsFinishedAfter). With ten times the finished history
// it reads the same: a range on runs_by_finished (schema 17), not every
// finished run sorted again.
TEST_CASE("the runs finished since a point are read without the history", "[outcomes][scale]") {
  Fixture f;
  AddHistory(f.store, f.path, 10);
  // The fixture's own runs finished at kNow; the history before it.
  std::vector<RunRow> small_rows, large_rows;
  auto small = Steps([&] { small_rows = f.store.runs().RunsFinishedAfter(kNow - 1, 0, 200).value(); });
  AddHistory(f.store, f.path, 90);
  auto large = Steps([&] { large_rows = f.store.runs().RunsFinishedAfter(kNow - 1, 0, 200).value(); });
  INFO("VM steps: " << small << " -> " << large);
  CHECK(small_rows.size() == 10);
  CHECK(large_rows.size() == small_rows.size());
  CHECK(large < small * 6 / 5);
  // Paging on (finished_ms, id): after the 4th, the next 6 in order.
  auto rest = f.store.runs().RunsFinishedAfter(*large_rows[3].finished_ms, large_rows[3].id, 200).value();
  REQUIRE(rest.size() == 6);
  CHECK(rest.front().id == large_rows[4].id);
  // And from the start of time, every finished run: 10 + 100 x 20.
  size_t all = 0;
  TimeMs at = 0;
  std::int64_t id = 0;
  while (true) {
    auto page = f.store.runs().RunsFinishedAfter(at, id, 200).value();
    all += page.size();
    if (page.size() < 200) break;
    at = *page.back().finished_ms;
    id = page.back().id;
  }
  CHECK(all == 10 + 100 * 20);
}

}  // namespace
}  // namespace trainq
