#include "core/process.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

using namespace trainq;

namespace {

// Alive and not a zombie (a killed grandchild waits for init to reap it).
bool Alive(int pid) {
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] != 'Z';
}

}  // namespace

TEST_CASE("Spawn runs argv with env, cwd and output file", "[process]") {
  testing::TempDir dir;
  PosixProcessRunner runner;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "echo \"$FOO\"; pwd; echo err >&2; exit 3"};
  spec.env = {{"FOO", "bar baz"}};
  spec.cwd = dir.path().string();
  spec.output_path = dir / "out.log";
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  auto status = runner.Wait(*pid);
  CHECK(status.code == 3);
  CHECK_FALSE(status.ok());
  CHECK(status.Describe() == "exit code 3");
  auto out = ReadFile(dir / "out.log").value();
  CHECK(out == "bar baz\n" + std::filesystem::canonical(dir.path()).string() + "\nerr\n");
}

TEST_CASE("Spawn of a missing program is an error naming it", "[process]") {
  PosixProcessRunner runner;
  ProcessSpec spec;
  spec.argv = {"/nonexistent/trainq-no-such-program"};
  auto pid = runner.Spawn(spec);
  // posix_spawnp reports exec failure either at spawn or as exit code 127.
  if (pid) {
    CHECK(runner.Wait(*pid).code == 127);
  } else {
    CHECK(pid.error().message.find("trainq-no-such-program") != std::string::npos);
  }
}

TEST_CASE("KillGroup kills the child and what it spawned", "[process]") {
  testing::TempDir dir;
  PosixProcessRunner runner;
  ProcessSpec spec;
  // The grandchild writes its pid, then both sleep.
  spec.argv = {"/bin/sh", "-c", "sleep 60 & echo $! > " + dir / "grandchild.pid" + "; wait"};
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  REQUIRE(testing::WaitFor([&] {
    auto t = ReadFile(dir / "grandchild.pid");
    return t && !Trim(*t).empty();
  }));
  int grandchild = std::stoi(std::string(Trim(ReadFile(dir / "grandchild.pid").value())));
  CHECK(Alive(grandchild));
  CHECK_FALSE(runner.Poll(*pid).has_value());
  runner.KillGroup(*pid, SIGKILL);
  auto status = runner.Wait(*pid);
  CHECK(status.signal == SIGKILL);
  CHECK(status.Describe().find("signal 9") != std::string::npos);
  // The grandchild is reparented to init and reaped there; it must be gone.
  CHECK(testing::WaitFor([&] { return !Alive(grandchild); }));
}

// Issue 16: the daemon's listening socket leaked into every training command,
// which kept the port after a kill -9 of serve.
TEST_CASE("Spawn: the child holds only stdin, stdout and stderr, not our descriptors",
          "[process]") {
  testing::TempDir dir;
  // A descriptor opened without O_CLOEXEC, as some libraries open theirs.
  int leaky = ::open("/dev/null", O_RDONLY);
  REQUIRE(leaky >= 3);
  PosixProcessRunner runner;
  ProcessSpec spec;
  // The glob's own directory descriptor is closed again by the time of the test.
  spec.argv = {"/bin/sh", "-c",
               "for f in /proc/$$/fd/*; do [ -e \"$f\" ] && echo \"$f\"; done; true"};
  spec.output_path = dir / "out.log";
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  CHECK(runner.Wait(*pid).ok());
  ::close(leaky);
  std::set<std::string> fds;
  for (auto line : Split(ReadFile(dir / "out.log").value(), '\n')) {
    if (!Trim(line).empty()) fds.insert(std::string(line.substr(line.rfind('/') + 1)));
  }
  CHECK(fds == std::set<std::string>{"0", "1", "2"});
}

TEST_CASE("IntersectEnvPatterns matches only names both sides match, ValidEnvPattern takes "
          "NAME and PREFIX*",
          "[process]") {
  using V = std::vector<std::string>;
  CHECK(IntersectEnvPatterns({"A", "B"}, {"B", "C"}) == V{"B"});
  CHECK(IntersectEnvPatterns({"WANDB_*"}, {"WANDB_API_KEY"}) == V{"WANDB_API_KEY"});
  CHECK(IntersectEnvPatterns({"WANDB_API_KEY"}, {"WANDB_*"}) == V{"WANDB_API_KEY"});
  CHECK(IntersectEnvPatterns({"WANDB_*"}, {"W*"}) == V{"WANDB_*"});  // the narrower prefix
  CHECK(IntersectEnvPatterns({"W*"}, {"WANDB_*"}) == V{"WANDB_*"});
  CHECK(IntersectEnvPatterns({"HF_*"}, {"AWS_*", "AWS_SECRET_ACCESS_KEY"}).empty());
  CHECK(IntersectEnvPatterns({}, {"*", "A"}).empty());  // nothing allowed: nothing at all
  CHECK(IntersectEnvPatterns({"A", "B"}, {}).empty());
  CHECK(IntersectEnvPatterns({"A*", "AB*"}, {"ABC"}) == V{"ABC"});  // once
  // Every name the result matches is matched by both sides.
  const V a = {"CONDA_*", "HF_TOKEN", "WANDB_*"}, b = {"C*", "HF_*", "WANDB_MODE", "X"};
  const auto both = IntersectEnvPatterns(a, b);
  for (const std::string name : {"CONDA_PREFIX", "CUDA_HOME", "HF_TOKEN", "HF_HOME", "WANDB_MODE",
                                 "WANDB_API_KEY", "X"}) {
    INFO(name);
    CHECK(EnvNameMatches(name, both) == (EnvNameMatches(name, a) && EnvNameMatches(name, b)));
  }
  CHECK(ValidEnvPattern("WANDB_API_KEY"));
  CHECK(ValidEnvPattern("CONDA_*"));
  CHECK_FALSE(ValidEnvPattern("*"));
  CHECK_FALSE(ValidEnvPattern(""));
  CHECK_FALSE(ValidEnvPattern("A B"));
  CHECK_FALSE(ValidEnvPattern("A*B"));
  CHECK_FALSE(ValidEnvPattern("A=B"));
}

TEST_CASE("Spawn with inherit_env false gives RunEnvironment(pass_env) and spec.env, "
          "RunEnvironment keeps only the safe base and the chosen passthrough",
          "[process]") {
  ::setenv("TRAINQ_TEST_SECRET", "hunter2-not-for-runs", 1);
  ::setenv("TRAINQ_TEST_PASS_A", "a-value", 1);
  auto env = RunEnvironment({"TRAINQ_TEST_PASS_*"});
  CHECK(env.at("TRAINQ_TEST_PASS_A") == "a-value");
  if (const char* home = std::getenv("HOME")) CHECK(env.at("HOME") == home);
  CHECK(env.contains("PATH"));
  CHECK_FALSE(env.contains("TRAINQ_TEST_SECRET"));
  CHECK_FALSE(RunEnvironment({"TRAINQ_TEST_PASS"}).contains("TRAINQ_TEST_PASS_A"));  // exact

  testing::TempDir dir;
  PosixProcessRunner runner;
  ProcessSpec spec;
  spec.argv = {"/usr/bin/env"};
  spec.inherit_env = false;
  spec.pass_env = {"TRAINQ_TEST_PASS_*"};
  spec.env["RUN_VAR"] = "1";
  spec.output_path = dir / "out.log";
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  CHECK(runner.Wait(*pid).ok());
  auto out = ReadFile(dir / "out.log").value();
  CHECK(out.find("TRAINQ_TEST_PASS_A=a-value\n") != std::string::npos);
  CHECK(out.find("RUN_VAR=1\n") != std::string::npos);
  CHECK(out.find("hunter2") == std::string::npos);
  // The default still inherits (helpers such as sbatch need the site's variables).
  spec.inherit_env = true;
  spec.pass_env = {};
  spec.env = {};
  pid = runner.Spawn(spec);
  REQUIRE(pid);
  CHECK(runner.Wait(*pid).ok());
  CHECK(ReadFile(dir / "out.log").value().find("hunter2") != std::string::npos);
  ::unsetenv("TRAINQ_TEST_SECRET");
  ::unsetenv("TRAINQ_TEST_PASS_A");
}
