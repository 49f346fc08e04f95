#include "core/process.h"

#include <signal.h>

#include <catch2/catch.hpp>
#include <filesystem>

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
