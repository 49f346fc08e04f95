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
  const std::string started = tmp / "started";
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", "touch " + ShellQuote(started) + "; sleep 60"};
  spec.inherit_env = false;
  SandboxRun run;
  run.writable = {tmp.path().string()};
  WrapInSandbox(spec, *bwrap, SandboxConfig{}, run);
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  // Once the command runs inside (a SIGTERM during bwrap's own set-up can
  // leave bwrap waiting for good; the worker's SIGKILL after the grace ends
  // that case, which is not this test's).
  bool inside = testing::WaitFor([&] { return std::filesystem::exists(started); },
                                 std::chrono::seconds(20));
  auto start = std::chrono::steady_clock::now();
  runner.KillGroup(*pid, SIGTERM);
  bool ended = testing::WaitFor([&] { return runner.Poll(*pid).has_value(); },
                                std::chrono::seconds(10));
  if (!ended) runner.KillGroup(*pid, SIGKILL);
  auto status = runner.Wait(*pid);
  CHECK(inside);
  CHECK(ended);
  CHECK_FALSE(status.ok());
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

// Runs `script` in the sandbox of `config` + `run`; its output.
std::string RunInside(const std::string& bwrap, const SandboxConfig& config, const SandboxRun& run,
                      const std::string& script, const std::string& log, ExitStatus* status) {
  ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.output_path = log;
  spec.inherit_env = false;
  WrapInSandbox(spec, bwrap, config, run);
  PosixProcessRunner runner;
  auto pid = runner.Spawn(spec);
  if (!pid) return "spawn failed: " + pid.error().message;
  *status = runner.Wait(*pid);
  return ReadFile(log).value_or("");
}

TEST_CASE(
    "sandbox: a path named through a symlinked folder is hidden by its real name "
    "(a pod's /var/run/secrets on Debian, where /var/run is /run)",
    "[sandbox]") {
  auto bwrap = ResolveSandbox("auto");
  REQUIRE(bwrap);
  if (bwrap->empty()) {
    WARN("bwrap is not installed: not tested");
    return;
  }
  testing::TempDir tmp{"/var/tmp"};
  fs::create_directories(tmp / "run/secrets/trainq");
  fs::create_directory_symlink(tmp / "run", tmp / "varrun");
  REQUIRE(WriteFile(tmp / "run/secrets/trainq/token", "pod-token"));
  fs::create_directories(tmp / "work");
  SandboxConfig config;
  config.mode = "bwrap";
  // Named as the worker's flag names it: through the link.
  config.hide = {tmp / "varrun/secrets/trainq/token"};
  CHECK(CanonicalPath(tmp / "varrun/secrets/trainq/token") ==
        fs::canonical(tmp / "run/secrets/trainq/token").string());
  CHECK(CanonicalPath(tmp / "varrun/missing").empty());
  SandboxRun run;
  run.writable = {tmp / "work"};
  ExitStatus st;
  std::string out = RunInside(*bwrap, config, run,
                              "cat " + tmp / "varrun/secrets/trainq/token" + " " +
                                  tmp / "run/secrets/trainq/token" + "; echo done",
                              tmp / "out.log", &st);
  INFO(out);
  CHECK(st.ok());  // bwrap started: it used to fail "Can't mkdir parents for ..."
  CHECK(out.find("pod-token") == std::string::npos);
  CHECK(out.find("done") != std::string::npos);
}

TEST_CASE("sandbox: directories of trainq under a private /tmp stay readable to runs",
          "[sandbox]") {
  auto bwrap = ResolveSandbox("auto");
  REQUIRE(bwrap);
  if (bwrap->empty()) {
    WARN("bwrap is not installed: not tested");
    return;
  }
  // A build under /tmp (a clone in /tmp running ci/demo): the run's /tmp is
  // its own, but trainq-train's folder is bound read-only where it is.
  testing::TempDir bin{"/tmp"};
  REQUIRE(WriteFile(bin / "trainq-train", "#!/bin/sh\necho trained\n"));
  fs::permissions(bin / "trainq-train", fs::perms::owner_all);
  testing::TempDir tmp{"/var/tmp"};
  fs::create_directories(tmp / "work/tmp");
  SandboxConfig config;
  config.mode = "bwrap";
  config.readable = {bin.path().string()};
  SandboxRun run;
  run.writable = {tmp / "work"};
  run.tmp = tmp / "work/tmp";
  ExitStatus st;
  std::string out = RunInside(*bwrap, config, run,
                              bin / "trainq-train" + "; echo x > " + bin / "y" +
                                  " 2>/dev/null || echo refused; echo t > /tmp/t && echo own-tmp",
                              tmp / "out.log", &st);
  INFO(out);
  CHECK(out.find("trained") != std::string::npos);
  CHECK(out.find("refused") != std::string::npos);  // read-only
  CHECK(out.find("own-tmp") != std::string::npos);
  CHECK_FALSE(fs::exists(bin / "y"));
  CHECK(fs::exists(tmp / "work/tmp/t"));
}

TEST_CASE(
    "sandbox: the probe finds the full form where bwrap starts, and says why it "
    "cannot where it does not",
    "[sandbox]") {
  testing::TempDir tmp{"/var/tmp"};
  SandboxConfig config;
  config.mode = "auto";
  std::string none;
  auto off = ProbeSandbox("none", none, config, tmp / "probe");
  REQUIRE(off);
  CHECK(off->form == "none");
  CHECK(off->note == "sandbox: none was asked for");
  auto bwrap = ResolveSandbox("auto");
  REQUIRE(bwrap);
  if (bwrap->empty()) {
    WARN("bwrap is not installed: the probe's bwrap forms not tested");
    return;
  }
  std::string b = *bwrap;
  auto full = ProbeSandbox("auto", b, config, tmp / "probe");
  REQUIRE(full);
  // This host (CI's) lets bwrap mount a fresh /proc; containers are tested in
  // tests/ci (podman) and ci/faults (a unit's mounts over /proc).
  CHECK(full->form == "bwrap");
  CHECK(config.own_proc);
  CHECK(b == *bwrap);
  CHECK_FALSE(fs::exists(tmp / "probe"));  // the throwaway run dir is gone
  // A bwrap that cannot start (here: a binary that fails like it): auto falls
  // back to none with its words, bwrap refuses with them.
  REQUIRE(WriteFile(tmp / "fakebwrap",
                    "#!/bin/sh\necho 'bwrap: No permissions to create new "
                    "namespace, likely because the kernel does not allow "
                    "non-privileged user namespaces.' >&2\nexit 1\n"));
  fs::permissions(tmp / "fakebwrap", fs::perms::owner_all);
  std::string fake = tmp / "fakebwrap";
  auto fallback = ProbeSandbox("auto", fake, config, tmp / "probe");
  REQUIRE(fallback);
  CHECK(fallback->form == "none");
  CHECK(fake.empty());  // runs start without bwrap
  CHECK(
      fallback->note.starts_with("bwrap cannot start here: bwrap: No permissions to create new "
                                 "namespace"));
  fake = tmp / "fakebwrap";
  auto refused = ProbeSandbox("bwrap", fake, config, tmp / "probe");
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.starts_with(
      "sandbox: bwrap cannot start here: bwrap: No permissions to create new namespace"));
  CHECK(refused.error().message.find("sandbox: auto") != std::string::npos);
  // A bwrap that cannot mount /proc (a container's masked /proc) but starts
  // without it: the hostproc form.
  REQUIRE(
      WriteFile(tmp / "noproc",
                "#!/bin/sh\nfor a in \"$@\"; do [ \"$a\" = --proc ] && { echo 'bwrap: Can'\"'\"'t "
                "mount proc on /newroot/proc: Operation not permitted' >&2; exit 1; }; done\n"
                "exec " +
                    *bwrap + " \"$@\"\n"));
  fs::permissions(tmp / "noproc", fs::perms::owner_all);
  std::string noproc = tmp / "noproc";
  auto hostproc = ProbeSandbox("auto", noproc, config, tmp / "probe");
  REQUIRE(hostproc);
  CHECK(hostproc->form == "bwrap-hostproc");
  CHECK_FALSE(config.own_proc);
  CHECK(hostproc->note.find("Can't mount proc") != std::string::npos);
  // With the form found, runs start (no --proc given to bwrap).
  fs::create_directories(tmp / "work");
  SandboxRun run;
  run.writable = {tmp / "work"};
  ExitStatus st;
  std::string out = RunInside(noproc, config, run, "echo started", tmp / "out.log", &st);
  CHECK(st.ok());
  CHECK(out == "started\n");
}

TEST_CASE("sandbox: a failed run's error names the sandbox when its output shows its limits",
          "[sandbox]") {
  CHECK(SandboxHint("training...\nloss 0.3\n").empty());
  CHECK(SandboxHint("mkdir: cannot create directory '/home/ada/.cache/huggingface': Read-only "
                    "file system\n")
            .find("sandbox_writable") != std::string::npos);
  CHECK(SandboxHint("FileNotFoundError: [Errno 2] No such file or directory: "
                    "'/tmp/digits.csv'\n")
            .find("/tmp of its own") != std::string::npos);
  CHECK(SandboxHint("bwrap: Can't mount proc on /newroot/proc: Operation not permitted\n")
            .find("trainq's sandbox") != std::string::npos);
  auto env = CacheEnvironment("/data/cache");
  CHECK(env.at("XDG_CACHE_HOME") == "/data/cache");
  CHECK(env.at("HF_HOME") == "/data/cache/huggingface");
  CHECK(env.at("TORCH_HOME") == "/data/cache/torch");
}

}  // namespace
}  // namespace trainq
