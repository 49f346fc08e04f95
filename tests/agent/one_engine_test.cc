// One run engine: `trainq serve --inproc` and `trainq serve` with worker
// processes run the same Worker (agent/runner/worker.h) over the same server
// code (agent/daemon/worker_api.cc); only how a call reaches the server
// differs (agent/runner/lease_client.h). The same batch, run both ways from
// the real binary, leaves the same run records.
#include <catch2/catch.hpp>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

namespace trainq {
namespace {

// Succeeds with a seed-dependent accuracy and a step curve; seed 2 prints a
// warning on stderr. `crash` fails every attempt (retried once), `config`
// fails the way a configuration error does (exit 2 after a usage line: not
// retried).
const char* kTrain = R"(import json, os, sys
seed = int(sys.argv[sys.argv.index("--seed") + 1])
with open(os.environ["TRAINQ_METRICS_FILE"], "a") as f:
    for step in (1, 2):
        f.write(json.dumps({"name": "loss", "value": 1.0 / (step + seed), "step": step}) + "\n")
    f.write(json.dumps({"name": "accuracy", "value": 0.5 + seed / 100, "final": True}) + "\n")
print(f"seed {seed} done")
if seed == 2:
    print("a warning", file=sys.stderr)
)";

const char* kYaml = R"(version: 1
defaults:
  max_attempts: 2
experiments:
  ok:
    command: python3 train.py --seed {seed}
    repeats: 3
  crash:
    command: 'echo "boom at seed {seed}" >&2; exit 1'
    repeats: 1
  config:
    command: 'echo "usage: train.py --seed N" >&2; exit 2'
    repeats: 1
)";

// The log without trainq's own lines: the banners name the machine, the run
// id and the time; the server's line between attempts names the lease token.
std::string RunOutput(const std::string& log) {
  std::istringstream in(log);
  std::string line, out;
  while (std::getline(in, line)) {
    if (!line.starts_with("=== trainq") && !line.starts_with("--- trainq: lease ")) {
      out += line + "\n";
    }
  }
  return out;
}

// One line per run: every field of the runs table but its ids, times, worker
// and log path; then its metric points and its output.
std::map<std::tuple<std::string, std::int64_t>, std::string> Records(const std::string& db) {
  StoreOptions so;
  so.create = false;
  auto store = Store::Open(db, so);
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  std::map<std::tuple<std::string, std::int64_t>, std::string> out;
  for (const auto& r : *runs) {
    std::ostringstream s;
    s << "experiment=" << r.experiment << " sha=" << r.sha << " seed=" << r.seed
      << " repeat=" << r.repeat << " state=" << RunStateName(r.state) << " attempts=" << r.attempts
      << "/" << r.max_attempts << " exit_code=" << (r.exit_code ? std::to_string(*r.exit_code) : "-")
      << " metric=" << (r.metric_value ? FormatDouble(*r.metric_value, 6) : "-")
      << " started=" << r.started_ms.has_value() << " finished=" << r.finished_ms.has_value()
      << " last_error=" << r.last_error << "\n";
    auto points = store->runs().Metrics(r.id);
    REQUIRE(points);
    for (const auto& p : *points) {
      s << "  point " << p.name << " step=" << (p.step ? std::to_string(*p.step) : "-")
        << " value=" << FormatDouble(p.value, 6) << " final=" << p.final << "\n";
    }
    s << "  output:\n" << RunOutput(testing::Slurp(r.log_path));
    out[{r.experiment, r.seed}] = s.str();
  }
  return out;
}

TEST_CASE("one engine: serve --inproc and serve with workers leave the same run records",
          "[e2e][worker]") {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  git.Commit({{"train.py", kTrain}, {"trainq.yaml", kYaml}}, "one engine");
  std::map<std::string, std::map<std::tuple<std::string, std::int64_t>, std::string>> records;
  const std::vector<std::pair<std::string, std::string>> modes = {
      {"inproc", "serve --inproc --slots 2 --until-idle --poll-ms 20"},
      {"workers", "serve --machines 1 --slots 2 --until-idle --poll-ms 20"}};
  for (const auto& [mode, serve] : modes) {
    // Each its own directory, so its own data dir (trainq-data beside the db).
    fs::create_directories(tmp / mode);
    const std::string db = (fs::path(tmp / mode) / "queue.db").string();
    auto cmd = [&](const std::string& args) {
      return ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) + " " + args;
    };
    std::string text;
    REQUIRE(testing::RunShell(cmd("submit --repo " + ShellQuote(git.dir())), &text) == 0);
    int code = testing::RunShell(cmd(serve), &text);
    INFO(mode << ": " << serve << "\n" << text);
    CHECK(code == 1);  // runs ended dead: crash and config
    CHECK_THAT(text, Catch::Contains("2 run(s) ended dead"));
    records[mode] = Records(db);
  }
  const auto& inproc = records["inproc"];
  const auto& workers = records["workers"];
  REQUIRE(inproc.size() == 5);
  REQUIRE(workers.size() == inproc.size());
  for (const auto& [key, record] : inproc) {
    INFO(std::get<0>(key) << " seed " << std::get<1>(key));
    REQUIRE(workers.contains(key));
    CHECK(workers.at(key) == record);
  }
  // The records say what ran: not empty, the same on both sides.
  CHECK_THAT(inproc.at({"ok", 2}), Catch::Contains("state=succeeded attempts=1/2"));
  CHECK_THAT(inproc.at({"ok", 2}), Catch::Contains("a warning"));
  CHECK_THAT(inproc.at({"ok", 3}), Catch::Contains("point loss step=2"));
  CHECK_THAT(inproc.at({"crash", 1}), Catch::Contains("state=dead attempts=2/2"));
  CHECK_THAT(inproc.at({"crash", 1}), Catch::Contains("boom at seed 1"));
  CHECK_THAT(inproc.at({"config", 1}), Catch::Contains("configuration error, not retried"));
}

}  // namespace
}  // namespace trainq
