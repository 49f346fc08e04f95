// `trainq sweep ...` end to end through the real binary: a real git
// repository, a real SQLite file, `trainq serve --until-idle` running the
// points as child processes.
#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "core/strings.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {
namespace {

struct Out {
  int code = -1;
  std::string text;
};

std::string Cmd(const std::string& db, const std::string& args) {
  return ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args;
}

Out Trainq(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell(Cmd(db, args), &o.text);
  return o;
}

json TrainqJson(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell("{ " + Cmd(db, args) + " 2>/dev/null; }", &o.text);
  INFO("trainq " << args << " -> " << o.code << ":\n" << o.text);
  REQUIRE(o.code == 0);
  auto j = json::parse(o.text, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// accuracy = 0.9 - (lr - 0.3)^2 - (width == 64 ? 0 : 0.01) + a seed effect
const char* kTrainPy = R"(import json, os, sys
a = dict(zip(sys.argv[1::2], sys.argv[2::2]))
lr, width, seed = float(a["--lr"]), int(a["--width"]), int(a["--seed"])
acc = 0.9 - (lr - 0.3) ** 2 - (0 if width == 64 else 0.01) + 0.001 * seed * (1 if width == 64 else 2)
print(f"lr {lr} width {width} seed {seed}: accuracy {acc}")
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": acc, "final": True}) + "\n")
)";

const char* kYaml = R"(version: 1
experiments:
  mlp:
    command: python3 train.py --lr {lr} --width {width} --seed {seed}
    max_attempts: 1
    sweep:
      repeats: 3
      parallel: 2
      parameters:
        lr: {values: [0.1, 0.3, 0.5]}
        width: {values: [32, 64]}
)";

TEST_CASE("sweep cli: start, serve --until-idle, status, best, --as set", "[sweep][cli]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
  std::string sha = git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kYaml}}, "sweep");

  auto start = Trainq(db, "sweep start mlp --repo " + ShellQuote(git.dir()));
  INFO(start.text);
  REQUIRE(start.code == 0);
  CHECK_THAT(start.text,
             Catch::Contains("sweep 1: mlp at " + sha.substr(0, 10) +
                             ", 6 points x 3 seeds (seeds 1..3), then 3 fresh "
                             "seeds for the winner and the same for the runner-up (paired), "
                             "grid: lr, width, 2 in flight; "
                             "2 queued now"));

  auto serve = Trainq(db, "serve --slots 2 --until-idle --poll-ms 20");
  INFO(serve.text);
  REQUIRE(serve.code == 0);

  auto status = TrainqJson(db, "sweep status 1 --json");
  CHECK(status["state"] == "done");
  // 6 points x 3 seeds + 3 fresh seeds for the winner and the same 3 for
  // the runner-up (a paired confirmation).
  CHECK(status["runs_done"] == 24);
  REQUIRE(status["points"].size() == 6);
  std::set<std::string> combos;
  for (const auto& p : status["points"]) {
    CHECK(p["state"] == "done");
    // The winner (lr 0.3, width 64) and the runner-up (lr 0.3, width 32).
    CHECK(p["n"] == (p["params"]["lr"] == 0.3 ? 6 : 3));
    combos.insert(p["params"].dump());
  }
  CHECK(combos.size() == 6);
  CHECK(status["leader"] == 3);  // lr 0.3, width 64

  auto text = Trainq(db, "sweep status 1");
  INFO(text.text);
  CHECK_THAT(text.text, Catch::Contains("sweep 1: mlp, done, 6/6 points, 24/24 runs ended"));
  CHECK_THAT(text.text, Catch::Contains("the runner-up, got the same fresh seeds"));
  CHECK_THAT(text.text, Catch::Contains("lr=0.3 width=64"));

  auto list = TrainqJson(db, "sweep status --json");
  REQUIRE(list["sweeps"].size() == 1);
  CHECK(list["sweeps"][0]["commit"] == sha);

  auto best = TrainqJson(db, "sweep best 1 --json");
  CHECK(best["winner"]["params"] == json{{"lr", 0.3}, {"width", 64}});
  // Seeds 1..3 picked it (0.902); seeds 4..6 are its claimed value (0.905).
  CHECK(best["winner"]["mean"].get<double>() == Approx(0.9035));
  CHECK(best["winner"]["search"]["n"] == 3);
  CHECK(best["winner"]["search"]["mean"].get<double>() == Approx(0.902));
  CHECK(best["winner"]["confirmed"]["n"] == 3);
  CHECK(best["winner"]["confirmed"]["mean"].get<double>() == Approx(0.905));
  auto best_text = Trainq(db, "sweep best 1");
  INFO(best_text.text);
  CHECK_THAT(best_text.text, Catch::Contains("confirmed on 3 fresh seeds: 0.905 [0.9025, 0.9075]; "
                                             "the 3 seeds it was picked on read 0.902 (+0.003 fresh)"));
  CHECK(best["runner_up"]["params"] == json{{"lr", 0.3}, {"width", 32}});
  CHECK(best["vs_runner_up"]["result"] == "better");
  CHECK(best["vs_runner_up"]["paired"] == true);
  // On the fresh seeds 4..6 alone, which neither was picked on.
  CHECK(best["vs_runner_up"]["on_fresh_seeds"] == true);
  CHECK(best["vs_runner_up"]["shared_seeds"] == 3);
  CHECK(best["runner_up"]["confirm_baseline"] == true);
  CHECK(best["runner_up"]["confirmed"]["n"] == 3);

  auto as_set = Trainq(db, "sweep best --as set");
  REQUIRE(as_set.code == 0);
  CHECK(as_set.text == "lr=0.3\nwidth=64\n");
  auto as_yaml = Trainq(db, "sweep best 1 --as yaml");
  INFO(as_yaml.text);
  REQUIRE(as_yaml.code == 0);
  CHECK_THAT(as_yaml.text, Catch::StartsWith("# sweep 1 (mlp), the winner: point 3: lr=0.3 width=64\n"));
  CHECK_THAT(as_yaml.text, Catch::Contains("\n# confirmed on 3 fresh seeds: 0.905 ["));
  CHECK_THAT(as_yaml.text, Catch::Contains("command: python3 train.py --lr '0.3' --width '64' --seed {seed}"));
  CHECK(Trainq(db, "sweep best 1 --as toml").code != 0);

  // The report shows the sweep in its own section, not its points as experiments.
  auto report = Trainq(db, "report --out " + ShellQuote(tmp / "report"));
  INFO(report.text);
  REQUIRE(report.code == 0);
  CHECK_THAT(report.text, Catch::Contains("6 batches, 24 runs, 0 experiment(s), 1 sweep(s)"));
  auto md = testing::Slurp(tmp / "report/report.md");
  CHECK_THAT(md, Catch::Contains("### Sweep 1: repo / mlp at `" + sha.substr(0, 7) + "` (done)"));
  CHECK_THAT(md, Catch::Contains("- point 3: lr=0.3 width=64"));
  CHECK_THAT(md, !Catch::Contains("mlp@sweep1"));
  auto html = testing::Slurp(tmp / "report/report.html");
  CHECK_THAT(html, Catch::Contains("<h3 id=\"sweep-1\">"));
  CHECK_THAT(html, Catch::Contains("every point across its parameters"));
  CHECK(html.find("<?xml") == std::string::npos);  // SVGs inline without their declaration
  auto rj = json::parse(testing::Slurp(tmp / "report/report.json"));
  REQUIRE(rj["sweeps"].size() == 1);
  CHECK(rj["sweeps"][0]["winner"][0] == "point 3: lr=0.3 width=64");
  CHECK(rj["sweeps"][0]["importance"].contains("lr"));

  // The points are ordinary batches: `trainq status` lists them.
  auto st = TrainqJson(db, "status --json");
  CHECK(st["batches"].size() == 6);
  CHECK(st["counts"]["succeeded"] == 24);

  // Stop / resume of a finished sweep.
  auto stop = Trainq(db, "sweep stop 1");
  CHECK(stop.code == 0);
  auto resume = Trainq(db, "sweep resume 1");
  CHECK(resume.code == 0);
  CHECK_THAT(resume.text, Catch::Contains("sweep 1 resumed; 0 points queued now"));
}

TEST_CASE("sweep cli: a mistake in the sweep queues nothing", "[sweep][cli][errors]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
  std::string yaml = kYaml;
  yaml.replace(yaml.find("[0.1, 0.3, 0.5]"), 15, "[]");
  git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", yaml}}, "broken sweep");
  auto start = Trainq(db, "sweep start mlp --repo " + ShellQuote(git.dir()));
  CHECK(start.code != 0);
  CHECK_THAT(start.text, Catch::Contains(
                             "trainq.yaml:10: experiments.mlp.sweep.parameters.lr.values: must "
                             "not be empty"));
  CHECK_FALSE(fs::exists(db));

  auto unknown = Trainq(db, "sweep best 4");
  CHECK(unknown.code != 0);
  CHECK_THAT(unknown.text, Catch::Contains("no sweep 4"));
}

// Regression: a swept command experiment got a plain batch on `trainq
// submit` with its {lr} unfilled, and every run failed.
TEST_CASE("sweep cli: submit runs a swept command at its first explicit point or not at all",
          "[sweep][cli]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
  std::string with_point = std::string(kYaml) + "      points:\n        - {lr: 0.3, width: 64}\n";
  git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", kYaml}}, "no default point");
  auto none = Trainq(db, "submit --repo " + ShellQuote(git.dir()));
  INFO(none.text);
  CHECK(none.code != 0);
  CHECK_THAT(none.text, Catch::Contains("mlp is swept and its sweep has no explicit point"));
  git.Commit({{"trainq.yaml", with_point}}, "a default point");
  auto one = TrainqJson(db, "submit --repo " + ShellQuote(git.dir()) + " --json");
  REQUIRE(one["batches"].size() == 1);
  auto serve = Trainq(db, "serve --slots 2 --until-idle --poll-ms 20");
  INFO(serve.text);
  REQUIRE(serve.code == 0);
  auto st = TrainqJson(db, "status --json");
  CHECK(st["counts"]["succeeded"] == 10);
  CHECK(st["counts"]["dead"] == 0);
}

// Regression (branch sweep, 5917d78): ${VAR} in a sweep's command was
// refused as an unknown placeholder; it is the shell's.
TEST_CASE("sweep cli: the shell's dollar-brace variables in a swept command are left to the shell",
          "[sweep][cli]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
  std::string yaml = kYaml;
  yaml.replace(yaml.find("python3 train.py"), 16, "X=${PWD} && python3 train.py");
  git.Commit({{"train.py", kTrainPy}, {"trainq.yaml", yaml}}, "dollar brace");
  auto start = Trainq(db, "sweep start mlp --repo " + ShellQuote(git.dir()));
  INFO(start.text);
  REQUIRE(start.code == 0);
  auto serve = Trainq(db, "serve --slots 2 --until-idle --poll-ms 20");
  REQUIRE(serve.code == 0);
  auto status = TrainqJson(db, "sweep status 1 --json");
  CHECK(status["state"] == "done");
  CHECK(status["runs_done"] == 24);  // 6 x 3 + 3 fresh seeds for the winner and the runner-up
}

TEST_CASE("sweep cli: kill -9 of serve mid-sweep, restart: no point lost or run twice",
          "[sweep][cli][faults]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = tmp / "t.db";
  std::string slow = std::string("import time\ntime.sleep(0.3)\n") + kTrainPy;
  const char* yaml = R"(version: 1
experiments:
  mlp:
    command: python3 train.py --lr {lr} --width {width} --seed {seed}
    max_attempts: 2
    sweep:
      repeats: {min: 2, max: 4}
      parallel: 4
      budget: {points: 10}
      strategy: bayes
      initial: 4
      parameters:
        lr: {uniform: [0.0, 0.6]}
        width: {values: [32, 64]}
)";
  git.Commit({{"train.py", slow}, {"trainq.yaml", yaml}}, "sweep");
  REQUIRE(Trainq(db, "sweep start mlp --repo " + ShellQuote(git.dir())).code == 0);
  std::string pidfile = tmp / "serve.pid";
  REQUIRE(testing::RunShell("{ " + Cmd(db, "serve --inproc --slots 4 --poll-ms 20 --lease 2 "
                                           "--heartbeat 1") +
                            " > " + ShellQuote(tmp / "serve1.log") + " 2>&1 & echo $! > " +
                            ShellQuote(pidfile) + "; }") == 0);
  REQUIRE(testing::WaitFor([&] { return testing::ReadPid(pidfile) > 0; }));
  int pid = testing::ReadPid(pidfile);
  // Kill it while points are in flight, after some have finished.
  REQUIRE(testing::WaitFor([&] {
    auto s = TrainqJson(db, "sweep status 1 --json");
    return s["runs_done"].get<int>() >= 6;
  }));
  REQUIRE(::kill(pid, SIGKILL) == 0);
  REQUIRE(testing::WaitFor([&] { return testing::ProcessGone(pid); }));
  auto mid = TrainqJson(db, "sweep status 1 --json");
  CHECK(mid["state"] == "running");

  auto serve = Trainq(db, "serve --inproc --slots 4 --until-idle --poll-ms 20 --lease 2 "
                          "--heartbeat 1");
  INFO(serve.text);
  REQUIRE(serve.code == 0);
  auto status = TrainqJson(db, "sweep status 1 --json");
  CHECK(status["state"] == "done");
  REQUIRE(status["points"].size() == 10);
  std::set<int> idx;
  int runs = 0;
  for (const auto& p : status["points"]) {
    idx.insert(p["point"].get<int>());
    CHECK(p["state"] == "done");
    CHECK(p["n"].get<int>() >= 2);
    CHECK(p["n"].get<int>() <= 4);
    runs += p["n"].get<int>();
  }
  CHECK(idx.size() == 10);
  // Every run of the sweep is one (batch, seed), counted once.
  auto st = TrainqJson(db, "status --json");
  CHECK(st["batches"].size() == 10);
  CHECK(st["counts"]["succeeded"] == runs);
  CHECK(status["runs_done"] == runs);
}

}  // namespace
}  // namespace trainq
