#include "cloud/local_provider.h"

#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/strings.h"
#include "tests/support/temp_dir.h"

namespace trainq::cloud {
namespace {

using testing::WaitFor;

bool Exists(int pid) { return ProcessStartTime(pid) >= 0; }

struct LocalFixture {
  testing::TempDir dir;
  PosixProcessRunner runner;
  FakeClock clock;
  std::unique_ptr<Provider> Make(std::map<std::string, std::string> params = {}) {
    auto p = MakeProvider("local", params,
                          ProviderDeps{&runner, nullptr, &clock, dir.path().string()});
    REQUIRE(p);
    return std::move(*p);
  }
  BootSpec Spec(const std::string& name, const MachineTag& tag, const std::string& script) {
    BootSpec s;
    s.tag = tag;
    s.name = name;
    s.worker_argv = {"/bin/sh", "-c", script};
    return s;
  }
  ~LocalFixture() {
    // Leave no process behind, whatever the test did.
    for (const auto& e : std::filesystem::directory_iterator(dir.path() / "local")) {
      if (e.path().extension() != ".json") continue;
      auto j = nlohmann::json::parse(ReadFile(e.path().string()).value_or("{}"), nullptr, false);
      if (j.is_object() && j.contains("pid") && j.value("start", -2) ==
                                                    ProcessStartTime(j["pid"].get<int>())) {
        ::kill(-j["pid"].get<int>(), SIGKILL);
        runner.Poll(j["pid"].get<int>());
      }
    }
  }
};

const MachineTag kTag{"cpu", "tq1"};

TEST_CASE("Local provider boots worker processes, lists them by tag, and a restart finds them") {
  LocalFixture f;
  auto p = f.Make();
  std::string out = f.dir / "out";
  auto a = p->Boot(f.Spec("tq-tq1-cpu-1", kTag, "echo \"up $0\" > '" + out + "'; exec sleep 300"));
  REQUIRE(a);
  auto b = p->Boot(f.Spec("tq-tq1-cpu-2", kTag, "exec sleep 300"));
  REQUIRE(b);
  auto c = p->Boot(f.Spec("tq-tq2-cpu-1", {"cpu", "tq2"}, "exec sleep 300"));
  REQUIRE(c);
  CHECK(WaitFor([&] { return ReadFile(out).value_or("") == "up /bin/sh\n"; }));
  CHECK(std::filesystem::exists(f.dir / "local/tq-tq1-cpu-1.log"));
  auto record = nlohmann::json::parse(ReadFile(f.dir / "local/tq-tq1-cpu-1.json").value());
  CHECK(record["pid"] == std::stoi(*a));
  CHECK(record["pool"] == "cpu");
  CHECK(record["instance"] == "tq1");
  CHECK(record["name"] == "tq-tq1-cpu-1");

  auto listed = p->List(kTag);
  REQUIRE(listed);
  REQUIRE(listed->size() == 2);
  std::set<std::string> names;
  for (const auto& m : *listed) names.insert(m.name);
  CHECK(names == std::set<std::string>{"tq-tq1-cpu-1", "tq-tq1-cpu-2"});

  // A new provider over the same state directory (trainq restarted).
  auto again = f.Make();
  CHECK(again->List(kTag)->size() == 2);
  // A name is never booted twice.
  auto dup = again->Boot(f.Spec("tq-tq1-cpu-1", kTag, "exec sleep 300"));
  REQUIRE_FALSE(dup);
  CHECK(dup.error().kind == ErrorKind::kConflict);
}

TEST_CASE("Local provider: a worker that dies (SIGKILL, exit) is no longer listed") {
  LocalFixture f;
  auto p = f.Make();
  auto a = p->Boot(f.Spec("tq-tq1-cpu-1", kTag, "exec sleep 300"));
  auto b = p->Boot(f.Spec("tq-tq1-cpu-2", kTag, "exit 3"));
  REQUIRE(a);
  REQUIRE(b);
  ::kill(std::stoi(*a), SIGKILL);  // a zombie until reaped: counts as dead
  REQUIRE(WaitFor([&] { return p->List(kTag)->empty(); }));
  CHECK_FALSE(std::filesystem::exists(f.dir / "local/tq-tq1-cpu-1.json"));
  CHECK(p->Stop(*a));  // already gone: fine
}

TEST_CASE("Local provider stops with SIGTERM, and SIGKILLs a worker that ignores it after the grace") {
  LocalFixture f;
  auto p = f.Make({{"stop_grace", "30s"}, {"stop_wait", "1s"}});
  std::string log = f.dir / "term";
  auto polite = p->Boot(f.Spec("tq-tq1-cpu-1", kTag,
                               "trap 'echo terminated > " + log + "; exit 0' TERM; "
                               "while true; do sleep 0.05; done"));
  REQUIRE(polite);
  REQUIRE(WaitFor([&] { return Exists(std::stoi(*polite)); }));
  // Let the shell install its trap before the signal.
  std::string ready = f.dir / "ready";
  auto stubborn = p->Boot(f.Spec("tq-tq1-cpu-2", kTag,
                                 "trap '' TERM; touch " + ready + "; while true; do sleep 0.05; done"));
  REQUIRE(stubborn);
  REQUIRE(WaitFor([&] { return std::filesystem::exists(ready); }));

  REQUIRE(WaitFor([&] { return p->Stop(*polite).has_value(); }));
  CHECK(ReadFile(log).value_or("") == "terminated\n");
  CHECK_FALSE(Exists(std::stoi(*polite)));

  auto start = std::chrono::steady_clock::now();
  REQUIRE(p->Stop(*stubborn));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));  // no waiting for the grace
  int pid = std::stoi(*stubborn);
  CHECK(Exists(pid));                 // still shutting down...
  CHECK(p->List(kTag)->empty());      // ...but no longer a machine
  f.clock.Advance(29'000);
  REQUIRE(p->List(kTag));
  CHECK(Exists(pid));
  f.clock.Advance(2'000);  // past the grace: the next call finishes the stop
  REQUIRE(p->List(kTag));
  CHECK(WaitFor([&] {
    f.runner.Poll(pid);
    return !Exists(pid);
  }));
  CHECK_FALSE(std::filesystem::exists(f.dir / "local/tq-tq1-cpu-2.json"));
  CHECK(p->Stop("123456789"));  // unknown id
}

TEST_CASE("Local provider: a reused pid is not taken for the worker, and is never signalled") {
  LocalFixture f;
  auto p = f.Make();
  // A live process that is not the worker, recorded with another start time.
  PosixProcessRunner runner;
  auto other = runner.Spawn(ProcessSpec{{"sleep", "300"}, {}, "", ""});
  REQUIRE(other);
  std::filesystem::create_directories(f.dir / "local");
  nlohmann::json j = {{"pid", *other}, {"start", ProcessStartTime(*other) - 5},
                      {"pool", "cpu"}, {"instance", "tq1"}, {"name", "tq-tq1-cpu-9"},
                      {"started", 1}};
  WriteFile(f.dir / "local/tq-tq1-cpu-9.json", j.dump()).value();
  CHECK(p->List(kTag)->empty());
  CHECK(p->Stop(std::to_string(*other)));
  CHECK(Exists(*other));
  runner.KillGroup(*other, SIGKILL);
  runner.Wait(*other);
}

}  // namespace
}  // namespace trainq::cloud
