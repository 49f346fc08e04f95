#include "agent/runner/executor.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>

#include "agent/repo/git_repo.h"
#include "core/strings.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/fake_process.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::ProcessGone;
using testing::ReadPid;
using testing::Slurp;

// ---------------------------------------------------------------------------
// BuildRunProcess

LeasedRun SampleRun() {
  LeasedRun r;
  r.run_id = 42;
  r.batch_id = 7;
  r.token = 3;
  r.seed = 1234;
  r.repeat = 5;
  r.attempt = 2;
  r.experiment = "lstm";
  r.command = "python3 train.py --seed {seed} --repeat {repeat} --run {run_id} --out {output_dir} {other}";
  r.metric_name = "accuracy";
  r.sha = std::string(40, 'c');
  r.repo_url = "/repo";
  return r;
}

RunPaths SamplePaths(const std::string& root) {
  RunPaths p;
  p.dir = root + "/runs/42";
  p.log = p.dir + "/output.log";
  p.metrics = p.dir + "/metrics.jsonl";
  p.output_dir = p.dir + "/output";
  p.workdir = root + "/worktrees/ccc";
  return p;
}

TEST_CASE("executor: BuildRunProcess sets the run environment and substitutes the command",
          "[executor][env]") {
  LeasedRun run = SampleRun();
  RunPaths paths = SamplePaths("/data dir");  // a space: {output_dir} must come out quoted
  auto spec = BuildRunProcess(run, paths, "", "");
  REQUIRE(spec.argv.size() == 3);
  CHECK(spec.argv[0] == "/bin/sh");
  CHECK(spec.argv[1] == "-c");
  CHECK(spec.argv[2] ==
        "python3 train.py --seed 1234 --repeat 5 --run 42 --out '/data dir/runs/42/output' {other}");
  CHECK(spec.cwd == "/data dir/worktrees/ccc");
  CHECK(spec.output_path == "/data dir/runs/42/output.log");
  CHECK(spec.env.at("TRAINQ_SEED") == "1234");
  CHECK(spec.env.at("TRAINQ_REPEAT") == "5");
  CHECK(spec.env.at("TRAINQ_RUN_ID") == "42");
  CHECK(spec.env.at("TRAINQ_BATCH_ID") == "7");
  CHECK(spec.env.at("TRAINQ_ATTEMPT") == "2");
  CHECK(spec.env.at("TRAINQ_EXPERIMENT") == "lstm");
  CHECK(spec.env.at("TRAINQ_COMMIT") == std::string(40, 'c'));
  CHECK(spec.env.at("TRAINQ_METRIC") == "accuracy");
  // The variables hold plain paths; only the {output_dir} substitution is quoted.
  CHECK(spec.env.at("TRAINQ_METRICS_FILE") == "/data dir/runs/42/metrics.jsonl");
  CHECK(spec.env.at("TRAINQ_OUTPUT_DIR") == "/data dir/runs/42/output");
  CHECK(spec.env.at("PYTHONHASHSEED") == "1234");
  CHECK(spec.env.at("PYTHONUNBUFFERED") == "1");
  // No GPU asked for: none visible.
  CHECK(spec.env.at("CUDA_VISIBLE_DEVICES") == "");
  CHECK(spec.env.count("PATH") == 0);
}

TEST_CASE("executor: BuildRunProcess hands out GPUs and prepends bin_dir to PATH",
          "[executor][env]") {
  LeasedRun run = SampleRun();
  run.gpus = 2;
  auto spec = BuildRunProcess(run, SamplePaths("/d"), "/opt/trainq/bin", "0,1");
  CHECK(spec.env.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK_THAT(spec.env.at("PATH"), Catch::StartsWith("/opt/trainq/bin:"));
  // A run that asks for GPUs when none are configured sees the machine's own setting.
  auto none = BuildRunProcess(run, SamplePaths("/d"), "", "");
  CHECK(none.env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("executor: BuildRunProcess passes the operator's variables, narrowed by the run's "
          "env_passthrough, and PassthroughNote names what the operator does not allow",
          "[executor][env]") {
  LeasedRun run = SampleRun();
  const std::vector<std::string> allowed = {"WANDB_*", "HF_TOKEN"};
  // trainq.yaml without env_passthrough: the operator's set as it is.
  CHECK(BuildRunProcess(run, SamplePaths("/d"), "", "", allowed).pass_env == allowed);
  CHECK(PassthroughNote(run, allowed).empty());
  // With it: only what both allow, whatever the repository asks for.
  run.env_passthrough = std::vector<std::string>{"WANDB_API_KEY", "AWS_*", "HF_*", "GITHUB_TOKEN"};
  CHECK(BuildRunProcess(run, SamplePaths("/d"), "", "", allowed).pass_env ==
        std::vector<std::string>{"WANDB_API_KEY", "HF_TOKEN"});
  CHECK(PassthroughNote(run, allowed) ==
        "=== trainq: env_passthrough: AWS_*, GITHUB_TOKEN not passed: the pool's env_passthrough "
        "(server.yaml or --env-passthrough) does not allow them ===\n");
  // An operator who passes nothing: a repository cannot get anything.
  CHECK(BuildRunProcess(run, SamplePaths("/d"), "", "", {}).pass_env.empty());
  // An empty list: nothing of the operator's either.
  run.env_passthrough = std::vector<std::string>{};
  CHECK(BuildRunProcess(run, SamplePaths("/d"), "", "", allowed).pass_env.empty());
  CHECK(PassthroughNote(run, allowed).empty());
}

TEST_CASE("executor: a quoted {output_dir} with a space and a quote works in a real shell",
          "[executor][env]") {
  testing::TempDir tmp;
  std::string root = tmp / "it's a dir";
  RunPaths paths = SamplePaths(root);
  fs::create_directories(paths.output_dir);
  fs::create_directories(paths.workdir);
  LeasedRun run = SampleRun();
  run.command =
      "touch {output_dir}/model.bin && test -f \"$TRAINQ_OUTPUT_DIR/model.bin\" && "
      "echo seed={seed} > \"$TRAINQ_METRICS_FILE\" && pwd";
  auto spec = BuildRunProcess(run, paths, "", "");
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  REQUIRE(pid.has_value());
  auto status = runner.Wait(*pid);
  INFO(Slurp(paths.log));
  CHECK(status.ok());
  CHECK(fs::exists(fs::path(paths.output_dir) / "model.bin"));
  CHECK(Slurp(paths.metrics) == "seed=1234\n");
  CHECK_THAT(Slurp(paths.log), Catch::Contains(paths.workdir));
}

// ---------------------------------------------------------------------------
// ReadRunMetric

TEST_CASE("executor: ReadRunMetric takes the last value of the metric", "[executor][metric]") {
  auto r = ReadRunMetric(
      "{\"name\":\"accuracy\",\"value\":0.1,\"step\":1}\n"
      "{\"name\":\"loss\",\"value\":2.5,\"step\":1}\n"
      "\n"
      "{\"name\":\"accuracy\",\"value\":0.2,\"step\":2}\n"
      "{\"name\":\"loss\",\"value\":1.5}\n",
      "", "accuracy", "");
  REQUIRE(r.value.has_value());
  CHECK(*r.value == Approx(0.2));
  CHECK(r.warnings.empty());
  REQUIRE(r.points.size() == 4);
  CHECK(r.points[0].name == "accuracy");
  CHECK(r.points[0].step == 1);
  CHECK(r.points[1].name == "loss");
  CHECK(r.points[1].value == Approx(2.5));
  CHECK(r.points[3].step == std::nullopt);
  CHECK_FALSE(r.points[2].final);
}

TEST_CASE("executor: ReadRunMetric prefers the point tagged final", "[executor][metric]") {
  auto r = ReadRunMetric(
      "{\"name\":\"accuracy\",\"value\":0.5,\"final\":true}\n"
      "{\"name\":\"accuracy\",\"value\":0.9}\n",
      "", "accuracy", "");
  REQUIRE(r.value.has_value());
  CHECK(*r.value == Approx(0.5));
  REQUIRE(r.points.size() == 2);
  CHECK(r.points[0].final);
  CHECK_FALSE(r.points[1].final);

  // Of several final points, the last.
  auto two = ReadRunMetric(
      "{\"name\":\"accuracy\",\"value\":0.3,\"final\":true}\n"
      "{\"name\":\"accuracy\",\"value\":0.4,\"final\":true}\n"
      "{\"name\":\"accuracy\",\"value\":0.9,\"final\":false}\n",
      "", "accuracy", "");
  CHECK(two.value.value_or(-1) == Approx(0.4));
}

TEST_CASE("executor: ReadRunMetric falls back to the last regex match in the output",
          "[executor][metric]") {
  const std::string log = "epoch 1 acc=0.10\nepoch 2 acc=0.30\nnoise\nepoch 3 acc=0.25\ndone\n";
  auto r = ReadRunMetric("", log, "accuracy", "acc=([0-9.]+)");
  REQUIRE(r.value.has_value());
  CHECK(*r.value == Approx(0.25));
  REQUIRE(r.points.size() == 1);
  CHECK(r.points[0].name == "accuracy");
  CHECK(r.points[0].final);

  // The metrics file wins over the regex.
  auto both = ReadRunMetric("{\"name\":\"accuracy\",\"value\":0.7}\n", log, "accuracy",
                            "acc=([0-9.]+)");
  CHECK(both.value.value_or(-1) == Approx(0.7));
  CHECK(both.points.size() == 1);

  // Another metric in the file does not stop the fallback.
  auto other = ReadRunMetric("{\"name\":\"loss\",\"value\":0.7}\n", log, "accuracy",
                             "acc=([0-9.]+)");
  CHECK(other.value.value_or(-1) == Approx(0.25));

  // No match, no regex: no value.
  CHECK_FALSE(ReadRunMetric("", "nothing here", "accuracy", "acc=([0-9.]+)").value);
  CHECK_FALSE(ReadRunMetric("", log, "accuracy", "").value);

  // A match that is not a number is a warning, not a value.
  auto word = ReadRunMetric("", "acc=high\n", "accuracy", "acc=(\\w+)");
  CHECK_FALSE(word.value);
  REQUIRE(word.warnings.size() == 1);
  CHECK_THAT(word.warnings[0], Catch::Contains("\"high\""));
}

TEST_CASE("executor: ReadRunMetric warns about malformed lines with their numbers",
          "[executor][metric]") {
  auto r = ReadRunMetric(
      "{\"name\":\"accuracy\",\"value\":0.1}\n"  // 1
      "not json\n"                               // 2
      "\n"                                       // 3 (blank: skipped, still counted)
      "{\"name\":\"accuracy\"}\n"                // 4 no value
      "{\"name\":\"accuracy\",\"value\":\"0.9\"}\n"  // 5 string value
      "[1, 2]\n"                                 // 6 not an object
      "{\"name\":7,\"value\":1}\n"               // 7 name not a string
      "{\"name\":\"accuracy\",\"value\":0.3}\n"  // 8
      "{\"name\":\"accuracy\",\"val",           // 9 cut off mid-write
      "", "accuracy", "");
  CHECK(r.value.value_or(-1) == Approx(0.3));
  CHECK(r.points.size() == 2);
  REQUIRE(r.warnings.size() == 6);
  CHECK_THAT(r.warnings[0], Catch::StartsWith("metrics file line 2:"));
  CHECK_THAT(r.warnings[1], Catch::StartsWith("metrics file line 4:"));
  CHECK_THAT(r.warnings[2], Catch::StartsWith("metrics file line 5:"));
  CHECK_THAT(r.warnings[3], Catch::StartsWith("metrics file line 6:"));
  CHECK_THAT(r.warnings[4], Catch::StartsWith("metrics file line 7:"));
  CHECK_THAT(r.warnings[5], Catch::StartsWith("metrics file line 9:"));
}

TEST_CASE("executor: ReadRunMetric reads a null value as NaN", "[executor][metric]") {
  auto r = ReadRunMetric("{\"name\":\"accuracy\",\"value\":null}\n", "", "accuracy", "");
  REQUIRE(r.value.has_value());
  CHECK(std::isnan(*r.value));
  REQUIRE(r.points.size() == 1);
  CHECK(std::isnan(r.points[0].value));
}

TEST_CASE("executor: ReadRunMetric survives a non-boolean `final`",
          "[executor][metric]") {
  // Regression (fixed): ReadRunMetric (agent/runner/executor.cc) calls j.value("final", false), which
  // throws nlohmann::json::type_error when a script writes "final": 1 (or "yes").
  // The exception escapes LocalExecutor::Step() and takes `trainq serve` down; the
  // run's lease then expires and the next serve crashes on it again. Expected: the
  // line counts (final when the value is true/1) or is warned about, never a throw.
  MetricReading r;
  REQUIRE_NOTHROW(r = ReadRunMetric("{\"name\":\"accuracy\",\"value\":0.5,\"final\":1}\n"
                                    "{\"name\":\"accuracy\",\"value\":0.9,\"final\":\"yes\"}\n",
                                    "", "accuracy", ""));
  CHECK(r.value.has_value());
}

// The liveness check the process-group tests rely on.
TEST_CASE("executor: ProcessGone tells a live process from a dead one", "[executor][local]") {
  PosixProcessRunner runner;
  auto pid = runner.Spawn(ProcessSpec{{"sleep", "30"}, {}, "", ""});
  REQUIRE(pid.has_value());
  CHECK_FALSE(ProcessGone(*pid));
  runner.KillGroup(*pid, SIGKILL);
  // A zombie (not reaped yet) already counts as gone.
  CHECK(testing::WaitFor([&] { return ProcessGone(*pid); }, 5s));
  CHECK(runner.Wait(*pid).signal == SIGKILL);
  CHECK(ProcessGone(*pid));
}

// ---------------------------------------------------------------------------
// LocalExecutor, end to end: a real store, a real repository, real processes.

Store MustOpen(const std::string& path, StoreOptions options) {
  auto s = Store::Open(path, options);
  if (!s) FAIL("Store::Open: " << s.error().message);
  return std::move(*s);
}

// Writes {"name":"accuracy","value":VALUE} to the metrics file; VALUE is shell text.
std::string WriteAccuracy(const std::string& value) {
  return "printf '{\"name\":\"accuracy\",\"value\":%s}\\n' " + value +
         " >> \"$TRAINQ_METRICS_FILE\"";
}

struct Rig {
  explicit Rig(StoreOptions so = {}) : store(MustOpen(tmp / "queue.db", so)) {}

  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string sha = git.Commit({{"marker.txt", "from-the-commit\n"}}, "initial");
  Store store;
  PosixProcessRunner runner;
  const Clock& clock = SystemClock::Get();

  BatchSpec Spec(const std::string& command, int repeats = 1) {
    BatchSpec b;
    b.experiment = "exp";
    b.command = command;
    b.repeats = repeats;
    b.seed_start = 1;
    b.timeout_s = 60;
    b.max_attempts = 1;
    return b;
  }

  std::int64_t Submit(const BatchSpec& spec) {
    auto repo = GitRepo::Open(git.dir());
    REQUIRE(repo.has_value());
    auto commit = repo->Resolve("HEAD");
    REQUIRE(commit.has_value());
    REQUIRE(commit->sha == sha);
    auto r = store.runs().Submit(repo->location(), *commit, {spec}, clock.Now());
    if (!r) FAIL("Submit: " << r.error().message);
    REQUIRE(r->size() == 1);
    return (*r)[0].batch_id;
  }

  ExecutorOptions Options(int slots = 1) {
    ExecutorOptions o;
    o.slots = slots;
    o.data_dir = tmp / "data dir";  // a space on purpose
    o.worker = "test-worker";
    o.lease_ms = 30'000;
    o.heartbeat_ms = 50;
    o.kill_grace_ms = 500;
    return o;
  }

  std::vector<RunRow> Runs(std::int64_t batch) {
    auto r = store.runs().Runs(batch, std::nullopt, 0);
    REQUIRE(r.has_value());
    return *r;
  }
  RunRow Run(std::int64_t id) {
    auto r = store.runs().Run(id);
    REQUIRE(r.has_value());
    REQUIRE(r->has_value());
    return **r;
  }
  RunState State(std::int64_t id) { return Run(id).state; }
  fs::path OutputDir(std::int64_t run_id) {
    return fs::path(Options().data_dir) / "runs" / std::to_string(run_id) / "output";
  }
};

// Steps the executor until `done` holds; false when the deadline passed first.
bool StepUntil(LocalExecutor& exec, const std::function<bool()>& done,
               std::chrono::milliseconds deadline = 20s) {
  return testing::WaitFor(
      [&] {
        auto st = exec.Step();
        if (!st) FAIL("Step: " << st.error().message);
        return done();
      },
      deadline);
}

// Stops whatever a failed test left running.
struct StopAtEnd {
  LocalExecutor& exec;
  ~StopAtEnd() { exec.Shutdown("test ended"); }
};

bool AllIn(const std::vector<RunRow>& runs, RunState s) {
  for (const auto& r : runs) {
    if (r.state != s) return false;
  }
  return !runs.empty();
}

TEST_CASE("executor: a successful run stores its metric and sees the run environment",
          "[executor][local]") {
  Rig rig;
  auto spec = rig.Spec(
      "set -e\n"
      "cat marker.txt\n"  // the working directory is the commit's checkout
      "echo \"substituted seed={seed} repeat={repeat} run={run_id}\"\n"
      "test -d \"$TRAINQ_OUTPUT_DIR\"\n"
      "touch {output_dir}/model.bin\n"
      "printf '{\"name\":\"repeat\",\"value\":%s}\\n' \"$TRAINQ_REPEAT\" >> \"$TRAINQ_METRICS_FILE\"\n"
      "printf '{\"name\":\"run_id\",\"value\":%s}\\n' \"$TRAINQ_RUN_ID\" >> \"$TRAINQ_METRICS_FILE\"\n" +
          WriteAccuracy("\"$TRAINQ_SEED\"") + "\n",
      2);
  spec.seed_start = 7;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options(1));
  StopAtEnd stop{exec};
  REQUIRE(exec.Register("test-machine").has_value());
  CHECK_FALSE(exec.QueueDrained().value());

  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto runs = rig.Runs(batch);
  REQUIRE(runs.size() == 2);
  for (const auto& r : runs) {
    INFO("run " << r.id << ": " << r.last_error << "\n" << Slurp(r.log_path));
    CHECK(r.state == RunState::kSucceeded);
    CHECK(r.attempts == 1);
    CHECK(r.exit_code == 0);
    CHECK(r.worker == "test-worker");
    CHECK(r.started_ms.has_value());
    CHECK(r.finished_ms.has_value());
    // The script wrote its own $TRAINQ_SEED as the metric.
    REQUIRE(r.metric_value.has_value());
    CHECK(*r.metric_value == Approx(static_cast<double>(r.seed)));
    auto points = rig.store.runs().Metrics(r.id);
    REQUIRE(points.has_value());
    REQUIRE(points->size() == 3);
    CHECK((*points)[0].name == "repeat");
    CHECK((*points)[0].value == Approx(r.repeat));
    CHECK((*points)[1].name == "run_id");
    CHECK((*points)[1].value == Approx(static_cast<double>(r.id)));
    auto dir = fs::path(rig.Options().data_dir) / "runs" / std::to_string(r.id);
    CHECK(r.log_path == (dir / "output.log").string());
    std::string log = Slurp(r.log_path);
    CHECK_THAT(log, Catch::Contains("from-the-commit"));
    CHECK_THAT(log, Catch::Contains("substituted seed=" + std::to_string(r.seed) + " repeat=" +
                                    std::to_string(r.repeat) + " run=" + std::to_string(r.id)));
    CHECK(fs::exists(dir / "output" / "model.bin"));
  }
  CHECK(runs[0].seed == 7);
  CHECK(runs[1].seed == 8);
  auto b = rig.store.runs().Batch(batch);
  REQUIRE(b.has_value());
  REQUIRE(b->has_value());
  CHECK((*b)->values.size() == 2);

  auto machines = rig.store.machines().List(false);
  REQUIRE(machines.has_value());
  REQUIRE(machines->size() == 1);
  CHECK((*machines)[0].provider_id == "test-machine");
  CHECK((*machines)[0].slots == 1);
}

TEST_CASE("executor: slots run at the same time", "[executor][local]") {
  Rig rig;
  // Each run waits (bounded) until both have started: only two concurrent slots pass.
  std::string meet = rig.tmp / "meet";
  fs::create_directories(meet);
  auto batch = rig.Submit(rig.Spec(
      "touch " + ShellQuote(meet) + "/$TRAINQ_SEED\n"
      "i=0; while [ ! -f " + ShellQuote(meet) + "/1 ] || [ ! -f " + ShellQuote(meet) + "/2 ]; do\n"
      "  i=$((i+1)); [ $i -gt 1000 ] && { echo alone; exit 9; }; sleep 0.01\n"
      "done\n" + WriteAccuracy("0.5"),
      2));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options(2));
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto runs = rig.Runs(batch);
  for (const auto& r : runs) INFO(r.last_error);
  CHECK(AllIn(runs, RunState::kSucceeded));
}

TEST_CASE("executor: a run's exit ends WaitForExit at once, not after the poll interval",
          "[executor][local][scale]") {
  // serve --inproc waits here between passes: short runs must not each wait
  // out a poll interval (issue 30: ~10 runs/s with --slots 4, poll-bound).
  Rig rig;
  auto batch = rig.Submit(rig.Spec(WriteAccuracy("0.5"), 3));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options(1));
  StopAtEnd stop{exec};
  CHECK_FALSE(exec.WaitForExit(60'000));  // nothing runs: the caller sleeps instead
  // Each run: one Step starts it, one wait sees it end, one Step reaps it and
  // starts the next. With a 60 s interval, three runs finish long before 60 s.
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(exec.Step().has_value());
  for (int i = 0; i < 10 && !exec.QueueDrained().value(); ++i) {
    if (exec.active() > 0) CHECK(exec.WaitForExit(60'000));
    REQUIRE(exec.Step().has_value());
  }
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(exec.QueueDrained().value());
  CHECK(AllIn(rig.Runs(batch), RunState::kSucceeded));
  CHECK(waited < 30s);
}

TEST_CASE("executor: children left behind by a finished run are killed", "[executor][local]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec(
      "sleep 300 &\necho $! > \"$TRAINQ_OUTPUT_DIR/child.pid\"\n" + WriteAccuracy("0.5")));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kSucceeded);
  int child = ReadPid(rig.OutputDir(run.id) / "child.pid");
  REQUIRE(child > 0);
  CHECK(testing::WaitFor([&] { return ProcessGone(child); }, 5s));
}

TEST_CASE("executor: a non-zero exit fails, retries after the backoff, then is dead",
          "[executor][local][retry]") {
  StoreOptions so;
  so.backoff_base_ms = 1;
  Rig rig(so);
  auto spec = rig.Spec("echo \"boom on attempt $TRAINQ_ATTEMPT\"; exit 3");
  spec.max_attempts = 3;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  auto id = rig.Runs(batch).at(0).id;
  REQUIRE(StepUntil(exec, [&] { return rig.State(id) == RunState::kDead; }));
  auto run = rig.Run(id);
  CHECK(run.attempts == 3);
  CHECK(run.exit_code == 3);
  CHECK_THAT(run.last_error, Catch::Contains("exit code 3"));
  CHECK_THAT(run.last_error, Catch::Contains("boom on attempt 3"));
  CHECK_FALSE(run.metric_value.has_value());
  // One log, every attempt in it.
  std::string log = Slurp(run.log_path);
  for (int a = 1; a <= 3; ++a) {
    CHECK_THAT(log, Catch::Contains("attempt " + std::to_string(a) + ")"));
    CHECK_THAT(log, Catch::Contains("boom on attempt " + std::to_string(a)));
  }
  CHECK(exec.QueueDrained().value());
}

TEST_CASE("executor: a failed run waits for its backoff before the retry",
          "[executor][local][retry]") {
  StoreOptions so;
  so.backoff_base_ms = 600'000;
  Rig rig(so);
  auto spec = rig.Spec("exit 5");
  spec.max_attempts = 2;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  auto id = rig.Runs(batch).at(0).id;
  REQUIRE(StepUntil(exec, [&] { return rig.State(id) == RunState::kFailed; }));
  auto run = rig.Run(id);
  CHECK(run.attempts == 1);
  CHECK(run.exit_code == 5);
  CHECK_THAT(run.last_error, Catch::Contains("exit code 5"));
  REQUIRE(run.not_before_ms.has_value());
  CHECK(*run.not_before_ms > rig.clock.Now() + 500'000);
  // Further passes leave it alone until then.
  for (int i = 0; i < 5; ++i) REQUIRE(exec.Step().has_value());
  CHECK(rig.State(id) == RunState::kFailed);
  CHECK(rig.Run(id).attempts == 1);
  CHECK(exec.active() == 0);
  CHECK_FALSE(exec.QueueDrained().value());  // a retry is still due
}

TEST_CASE("executor: a retry can succeed", "[executor][local][retry]") {
  StoreOptions so;
  so.backoff_base_ms = 1;
  Rig rig(so);
  auto spec = rig.Spec("[ \"$TRAINQ_ATTEMPT\" -ge 2 ] || exit 1\n" + WriteAccuracy("0.25"));
  spec.max_attempts = 3;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 2);
  CHECK(run.metric_value.value_or(-1) == Approx(0.25));
  CHECK(run.last_error.empty());
}

TEST_CASE("executor: exit 0 without the metric is a failure that names the metric",
          "[executor][local]") {
  Rig rig;
  auto spec = rig.Spec("echo 'all done, but nothing reported'");
  spec.metric_name = "f1";
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kDead);
  CHECK(run.exit_code == 0);
  CHECK_THAT(run.last_error, Catch::Contains("exited 0 but reported no 'f1' metric"));
  CHECK_THAT(run.last_error, Catch::Contains("$TRAINQ_METRICS_FILE"));
  CHECK_THAT(run.last_error, Catch::Contains("all done, but nothing reported"));
}

TEST_CASE("executor: the regex reads the metric from the output, last match wins",
          "[executor][local]") {
  Rig rig;
  auto spec = rig.Spec("echo 'acc=0.25'; echo 'acc=0.75'; echo tail");
  spec.metric_regex = "acc=([0-9.]+)";
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  INFO(run.last_error);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.metric_value.value_or(-1) == Approx(0.75));
}

TEST_CASE("executor: the regex only sees the current attempt's output", "[executor][local]") {
  StoreOptions so;
  so.backoff_base_ms = 1;
  Rig rig(so);
  // Attempt 1 prints a metric and fails; attempt 2 prints none: its result must not be
  // taken from attempt 1's output in the shared log.
  auto spec = rig.Spec("if [ \"$TRAINQ_ATTEMPT\" = 1 ]; then echo 'acc=0.9'; exit 1; fi; echo nothing");
  spec.metric_regex = "acc=([0-9.]+)";
  spec.max_attempts = 2;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kDead);
  CHECK(run.attempts == 2);
  CHECK_THAT(run.last_error, Catch::Contains("no match of metric.regex"));
}

TEST_CASE("executor: a NaN metric makes the run invalid", "[executor][local]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec(WriteAccuracy("null")));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kDead);
  CHECK_THAT(run.last_error, Catch::Contains("metric 'accuracy' is nan; the run is invalid"));
}

TEST_CASE("executor: a timeout kills the whole process group", "[executor][local][timeout]") {
  Rig rig;
  auto spec = rig.Spec(
      "sleep 300 &\n"
      "echo $! > \"$TRAINQ_OUTPUT_DIR/child.pid\"\n"
      "echo $$ > \"$TRAINQ_OUTPUT_DIR/shell.pid\"\n"
      "sleep 30\n" + WriteAccuracy("1"));
  spec.timeout_s = 1;
  auto batch = rig.Submit(spec);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  auto id = rig.Runs(batch).at(0).id;
  auto start = std::chrono::steady_clock::now();
  REQUIRE(StepUntil(exec, [&] { return rig.State(id) == RunState::kDead; }));
  auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= 1s);
  CHECK(took < 10s);
  auto run = rig.Run(id);
  CHECK_THAT(run.last_error, Catch::Contains("timed out after 1s"));
  CHECK_FALSE(run.metric_value.has_value());
  int child = ReadPid(rig.OutputDir(id) / "child.pid");
  int shell = ReadPid(rig.OutputDir(id) / "shell.pid");
  REQUIRE(child > 0);
  REQUIRE(shell > 0);
  CHECK(testing::WaitFor([&] { return ProcessGone(child) && ProcessGone(shell); }, 5s));
  CHECK(exec.active() == 0);
}

TEST_CASE("executor: a run that ignores SIGTERM is killed after the grace period",
          "[executor][local][timeout]") {
  Rig rig;
  auto spec = rig.Spec(
      "trap '' TERM\n"
      "sleep 300 &\n"
      "echo $! > \"$TRAINQ_OUTPUT_DIR/child.pid\"\n"
      "sleep 30\n");
  spec.timeout_s = 1;
  auto batch = rig.Submit(spec);
  auto options = rig.Options();
  options.kill_grace_ms = 300;
  LocalExecutor exec(rig.store, rig.runner, rig.clock, options);
  StopAtEnd stop{exec};
  auto id = rig.Runs(batch).at(0).id;
  REQUIRE(StepUntil(exec, [&] { return rig.State(id) == RunState::kDead; }));
  auto run = rig.Run(id);
  CHECK_THAT(run.last_error, Catch::Contains("timed out"));
  int child = ReadPid(rig.OutputDir(id) / "child.pid");
  REQUIRE(child > 0);
  CHECK(testing::WaitFor([&] { return ProcessGone(child); }, 5s));
}

TEST_CASE("executor: cancelling a batch kills its running process at the next heartbeat",
          "[executor][local][cancel]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec(
      "sleep 300 &\n"
      "echo $! > \"$TRAINQ_OUTPUT_DIR/child.pid\"\n"
      "echo $$ > \"$TRAINQ_OUTPUT_DIR/shell.pid\"\n"
      "wait\n" + WriteAccuracy("1"), 2));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options(1));
  StopAtEnd stop{exec};
  auto id = rig.Runs(batch).at(0).id;
  auto second = rig.Runs(batch).at(1).id;
  REQUIRE(StepUntil(exec, [&] {  // shell.pid is written last
    return rig.State(id) == RunState::kRunning && ReadPid(rig.OutputDir(id) / "shell.pid") > 0;
  }));
  int child = ReadPid(rig.OutputDir(id) / "child.pid");
  int shell = ReadPid(rig.OutputDir(id) / "shell.pid");
  REQUIRE(child > 0);

  // Another connection, as `trainq cancel` would use.
  auto other = MustOpen(rig.tmp / "queue.db", {});
  auto n = other.runs().CancelBatch(batch, rig.clock.Now());
  REQUIRE(n.has_value());
  CHECK(*n == 2);  // the running one and the queued one
  REQUIRE(StepUntil(exec, [&] { return exec.active() == 0; }, 10s));
  CHECK(testing::WaitFor([&] { return ProcessGone(child) && ProcessGone(shell); }, 5s));
  // Neither run is reported or started afterwards.
  for (int i = 0; i < 5; ++i) REQUIRE(exec.Step().has_value());
  CHECK(exec.active() == 0);
  CHECK(rig.State(id) == RunState::kCancelled);
  CHECK(rig.State(second) == RunState::kCancelled);
  CHECK_FALSE(rig.Run(id).metric_value.has_value());
  CHECK(exec.QueueDrained().value());
}

TEST_CASE("executor: Shutdown puts a running run back in the queue without using an attempt",
          "[executor][local][shutdown]") {
  Rig rig;
  // First start: wait forever. Once restarted, report at once.
  auto spec = rig.Spec(
      "if [ -f \"$TRAINQ_OUTPUT_DIR/started\" ]; then " + WriteAccuracy("0.5") + "; exit 0; fi\n"
      "touch \"$TRAINQ_OUTPUT_DIR/started\"\n"
      "sleep 300 &\n"
      "echo $! > \"$TRAINQ_OUTPUT_DIR/child.pid\"\n"
      "wait\n");
  spec.max_attempts = 1;  // an interruption that used the attempt would leave it dead
  auto batch = rig.Submit(spec);
  auto id = rig.Runs(batch).at(0).id;
  {
    LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
    REQUIRE(exec.Register("m1").has_value());
    REQUIRE(StepUntil(exec, [&] {
      return rig.State(id) == RunState::kRunning && ReadPid(rig.OutputDir(id) / "child.pid") > 0;
    }));
    int child = ReadPid(rig.OutputDir(id) / "child.pid");
    CHECK(rig.Run(id).attempts == 1);
    auto start = std::chrono::steady_clock::now();
    exec.Shutdown("maintenance");
    CHECK(std::chrono::steady_clock::now() - start < 5s);
    CHECK(exec.active() == 0);
    auto run = rig.Run(id);
    CHECK(run.state == RunState::kQueued);
    CHECK(run.attempts == 0);
    CHECK_THAT(run.last_error, Catch::Contains("interrupted: maintenance"));
    CHECK(testing::WaitFor([&] { return ProcessGone(child); }, 5s));
    auto machines = rig.store.machines().List(true);
    REQUIRE(machines.has_value());
    REQUIRE(machines->size() == 1);
    CHECK((*machines)[0].state == "stopped");
  }
  // A new executor picks it up again and it succeeds on its one attempt.
  LocalExecutor again(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{again};
  REQUIRE(StepUntil(again, [&] { return again.QueueDrained().value(); }));
  auto run = rig.Run(id);
  INFO(run.last_error);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 1);
  CHECK(run.metric_value.value_or(-1) == Approx(0.5));
}

TEST_CASE("executor: Shutdown keeps the result of a run that already finished",
          "[executor][local][shutdown]") {
  // Regression (fixed): LocalExecutor::Shutdown (agent/runner/executor.cc) treats every active run as
  // still running: a child that already exited with its metric (not yet reaped by
  // Step) is "interrupted" and put back in the queue, so its finished work is
  // thrown away and run again. Expected: a child that has ended is reaped and
  // reported through Finish (succeeded here), only live ones are interrupted.
  Rig rig;
  std::string go = rig.tmp / "go";
  auto batch = rig.Submit(rig.Spec(
      "echo $$ > \"$TRAINQ_OUTPUT_DIR/shell.pid\"\n"
      "i=0; while [ ! -f " + ShellQuote(go) + " ]; do i=$((i+1)); [ $i -gt 3000 ] && exit 1; "
      "sleep 0.01; done\n" + WriteAccuracy("0.75")));
  auto id = rig.Runs(batch).at(0).id;
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] {
    return rig.State(id) == RunState::kRunning && ReadPid(rig.OutputDir(id) / "shell.pid") > 0;
  }));
  int shell = ReadPid(rig.OutputDir(id) / "shell.pid");
  testing::Spit(go, "");
  // The run ends (a zombie: Step is not called to reap it) ...
  REQUIRE(testing::WaitFor([&] { return ProcessGone(shell); }, 10s));
  // ... and then the daemon is stopped.
  exec.Shutdown("stopping");
  auto run = rig.Run(id);
  INFO(run.last_error);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.metric_value.value_or(-1) == Approx(0.75));
}

TEST_CASE("executor: a run killed by a signal is a failure naming the signal",
          "[executor][local]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec("echo about to die; kill -KILL $$"));
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kDead);
  CHECK_FALSE(run.exit_code.has_value());
  CHECK_THAT(run.last_error, Catch::Contains("killed by signal 9"));
  CHECK_THAT(run.last_error, Catch::Contains("about to die"));
}

TEST_CASE("executor: heartbeats keep a run's short lease alive", "[executor][local]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec("sleep 2\n" + WriteAccuracy("0.5")));
  auto options = rig.Options();
  options.lease_ms = 1000;  // half the run
  options.heartbeat_ms = 50;
  LocalExecutor exec(rig.store, rig.runner, rig.clock, options);
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  INFO(run.last_error);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 1);
}

TEST_CASE("executor: a run held by a silent executor is taken back and run",
          "[executor][local]") {
  StoreOptions so;
  so.backoff_base_ms = 1;
  Rig rig(so);
  auto spec = rig.Spec(WriteAccuracy("0.5"));
  spec.max_attempts = 2;
  auto batch = rig.Submit(spec);
  // Another worker leased it and went silent: its lease ran out a while ago.
  auto ghost = rig.store.runs().Lease("ghost", rig.clock.Now() - 60'000, 1'000, 1);
  REQUIRE(ghost.has_value());
  REQUIRE(ghost->size() == 1);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  INFO(run.last_error);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 2);  // the silent worker's lease counted as one
  CHECK(run.worker == "test-worker");
  // The ghost's token is fenced off.
  auto late = rig.store.runs().Complete(run.id, (*ghost)[0].token, rig.clock.Now(), 0.1);
  REQUIRE_FALSE(late.has_value());
  CHECK(late.error().kind == ErrorKind::kConflict);
  CHECK(rig.Run(run.id).metric_value.value_or(-1) == Approx(0.5));
}

TEST_CASE("executor: a run whose repository vanished fails with the reason",
          "[executor][local]") {
  Rig rig;
  auto batch = rig.Submit(rig.Spec(WriteAccuracy("0.5")));
  fs::remove_all(rig.git.dir());
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  StopAtEnd stop{exec};
  REQUIRE(StepUntil(exec, [&] { return exec.QueueDrained().value(); }));
  auto run = rig.Runs(batch).at(0);
  CHECK(run.state == RunState::kDead);
  CHECK_THAT(run.last_error, Catch::StartsWith("cannot start: "));
  CHECK_THAT(run.last_error, Catch::Contains("no such directory"));
  CHECK(exec.active() == 0);
}

}  // namespace
}  // namespace trainq

// The executor over a FakeProcessRunner and a FakeClock: the kill grace, the
// timeout and a lost lease, with every signal the executor sends recorded and
// the clock moved by the test (no real child, no wall-clock wait).
namespace trainq {
namespace {

struct FakeRig {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string sha = git.Commit({{"marker.txt", "from-the-commit\n"}}, "initial");
  Store store = MustOpen(tmp / "queue.db", {});
  testing::FakeProcessRunner runner;
  FakeClock clock;

  std::int64_t Submit(int timeout_s, int max_attempts = 1) {
    BatchSpec b;
    b.experiment = "exp";
    b.command = "python3 train.py --seed {seed}";
    b.repeats = 1;
    b.timeout_s = timeout_s;
    b.max_attempts = max_attempts;
    auto repo = GitRepo::Open(git.dir());
    REQUIRE(repo);
    auto commit = repo->Resolve("HEAD");
    REQUIRE(commit);
    auto r = store.runs().Submit(repo->location(), *commit, {b}, clock.Now());
    REQUIRE(r);
    return store.runs().Runs(r->front().batch_id, std::nullopt, 0).value().at(0).id;
  }
  ExecutorOptions Options() {
    ExecutorOptions o;
    o.slots = 1;
    o.data_dir = tmp / "data";
    o.worker = "test-worker";
    o.lease_ms = 30'000;
    o.heartbeat_ms = 1'000;
    o.kill_grace_ms = 2'000;
    return o;
  }
  RunRow Run(std::int64_t id) { return store.runs().Run(id).value().value(); }
  // The one process spawned so far.
  int Pid() {
    auto pids = runner.pids();
    REQUIRE(pids.size() == 1);
    return pids[0];
  }
  std::vector<int> Signals() { return runner.process(Pid()).signals; }
};

TEST_CASE("executor with a fake process: exit 0 with the metric written succeeds",
          "[executor][fake_process]") {
  FakeRig rig;
  auto id = rig.Submit(60);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  REQUIRE(exec.Step());
  const auto spec = rig.runner.process(rig.Pid()).spec;
  CHECK(spec.argv == std::vector<std::string>{"/bin/sh", "-c", "python3 train.py --seed 1"});
  CHECK(rig.Run(id).state == RunState::kRunning);
  REQUIRE(WriteFile(spec.env.at("TRAINQ_METRICS_FILE"),
                    "{\"name\": \"accuracy\", \"value\": 0.75}\n"));
  rig.clock.Advance(42'000);
  rig.runner.Exit(rig.Pid(), 0);
  REQUIRE(exec.Step());
  auto run = rig.Run(id);
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.metric_value == 0.75);
  CHECK(run.finished_ms.value() - run.started_ms.value() == 42'000);
  // Whatever the script left in its group is killed once it ended.
  CHECK(rig.Signals() == std::vector<int>{SIGKILL});
}

TEST_CASE("executor with a fake process: the timeout sends SIGTERM once, and the run fails "
          "naming it",
          "[executor][fake_process][timeout]") {
  FakeRig rig;
  auto id = rig.Submit(5);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  REQUIRE(exec.Step());
  rig.clock.Advance(5'000);  // at the timeout, not past it
  REQUIRE(exec.Step());
  CHECK(rig.Signals().empty());
  rig.clock.Advance(1);
  REQUIRE(exec.Step());  // SIGTERM; the process ends on it
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  REQUIRE(exec.Step());  // reaped
  auto run = rig.Run(id);
  CHECK(run.state == RunState::kDead);
  CHECK_THAT(run.last_error, Catch::StartsWith("timed out after 5s (process group killed)"));
  CHECK(exec.active() == 0);
}

TEST_CASE("executor with a fake process: a run that ignores SIGTERM gets SIGKILL only once the "
          "kill grace has passed",
          "[executor][fake_process][timeout]") {
  FakeRig rig;
  auto id = rig.Submit(5);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  REQUIRE(exec.Step());
  rig.runner.IgnoreTerm(rig.Pid());
  rig.clock.Advance(5'001);
  REQUIRE(exec.Step());
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  rig.clock.Advance(1'999);  // within the 2 s grace: it is left alone
  REQUIRE(exec.Step());
  REQUIRE(exec.Step());
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  CHECK(rig.runner.running() == 1);
  rig.clock.Advance(1);
  REQUIRE(exec.Step());
  CHECK(rig.Signals() == std::vector<int>{SIGTERM, SIGKILL});
  REQUIRE(exec.Step());
  CHECK(rig.Run(id).state == RunState::kDead);
  CHECK_THAT(rig.Run(id).last_error, Catch::Contains("timed out"));
}

TEST_CASE("executor with a fake process: a lease lost while the executor was silent stops the "
          "process and reports nothing",
          "[executor][fake_process][heartbeat]") {
  FakeRig rig;
  auto id = rig.Submit(3600, 3);
  LocalExecutor exec(rig.store, rig.runner, rig.clock, rig.Options());
  REQUIRE(exec.Step());
  REQUIRE(rig.Run(id).state == RunState::kRunning);
  // Heartbeats keep the 30 s lease while the executor steps.
  for (int i = 0; i < 60; ++i) {
    rig.clock.Advance(1'000);
    REQUIRE(exec.Step());
  }
  CHECK(rig.Signals().empty());
  // The executor stalls for longer than its lease: another process expires
  // it and another worker takes the run.
  rig.clock.Advance(31'000);
  auto other = MustOpen(rig.tmp / "queue.db", {});
  REQUIRE(other.runs().ExpireLeases(rig.clock.Now()).value() == 1);
  auto taken = other.runs().Lease("thief", rig.clock.Now() + 20'000, 30'000, 1).value();
  REQUIRE(taken.size() == 1);
  rig.clock.Advance(20'000);
  // Its next heartbeat is refused: the process is killed, no outcome reported.
  REQUIRE(exec.Step());
  CHECK(rig.Signals() == std::vector<int>{SIGKILL});
  CHECK(exec.active() == 0);
  auto run = rig.Run(id);
  CHECK(run.state == RunState::kLeased);
  CHECK(run.worker == "thief");
  CHECK_FALSE(run.metric_value);
}

}  // namespace
}  // namespace trainq
