// End to end through the real binaries: `trainq serve` boots local worker
// machines (the local provider), they lease runs over HTTP, one worker is
// killed with SIGKILL mid-run, and the recorded history shows that its run was
// leased again and stored once, that every machine ends stopped, and that no
// machine was drained or stopped while it held a lease.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>

#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::Daemon;

// A run that waits until the test creates the file `release` in the
// test's folder (so that a worker is certainly killed in the
// middle of its runs), then reports its seed back as the metric.
constexpr const char* kManifest =
    "version: 1\n"
    "defaults:\n"
    "  repeats: 12\n"
    "  timeout: 2m\n"
    "experiments:\n"
    "  slow:\n"
    "    command: sh run.sh\n";
std::string RunScript(const std::string& release) {
  return "#!/bin/sh\n"
         "i=0\n"
         "while [ ! -e " + ShellQuote(release) + " ] && [ $i -lt 1200 ]; do i=$((i+1)); sleep 0.05; done\n"
         "sleep 0.2\n"
         "echo \"{\\\"name\\\":\\\"accuracy\\\",\\\"value\\\":0.$TRAINQ_SEED}\" >> \"$TRAINQ_METRICS_FILE\"\n";
}

TEST_CASE("fleet e2e: 2 local machines x 2 slots, 12 runs, one worker SIGKILLed mid-run",
          "[fleet][e2e]") {
  testing::TempDir tmp;
  testing::GitFixture repo(tmp / "repo");
  repo.Commit({{"trainq.yaml", kManifest}, {"run.sh", RunScript(tmp / "release")}}, "slow experiment");
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  std::string out;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                " submit --repo " + ShellQuote(repo.dir()),
                            &out) == 0);

  Daemon daemon;
  auto pid = daemon.runner.Spawn(
      {{TRAINQ_BINARY, "--db", db, "serve", "--machines", "2", "--slots", "2", "--until-idle",
        "--idle-grace", "1", "--poll-ms", "50", "--heartbeat", "1", "--lease", "30",
        "--sandbox-writable", tmp.path().string()},  // the runs wait for `release` there
       {},
       tmp.path().string(),
       tmp / "serve.log"});
  REQUIRE(pid);
  daemon.pid = *pid;
  INFO("serve log:\n" << testing::Slurp(tmp / "serve.log"));

  auto store = Store::Open(db, {.create = false});
  REQUIRE(store);

  // Both machines run two runs each, and the runs wait for `release`: pick a
  // machine and the runs it holds.
  MachineRow victim;
  std::vector<std::int64_t> victim_runs;
  REQUIRE(testing::WaitFor(
      [&] {
        auto machines = store->machines().List(false);
        auto running = store->runs().Runs(std::nullopt, RunState::kRunning, 0);
        if (!machines || !running || running->size() < 4) return false;
        for (const auto& m : *machines) {
          // Ready, and its boot's answer recorded (a pass after the boot:
          // the worker may register first).
          if (m.state != "ready" || m.provider_id.empty()) continue;
          victim = m;
          victim_runs.clear();
          for (const auto& r : *running) {
            if (r.worker == m.name) victim_runs.push_back(r.id);
          }
          return !victim_runs.empty();
        }
        return false;
      },
      60s));
  REQUIRE(!victim.provider_id.empty());
  const int victim_pid = std::stoi(victim.provider_id);
  REQUIRE(::kill(victim_pid, SIGKILL) == 0);
  REQUIRE(WriteFile(tmp / "release", ""));

  // serve exits by itself once all 12 runs are done and every machine stopped.
  std::optional<ExitStatus> status;
  REQUIRE(testing::WaitFor(
      [&] {
        status = daemon.runner.Poll(daemon.pid);
        return status.has_value();
      },
      120s));
  daemon.pid = 0;
  CHECK(status->ok());

  // Every seed ran to completion exactly once: 12 succeeded runs, one value each.
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 12);
  std::set<std::int64_t> seeds;
  for (const auto& r : *runs) {
    CHECK(r.state == RunState::kSucceeded);
    REQUIRE(r.metric_value);
    CHECK(*r.metric_value == Approx(std::stod("0." + std::to_string(r.seed))));
    seeds.insert(r.seed);
  }
  CHECK(seeds.size() == 12);
  REQUIRE(!victim_runs.empty());
  for (std::int64_t id : victim_runs) {
    INFO("run " << id << " was running on the killed worker");
    auto r = store->runs().Run(id);
    REQUIRE(r);
    REQUIRE(*r);
    // Leased again, on another machine; the killed attempt did not count.
    CHECK((*r)->state == RunState::kSucceeded);
    CHECK((*r)->attempts == 1);
    CHECK((*r)->worker != victim.name);
  }

  // Every machine ended stopped, and its worker process is gone.
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  // Two booted; a replacement for the killed one only if the queue still
  // needed it when the loss was seen (the survivor may have finished the
  // rest first), so at least the two.
  CHECK(machines->size() >= 2);
  for (const auto& m : *machines) {
    INFO("machine " << m.name << " " << m.state);
    CHECK(m.state == "stopped");
    if (!m.provider_id.empty()) CHECK(testing::ProcessGone(std::stoi(m.provider_id)));
  }

  // The history: no machine drained or stopped by trainq while it held a lease.
  // (The killed machine is `stopped` by ForgetMachine, which returns its lease.)
  auto history = store->machines().MachineHistory(std::nullopt);
  REQUIRE(history);
  bool killed_forgotten = false;
  for (const auto& e : *history) {
    INFO("machine " << e.machine_id << " -> " << e.state << " with " << e.live_leases
                    << " lease(s): " << e.note);
    if (e.machine_id == victim.id && e.state == "stopped") killed_forgotten = true;
    if (e.state == "draining" || e.state == "stopping") CHECK(e.live_leases == 0);
    if (e.state == "stopped" && e.machine_id != victim.id) CHECK(e.live_leases == 0);
  }
  CHECK(killed_forgotten);
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE("fleet e2e: an idle machine is drained after idle_grace, not before, and not left "
          "running",
          "[fleet][e2e]") {
  testing::TempDir tmp;
  testing::GitFixture repo(tmp / "repo");
  repo.Commit({{"trainq.yaml",
                "version: 1\n"
                "defaults: {repeats: 2, timeout: 1m}\n"
                "experiments:\n"
                "  quick:\n"
                "    command: echo '{\"name\":\"accuracy\",\"value\":0.5}' >> "
                "\"$TRAINQ_METRICS_FILE\"\n"}},
              "quick");
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  std::string out;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                " submit --repo " + ShellQuote(repo.dir()),
                            &out) == 0);
  // No --until-idle: only the autoscaler's idle rule may stop the machine.
  Daemon daemon;
  auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--machines", "1",
                                   "--slots", "2", "--idle-grace", "2", "--listen", "auto",
                                   "--poll-ms", "50"},
                                  {},
                                  tmp.path().string(),
                                  tmp / "serve.log"});
  REQUIRE(pid);
  daemon.pid = *pid;
  INFO("serve log:\n" << testing::Slurp(tmp / "serve.log"));
  auto store = Store::Open(db, {.create = false});
  REQUIRE(store);
  REQUIRE(testing::WaitFor(
      [&] {
        auto machines = store->machines().List(true);
        return machines && machines->size() == 1 && machines->front().state == "stopped";
      },
      60s));
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  for (const auto& r : *runs) CHECK(r.state == RunState::kSucceeded);
  auto m = store->machines().List(true).value().front();
  REQUIRE(m.last_busy_ms);
  auto history = store->machines().MachineHistory(m.id);
  REQUIRE(history);
  std::optional<TimeMs> drained_at;
  for (const auto& e : *history) {
    if (e.state == "draining") {
      drained_at = e.at_ms;
      CHECK(e.live_leases == 0);
    }
  }
  // Stopped by the drain rule, and only once idle_grace (2 s) had passed.
  REQUIRE(drained_at);
  CHECK(*drained_at - *m.last_busy_ms >= 2000);
  // ... and not left running long past it (serve checks every 50 ms here; the
  // bound is loose for a loaded machine).
  CHECK(*drained_at - *m.last_busy_ms < 2000 + 20000);
  CHECK(testing::ProcessGone(std::stoi(m.provider_id)));
  // serve keeps running with no machine; SIGTERM ends it cleanly.
  daemon.runner.KillGroup(daemon.pid, SIGTERM);
  auto exit = daemon.runner.Wait(daemon.pid);
  daemon.pid = 0;
  CHECK(exit.ok());
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE("fleet e2e: local workers that cannot reach the server: boots back off, the pool ends "
          "failing with the worker's log, `trainq pools reset` lets it boot again",
          "[fleet][e2e]") {
  testing::TempDir tmp;
  testing::GitFixture repo(tmp / "repo");
  repo.Commit({{"trainq.yaml",
                "version: 1\n"
                "defaults: {repeats: 2, timeout: 1m}\n"
                "experiments:\n"
                "  quick:\n"
                "    command: echo '{\"name\":\"accuracy\",\"value\":0.5}' >> "
                "\"$TRAINQ_METRICS_FILE\"\n"}},
              "quick");
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  const std::string trainq = ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db);
  std::string out;
  REQUIRE(testing::RunShell(trainq + " submit --repo " + ShellQuote(repo.dir()), &out) == 0);
  // The workers are told a port where nothing listens: they never register.
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "pools:\n"
                    "  - name: cpu\n"
                    "    max: 1\n"
                    "    slots: 2\n"
                    "    boot_timeout: 3s\n"
                    "    boot_backoff: 1s\n"
                    "    failing_after: 3\n"
                    "    hourly_cost: 1.0\n"
                    "    params: {server_url: \"http://127.0.0.1:1\"}\n"));
  Daemon daemon;
  auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--config",
                                   tmp / "server.yaml", "--listen", "auto", "--poll-ms", "50"},
                                  {},
                                  tmp.path().string(),
                                  tmp / "serve.log"});
  REQUIRE(pid);
  daemon.pid = *pid;
  INFO("serve log:\n" << testing::Slurp(tmp / "serve.log"));
  auto store = Store::Open(db, {.create = false});
  REQUIRE(store);
  auto failing = [&] {
    auto states = store->machines().PoolStates();
    if (!states) return false;
    for (const auto& s : *states) {
      if (s.pool == "cpu" && s.failing) return true;
    }
    return false;
  };
  // Boot, 3 s, back-off 1 s, boot, 3 s, back-off 2 s, boot, 3 s: failing.
  REQUIRE(testing::WaitFor(failing, 90s));
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  CHECK(machines->size() == 3);
  TimeMs billed = 0;
  for (const auto& m : *machines) {
    CHECK(m.lost());  // no worker registered within boot_timeout
    CHECK_FALSE(m.ready_ms);
    billed += m.stopped_ms.value_or(0) - m.created_ms;
  }
  // Each one billed about boot_timeout (3 s) plus the stop; loose for a loaded host.
  CHECK(billed < 3 * 10'000);
  auto states = store->machines().PoolStates().value();
  REQUIRE(states.size() >= 1);
  const auto& st = states.front();
  CHECK(st.failed_boots == 3);
  CHECK_THAT(st.boot_error, Catch::Contains("no worker registered within boot_timeout (3s)"));
  // The local provider's log of the worker: it says what went wrong.
  CHECK_THAT(st.log_tail, Catch::Contains("127.0.0.1:1"));

  REQUIRE(testing::RunShell(trainq + " status", &out) == 0);
  INFO(out);
  CHECK_THAT(out, Catch::Contains("FAILING: 3 boots in a row failed"));
  CHECK_THAT(out, Catch::Contains("trainq pools reset cpu"));
  CHECK_THAT(out, Catch::Contains("its log ends:"));
  CHECK_THAT(testing::Slurp(tmp / "serve.log"), Catch::Contains("pool cpu: failing: 3 boots"));

  // Nothing more is booted while failing ...
  auto before = store->machines().List(true).value().size();
  CHECK(before == 3);
  REQUIRE(testing::RunShell(trainq + " pools reset cpu", &out) == 0);
  CHECK_THAT(out, Catch::Contains("pool cpu: 3 failed boot(s) forgotten; it was failing"));
  // ... and after the reset the running serve boots again.
  REQUIRE(testing::WaitFor([&] { return store->machines().List(true).value().size() > before; }, 30s));
  REQUIRE(testing::RunShell(trainq + " pools reset nosuch", &out) == 0);
  CHECK_THAT(out, Catch::Contains("nothing to reset"));
  daemon.runner.KillGroup(daemon.pid, SIGTERM);
  daemon.runner.Wait(daemon.pid);
  daemon.pid = 0;
}

TEST_CASE("fleet e2e: a worker stopped with SIGSTOP is lost after lost_after, killed, its run "
          "back in the queue with no attempt used and finished on a replacement",
          "[fleet][e2e][lost]") {
  testing::TempDir tmp;
  testing::GitFixture repo(tmp / "repo");
  repo.Commit({{"trainq.yaml",
                "version: 1\n"
                "defaults:\n"
                "  repeats: 2\n"
                "  timeout: 2m\n"
                "  max_attempts: 1\n"
                "experiments:\n"
                "  slow:\n"
                "    command: sh run.sh\n"},
               {"run.sh", RunScript(tmp / "release")}},
              "slow experiment");
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  const std::string trainq = ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db);
  std::string out;
  REQUIRE(testing::RunShell(trainq + " submit --repo " + ShellQuote(repo.dir()), &out) == 0);
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "pools:\n"
                    "  - name: cpu\n"
                    "    max: 2\n"
                    "    slots: 1\n"
                    "    idle_grace: 1s\n"
                    "    lost_after: 3s\n"
                    "    sandbox_writable: [" + tmp.path().string() + "]\n"
                    "    params: {stop_grace: 1s}\n"));
  Daemon daemon;
  auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--config",
                                   tmp / "server.yaml", "--listen", "auto", "--until-idle",
                                   "--poll-ms", "50", "--heartbeat", "1", "--lease", "30"},
                                  {},
                                  tmp.path().string(),
                                  tmp / "serve.log"});
  REQUIRE(pid);
  daemon.pid = *pid;
  INFO("serve log:\n" << testing::Slurp(tmp / "serve.log"));
  auto store = Store::Open(db, {.create = false});
  REQUIRE(store);
  // Both runs start, one on each machine; stop one machine's worker.
  MachineRow victim;
  std::int64_t victim_run = 0;
  REQUIRE(testing::WaitFor(
      [&] {
        auto running = store->runs().Runs(std::nullopt, RunState::kRunning, 0);
        auto machines = store->machines().List(false);
        if (!running || !machines || running->size() < 2) return false;
        for (const auto& m : *machines) {
          if (m.state == "ready" && !m.provider_id.empty() &&
              m.name == running->front().worker) {
            victim = m;
            victim_run = running->front().id;
            return true;
          }
        }
        return false;
      },
      60s));
  const int victim_pid = std::stoi(victim.provider_id);
  REQUIRE(::kill(victim_pid, SIGSTOP) == 0);
  REQUIRE(testing::WaitFor([&] { return store->machines().Machine(victim.id).value()->lost(); }, 30s));
  REQUIRE(testing::RunShell(trainq + " status", &out) == 0);
  CHECK_THAT(out, Catch::Contains("lost in the last hour: 1; last " + victim.name));
  REQUIRE(WriteFile(tmp / "release", ""));
  std::optional<ExitStatus> status;
  REQUIRE(testing::WaitFor(
      [&] {
        status = daemon.runner.Poll(daemon.pid);
        return status.has_value();
      },
      120s));
  daemon.pid = 0;
  CHECK(status->ok());
  // max_attempts 1, yet the run whose worker was stopped succeeded: the loss
  // was the machine's, not the run's.
  auto final_runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(final_runs);
  for (const auto& r : *final_runs) {
    INFO("run " << r.id << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    CHECK(r.attempts == 1);
    if (r.id == victim_run) CHECK(r.worker != victim.name);
  }
  auto lost = store->machines().Machine(victim.id).value();
  CHECK(lost->state == "failed");
  CHECK_THAT(lost->last_error, Catch::Contains("lost: worker silent for"));
  // Killed through the local provider (a stopped process still dies of SIGKILL).
  CHECK(testing::WaitFor([&] { return testing::ProcessGone(victim_pid); }, 20s));
  CHECK(store->machines().List(true).value().size() >= 3);  // its replacement was booted
  REQUIRE(testing::RunShell(trainq + " machines --all", &out) == 0);
  CHECK_THAT(out, Catch::Contains("lost (worker silent for"));
}

}  // namespace
}  // namespace trainq
