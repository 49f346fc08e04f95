// Retention (issue 30; queue/retention.h, agent/results/retention.h):
// server.yaml's `retention:` compacts old finished runs' metric points and
// archives their logs, a bounded amount per serve tick, and changes nothing a
// verdict, a report or `trainq show` reads. Real stores, real files, and the
// real `trainq serve` and `trainq logs`.
#include "agent/results/retention.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "agent/results/commit_view.h"
#include "agent/results/report.h"
#include "agent/results/run_logs.h"
#include "agent/triggers/server_config.h"
#include "core/strings.h"
#include "queue/retention.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {
namespace {

constexpr TimeMs kDay = 86'400'000;

json RunTrainqJson(const std::string& db, const std::string& args) {
  std::string out;
  int code = testing::RunShell(
      "{ " + ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args + " 2>/dev/null; }",
      &out);
  INFO("trainq " << args << " -> " << code << ":\n" << out);
  REQUIRE(code == 0);
  auto j = json::parse(out, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

struct Finished {
  std::int64_t run_id = 0;
  std::string log;
};

// A commit's batch of `runs` runs of experiment `exp`, each with `points`
// step points of "loss" and "acc", a final "acc" and a log under `logs`,
// finished at `at`. Its parent: `parent` ("" for none).
std::vector<Finished> FinishBatch(Store& store, const std::string& logs, const std::string& sha,
                                  const std::string& parent, int runs, int points, TimeMs at,
                                  double base) {
  BatchSpec spec;
  spec.experiment = "exp";
  spec.command = "true";
  spec.repeats = runs;
  REQUIRE(store.runs().Submit("/srv/model", {sha, parent, "s", "me", 0}, {spec}, at - 60'000));
  auto leased = store.runs().Lease("w", at - 60'000, 600'000, runs).value();
  REQUIRE(static_cast<int>(leased.size()) == runs);
  std::vector<Finished> out;
  for (size_t i = 0; i < leased.size(); ++i) {
    const auto& l = leased[i];
    std::string dir = logs + "/runs/" + std::to_string(l.run_id);
    fs::create_directories(dir);
    std::string log = dir + "/output.log";
    std::string text;
    for (int k = 0; k < 200; ++k) text += "run " + std::to_string(l.run_id) + " line " + std::to_string(k) + "\n";
    REQUIRE(WriteFile(log, text));
    REQUIRE(store.runs().MarkRunning(l.run_id, l.token, at - 50'000, log));
    std::vector<MetricPoint> pts;
    for (int s = 0; s < points; ++s) {
      pts.push_back({"loss", 1.0 / (s + 1), s, false});
      pts.push_back({"acc", 0.5 + s * 0.0001, s, false});
    }
    pts.push_back({"acc", base + 0.01 * static_cast<double>(i), std::nullopt, true});
    REQUIRE(store.runs().AddMetrics(l.run_id, l.token, pts, at - 1'000));
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, base + 0.01 * static_cast<double>(i)));
    out.push_back({l.run_id, log});
  }
  return out;
}

TEST_CASE("retention keeps the final points and an even spread of the others", "[retention]") {
  using P = Retention::Point;
  std::vector<P> pts;
  for (int i = 1; i <= 10; ++i) pts.push_back({i, false});
  pts.push_back({11, true});
  // 10 step points down to 4: the first, the last and two between; the final.
  CHECK(Retention::KeptPoints(pts, 4) == std::vector<std::int64_t>{1, 4, 7, 10, 11});
  CHECK(Retention::KeptPoints(pts, 10).size() == 11);
  CHECK(Retention::KeptPoints(pts, 100).size() == 11);
  CHECK(Retention::KeptPoints(pts, 2) == std::vector<std::int64_t>{1, 10, 11});
  CHECK(Retention::KeptPoints({{1, true}, {2, true}}, 2) == std::vector<std::int64_t>{1, 2});
}

TEST_CASE("server.yaml retention: durations, points kept, and errors naming the key",
          "[retention][config]") {
  auto c = ParseServerConfig("retention: {metric_points: 90d, logs: 30d}\n", "server.yaml");
  REQUIRE(c);
  CHECK(c->retention.metric_points_ms == 90 * kDay);
  CHECK(c->retention.logs_ms == 30 * kDay);
  CHECK(c->retention.points_kept == 200);
  auto off = ParseServerConfig("retention: {logs: 30d}\n", "server.yaml");
  REQUIRE(off);
  CHECK(off->retention.metric_points_ms == 0);
  CHECK(ParseServerConfig("", "server.yaml")->retention.any() == false);
  auto bad = ParseServerConfig("retention:\n  logs: 30x\n", "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("server.yaml:2"));
  CHECK_THAT(bad.error().message, Catch::Contains("retention.logs"));
  auto key = ParseServerConfig("retention: {metric_point: 90d}\n", "server.yaml");
  REQUIRE_FALSE(key);
  CHECK_THAT(key.error().message, Catch::Contains("metric_point"));
  auto few = ParseServerConfig("retention: {metric_points: 90d, points_kept: 1}\n", "server.yaml");
  REQUIRE_FALSE(few);
  CHECK_THAT(few.error().message, Catch::Contains("retention.points_kept"));
}

TEST_CASE("retention compacts old runs only, a bounded number a step, and no verdict changes",
          "[retention]") {
  testing::TempDir tmp;
  const std::string path = testing::StoreLocation(tmp, "t.db");
  Store store = Store::Open(path).value();
  const TimeMs now = 1'800'000'000'000;
  // Old: the parent and the head, 100 days ago; new: a commit of yesterday.
  auto parent = FinishBatch(store, tmp.path().string(), std::string(40, 'a'), "", 4, 500, now - 101 * kDay, 0.7);
  auto head = FinishBatch(store, tmp.path().string(), std::string(40, 'b'), std::string(40, 'a'), 4, 500,
                          now - 100 * kDay, 0.8);
  auto fresh = FinishBatch(store, tmp.path().string(), std::string(40, 'c'), std::string(40, 'b'), 2, 500,
                           now - kDay, 0.9);
  auto show = [&] { return LoadCommitView(store, std::string(40, 'b')).value(); };
  auto report = [&] { return ReportBytes(store, {"", {}, "json", std::nullopt}, now).value(); };
  auto table = [&] { return ReportBytes(store, {"", {}, "table", std::nullopt}, now).value(); };
  json show_before = show();
  std::string report_before = report(), table_before = table();
  REQUIRE(show_before["batches"][0].contains("vs_parent"));

  RetentionPolicy p;
  p.metric_points_ms = 90 * kDay;
  p.logs_ms = 30 * kDay;
  p.points_kept = 20;
  p.runs_per_tick = 3;
  RetentionStepper stepper(p, /*interval_ms=*/60'000, /*catch_up_ms=*/0);
  // Bounded: 3 runs a step; the 8 old runs take 3 steps.
  auto d1 = stepper.Step(store, now).value();
  CHECK(d1.compacted_runs == 3);
  CHECK(d1.archived_runs == 3);
  CHECK(d1.points_deleted == 3 * (1000 - 2 * 20));
  CHECK(stepper.Step(store, now).value().compacted_runs == 3);
  auto d3 = stepper.Step(store, now).value();
  CHECK(d3.compacted_runs == 2);
  // Then nothing is due until the interval has passed.
  CHECK_FALSE(stepper.Step(store, now + 1).value().ran);
  CHECK(stepper.Step(store, now + 60'000).value().compacted_runs == 0);

  for (const auto& r : parent) {
    auto pts = store.runs().Metrics(r.run_id).value();
    CHECK(pts.size() == 2 * 20 + 1);
    // The final value and the first and last steps survive.
    CHECK(std::count_if(pts.begin(), pts.end(), [](const MetricPoint& m) { return m.final; }) == 1);
    CHECK(std::any_of(pts.begin(), pts.end(),
                      [](const MetricPoint& m) { return m.name == "loss" && m.step == 499; }));
    CHECK(std::any_of(pts.begin(), pts.end(),
                      [](const MetricPoint& m) { return m.name == "loss" && m.step == 0; }));
    CHECK_FALSE(fs::exists(r.log));
    CHECK(fs::exists(r.log + ".gz"));
  }
  for (const auto& r : fresh) {
    CHECK(store.runs().Metrics(r.run_id).value().size() == 1001);
    CHECK(fs::exists(r.log));
  }
  // Nothing a verdict, `trainq show` or a report reads has changed.
  CHECK(show() == show_before);
  CHECK(report() == report_before);
  CHECK(table() == table_before);

  // An archived log reads as the original did, from any offset.
  auto whole = ReadRunLog(store, parent[0].run_id, std::nullopt, 0, 1 << 20).value();
  CHECK(whole.archived);
  CHECK(whole.bytes.starts_with("run " + std::to_string(parent[0].run_id) + " line 0\n"));
  CHECK(whole.bytes.size() > 2000);
  auto tail = ReadRunLog(store, parent[0].run_id, std::nullopt, 100, 50).value();
  CHECK(tail.bytes == whole.bytes.substr(100, 50));
  CHECK(tail.next_offset == 150);
  auto past = ReadRunLog(store, parent[0].run_id, std::nullopt, 1 << 20, 50).value();
  CHECK(past.bytes.empty());
}

TEST_CASE("a retention step reads the same whatever the compacted history",
          "[retention][scale][sqlite]") {
  testing::TempDir tmp;
  const std::string path = testing::StoreLocation(tmp, "t.db");
  Store store = Store::Open(path).value();
  const TimeMs now = 1'800'000'000'000;
  RetentionPolicy p;
  p.metric_points_ms = 90 * kDay;
  p.logs_ms = 30 * kDay;
  p.runs_per_tick = 1000;
  auto steps = [&](int batches) {
    static int next = 0;
    for (int i = 0; i < batches; ++i, ++next) {
      char sha[41];
      std::snprintf(sha, sizeof sha, "%040x", 0x5000 + next);
      FinishBatch(store, tmp.path().string(), sha, "", 10, 3, now - 100 * kDay, 0.5);
    }
    RetentionStepper catch_up(p, 60'000, 0);
    while (catch_up.Step(store, now).value().compacted_runs > 0) {
    }
    // One more step with nothing due: what every tick after costs.
    RetentionStepper idle(p, 60'000, 0);
    std::int64_t s0 = sql::VmSteps();
    auto d = idle.Step(store, now).value();
    CHECK(d.compacted_runs == 0);
    CHECK(d.archived_runs == 0);
    return sql::VmSteps() - s0;
  };
  auto small = steps(5);
  auto large = steps(45);
  INFO("VM steps of an idle retention step after 50 runs: " << small << ", after 500: " << large);
  CHECK(large <= small + 10);
}

TEST_CASE("serve applies server.yaml retention and trainq logs reads the archive",
          "[retention][e2e]") {
  testing::TempDir tmp;
  const std::string db = testing::StoreLocation(tmp, "t.db");
  const TimeMs now = 1'800'000'000'000;  // 2027: the real clock is later than this
  std::vector<Finished> old_runs;
  json show_before;
  {
    Store store = Store::Open(db).value();
    // Finished long before the real clock's now: 30d and 90d are long past.
    FinishBatch(store, tmp.path().string(), std::string(40, 'a'), "", 3, 400, now - 400 * kDay, 0.7);
    old_runs = FinishBatch(store, tmp.path().string(), std::string(40, 'b'), std::string(40, 'a'), 3, 400,
                           now - 399 * kDay, 0.8);
    show_before = LoadCommitView(store, std::string(40, 'b')).value();
  }
  auto report_before = RunTrainqJson(db, "report --json");
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "retention: {metric_points: 90d, logs: 30d, points_kept: 10}\n"));
  std::string out;
  int code = testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                   " serve --inproc --until-idle --listen off --poll-ms 20 --config " +
                                   ShellQuote(tmp / "server.yaml") + " 2>&1",
                               &out);
  INFO(out);
  REQUIRE(code == 0);
  CHECK_THAT(out, Catch::Contains("retention: 6 run(s)' metric points compacted"));
  {
    Store store = Store::Open(db).value();
    for (const auto& r : old_runs) {
      CHECK(store.runs().Metrics(r.run_id).value().size() == 2 * 10 + 1);
      CHECK_FALSE(fs::exists(r.log));
      CHECK(fs::exists(r.log + ".gz"));
    }
    CHECK(LoadCommitView(store, std::string(40, 'b')).value() == show_before);
  }
  CHECK(RunTrainqJson(db, "report --json") == report_before);
  // `trainq logs`: the original bytes on stdout, a note on stderr.
  std::string logs, note;
  // (RunShell adds 2>&1 after the command: the braces keep each stream apart.)
  REQUIRE(testing::RunShell("{ " + ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                " logs " + std::to_string(old_runs[1].run_id) + " 2>/dev/null; }",
                            &logs) == 0);
  INFO("trainq logs: " << logs);
  CHECK(logs.starts_with("run " + std::to_string(old_runs[1].run_id) + " line 0\n"));
  CHECK_THAT(logs, Catch::EndsWith("line 199\n"));
  REQUIRE(testing::RunShell("{ " + ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                " logs " + std::to_string(old_runs[1].run_id) +
                                " 2>&1 >/dev/null; }",
                            &note) == 0);
  CHECK_THAT(note, Catch::Contains("reading the archive retention made"));
  CHECK_THAT(note, Catch::Contains("output.log.gz"));
}

}  // namespace
}  // namespace trainq
