// End to end on a real single-node Slurm: `trainq serve` with a slurm pool
// submits `trainq worker` as an sbatch job, the worker registers over HTTP,
// runs the queue inside the job, and the job is drained and cancelled
// (scancel) once the queue is empty. Needs root, slurm-wlm and munge
// (tests/support/slurm_cluster.h); fails saying what is missing otherwise.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <set>

#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_fixture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/slurm_cluster.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using testing::Daemon;

// Every file of `dir` whose name starts with `prefix`, with its contents.
std::string SlurpAll(const fs::path& dir, const std::string& prefix) {
  std::string all;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().filename().string().starts_with(prefix)) {
      all += "--- " + e.path().string() + "\n" + testing::Slurp(e.path());
    }
  }
  return all;
}

TEST_CASE("fleet e2e on real Slurm: runs execute in a worker that sbatch started",
          "[fleet][slurm][e2e]") {
  // Destroyed in reverse: serve first, then the cluster (its jobs cancelled,
  // its daemons stopped), then the files the jobs used.
  testing::TempDir tmp;
  testing::GitFixture repo(tmp / "repo");
  auto cluster = testing::SlurmCluster::Start();
  INFO((cluster ? std::string() : cluster.error()));
  REQUIRE(cluster);
  repo.Commit({{"trainq.yaml",
                "version: 1\n"
                "defaults: {repeats: 4, timeout: 2m}\n"
                "experiments:\n"
                "  quick:\n"
                "    command: echo \"{\\\"name\\\":\\\"accuracy\\\",\\\"value\\\":0.$TRAINQ_SEED}\" "
                ">> \"$TRAINQ_METRICS_FILE\"; echo \"on $SLURM_JOB_ID\"\n"}},
              "quick experiment");
  const std::string db = testing::StoreLocation(tmp, "trainq.db");
  std::string out;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                " submit --repo " + ShellQuote(repo.dir()),
                            &out) == 0);
  REQUIRE(WriteFile(tmp / "server.yaml",
                    "pools:\n"
                    "  - name: hpc\n"
                    "    provider: slurm\n"
                    "    max: 1\n"
                    "    slots: 2\n"
                    "    idle_grace: 1s\n"
                    "    boot_timeout: 2m\n"
                    "    allow_loopback: true\n"  // a one-node cluster on this host
                    "    params:\n"
                    "      partition: " + (*cluster)->partition() + "\n"
                    "      slurm_conf: " + (*cluster)->conf() + "\n"
                    "      output: " + (tmp / "slurm-%j.out") + "\n"));
  Daemon daemon;
  auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--config",
                                   tmp / "server.yaml", "--listen", "auto", "--until-idle",
                                   "--poll-ms", "50", "--heartbeat", "1"},
                                  (*cluster)->env(),
                                  tmp.path().string(),
                                  tmp / "serve.log"});
  REQUIRE(pid);
  daemon.pid = *pid;
  std::optional<ExitStatus> status;
  bool exited = testing::WaitFor(
      [&] {
        status = daemon.runner.Poll(daemon.pid);
        return status.has_value();
      },
      120s);
  INFO("serve log:\n" << testing::Slurp(tmp / "serve.log") << "\nworker (Slurm output):\n"
                      << SlurpAll(tmp.path(), "slurm-") << "\nslurmctld.log:\n"
                      << testing::Slurp((*cluster)->dir() / "slurmctld.log"));
  REQUIRE(exited);
  daemon.pid = 0;
  CHECK(status->ok());

  auto store = Store::Open(db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 4);
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  REQUIRE(machines->size() == 1);
  const auto& m = machines->front();
  CHECK(m.provider == "slurm");
  CHECK(m.state == "stopped");
  CHECK(m.ready_ms.has_value());
  CHECK(m.runs_done == 4);
  REQUIRE(!m.provider_id.empty());
  for (const auto& r : *runs) {
    INFO("run " << r.id);
    CHECK(r.state == RunState::kSucceeded);
    // Its output (shipped to the server) names the Slurm job it ran in.
    auto log = testing::Slurp(tmp / ("trainq-data/runs/" + std::to_string(r.id) + "/output.log"));
    CHECK(log.find("on " + m.provider_id + "\n") != std::string::npos);
    // The worker kept its files in its own directory under the data dir, not
    // in ./trainq-worker of the job's working directory.
    CHECK(fs::is_directory(tmp / ("trainq-data/machines/" + m.name + "/runs/" +
                                  std::to_string(r.id))));
  }
  CHECK_FALSE(fs::exists(tmp / "trainq-worker"));
  // The worker's own log went to the pool's `output` file.
  CHECK(testing::Slurp(tmp / ("slurm-" + m.provider_id + ".out")).find(m.name) !=
        std::string::npos);

  // No machine was drained or stopped while it held a lease.
  auto history = store->machines().MachineHistory(std::nullopt);
  REQUIRE(history);
  std::set<std::string> states;
  for (const auto& e : *history) {
    INFO("machine " << e.machine_id << " -> " << e.state << " with " << e.live_leases
                    << " lease(s): " << e.note);
    states.insert(e.state);
    if (e.state == "draining" || e.state == "stopping" || e.state == "stopped") {
      CHECK(e.live_leases == 0);
    }
  }
  CHECK(states.count("draining") == 1);
  CHECK(states.count("stopped") == 1);

  // scancel took the job away (Slurm may list it as COMPLETING for a moment).
  std::string q;
  CHECK(testing::WaitFor(
      [&] {
        return testing::RunShell((*cluster)->shell_prefix() +
                                     "squeue --noheader --format=%i",
                                 &q) == 0 &&
               q.find(m.provider_id) == std::string::npos;
      },
      30s));
  INFO("squeue: " << q);
  CHECK(q.find(m.provider_id) == std::string::npos);
}

}  // namespace
}  // namespace trainq
