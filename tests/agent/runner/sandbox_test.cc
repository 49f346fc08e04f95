// The run sandbox (agent/runner/sandbox.h) with the real bwrap and real
// processes: what a command inside can read, write and see.
#include "agent/runner/sandbox.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <filesystem>

#include "core/process.h"
#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;

namespace trainq {
namespace {

TEST_CASE("sandbox: modes, and bwrap asked for but missing is a clear error", "[sandbox]") {
  CHECK(CheckSandboxMode("auto", "x"));
  CHECK(CheckSandboxMode("bwrap", "x"));
  CHECK(CheckSandboxMode("none", "x"));
  auto bad = CheckSandboxMode("docker", "pools[0].sandbox");
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "pools[0].sandbox: expected auto, bwrap or none, got \"docker\"");
  CHECK(ResolveSandbox("none").value().empty());
  // Without bwrap on PATH (and in /usr/bin), bwrap is an error and auto is none.
  const bool installed = access("/usr/bin/bwrap", X_OK) == 0 || access("/bin/bwrap", X_OK) == 0;
  const char* old = std::getenv("PATH");
  std::string saved = old ? old : "";
  setenv("PATH", "/nonexistent", 1);
  auto need = ResolveSandbox("bwrap");
  auto maybe = ResolveSandbox("auto");
  setenv("PATH", saved.c_str(), 1);
  if (installed) {
    CHECK(need.value() == (access("/usr/bin/bwrap", X_OK) == 0 ? "/usr/bin/bwrap" : "/bin/bwrap"));
  } else {
    REQUIRE_FALSE(need);
    CHECK(need.error().message.find("apt-get install bubblewrap") != std::string::npos);
    CHECK(maybe.value().empty());
  }
}

TEST_CASE("sandbox: a command inside sees no other process, cannot read hidden paths and "
          "writes only its own directories",
          "[sandbox]") {
  auto bwrap = ResolveSandbox("auto");
  REQUIRE(bwrap);
  if (bwrap->empty()) {
    WARN("bwrap is not installed (ci/install-deps installs bubblewrap): sandbox not tested");
    return;
  }
  // Outside /tmp: inside the sandbox /tmp is the run's own, which would hide
  // everything under it whatever the hide list says.
  testing::TempDir tmp{"/var/tmp"};
  fs::create_directories(tmp / "data/tokens");
  fs::create_directories(tmp / "data/runs/7/output");
  fs::create_directories(tmp / "checkout");
  fs::create_directories(tmp / "shared");
  fs::create_directories(tmp / "elsewhere");
  fs::create_directories(tmp / "runtmp");
  REQUIRE(WriteFile(tmp / "data/tokens/local.token", "pool-token"));
  REQUIRE(WriteFile(tmp / "secret", "file-secret"));
  REQUIRE(WriteFile(tmp / "q.db", "database"));
  REQUIRE(WriteFile(tmp / "shared/q.db", "hidden inside a writable dir"));
  const std::string script =
      "cat " + tmp / "data/tokens/local.token" + " " + tmp / "secret" + " " + tmp / "q.db" + " " +
      tmp / "shared/q.db" +
      " 2>/dev/null; echo read-done;"
      " echo own > " + tmp / "data/runs/7/output/x" + " && echo wrote-run;"
      " echo own > " + tmp / "checkout/x" + " && echo wrote-checkout;"
      " echo own > " + tmp / "shared/x" + " && echo wrote-shared;"
      " echo no > " + tmp / "elsewhere/x" + " 2>/dev/null || echo elsewhere-refused;"
      " echo t > /tmp/t && echo wrote-tmp;"
      " echo procs $(ls /proc | grep -c '^[0-9]');"
      " echo ppid-environ $(cat /proc/" + std::to_string(getpid()) + "/environ 2>/dev/null | wc -c);"
      " echo cwd $(pwd)";
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.cwd = tmp / "checkout";
  spec.output_path = tmp / "out.log";
  spec.inherit_env = false;
  SandboxConfig config;
  config.mode = "bwrap";
  config.hide = {tmp / "data", tmp / "secret", tmp / "q.db", tmp / "shared/q.db",
                 tmp / "missing-file"};
  config.writable = {tmp / "shared"};
  SandboxRun run;
  run.writable = {tmp / "checkout", tmp / "data/runs/7"};
  run.tmp = tmp / "runtmp";
  WrapInSandbox(spec, *bwrap, config, run);
  CHECK(spec.argv.front() == *bwrap);
  CHECK(spec.env["TMPDIR"] == "/tmp");
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  auto status = runner.Wait(*pid);
  std::string out = ReadFile(tmp / "out.log").value_or("");
  INFO(out);
  CHECK(status.ok());
  CHECK(out.starts_with("read-done\n"));  // nothing hidden was read
  CHECK(out.find("pool-token") == std::string::npos);
  CHECK(out.find("file-secret") == std::string::npos);
  CHECK(out.find("database") == std::string::npos);
  CHECK(out.find("hidden inside") == std::string::npos);
  CHECK(out.find("wrote-run") != std::string::npos);
  CHECK(out.find("wrote-checkout") != std::string::npos);
  CHECK(out.find("wrote-shared") != std::string::npos);
  CHECK(out.find("elsewhere-refused") != std::string::npos);
  CHECK(out.find("wrote-tmp") != std::string::npos);
  CHECK(out.find("ppid-environ 0") != std::string::npos);
  CHECK(out.find("cwd " + tmp / "checkout") != std::string::npos);
  // Its own pid namespace: the shell, the command substitution's ls and bwrap's init.
  auto at = out.find("procs ");
  REQUIRE(at != std::string::npos);
  CHECK(std::stoi(out.substr(at + 6)) <= 5);
  CHECK(ReadFile(tmp / "data/runs/7/output/x").value_or("") == "own\n");
  CHECK(ReadFile(tmp / "checkout/x").value_or("") == "own\n");
  CHECK_FALSE(fs::exists(tmp / "elsewhere/x"));
  CHECK(fs::exists(tmp / "runtmp/t"));  // /tmp was the run's own
  CHECK(ReadFile(tmp / "shared/q.db").value_or("") == "hidden inside a writable dir");
}

TEST_CASE("sandbox: a process group signal reaches the command inside", "[sandbox]") {
  auto bwrap = ResolveSandbox("auto");
  REQUIRE(bwrap);
  if (bwrap->empty()) {
    WARN("bwrap is not installed: sandbox not tested");
    return;
  }
  testing::TempDir tmp;
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "sleep 60"};
  spec.inherit_env = false;
  WrapInSandbox(spec, *bwrap, SandboxConfig{}, SandboxRun{});
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  auto start = std::chrono::steady_clock::now();
  runner.KillGroup(*pid, SIGTERM);
  auto status = runner.Wait(*pid);
  CHECK_FALSE(status.ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

}  // namespace
}  // namespace trainq
