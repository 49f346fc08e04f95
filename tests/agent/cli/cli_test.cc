// Integration tests through the real `trainq` binary: real git repositories,
// real SQLite files, real child processes.
#include <signal.h>
#include <sqlite3.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/runner/run_process.h"
#include "core/clock.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/agent/mistakes_table.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::ProcessGone;
using testing::ReadPid;
using testing::Slurp;
using testing::Spit;

struct Out {
  int code = -1;
  std::string text;
};

std::string Cmd(const std::string& db, const std::string& args) {
  return ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args;
}

// stdout and stderr together.
Out Trainq(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell(Cmd(db, args), &o.text);
  return o;
}

// stdout only (for --json).
json TrainqJson(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell("{ " + Cmd(db, args) + " 2>/dev/null; }", &o.text);
  INFO("trainq " << args << " -> " << o.code << ":\n" << o.text);
  REQUIRE(o.code == 0);
  auto j = json::parse(o.text, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// Every row of every table, in order: equal snapshots mean nothing was written.
std::string Snapshot(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr) != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "open failed";
    sqlite3_close(db);
    FAIL("snapshot of " << path << ": " << msg);
  }
  auto rows = [&](const std::string& sql) {
    std::vector<std::vector<std::string>> out;
    sqlite3_stmt* st = nullptr;
    REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &st, nullptr) == SQLITE_OK);
    while (sqlite3_step(st) == SQLITE_ROW) {
      std::vector<std::string> row;
      for (int i = 0; i < sqlite3_column_count(st); ++i) {
        auto t = sqlite3_column_text(st, i);
        row.push_back(t ? reinterpret_cast<const char*>(t) : "NULL");
      }
      out.push_back(std::move(row));
    }
    sqlite3_finalize(st);
    return out;
  };
  std::string snap;
  for (const auto& t : rows("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")) {
    auto content = rows("SELECT * FROM \"" + t[0] + "\" ORDER BY rowid");
    snap += "== " + t[0] + " (" + std::to_string(content.size()) + " rows)\n";
    for (const auto& r : content) {
      for (const auto& v : r) snap += v + "|";
      snap += "\n";
    }
  }
  snap += "user_version " + rows("PRAGMA user_version")[0][0] + "\n";
  sqlite3_close(db);
  return snap;
}

Store OpenStore(const std::string& db) {
  StoreOptions so;
  so.create = false;
  auto s = Store::Open(db, so);
  if (!s) FAIL("Store::Open(" << db << "): " << s.error().message);
  return std::move(*s);
}

std::vector<RunRow> AllRuns(const std::string& db) {
  auto store = OpenStore(db);
  auto runs = store.runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs.has_value());
  return *runs;
}

int Count(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t p = text.find(needle); p != std::string::npos; p = text.find(needle, p + 1)) ++n;
  return n;
}

// A seed-dependent "training" script: accuracy = 0.5 + seed / 100.
const char* kTrainPy = R"(import json, os, sys
seed = int(sys.argv[sys.argv.index("--seed") + 1])
if int(os.environ["TRAINQ_SEED"]) != seed:
    sys.exit("TRAINQ_SEED does not match --seed")
acc = 0.5 + seed / 100
print(f"seed {seed}: accuracy {acc}")
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": acc, "final": True}) + "\n")
)";

const char* kTinyYaml = R"(version: 1
defaults:
  repeats: 10
  max_attempts: 1
experiments:
  tiny:
    command: python3 train.py --seed {seed}
    watch: [train.py]
  other:
    command: python3 train.py --seed {seed}
    repeats: 2
)";

double Expected(std::int64_t seed) { return 0.5 + static_cast<double>(seed) / 100; }

struct Project {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
};

TEST_CASE("cli: submit then serve runs every seed and stores the results", "[cli]") {
  Project p;
  std::string sha = p.git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kTinyYaml}}, "tiny");

  auto sub = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()) + " --experiment tiny");
  INFO(sub.text);
  REQUIRE(sub.code == 0);
  CHECK_THAT(sub.text, Catch::Contains("batch 1  tiny: 10 runs queued (seeds 1..10)"));
  CHECK_THAT(sub.text, Catch::Contains(sha.substr(0, 10)));
  {
    auto runs = AllRuns(p.db);
    REQUIRE(runs.size() == 10);
    for (const auto& r : runs) CHECK(r.state == RunState::kQueued);
  }

  auto serve = Trainq(p.db, "serve --slots 2 --until-idle --poll-ms 20");
  INFO(serve.text);
  REQUIRE(serve.code == 0);

  auto runs = AllRuns(p.db);
  REQUIRE(runs.size() == 10);
  std::set<std::int64_t> seeds;
  for (const auto& r : runs) {
    INFO("run " << r.id << " seed " << r.seed << ": " << r.last_error);
    seeds.insert(r.seed);
    CHECK(r.state == RunState::kSucceeded);
    CHECK(r.attempts == 1);
    CHECK(r.batch_id == 1);
    CHECK(r.sha == sha);
    REQUIRE(r.metric_value.has_value());
    CHECK(*r.metric_value == Approx(Expected(r.seed)));
    CHECK_THAT(Slurp(r.log_path), Catch::Contains("seed " + std::to_string(r.seed) + ": accuracy"));
  }
  CHECK(seeds == std::set<std::int64_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10});

  // serve's workers said at register which trainq-train they found: the one
  // beside the binary, as FindTrainqTrain finds it here, or "" without one.
  {
    auto store = Store::Open(p.db).value();
    auto machines = store.machines().List(/*include_stopped=*/true).value();
    REQUIRE_FALSE(machines.empty());
    const std::string expected =
        FindTrainqTrain(fs::path(TRAINQ_BINARY).parent_path().string(), PathEnv());
    for (const auto& m : machines) {
      INFO(m.name << ": " << m.resources_json);
      auto r = json::parse(m.resources_json);
      REQUIRE(r.contains("trainer"));
      CHECK(r["trainer"] == expected);
    }
  }

  // status --json
  auto status = TrainqJson(p.db, "status --json");
  CHECK(status["counts"]["succeeded"] == 10);
  CHECK(status["counts"]["queued"] == 0);
  CHECK(status["counts"]["running"] == 0);
  CHECK(status["running"].empty());
  REQUIRE(status["batches"].size() == 1);
  auto b = status["batches"][0];
  CHECK(b["id"] == 1);
  CHECK(b["experiment"] == "tiny");
  CHECK(b["commit"] == sha);
  CHECK(b["done"] == 10);
  CHECK(b["failed"] == 0);
  CHECK(b["runs"] == 10);
  CHECK(b["summary"]["n"] == 10);
  CHECK(b["summary"]["mean"].get<double>() == Approx(0.555));

  auto text = Trainq(p.db, "status");
  REQUIRE(text.code == 0);
  CHECK_THAT(text.text, Catch::Contains("10/10 done, 0 failed"));

  // report --json: n, mean, sd, min, max.
  auto report = TrainqJson(p.db, "report --json");
  REQUIRE(report.size() == 1);
  auto s = report[0]["summary"];
  CHECK(s["n"] == 10);
  CHECK(s["mean"].get<double>() == Approx(0.555));
  CHECK(s["sd"].get<double>() == Approx(0.0302765).epsilon(1e-4));  // sd of 1..10, / 100
  CHECK(s["min"].get<double>() == Approx(0.51));
  CHECK(s["max"].get<double>() == Approx(0.60));
  auto report_text = Trainq(p.db, "report");
  REQUIRE(report_text.code == 0);
  CHECK_THAT(report_text.text, Catch::Contains("0.5550"));

  // runs --batch 1
  auto list = Trainq(p.db, "runs --batch 1");
  INFO(list.text);
  REQUIRE(list.code == 0);
  CHECK(Count(list.text, "succeeded") == 10);
  auto list_json = TrainqJson(p.db, "runs --batch 1 --json");
  REQUIRE(list_json.size() == 10);
  for (const auto& r : list_json) {
    CHECK(r["state"] == "succeeded");
    CHECK(r["metric"].get<double>() == Approx(Expected(r["seed"].get<std::int64_t>())));
  }

  // The same commit again: nothing new.
  auto again = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()) + " --experiment tiny");
  INFO(again.text);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.text, Catch::Contains("already submitted; nothing added"));
  CHECK(AllRuns(p.db).size() == 10);

  // More repeats top the batch up with the next seeds.
  auto more = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()) +
                               " --experiment tiny --repeats 12");
  INFO(more.text);
  REQUIRE(more.code == 0);
  CHECK_THAT(more.text, Catch::Contains("2 more runs queued"));
  auto topped = AllRuns(p.db);
  REQUIRE(topped.size() == 12);
  CHECK(topped[10].seed == 11);
  CHECK(topped[11].seed == 12);
  CHECK(topped[10].state == RunState::kQueued);
  CHECK(topped[11].state == RunState::kQueued);
  CHECK(topped[10].batch_id == 1);
  auto status2 = TrainqJson(p.db, "status --json");
  CHECK(status2["counts"]["queued"] == 2);
  CHECK(status2["counts"]["succeeded"] == 10);
  REQUIRE(status2["batches"].size() == 1);
  CHECK(status2["batches"][0]["repeats"] == 12);
}

TEST_CASE("cli: submit without --experiment queues every experiment, --json", "[cli]") {
  Project p;
  std::string sha = p.git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kTinyYaml}}, "tiny");
  auto j = TrainqJson(p.db, "submit --json --repo " + ShellQuote(p.git.dir()));
  CHECK(j["commit"] == sha);
  REQUIRE(j["batches"].size() == 2);
  CHECK(j["batches"][0]["experiment"] == "tiny");
  CHECK(j["batches"][0]["runs_added"] == 10);
  CHECK(j["batches"][1]["experiment"] == "other");
  CHECK(j["batches"][1]["runs_added"] == 2);
  CHECK(j["batches"][1]["seeds"] == json::array({1, 2}));
  CHECK(AllRuns(p.db).size() == 12);
}

// ---------------------------------------------------------------------------
// Bad input: a clear message, a non-zero exit, and the store unchanged.

struct BadInput : Project {
  std::string first = git.Commit({{"README", "no manifest here\n"}}, "readme only");
  std::string good = git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kTinyYaml}}, "tiny");
  std::string before;

  BadInput() {
    auto sub = Trainq(db, "submit --repo " + ShellQuote(git.dir()) + " --experiment other");
    INFO(sub.text);
    REQUIRE(sub.code == 0);
    before = Snapshot(db);
    REQUIRE_THAT(before, Catch::Contains("== runs (2 rows)"));
  }

  // Runs a command that must fail; returns its message.
  std::string MustFail(const std::string& args) {
    auto o = Trainq(db, args);
    INFO("trainq " << args << "\n" << o.text);
    CHECK(o.code != 0);
    CHECK_THAT(o.text, Catch::Contains("trainq: error: "));
    CHECK(Snapshot(db) == before);
    CHECK(AllRuns(db).size() == 2);
    return o.text;
  }
  std::string Repo() const { return ShellQuote(git.dir()); }
};

TEST_CASE("cli: submit from a directory that is not a git repository", "[cli][errors]") {
  BadInput t;
  fs::create_directories(t.tmp.path() / "plain");
  Spit(t.tmp.path() / "plain" / "trainq.yaml", kTinyYaml);
  auto msg = t.MustFail("submit --repo " + ShellQuote(t.tmp / "plain"));
  CHECK_THAT(msg, Catch::Contains(t.tmp / "plain"));
  CHECK_THAT(msg, Catch::Contains("not a git repository"));

  auto missing = t.MustFail("submit --repo " + ShellQuote(t.tmp / "nowhere"));
  CHECK_THAT(missing, Catch::Contains(t.tmp / "nowhere"));
  CHECK_THAT(missing, Catch::Contains("no such directory"));
}

TEST_CASE("cli: submit an unknown revision", "[cli][errors]") {
  BadInput t;
  auto msg = t.MustFail("submit --repo " + t.Repo() + " --commit no-such-branch");
  CHECK_THAT(msg, Catch::Contains("unknown revision 'no-such-branch'"));
  CHECK_THAT(msg, Catch::Contains(fs::canonical(t.git.dir()).string()));
}

TEST_CASE("cli: submit a commit without trainq.yaml", "[cli][errors]") {
  BadInput t;
  auto msg = t.MustFail("submit --repo " + t.Repo() + " --commit HEAD~1");
  CHECK_THAT(msg, Catch::Contains("trainq.yaml not found at commit " + t.first.substr(0, 10)));
  CHECK_THAT(msg, Catch::Contains(fs::canonical(t.git.dir()).string()));
}

TEST_CASE("cli: submit an invalid trainq.yaml", "[cli][errors]") {
  BadInput t;
  std::string bad = t.git.Commit({{"trainq.yaml", "version: 1\n"
                                                  "experiments:\n"
                                                  "  tiny:\n"
                                                  "    command: python3 train.py\n"
                                                  "    repeats: ten\n"}},
                                 "break the manifest");
  auto msg = t.MustFail("submit --repo " + t.Repo());
  CHECK_THAT(msg, Catch::Contains(
                      "trainq.yaml:5: experiments.tiny.repeats: expected a positive integer, got "
                      "\"ten\""));
  CHECK_THAT(msg, Catch::Contains(bad.substr(0, 10)));

  t.git.Commit({{"trainq.yaml", "version: 1\nexperiments:\n  tiny:\n    command: [unclosed\n"}},
               "worse");
  auto syntax = t.MustFail("submit --repo " + t.Repo());
  CHECK_THAT(syntax, Catch::Matches("(.|\n)*trainq\\.yaml:[0-9]+: invalid YAML(.|\n)*"));

  t.git.Commit({{"trainq.yaml", "version: 1\nexperiments:\n  tiny:\n    command: x\n    repeat: 3\n"}},
               "typo");
  auto typo = t.MustFail("submit --repo " + t.Repo());
  CHECK_THAT(typo, Catch::Contains("trainq.yaml:5: experiments.tiny.repeat: unknown key"));
}

TEST_CASE("cli: submit refuses each usual mistake with file:line:key and queues nothing",
          "[cli][errors]") {
  for (const auto& m : testing::Mistakes()) {
    DYNAMIC_SECTION(m.what) {
      BadInput t;
      t.git.Commit(m.files, m.what);
      auto msg = t.MustFail("submit --repo " + t.Repo());
      for (const auto& e : m.expected) CHECK_THAT(msg, Catch::Contains(e));
    }
  }
}

TEST_CASE("cli: submit's limits are configurable", "[cli]") {
  BadInput t;
  t.git.Commit({{"trainq.yaml", "version: 1\nexperiments:\n  t:\n    command: echo {seed}\n"
                                "    repeats: 6\n"}},
               "six runs");
  auto msg = t.MustFail("submit --repo " + t.Repo() + " --max-runs 5");
  CHECK_THAT(msg, Catch::Contains("6 runs in one submission, more than the limit of 5"));
  auto ok = Trainq(t.db, "submit --repo " + t.Repo() + " --max-runs 6");
  INFO(ok.text);
  CHECK(ok.code == 0);
  CHECK(AllRuns(t.db).size() == 8);
}

TEST_CASE("cli: a valid trainer spec with a template in the commit is accepted", "[cli]") {
  BadInput t;
  t.git.Commit({{"trainq.yaml", "version: 1\nexperiments:\n  mlp:\n    trainer: configs/mlp.yaml\n"
                                "    repeats: 2\n"},
                {"configs/base.yaml", testing::kGoodSpec},
                {"configs/mlp.yaml", "template: ../configs/./base.yaml\ntrainer: {epochs: 3}\n"}},
               "trainer spec");
  auto ok = Trainq(t.db, "submit --repo " + t.Repo());
  INFO(ok.text);
  CHECK(ok.code == 0);
  CHECK(AllRuns(t.db).size() == 4);
}

TEST_CASE("cli: submit an unknown experiment lists the known ones", "[cli][errors]") {
  BadInput t;
  // One good and one unknown name: nothing at all is queued.
  auto msg = t.MustFail("submit --repo " + t.Repo() + " --experiment tiny --experiment lstm");
  CHECK_THAT(msg, Catch::Contains("unknown experiment 'lstm'"));
  CHECK_THAT(msg, Catch::Contains("known: tiny, other"));
}

TEST_CASE("cli: submit with --repeats 0", "[cli][errors]") {
  BadInput t;
  auto msg = t.MustFail("submit --repo " + t.Repo() + " --repeats 0");
  CHECK_THAT(msg, Catch::Contains("--repeats"));
}

TEST_CASE("cli: a file that is not a SQLite database as --db", "[cli][errors]") {
  Project p;
  p.git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kTinyYaml}}, "tiny");
  std::string notdb = p.tmp / "notes.txt";
  std::string content;
  for (int i = 0; i < 200; ++i) content += "these are my notes, not a database\n";
  Spit(notdb, content);
  for (const std::string& args : {"submit --repo " + ShellQuote(p.git.dir()), std::string("status"),
                                 std::string("serve --until-idle"), std::string("report")}) {
    auto o = Trainq(notdb, args);
    INFO("trainq " << args << "\n" << o.text);
    CHECK(o.code != 0);
    CHECK_THAT(o.text, Catch::Contains("trainq: error: " + notdb));
    CHECK_THAT(o.text, Catch::Contains("not a database"));
    CHECK(Slurp(notdb) == content);
  }
  CHECK_FALSE(fs::exists(notdb + "-wal"));
}

TEST_CASE("cli: read commands leave another program's SQLite database alone",
          "[cli][errors]") {
  // Regression (fixed): Store::Open (queue/store.cc), used by `trainq status/runs/report/cancel`
  // with create=false, accepts any SQLite file at user_version 0: it switches it to
  // WAL and runs the migrations, adding trainq's tables to someone else's database.
  // Expected: a file that is a SQLite database but not a trainq one (has tables,
  // user_version 0) is refused with a clear error and left byte-for-byte unchanged.
  testing::TempDir tmp;
  std::string db = tmp / "notes.sqlite";
  sqlite3* raw = nullptr;
  REQUIRE(sqlite3_open(db.c_str(), &raw) == SQLITE_OK);
  REQUIRE(sqlite3_exec(raw, "CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT);"
                            "INSERT INTO notes (text) VALUES ('keep me');",
                       nullptr, nullptr, nullptr) == SQLITE_OK);
  sqlite3_close(raw);
  std::string bytes = Slurp(db);
  auto o = Trainq(db, "status");
  INFO(o.text);
  CHECK(o.code != 0);
  CHECK_THAT(o.text, Catch::Contains(db));
  CHECK(Slurp(db) == bytes);
  CHECK_THAT(Snapshot(db), !Catch::Contains("== runs"));
}

TEST_CASE("cli: read commands on a missing database say so and create nothing",
          "[cli][errors]") {
  testing::TempDir tmp;
  std::string db = tmp / "missing.db";
  for (const std::string args : {"status", "status --json", "runs", "report", "cancel 1"}) {
    auto o = Trainq(db, args);
    INFO("trainq " << args << "\n" << o.text);
    CHECK(o.code != 0);
    CHECK_THAT(o.text, Catch::Contains(db + ": no such database"));
  }
  CHECK_FALSE(fs::exists(db));
}

TEST_CASE("cli: cancel and runs with a bad id or state", "[cli][errors]") {
  BadInput t;
  auto cancel = t.MustFail("cancel 999");
  CHECK_THAT(cancel, Catch::Contains("batch 999 does not exist"));
  auto cancel_run = t.MustFail("cancel --run 999");
  CHECK_THAT(cancel_run, Catch::Contains("run 999 does not exist"));
  auto state = t.MustFail("runs --state bogus");
  CHECK_THAT(state, Catch::Contains("unknown state 'bogus'"));
  CHECK_THAT(state, Catch::Contains("succeeded"));
  auto batch = t.MustFail("runs --batch 999");
  CHECK_THAT(batch, Catch::Contains("batch 999 does not exist"));
  CHECK(Trainq(t.db, "frobnicate").code != 0);
  CHECK(Snapshot(t.db) == t.before);
}

TEST_CASE("cli: issue 27's names: runs --state bogus exits 2, --limit keeps the newest runs, "
          "durations read as in server.yaml",
          "[cli][errors]") {
  BadInput t;
  auto bogus = Trainq(t.db, "runs --state bogus");
  CHECK(bogus.code == 2);  // a usage error, as documented
  CHECK_THAT(bogus.text, Catch::Contains("unknown state 'bogus'"));

  auto sub = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny --json");
  REQUIRE(sub.code == 0);
  auto all = AllRuns(t.db);
  REQUIRE(all.size() == 12);
  auto newest = TrainqJson(t.db, "runs --limit 3 --json");
  REQUIRE(newest.size() == 3);
  // The newest three, listed oldest first like the whole list.
  CHECK(newest[0]["id"] == all[9].id);
  CHECK(newest[1]["id"] == all[10].id);
  CHECK(newest[2]["id"] == all[11].id);

  // The CLI takes the durations the YAML takes; a bad one is a usage error.
  auto bad = Trainq(t.db, "serve --until-idle --idle-grace 2x");
  CHECK(bad.code == 2);
  CHECK_THAT(bad.text, Catch::Contains("--idle-grace"));
  CHECK_THAT(bad.text, Catch::Contains("expected a duration such as 90s, 15m, 2h or 1d"));
  auto worker = Trainq(t.db, "worker --server http://127.0.0.1:1 --orphan-timeout 1h30x");
  CHECK(worker.code == 2);
  // An empty queue: serve starts with them and exits at once.
  auto ok = Trainq(t.tmp / "empty.db", "serve --until-idle --inproc --idle-grace 2m "
                                       "--lease 1m30s --heartbeat 5s --kill-grace 10");
  INFO(ok.text);
  CHECK(ok.code == 0);
}

TEST_CASE("cli: cancel a batch", "[cli]") {
  BadInput t;
  auto o = Trainq(t.db, "cancel 1");
  INFO(o.text);
  REQUIRE(o.code == 0);
  CHECK_THAT(o.text, Catch::Contains("2 run(s) cancelled"));
  for (const auto& r : AllRuns(t.db)) CHECK(r.state == RunState::kCancelled);
  // Serving a cancelled batch runs nothing.
  auto serve = Trainq(t.db, "serve --until-idle --poll-ms 20");
  REQUIRE(serve.code == 0);
  for (const auto& r : AllRuns(t.db)) CHECK(r.state == RunState::kCancelled);
}

TEST_CASE("cli: cancel --json, and a fully cancelled batch leaves status", "[cli]") {
  BadInput t;
  REQUIRE(Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny").code == 0);
  auto before = Trainq(t.db, "status");
  CHECK_THAT(before.text, Catch::Contains(" other "));
  auto j = TrainqJson(t.db, "cancel 1 --json");
  CHECK(j == json{{"batch", 1}, {"cancelled", 2}});
  auto run = TrainqJson(t.db, "cancel --run 3 --json");
  CHECK(run == json{{"run", 3}, {"cancelled", 1}});
  auto after = Trainq(t.db, "status");
  INFO(after.text);
  CHECK_THAT(after.text, !Catch::Contains(" other "));
  CHECK_THAT(after.text, Catch::Contains(" tiny "));  // partly cancelled: still shown
}

TEST_CASE("cli: retry puts a cancelled run back in the queue, refuses one still queued",
          "[cli][retry]") {
  BadInput t;
  // Refused without a change: an unknown run, a run still in the queue, a batch
  // with no dead runs (nothing to do, exit 0).
  CHECK_THAT(t.MustFail("retry 999"), Catch::Contains("run 999 does not exist"));
  CHECK_THAT(t.MustFail("retry 1"),
             Catch::Contains("run 1 is queued, still in the queue; only a dead or cancelled run "
                             "can be retried"));
  auto none = Trainq(t.db, "retry --batch 1");
  CHECK(none.code == 0);
  CHECK_THAT(none.text, Catch::Contains("batch 1 has no dead runs; nothing to retry"));
  CHECK_THAT(t.MustFail("retry --batch 9"), Catch::Contains("batch 9 does not exist"));

  REQUIRE(Trainq(t.db, "cancel --run 1").code == 0);
  auto o = Trainq(t.db, "retry 1");
  INFO(o.text);
  REQUIRE(o.code == 0);
  CHECK_THAT(o.text, Catch::Contains("run 1 queued again (was cancelled after 0 attempt(s)); "));
  auto runs = AllRuns(t.db);
  REQUIRE(runs.size() == 2);
  CHECK(runs[0].state == RunState::kQueued);
  CHECK(runs[0].retries == 1);
  CHECK_THAT(runs[0].last_error, Catch::Contains("retried by local user "));
  REQUIRE(Trainq(t.db, "cancel --run 1").code == 0);
  auto j = TrainqJson(t.db, "retry 1 --json");
  REQUIRE(j["retried"].size() == 1);
  CHECK(j["retried"][0]["run"] == 1);
  CHECK(j["retried"][0]["was"] == "cancelled");
  CHECK(j["retried"][0]["retries"] == 2);
}

TEST_CASE("cli: usage errors exit 2 with CLI11's message, an unknown command is named",
          "[cli][errors]") {
  testing::TempDir tmp;
  std::string db = tmp / "t.db";
  auto bad_flag = Trainq(db, "submit --repeatz 3");
  CHECK(bad_flag.code == 2);
  CHECK_THAT(bad_flag.text, Catch::Contains("--repeatz"));
  auto missing = Trainq(db, "cancel");
  CHECK(missing.code == 2);
  CHECK_THAT(missing.text, Catch::Contains("ID is required"));
  auto unknown = Trainq(db, "nosuch");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.text, Catch::StartsWith("trainq: unknown command 'nosuch' (commands: "));
  CHECK_THAT(unknown.text, Catch::Contains("submit"));
  CHECK(Trainq(db, "--help").code == 0);
  CHECK(Trainq(db, "submit --help").code == 0);
  CHECK_FALSE(fs::exists(db));
}

// Issue 38.9: `trainq help` was an unknown command, `trainq help logs` said
// "RUN is required" and `trainq help submit` "The following argument was not
// expected: help".
TEST_CASE("cli: trainq help [COMMAND [SUBCOMMAND]] prints what --help prints, exit 0",
          "[cli]") {
  testing::TempDir tmp;
  std::string db = tmp / "t.db";
  for (const std::string words : {"", "logs", "submit", "sweep", "sweep start", "pools reset"}) {
    INFO("trainq help " << words);
    auto help = Trainq(db, "help " + words);
    auto flag = Trainq(db, words + " --help");
    CHECK(help.code == 0);
    CHECK(flag.code == 0);
    CHECK(help.text == flag.text);
    CHECK_THAT(help.text, Catch::Contains("Usage:"));
  }
  CHECK_THAT(Trainq(db, "help logs").text, Catch::Contains("RUN"));
  // Global options may come first; `help` is listed among the commands.
  CHECK(Trainq(db, "-q help submit").text == Trainq(db, "submit --help").text);
  CHECK_THAT(Trainq(db, "--help").text, Catch::Contains("  help"));
  // An unknown command after help is named, as without it.
  auto unknown = Trainq(db, "help nosuch");
  CHECK(unknown.code == 2);
  CHECK_THAT(unknown.text, Catch::StartsWith("trainq: unknown command 'nosuch'"));
  CHECK_FALSE(fs::exists(db));
}

TEST_CASE("cli: report --experiment with a name no batch has is an error", "[cli][errors]") {
  BadInput t;
  auto o = Trainq(t.db, "report --experiment nope");
  CHECK(o.code == 1);
  CHECK_THAT(o.text, Catch::Contains("--experiment: no batch of experiment 'nope'"));
  CHECK_THAT(o.text, Catch::Contains("(known: other)"));
  CHECK(Trainq(t.db, "report --experiment other").code == 0);
}

TEST_CASE("cli: one run is 'run', and a top-up names its last seed", "[cli]") {
  BadInput t;
  auto one = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny --repeats 1");
  CHECK_THAT(one.text, Catch::Contains("tiny: 1 run queued (seed 1)\n"));
  auto more = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny --repeats 3");
  CHECK_THAT(more.text, Catch::Contains("already submitted; 2 more runs queued (up to seed 3)"));
}

TEST_CASE("cli: submit of HEAD warns about uncommitted edits to files that matter",
          "[cli]") {
  BadInput t;
  fs::path repo = t.git.dir();
  // An edit to an unrelated file says nothing.
  Spit(repo / "README", "edited\n");
  auto quiet = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny");
  INFO(quiet.text);
  REQUIRE(quiet.code == 0);
  CHECK_THAT(quiet.text, !Catch::Contains("warning"));
  // trainq.yaml and a watched file (tiny watches train.py).
  Spit(repo / "trainq.yaml", std::string(kTinyYaml) + "# lr 0.2\n");
  Spit(repo / "train.py", std::string(kTrainPy) + "# changed\n");
  auto warned = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny");
  INFO(warned.text);
  CHECK(warned.code == 0);
  CHECK_THAT(warned.text, Catch::Contains("trainq: warning: uncommitted changes to train.py, "
                                          "trainq.yaml are not part of " +
                                          t.good.substr(0, 10)));
  auto silenced =
      Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny --allow-dirty");
  CHECK_THAT(silenced.text, !Catch::Contains("warning"));
  // Another commit than HEAD: the work tree is not what runs anyway.
  auto other = Trainq(t.db, "submit --repo " + t.Repo() + " --commit " + t.good.substr(0, 10) +
                                "~0 --experiment tiny");
  CHECK_THAT(other.text, Catch::Contains("warning"));  // still HEAD's commit
  t.git.Commit({{"notes.txt", "x\n"}}, "later");
  auto older = Trainq(t.db, "submit --repo " + t.Repo() + " --commit HEAD~1 --experiment tiny");
  INFO(older.text);
  CHECK(older.code == 0);
  CHECK_THAT(older.text, !Catch::Contains("warning"));
}

TEST_CASE("cli: without --db or TRAINQ_DB the state goes to the per-user data folder",
          "[cli]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kTinyYaml}}, "tiny");
  std::string env = "cd " + ShellQuote(git.dir()) + " && env -u TRAINQ_DB XDG_DATA_HOME=" +
                    ShellQuote(tmp / "xdg") + " " + ShellQuote(TRAINQ_BINARY) + " ";
  Out first;
  first.code = testing::RunShell(env + "submit --experiment other", &first.text);
  INFO(first.text);
  REQUIRE(first.code == 0);
  std::string db = (fs::path(tmp / "xdg") / "trainq" / "trainq.db").string();
  CHECK(fs::exists(db));
  CHECK_THAT(first.text, Catch::Contains("trainq: created " + db));
  CHECK_FALSE(fs::exists(fs::path(git.dir()) / "trainq.db"));
  Out second;
  second.code = testing::RunShell(env + "status", &second.text);
  CHECK(second.code == 0);
  CHECK_THAT(second.text, !Catch::Contains("created"));
  CHECK_THAT(second.text, Catch::Contains("queued 2"));
  // An existing ./trainq.db keeps working.
  Out local;
  REQUIRE(testing::RunShell("cd " + ShellQuote(git.dir()) + " && " + ShellQuote(TRAINQ_BINARY) +
                                " --db trainq.db submit --experiment tiny --repeats 1",
                            &local.text) == 0);
  Out here;
  here.code = testing::RunShell(env + "status", &here.text);
  INFO(here.text);
  CHECK_THAT(here.text, Catch::Contains("queued 1"));
}

TEST_CASE("cli: a locked database fails submit cleanly while reads still work",
          "[cli][errors]") {
  BadInput t;
  sqlite3* lock = nullptr;
  REQUIRE(sqlite3_open(t.db.c_str(), &lock) == SQLITE_OK);
  REQUIRE(sqlite3_exec(lock, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) == SQLITE_OK);
  // Reads work next to a writer (WAL).
  auto status = TrainqJson(t.db, "status --json");
  CHECK(status["counts"]["queued"] == 2);
  // A write waits for the busy timeout, then gives up with a message.
  auto o = Trainq(t.db, "submit --repo " + t.Repo() + " --experiment tiny");
  sqlite3_exec(lock, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(lock);
  INFO(o.text);
  CHECK(o.code != 0);
  CHECK_THAT(o.text, Catch::Contains("trainq: error: " + t.db));
  CHECK_THAT(o.text, Catch::Contains("lock"));
  CHECK(Snapshot(t.db) == t.before);
}

// ---------------------------------------------------------------------------
// Runs that fail: serve finishes, the runs are dead with their error.

TEST_CASE("cli: runs that exit non-zero, print no metric or time out end dead, serve exits 1",
          "[cli]") {
  Project p;
  p.git.Commit({{"trainq.yaml", R"(version: 1
defaults:
  max_attempts: 1
experiments:
  crash:
    command: echo "oops on stderr" >&2; exit 4
    repeats: 2
  silent:
    command: echo "trained, forgot to report"
    repeats: 1
  slow:
    command: sleep 30
    timeout: 1s
    repeats: 1
)"}},
               "failing experiments");
  auto sub = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()));
  INFO(sub.text);
  REQUIRE(sub.code == 0);
  auto start = std::chrono::steady_clock::now();
  auto serve = Trainq(p.db, "serve --slots 2 --until-idle --poll-ms 20 --kill-grace 1");
  INFO(serve.text);
  CHECK(serve.code == 1);
  CHECK_THAT(serve.text, Catch::Contains("trainq: error: 4 run(s) ended dead"));
  // Fleet workers report over HTTP; serve logs each outcome from the store.
  CHECK(Count(serve.text, " dead: crash seed ") == 2);
  CHECK_THAT(serve.text, Catch::Contains("exit code 4: oops on stderr"));
  CHECK_THAT(serve.text, Catch::Contains(" dead: slow seed 1 (attempt 1/1"));
  CHECK(std::chrono::steady_clock::now() - start < 20s);

  auto runs = AllRuns(p.db);
  REQUIRE(runs.size() == 4);
  for (const auto& r : runs) {
    INFO("run " << r.id << " " << r.experiment << ": " << r.last_error);
    CHECK(r.state == RunState::kDead);
    CHECK(r.attempts == 1);
    CHECK_FALSE(r.metric_value.has_value());
    if (r.experiment == "crash") {
      CHECK(r.exit_code == 4);
      CHECK_THAT(r.last_error, Catch::Contains("exit code 4"));
      CHECK_THAT(r.last_error, Catch::Contains("oops on stderr"));
    } else if (r.experiment == "silent") {
      CHECK(r.exit_code == 0);
      CHECK_THAT(r.last_error, Catch::Contains("reported no 'accuracy' metric"));
    } else {
      CHECK(r.experiment == "slow");
      CHECK_THAT(r.last_error, Catch::Contains("timed out after 1s"));
    }
  }
  auto dead = Trainq(p.db, "runs --state dead");
  REQUIRE(dead.code == 0);
  CHECK(Count(dead.text, " dead ") == 4);
  // The run's own error, not trainq's banner line.
  CHECK_THAT(dead.text, Catch::Contains("exit code 4: oops on stderr"));
  CHECK_THAT(dead.text, !Catch::Contains("=== trainq"));
  auto report = TrainqJson(p.db, "report --json");
  REQUIRE(report.size() == 3);
  for (const auto& b : report) {
    CHECK(b["done"] == 0);
    CHECK(b["failed"] == b["runs"]);
    CHECK(b["summary"]["n"] == 0);
  }
  auto status = Trainq(p.db, "status");
  REQUIRE(status.code == 0);
  CHECK_THAT(status.text, Catch::Contains("0/2 done, 2 failed"));
}

TEST_CASE("cli: a configuration error is dead after one attempt, its message everywhere",
          "[cli]") {
  for (std::string mode : {"", "--inproc"}) {
    DYNAMIC_SECTION("serve " << mode) {
      Project p;
      // A stand-in trainq-train on PATH (the real one, when built, comes first
      // and fails on the missing data file the same way: exit 3).
      const fs::path bin = p.tmp / "bin";
      fs::create_directories(bin);
      Spit(bin / "trainq-train",
           "#!/bin/sh\necho 'epoch 1/3 ...'\n"
           "echo \"trainq-train: data error: $1: data.csv: No such file or directory\" >&2\n"
           "exit 3\n");
      fs::permissions(bin / "trainq-train", fs::perms::owner_all);
      p.git.Commit({{"trainq.yaml", R"(version: 1
defaults:
  max_attempts: 3
experiments:
  script:
    command: python3 no_such_script.py --seed {seed}
    repeats: 2
  spec:
    trainer: spec.yaml
    repeats: 1
  crash:
    command: 'echo "RuntimeError: CUDA out of memory" >&2; exit 1'
    repeats: 1
    max_attempts: 2
)"},
                    {"spec.yaml", testing::kGoodSpec}},
                   "config errors");
      auto sub = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()));
      INFO(sub.text);
      REQUIRE(sub.code == 0);
      std::string path = "PATH=" + ShellQuote(bin.string()) + ":\"$PATH\" ";
      Out serve;
      serve.code = testing::RunShell(
          path + Cmd(p.db, "serve --until-idle --poll-ms 20 " + mode), &serve.text);
      INFO(serve.text);
      CHECK(serve.code == 1);
      CHECK_THAT(serve.text, Catch::Contains("4 run(s) ended dead"));
      for (const auto& r : AllRuns(p.db)) {
        INFO("run " << r.id << " " << r.experiment << ": " << r.last_error);
        CHECK(r.state == RunState::kDead);
        if (r.experiment == "script") {
          CHECK(r.attempts == 1);
          CHECK_THAT(r.last_error, Catch::StartsWith("exit code 2 (configuration error, not "
                                                     "retried): "));
          CHECK_THAT(r.last_error, Catch::Contains("can't open file"));
        } else if (r.experiment == "spec") {
          CHECK(r.attempts == 1);
          CHECK_THAT(r.last_error, Catch::StartsWith("exit code 3 (configuration error"));
          CHECK_THAT(r.last_error, Catch::Contains("trainq-train: data error:"));
        } else {
          CHECK(r.attempts == 2);  // a crash is retried
          CHECK_THAT(r.last_error,
                     Catch::Equals("exit code 1: RuntimeError: CUDA out of memory"));
        }
      }
      // The serve log (fleet: learnt from the store; --inproc: the executor's own).
      CHECK_THAT(serve.text, Catch::Contains("trainq-train: data error:"));
      CHECK_THAT(serve.text, Catch::Contains("RuntimeError: CUDA out of memory"));
      auto runs = Trainq(p.db, "runs --state dead");
      CHECK_THAT(runs.text, Catch::Contains("exit code 1: RuntimeError: CUDA out of memory"));
      // The output's last lines follow (the stand-in's, or the real
      // trainq-train's when it was built next to trainq).
      CHECK_THAT(runs.text, Catch::Contains("exit code 3 (configuration error, not retried): "));
      auto sha = AllRuns(p.db).front().sha;
      auto show = Trainq(p.db, "show " + sha.substr(0, 10));
      INFO(show.text);
      CHECK_THAT(show.text, Catch::Contains("(dead): exit code 1: RuntimeError: CUDA out of memory"));
      CHECK_THAT(show.text, Catch::Contains("(dead): exit code 2 (configuration error, not "
                                            "retried): "));
    }
  }
}

TEST_CASE("cli: serve --until-idle gives up on runs no pool can serve and says why", "[cli]") {
  Project p;
  p.git.Commit({{"train.py", kTrainPy},
                {"trainq.yaml", "version: 1\nexperiments:\n  gpu:\n    command: python3 train.py "
                                "--seed {seed}\n    repeats: 2\n    resources: {gpus: 1}\n"
                                "  cpu:\n    command: python3 train.py --seed {seed}\n"
                                "    repeats: 1\n"}},
               "a GPU experiment");
  REQUIRE(Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir())).code == 0);
  auto start = std::chrono::steady_clock::now();
  auto serve = Trainq(p.db, "serve --until-idle --poll-ms 20");
  INFO(serve.text);
  CHECK(serve.code == 1);
  CHECK_THAT(serve.text, Catch::Contains("trainq: error: 2 queued run(s) can never start (2 "
                                         "run(s): no pool has 1 GPU (the most is 0)); exiting "
                                         "(--until-idle)"));
  CHECK(std::chrono::steady_clock::now() - start < 60s);
  // The CPU run ran; status names the reason beside the waiting batch.
  auto status = Trainq(p.db, "status");
  INFO(status.text);
  CHECK_THAT(status.text, Catch::Contains("waiting:\n  batch 1 (gpu): 2 run(s): no pool has 1 "
                                          "GPU (the most is 0)"));
  auto j = TrainqJson(p.db, "status --json");
  REQUIRE(j["waiting"].size() == 1);
  CHECK(j["waiting"][0]["batch"] == 1);
  CHECK(j["waiting"][0]["reason"] == "no pool has 1 GPU (the most is 0)");
  CHECK(j["counts"]["succeeded"] == 1);
}

// ---------------------------------------------------------------------------
// Read commands while `trainq serve` works; a stopped serve loses nothing.

struct Background {
  std::string pid_file, rc_file, log_file;
  ~Background() {
    if (int pid = ReadPid(pid_file); pid > 0 && !ProcessGone(pid)) ::kill(pid, SIGKILL);
  }
};

TEST_CASE("cli: status while serving, and SIGTERM puts running runs back", "[cli][serve]") {
  Project p;
  std::string go = p.tmp / "go";
  // Each run waits (bounded) for the go file.
  std::string yaml =
      "version: 1\n"
      "experiments:\n"
      "  wait:\n"
      "    repeats: 3\n"
      "    max_attempts: 1\n"
      "    command: |\n"
      "      printf '{\"name\":\"loss\",\"value\":0.25,\"step\":7}\\n' > \"$TRAINQ_METRICS_FILE\"\n"
      "      i=0\n"
      "      while [ ! -f " + go + " ]; do\n"
      "        i=$((i+1)); [ $i -gt 3000 ] && exit 1; sleep 0.01\n"
      "      done\n"
      "      printf '{\"name\":\"accuracy\",\"value\":0.%s}\\n' \"$TRAINQ_SEED\" "
      ">> \"$TRAINQ_METRICS_FILE\"\n";
  p.git.Commit({{"trainq.yaml", yaml}}, "waiting");
  REQUIRE(Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir())).code == 0);

  Background bg{p.tmp / "serve.pid", p.tmp / "serve.rc", p.tmp / "serve.log"};
  auto start_serve = [&] {
    fs::remove(bg.pid_file);
    fs::remove(bg.rc_file);
    std::string inner = "echo $$ > " + ShellQuote(bg.pid_file) + "; exec " +
                        Cmd(p.db, "serve --slots 2 --until-idle --poll-ms 20 --heartbeat 1 "
                                  "--sandbox-writable " + ShellQuote(p.tmp.path().string()));  // the go file
    REQUIRE(testing::RunShell("( sh -c " + ShellQuote(inner) + "; echo $? > " +
                              ShellQuote(bg.rc_file) + " ) > " + ShellQuote(bg.log_file) +
                              " 2>&1 &") == 0);
    REQUIRE(testing::WaitFor([&] { return ReadPid(bg.pid_file) > 0; }, 10s));
  };
  auto serve_rc = [&] {
    REQUIRE(testing::WaitFor(
        [&] {
          auto rc = Slurp(bg.rc_file);
          return !rc.empty() && rc.back() == '\n';
        },
        20s));
    return Slurp(bg.rc_file);
  };

  start_serve();
  json status;
  REQUIRE(testing::WaitFor([&] {
    status = TrainqJson(p.db, "status --json");
    return status["counts"]["running"] == 2;
  }));
  CHECK(status["counts"]["queued"] == 1);
  CHECK(status["slots"]["total"] == 2);
  CHECK(status["slots"]["busy"] == 2);
  REQUIRE(status["running"].size() == 2);
  CHECK(status["running"][0]["elapsed_ms"].get<std::int64_t>() >= 0);
  REQUIRE(status["machines"].size() == 1);
  CHECK(status["machines"][0]["state"] == "ready");
  auto text = Trainq(p.db, "status");
  REQUIRE(text.code == 0);
  CHECK_THAT(text.text, Catch::Contains("2 busy / 2 available"));
  CHECK_THAT(text.text, Catch::Contains("pool local: 1 ready; slots 2 busy / 2"));
  CHECK_THAT(text.text, Catch::Contains(": ready, 2/2 slot(s) busy\n"));
  CHECK_THAT(text.text, Catch::Contains("0/3 done, 0 failed, 2 running"));
  CHECK(Trainq(p.db, "runs --state running").code == 0);
  // Live progress: the points each run reported so far, shipped with heartbeats.
  REQUIRE(testing::WaitFor([&] {
    status = TrainqJson(p.db, "status --json");
    return status["running"].size() == 2 && status["running"][0].contains("latest") &&
           status["running"][1].contains("latest");
  }));
  CHECK(status["running"][0]["latest"]["step"] == 7);
  CHECK(status["running"][0]["latest"]["metrics"]["loss"] == 0.25);
  CHECK(status["running"][0]["latest"]["metric"] == "accuracy");
  CHECK_THAT(Trainq(p.db, "status").text, Catch::Contains("step 7 · loss 0.2500"));

  // Stop it: the running runs go back to the queue without using their one attempt.
  REQUIRE(::kill(ReadPid(bg.pid_file), SIGTERM) == 0);
  CHECK(serve_rc() == "0\n");
  INFO(Slurp(bg.log_file));
  for (const auto& r : AllRuns(p.db)) {
    INFO("run " << r.id << ": " << r.last_error);
    CHECK(r.state == RunState::kQueued);
    CHECK(r.attempts == 0);
  }
  auto stopped = TrainqJson(p.db, "status --json");
  CHECK(stopped["slots"]["total"] == 0);
  CHECK_THAT(Trainq(p.db, "status").text,
             Catch::Contains("slots:    0 busy / 0 available (no machine is up"));

  // Let them finish.
  Spit(go, "");
  start_serve();
  CHECK(serve_rc() == "0\n");
  auto runs = AllRuns(p.db);
  REQUIRE(runs.size() == 3);
  for (const auto& r : runs) {
    INFO("run " << r.id << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    CHECK(r.attempts == 1);
    CHECK(r.metric_value.value_or(-1) == Approx(static_cast<double>(r.seed) / 10));
  }
}

TEST_CASE("cli: status shows each pool's machines, cost totals and a failing provider",
          "[cli][machines]") {
  Project p;
  const TimeMs now = SystemClock::Get().Now();
  constexpr TimeMs kMin = 60'000;
  {
    auto store = Store::Open(p.db).value();
    // cpu: one machine, booted 3 h ago at $1.50/h, stopped 1 h ago: billed 2 h, $3.00.
    MachineRow old;
    old.pool = "cpu";
    old.provider = "command";
    old.name = "cpu-box";
    old.state = "booting";
    old.provider_id = "i-old";
    old.slots = 4;
    old.hourly_cost = 1.5;
    auto old_row = store.machines().AddMachine(old, now - 180 * kMin).value();
    REQUIRE(store.machines().SetMachineState(old_row, "stopped", now - 60 * kMin));
    // gpu: booted 10 min ago at $2/h, its worker registered 5 min ago, no run since.
    MachineRow gpu;
    gpu.pool = "gpu";
    gpu.provider = "command";
    gpu.name = "gpu-box-1";
    gpu.state = "booting";
    gpu.provider_id = "i-gpu";
    gpu.slots = 2;
    gpu.gpus = 1;
    gpu.hourly_cost = 2.0;
    auto gpu_row = store.machines().AddMachine(gpu, now - 10 * kMin).value();
    Machines::WorkerRegistration reg;
    reg.pool = "gpu";
    reg.name = "gpu-box-1";
    reg.hostname = "gpu-host";
    reg.slots = 2;
    reg.gpus = 1;
    REQUIRE(store.machines().RegisterWorker(reg, now - 5 * kMin));
    REQUIRE(store.machines().TouchWorker(gpu_row, now, /*busy=*/false));
    // cloud: its provider failed three calls in a row; gpu's only twice.
    REQUIRE(store.machines().SetPoolHealth(
        {"cloud", 3, now + 10 * kMin, "RunInstances: InsufficientInstanceCapacity"}, now));
    REQUIRE(store.machines().SetPoolHealth({"gpu", 2, now + kMin, "timed out"}, now));
  }

  auto text = Trainq(p.db, "status");
  REQUIRE(text.code == 0);
  INFO(text.text);
  CHECK_THAT(text.text, Catch::Contains("slots:    0 busy / 2 available\n"));
  CHECK_THAT(text.text,
             Catch::Contains("pool cloud: no machines\n"
                             "          provider failing (3 calls in a row; next try in "));
  CHECK_THAT(text.text, Catch::Contains("): RunInstances: InsufficientInstanceCapacity\n"));
  CHECK_THAT(text.text, Catch::Contains("pool cpu: no machines; billed 2h00m00s, cost $3.00\n"));
  CHECK_THAT(text.text, Catch::Contains("pool gpu: 1 ready; slots 0 busy / 2; billed 10m"));
  CHECK_THAT(text.text, Catch::Contains("          gpu-box-1: ready, 0/2 slot(s) busy, idle 5m"));
  CHECK_THAT(text.text, Catch::Contains("cost $3.33 in all (2 machine(s);"));
  // Twice is not yet failing; the machine line names the machine, not its provider id.
  CHECK_THAT(text.text, !Catch::Contains("timed out"));
  CHECK_THAT(text.text, !Catch::Contains("i-gpu"));

  auto j = TrainqJson(p.db, "status --json");
  CHECK(j["slots"]["total"] == 2);
  REQUIRE(j["machines"].size() == 1);
  CHECK(j["machines"][0]["name"] == "gpu-box-1");
  CHECK(j["machines"][0]["provider_id"] == "i-gpu");
  CHECK(j["machines"][0]["busy"] == 0);
  CHECK(j["machines"][0]["idle_ms"].get<TimeMs>() >= 5 * kMin);
  std::map<std::string, json> pools;
  for (const auto& pj : j["pools"]) pools[pj["pool"].get<std::string>()] = pj;
  REQUIRE(pools.size() == 3);
  CHECK(pools["cloud"]["failing"] == true);
  CHECK(pools["cloud"]["provider_failures"] == 3);
  CHECK(pools["cloud"]["provider_error"] == "RunInstances: InsufficientInstanceCapacity");
  CHECK(pools["gpu"]["failing"] == false);
  CHECK(pools["gpu"]["provider_failures"] == 2);
  CHECK(pools["gpu"]["machines"] == json{{"ready", 1}});
  CHECK(pools["gpu"]["slots"] == json{{"total", 2}, {"busy", 0}});
  CHECK(pools["cpu"]["billed_ms"] == 120 * kMin);
  CHECK(pools["cpu"]["cost"].get<double>() == Approx(3.0));
  CHECK(j["costs"]["machines_booted"] == 2);
  CHECK(j["costs"]["cost"].get<double>() == Approx(3.0 + 2.0 / 6).epsilon(0.01));
}

// ---------------------------------------------------------------------------
// The example repository.

TEST_CASE("cli: the example trains for real and its accuracy depends on the seed",
          "[cli][example]") {
  Project p;
  std::map<std::string, std::string> files;
  fs::path examples = fs::path(TRAINQ_SOURCE_DIR) / "examples";
  for (const auto& e : fs::recursive_directory_iterator(examples)) {
    if (e.is_regular_file()) files[fs::relative(e.path(), examples).string()] = Slurp(e.path());
  }
  REQUIRE(files.count("trainq.yaml") == 1);
  REQUIRE(files.count("train.py") == 1);
  p.git.Commit(files, "the example");

  auto sub = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()) +
                              " --experiment digits-softmax --repeats 3");
  INFO(sub.text);
  REQUIRE(sub.code == 0);
  auto serve = Trainq(p.db, "serve --slots 2 --until-idle --poll-ms 20");
  INFO(serve.text);
  REQUIRE(serve.code == 0);

  auto runs = AllRuns(p.db);
  REQUIRE(runs.size() == 3);
  std::set<double> values;
  for (const auto& r : runs) {
    INFO("run " << r.id << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    REQUIRE(r.metric_value.has_value());
    CHECK(*r.metric_value >= 0.8);
    CHECK(*r.metric_value <= 1.0);
    values.insert(*r.metric_value);
  }
  CHECK(values.size() > 1);  // the seed matters
  auto report = TrainqJson(p.db, "report --json");
  REQUIRE(report.size() == 1);
  CHECK(report[0]["experiment"] == "digits-softmax");
  CHECK(report[0]["summary"]["n"] == 3);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// A terminal for `trainq status --watch`: a detached tmux session on its own
// server socket, read back with capture-pane.
struct Tmux {
  std::string socket = "trainq-watch-test-" + std::to_string(getpid());
  ~Tmux() { testing::RunShell("tmux -L " + socket + " kill-server 2>/dev/null"); }
  int Run(const std::string& args, std::string* out = nullptr) {
    return testing::RunShell("tmux -L " + socket + " " + args, out);
  }
  // What the pane shows now; with `history`, also what scrolled off it.
  std::string Capture(bool history = false) {
    std::string out;
    Run(std::string("capture-pane -p -t watch") + (history ? " -S - -E -" : ""), &out);
    return out;
  }
};

TEST_CASE("cli: status --watch redraws in place on a terminal as runs finish, and --until-idle "
          "ends it",
          "[cli][watch]") {
  testing::TempDir tmp;
  const std::string db = tmp / "t.db";
  Store store = Store::Open(db).value();
  const Clock& clock = SystemClock::Get();
  BatchSpec spec;
  spec.experiment = "mlp";
  spec.command = "true";
  spec.repeats = 3;
  REQUIRE(store.runs().Submit("/srv/model", {std::string(40, 'a'), "", "s", "me", 0}, {spec},
                       clock.Now()));
  auto leased = store.runs().Lease("local/1", clock.Now(), 600'000, 3).value();
  REQUIRE(leased.size() == 3);
  REQUIRE(store.runs().MarkRunning(leased[0].run_id, leased[0].token, clock.Now(), ""));

  Tmux tmux;
  const std::string watch = Cmd(db, "status --watch --interval 0.2 --until-idle");
  REQUIRE(tmux.Run("new-session -d -s watch -x 150 -y 40 " +
                   ShellQuote(watch + "; echo watch-exit=$?; exec cat")) == 0);
  auto shows = [&](const std::string& what) {
    return testing::WaitFor([&] { return tmux.Capture().find(what) != std::string::npos; },
                            std::chrono::seconds(30));
  };
  INFO(tmux.Capture(true));
  REQUIRE(shows("0/3 done, 0 failed, 3 running"));
  REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
  REQUIRE(shows("1/3 done, 0 failed, 2 running"));
  CHECK(tmux.Capture().find("0/3 done") == std::string::npos);
  REQUIRE(store.runs().Complete(leased[1].run_id, leased[1].token, clock.Now(), 0.8));
  REQUIRE(shows("2/3 done, 0 failed, 1 running"));
  // In place: one frame on the screen, none scrolled into the history.
  const std::string all = tmux.Capture(true);
  CHECK(Count(all, "trainq status, every 0.2s at") == 1);
  CHECK(Count(all, "batches:") == 1);
  // The last run ends: nothing left to run, the watch stops by itself.
  REQUIRE(store.runs().Complete(leased[2].run_id, leased[2].token, clock.Now(), 0.7));
  REQUIRE(shows("watch-exit=0"));
  CHECK(tmux.Capture().find("3/3 done, 0 failed") != std::string::npos);
}

TEST_CASE("cli: status --watch refuses --json, and --interval needs --watch", "[cli][watch]") {
  testing::TempDir tmp;
  REQUIRE(Store::Open(tmp / "t.db"));
  auto j = Trainq(tmp / "t.db", "status --watch --json");
  CHECK(j.code == 1);
  CHECK_THAT(j.text, Catch::Contains("--watch draws text; leave out --json"));
  auto i = Trainq(tmp / "t.db", "status --interval 1");
  CHECK(i.code == 2);
  CHECK_THAT(i.text, Catch::Contains("--interval requires --watch"));
  // Not a terminal: frames follow each other; one frame when already idle.
  auto once = Trainq(tmp / "t.db", "status --watch --until-idle --interval 0.1");
  CHECK(once.code == 0);
  CHECK(Count(once.text, "trainq status, every") == 1);
  CHECK(once.text.find("\x1b[") == std::string::npos);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// A trainer: experiment on the iris spec of examples/ (checked at submit).
struct TrainerProject : Project {
  std::string sha = git.Commit(
      {{"trainq.yaml",
        "version: 1\nexperiments:\n  iris:\n    trainer: configs/iris_mlp.yaml\n    repeats: 2\n"},
       {"configs/iris_mlp.yaml",
        Slurp(fs::path(TRAINQ_SOURCE_DIR) / "examples" / "configs" / "iris_mlp.yaml")},
       {"data/iris.csv", Slurp(fs::path(TRAINQ_SOURCE_DIR) / "examples" / "data" / "iris.csv")}},
      "iris");

  void AddMachine(const std::string& pool, const std::string& name, const std::string& trainer) {
    auto store = Store::Open(db).value();
    MachineRow m;
    m.pool = pool;
    m.provider = "static";
    m.provider_id = name;
    m.name = name;
    m.state = "ready";
    m.slots = 1;
    m.resources_json = json{{"trainer", trainer}}.dump();
    REQUIRE(store.machines().UpsertMachine(m, 1000));
  }
};

TEST_CASE("cli: submit warns when the workers that reported have no trainq-train",
          "[cli][trainer]") {
  TrainerProject p;
  // Before any worker registered, this trainq is judged: a build with
  // trainq-train beside it does not warn (tested below without one).
  p.AddMachine("gpu", "gpu-1", "");
  p.AddMachine("gpu", "gpu-2", "");
  auto warned = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()));
  INFO(warned.text);
  REQUIRE(warned.code == 0);
  CHECK_THAT(warned.text, Catch::Contains("2 runs queued"));
  CHECK_THAT(warned.text,
             Catch::Contains("trainq: warning: iris is a `trainer:` experiment, but no worker of "
                             "any pool has trainq-train (they reported none beside trainq or on "
                             "PATH: gpu-1, gpu-2)"));
  // One worker with it is enough.
  p.AddMachine("gpu", "gpu-3", "/opt/trainq/bin/trainq-train");
  auto quiet = Trainq(p.db, "submit --repo " + ShellQuote(p.git.dir()) + " --repeats 3");
  INFO(quiet.text);
  REQUIRE(quiet.code == 0);
  CHECK_THAT(quiet.text, !Catch::Contains("warning"));
}

TEST_CASE("cli: submit warns when trainq-train is neither beside trainq nor on PATH",
          "[cli][trainer]") {
  TrainerProject p;
  // A copy of trainq alone in a folder, PATH without trainq-train: the
  // newcomer's `cp trainq /usr/local/bin` (issue 27).
  fs::path bin = p.tmp / "bin";
  fs::create_directories(bin);
  fs::copy_file(TRAINQ_BINARY, bin / "trainq");
  const std::string env = "env PATH=/usr/bin:/bin ";
  auto submit = [&](const std::string& args) {
    Out o;
    o.code = testing::RunShell(env + ShellQuote((bin / "trainq").string()) + " --db " +
                                   ShellQuote(p.db) + " " + args,
                               &o.text);
    return o;
  };
  REQUIRE(FindTrainqTrain("", "/usr/bin:/bin").empty());  // else this machine has one installed
  auto alone = submit("submit --repo " + ShellQuote(p.git.dir()));
  INFO(alone.text);
  REQUIRE(alone.code == 0);
  CHECK_THAT(alone.text, Catch::Contains("trainq: warning: iris is a `trainer:` experiment, but "
                                         "trainq-train is neither beside this trainq (" +
                                         bin.string() + ") nor on PATH"));
  // An executable trainq-train beside it: no warning.
  Spit(bin / "trainq-train", "#!/bin/sh\nexit 0\n");
  fs::permissions(bin / "trainq-train", fs::perms::owner_all);
  auto beside = submit("submit --repo " + ShellQuote(p.git.dir()) + " --repeats 3");
  INFO(beside.text);
  REQUIRE(beside.code == 0);
  CHECK_THAT(beside.text, !Catch::Contains("warning"));
}

}  // namespace
}  // namespace trainq
