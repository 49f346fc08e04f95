// `trainq sweep ...` end to end through the real binary: a real git
// repository, a real SQLite file, `trainq serve --until-idle` running the
// points as child processes.
#include <catch2/catch.hpp>
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
  CHECK_THAT(start.text, Catch::Contains("sweep 1: mlp at " + sha.substr(0, 10) +
                                         ", 6 points x 3 seeds (seeds 1..3), 2 in flight; "
                                         "2 queued now"));

  auto serve = Trainq(db, "serve --slots 2 --until-idle --poll-ms 20");
  INFO(serve.text);
  REQUIRE(serve.code == 0);

  auto status = TrainqJson(db, "sweep status 1 --json");
  CHECK(status["state"] == "done");
  CHECK(status["runs_done"] == 18);
  REQUIRE(status["points"].size() == 6);
  std::set<std::string> combos;
  for (const auto& p : status["points"]) {
    CHECK(p["state"] == "done");
    CHECK(p["n"] == 3);
    combos.insert(p["params"].dump());
  }
  CHECK(combos.size() == 6);
  CHECK(status["leader"] == 3);  // lr 0.3, width 64

  auto text = Trainq(db, "sweep status 1");
  INFO(text.text);
  CHECK_THAT(text.text, Catch::Contains("sweep 1: mlp, done, 6/6 points, 18/18 runs ended"));
  CHECK_THAT(text.text, Catch::Contains("lr=0.3 width=64"));

  auto list = TrainqJson(db, "sweep status --json");
  REQUIRE(list["sweeps"].size() == 1);
  CHECK(list["sweeps"][0]["commit"] == sha);

  auto best = TrainqJson(db, "sweep best 1 --json");
  CHECK(best["winner"]["params"] == json{{"lr", 0.3}, {"width", 64}});
  CHECK(best["winner"]["mean"].get<double>() == Approx(0.902));
  CHECK(best["runner_up"]["params"] == json{{"lr", 0.3}, {"width", 32}});
  CHECK(best["vs_runner_up"]["result"] == "better");
  CHECK(best["vs_runner_up"]["paired"] == true);

  auto as_set = Trainq(db, "sweep best --as set");
  REQUIRE(as_set.code == 0);
  CHECK(as_set.text == "lr=0.3\nwidth=64\n");

  // The points are ordinary batches: `trainq status` lists them.
  auto st = TrainqJson(db, "status --json");
  CHECK(st["batches"].size() == 6);
  CHECK(st["counts"]["succeeded"] == 18);

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

}  // namespace
}  // namespace trainq
