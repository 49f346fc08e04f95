// A run's process as agent/runner/run_process.h builds and judges it: the
// command line and environment (BuildRunProcess), the metric readers
// (ReadRunMetric), in a real shell where quoting matters. The loop that
// starts, watches and reports processes is worker_loop_test.cc.
#include "agent/runner/run_process.h"

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

TEST_CASE("run process: BuildRunProcess sets the run environment and substitutes the command",
          "[run_process][env]") {
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

TEST_CASE("run process: BuildRunProcess hands out GPUs and prepends bin_dir to PATH",
          "[run_process][env]") {
  LeasedRun run = SampleRun();
  run.gpus = 2;
  auto spec = BuildRunProcess(run, SamplePaths("/d"), "/opt/trainq/bin", "0,1");
  CHECK(spec.env.at("CUDA_VISIBLE_DEVICES") == "0,1");
  CHECK_THAT(spec.env.at("PATH"), Catch::StartsWith("/opt/trainq/bin:"));
  // A run that asks for GPUs when none are configured sees the machine's own setting.
  auto none = BuildRunProcess(run, SamplePaths("/d"), "", "");
  CHECK(none.env.count("CUDA_VISIBLE_DEVICES") == 0);
}

TEST_CASE("run process: BuildRunProcess passes the operator's variables, narrowed by the run's "
          "env_passthrough, and PassthroughNote names what the operator does not allow",
          "[run_process][env]") {
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

TEST_CASE("run process: a quoted {output_dir} with a space and a quote works in a real shell",
          "[run_process][env]") {
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

TEST_CASE("run process: ReadRunMetric takes the last value of the metric", "[run_process][metric]") {
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

TEST_CASE("run process: ReadRunMetric prefers the point tagged final", "[run_process][metric]") {
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

TEST_CASE("run process: ReadRunMetric falls back to the last regex match in the output",
          "[run_process][metric]") {
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

TEST_CASE("run process: ReadRunMetric warns about malformed lines with their numbers",
          "[run_process][metric]") {
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

TEST_CASE("run process: ReadRunMetric reads a null value as NaN", "[run_process][metric]") {
  auto r = ReadRunMetric("{\"name\":\"accuracy\",\"value\":null}\n", "", "accuracy", "");
  REQUIRE(r.value.has_value());
  CHECK(std::isnan(*r.value));
  REQUIRE(r.points.size() == 1);
  CHECK(std::isnan(r.points[0].value));
}

TEST_CASE("run process: ReadRunMetric survives a non-boolean `final`",
          "[run_process][metric]") {
  // Regression (fixed): ReadRunMetric (agent/runner/run_process.cc) calls j.value("final", false), which
  // throws nlohmann::json::type_error when a script writes "final": 1 (or "yes").
  // The exception escaped the run engine's Step() and takes `trainq serve` down; the
  // run's lease then expires and the next serve crashes on it again. Expected: the
  // line counts (final when the value is true/1) or is warned about, never a throw.
  MetricReading r;
  REQUIRE_NOTHROW(r = ReadRunMetric("{\"name\":\"accuracy\",\"value\":0.5,\"final\":1}\n"
                                    "{\"name\":\"accuracy\",\"value\":0.9,\"final\":\"yes\"}\n",
                                    "", "accuracy", ""));
  CHECK(r.value.has_value());
}

// The liveness check the process-group tests rely on.
TEST_CASE("run process: ProcessGone tells a live process from a dead one", "[run_process][local]") {
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

}  // namespace
}  // namespace trainq
