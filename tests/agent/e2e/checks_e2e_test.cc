// End to end through the real `trainq` binary, a real git repository and
// real child processes: the determinism check (`determinism: check`,
// `trainq repro`) and noise drift (an unchanged experiment whose
// environment moves its mean). See docs/STATISTICS.md.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "core/strings.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

struct Out {
  int code = -1;
  std::string text;
};

Out Trainq(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args,
                             &o.text);
  return o;
}

json TrainqJson(const std::string& db, const std::string& args) {
  Out o;
  o.code = testing::RunShell(
      "{ " + ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args + " 2>/dev/null; }",
      &o.text);
  INFO("trainq " << args << " -> " << o.code << ":\n" << o.text);
  REQUIRE(o.code == 0);
  auto j = json::parse(o.text, nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  return j;
}

// `data_dir`: the test's own (SQLite's default is beside the file; on
// PostgreSQL it would be the working directory, shared by cases run at once).
void Serve(const std::string& db, const std::string& data_dir) {
  auto serve =
      Trainq(db, "serve --slots 2 --until-idle --poll-ms 20 --data-dir " + ShellQuote(data_dir));
  INFO(serve.text);
  REQUIRE(serve.code == 0);
}

const json& BatchOf(const json& show, const std::string& experiment) {
  for (const auto& b : show["batches"]) {
    if (b["experiment"] == experiment) return b;
  }
  FAIL("no batch of " << experiment << " in " << show.dump(2));
  throw;
}

// accuracy = 0.5 + seed / 100: the same number for the same seed, always.
const char* kDeterministic = R"(import json, os, sys
seed = int(sys.argv[1])
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": 0.5 + seed / 100}) + "\n")
)";

// The same, plus noise from the clock: a fixed seed does not fix the result.
const char* kTimeNoise = R"(import json, os, sys, time
seed = int(sys.argv[1])
noise = (time.time_ns() // 1000 % 1000) / 1e6
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": 0.5 + seed / 100 + noise}) + "\n")
)";

const char* kDeterminismYaml = R"(version: 1
defaults:
  repeats: 4
  max_attempts: 1
  determinism: check
experiments:
  det:
    command: python3 det.py {seed}
    watch: [det.py]
  noisy:
    command: python3 noisy.py {seed}
    watch: [noisy.py]
)";

}  // namespace

TEST_CASE("determinism check: time-based noise is not reproducible, a pure function of the seed is",
          "[e2e][determinism]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = testing::StoreLocation(tmp, "t.db");
  std::string first = git.Commit(
      {{"det.py", kDeterministic}, {"noisy.py", kTimeNoise}, {"trainq.yaml", kDeterminismYaml}},
      "two experiments");
  auto sub = Trainq(db, "submit --repo " + ShellQuote(git.dir()));
  INFO(sub.text);
  REQUIRE(sub.code == 0);
  // Each batch runs its first seed once more, in a companion batch.
  CHECK_THAT(sub.text, Catch::Contains("det@repro: 1 run queued (seed 1)"));
  CHECK_THAT(sub.text, Catch::Contains("noisy@repro: 1 run queued (seed 1)"));
  Serve(db, tmp / "trainq-data");

  auto show = TrainqJson(db, "show " + first + " --json");
  CHECK(BatchOf(show, "det")["determinism"] == "reproducible (seed 1 run twice: 0.5100)");
  std::string noisy = BatchOf(show, "noisy")["determinism"];
  CHECK_THAT(noisy, Catch::StartsWith("not reproducible (seed 1: 0.51"));
  auto text = Trainq(db, "show " + first);
  CHECK_THAT(text.text, Catch::Contains("determinism: reproducible (seed 1 run twice: 0.5100)"));
  CHECK_THAT(text.text, Catch::Contains("determinism: not reproducible (seed 1: "));
  auto status = Trainq(db, "status");
  CHECK_THAT(status.text, Catch::Contains("noisy: not reproducible (seed 1: "));
  CHECK_THAT(status.text, Catch::Contains("det: reproducible"));
  auto report = Trainq(db, "report --out " + ShellQuote(tmp / "report") + " --format md");
  INFO(report.text);
  REQUIRE(report.code == 0);
  std::string md = testing::Slurp(tmp / "report/report.md");
  CHECK_THAT(md, Catch::Contains("; reproducible (seed 1 run twice: 0.5100)"));
  CHECK_THAT(md, Catch::Contains("; not reproducible (seed 1: "));
  CHECK_THAT(md, !Catch::Contains("det@repro"));

  // On demand: two more seeds of det run twice; still reproducible.
  auto repro = Trainq(db, "repro det --repo " + ShellQuote(git.dir()) + " --runs 3");
  INFO(repro.text);
  REQUIRE(repro.code == 0);
  CHECK_THAT(repro.text, Catch::Contains("det@repro: already submitted; 2 more runs queued"));
  Serve(db, tmp / "trainq-data");
  show = TrainqJson(db, "show " + first + " --json");
  CHECK(BatchOf(show, "det")["determinism"] == "reproducible (3 seeds run twice, identical)");

  // A change to noisy is compared unpaired: its seeds do not fix its runs.
  std::string second = git.Commit({{"noisy.py", std::string(kTimeNoise) + "# touched\n"},
                                   {"det.py", std::string(kDeterministic) + "# touched\n"}},
                                  "touch both");
  sub = Trainq(db, "submit --repo " + ShellQuote(git.dir()));
  REQUIRE(sub.code == 0);
  Serve(db, tmp / "trainq-data");
  show = TrainqJson(db, "show " + second + " --json");
  const auto& n = BatchOf(show, "noisy")["vs_parent"];
  CHECK(n["paired"] == false);
  CHECK_THAT(n["pairing_unreliable"].get<std::string>(),
             Catch::StartsWith("this batch is not reproducible (seed 1: "));
  CHECK_THAT(n["text"].get<std::string>(), Catch::Contains("Welch t"));
  CHECK_THAT(n["text"].get<std::string>(), Catch::Contains("pairing unreliable"));
  const auto& d = BatchOf(show, "det")["vs_parent"];
  CHECK(d["paired"] == true);
  CHECK(d["pairing_unreliable"].is_null());
  // The companion batches are no experiments of their own: the gate decides
  // on det and noisy only (both unchanged in what they compute).
  auto gate = Trainq(db, "gate " + second + " --baseline " + first + " --repo " +
                             ShellQuote(git.dir()));
  INFO(gate.text);
  CHECK(gate.code == 0);
  CHECK_THAT(gate.text, !Catch::Contains("@repro"));
  CHECK_THAT(gate.text, Catch::Contains("Holm over 2"));
  // show says what a companion is instead of comparing it.
  CHECK(BatchOf(show, "det@repro")["repro_of"] == "det");
}

namespace {

// accuracy = level + seed / 100, where level comes from env.txt: a file the
// command reads but no watch glob covers (a data or library version, say).
const char* kReadsEnv = R"(import json, os, sys
seed = int(sys.argv[1])
level = float(open("env.txt").read())
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    f.write(json.dumps({"name": "accuracy", "value": level + seed / 100}) + "\n")
)";

const char* kDriftYaml = R"(version: 1
defaults:
  repeats: 5
  max_attempts: 1
experiments:
  x:
    command: python3 train.py {seed}
    watch: [train.py]
)";

}  // namespace

TEST_CASE("noise drift: an unchanged experiment whose environment moves its mean is flagged",
          "[e2e][drift]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string db = testing::StoreLocation(tmp, "t.db");
  // --rerun: the same inputs are otherwise reused, not run again (issue 27);
  // drift is what a deliberate rerun of unchanged inputs finds.
  auto submit = [&] {
    auto sub = Trainq(db, "submit --rerun --repo " + ShellQuote(git.dir()));
    INFO(sub.text);
    REQUIRE(sub.code == 0);
    Serve(db, tmp / "trainq-data");
  };
  std::string a = git.Commit(
      {{"train.py", kReadsEnv}, {"env.txt", "0.5\n"}, {"trainq.yaml", kDriftYaml}}, "first");
  submit();
  // README only: the same inputs, the same numbers: no drift.
  std::string b = git.Commit({{"README", "hello\n"}}, "readme");
  submit();
  auto show_b = TrainqJson(db, "show " + b + " --json");
  std::string no_drift = BatchOf(show_b, "x")["drift"];
  CHECK_THAT(no_drift, Catch::StartsWith("no drift: mean 0.5300 vs 0.5300"));
  CHECK_THAT(no_drift, Catch::Contains("against 1 earlier batch (n=5) with the same inputs"));
  CHECK_THAT(Trainq(db, "status").text, !Catch::Contains("drift"));

  // env.txt moves the mean by 0.03; x's inputs (train.py, its trainq.yaml
  // entry) are unchanged, so nothing but drift can explain it.
  std::string c = git.Commit({{"env.txt", "0.53\n"}}, "environment moved");
  submit();
  auto show_c = TrainqJson(db, "show " + c + " --json");
  std::string drift = BatchOf(show_c, "x")["drift"];
  CHECK_THAT(drift, Catch::StartsWith("drift: mean 0.5600 vs 0.5300 (paired t on 5 seeds, p<0.001)"));
  CHECK_THAT(drift, Catch::Contains("against 2 earlier batches (n=5) with the same inputs"));
  auto status = Trainq(db, "status");
  CHECK_THAT(status.text, Catch::Contains("x: drift: mean 0.5600 vs 0.5300"));
  auto status_json = TrainqJson(db, "status --json");
  int flagged = 0;
  for (const auto& bj : status_json["batches"]) flagged += bj["drift"].is_string() ? 1 : 0;
  CHECK(flagged == 1);
  auto report = Trainq(db, "report --out " + ShellQuote(tmp / "report") + " --format md");
  INFO(report.text);
  REQUIRE(report.code == 0);
  CHECK_THAT(testing::Slurp(tmp / "report/report.md"),
             Catch::Contains("drift: mean 0.5600 vs 0.5300"));
  (void)a;
}

}  // namespace trainq
