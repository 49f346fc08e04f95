// Gang runs end to end through the real binaries: `trainq serve` boots local
// worker machines (the local provider), a run with resources.nodes = 2 is
// leased to two of them at once, and every process of it checks torchrun's
// variables and rendezvouses over real TCP (rank 0 listens on MASTER_PORT,
// the others connect and send their ranks). Also: two gangs competing for
// too few machines, kill -9 of one member, and the same on a real Slurm.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "core/process.h"
#include "core/strings.h"
#include "queue/gangs.h"
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

// Checks torchrun's variables, writes "pid\ncwd\n" to $GANG_PIDS/<run>-<attempt>-<rank>,
// rendezvouses over TCP, and rank 0 reports accuracy = WORLD_SIZE + sum of the
// ranks it heard from / 100. Other ranks write a bogus metric to their own
// metrics file: it must not count. With $GANG_HOLD existing, attempt 1 waits
// after the rendezvous (for a kill -9); with GANG_SLEEP it sleeps that long.
constexpr const char* kScript = R"PY(import os, socket, sys, time
need = ["MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK",
        "LOCAL_WORLD_SIZE"]
missing = [k for k in need if not os.environ.get(k)]
if missing:
    sys.exit("missing torchrun variables: %s" % missing)
rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
local, node = int(os.environ["LOCAL_RANK"]), int(os.environ["NODE_RANK"])
lws = int(os.environ["LOCAL_WORLD_SIZE"])
assert rank == node * lws + local, (rank, node, lws, local)
assert 0 <= rank < world and world % lws == 0
d = os.environ["GANG_PIDS"]
name = "%s-%s-%d" % (os.environ["TRAINQ_RUN_ID"], os.environ["TRAINQ_ATTEMPT"], rank)
with open(os.path.join(d, name + ".tmp"), "w") as f:
    f.write("%d\n%s\n" % (os.getpid(), os.getcwd()))
os.rename(os.path.join(d, name + ".tmp"), os.path.join(d, name))
addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
deadline = time.time() + 60
if rank == 0:
    srv = socket.create_server(("", port))
    srv.settimeout(60)
    heard, conns = [], []
    while len(heard) < world - 1:
        c, _ = srv.accept()
        heard.append(int(c.makefile().readline()))
        conns.append(c)
    assert sorted(heard) == list(range(1, world)), heard
    for c in conns:
        c.sendall(b"ok\n")
        c.close()
    print("rank 0 heard ranks", sorted(heard), flush=True)
else:
    while True:
        try:
            s = socket.create_connection((addr, port), timeout=5)
            break
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.05)
    s.sendall(b"%d\n" % rank)
    assert s.makefile().readline().strip() == "ok"
    print("rank", rank, "joined", addr, port, flush=True)
hold = os.environ.get("GANG_HOLD")
if hold and os.path.exists(hold) and os.environ["TRAINQ_ATTEMPT"] == "1":
    time.sleep(120)
time.sleep(float(os.environ.get("GANG_SLEEP", "0")))
m = os.environ["TRAINQ_METRICS_FILE"]
with open(m, "a") as f:
    if rank == 0:
        f.write('{"name": "accuracy", "value": %s}\n' % ((world + sum(heard)) / 100.0))
    else:
        f.write('{"name": "accuracy", "value": 99}\n')
)PY";

std::string Manifest(int repeats, int nodes, int procs) {
  return "version: 1\n"
         "defaults: {repeats: " + std::to_string(repeats) + ", timeout: 3m, max_attempts: 3}\n"
         "experiments:\n"
         "  ddp:\n"
         "    command: python3 ddp.py\n"
         "    resources: {nodes: " + std::to_string(nodes) +
         ", processes_per_node: " + std::to_string(procs) + "}\n";
}

struct RankFile {
  int pid = 0;
  std::string cwd;
};

// $GANG_PIDS/<run>-<attempt>-<rank> files.
std::map<int, RankFile> Ranks(const fs::path& dir, std::int64_t run, int attempt) {
  std::map<int, RankFile> out;
  std::error_code ec;
  std::string prefix = std::to_string(run) + "-" + std::to_string(attempt) + "-";
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string n = e.path().filename().string();
    if (!n.starts_with(prefix) || n.ends_with(".tmp")) continue;
    auto lines = Split(testing::Slurp(e.path()), '\n');
    if (lines.size() < 2) continue;
    out[std::stoi(n.substr(prefix.size()))] = {std::stoi(lines[0]), lines[1]};
  }
  return out;
}

struct GangServe {
  testing::TempDir tmp;
  testing::GitFixture repo{tmp / "repo"};
  std::string db = testing::StoreLocation(tmp, "trainq.db");
  fs::path pids = tmp / "pids";
  // The local pool's sandbox; the test's directory is writable in it (rank
  // files, the hold file), and "none" where a test signals a rank by its pid.
  std::string sandbox = "auto";
  Daemon daemon;

  void Submit(const std::string& manifest) {
    fs::create_directories(pids);
    repo.Commit({{"trainq.yaml", manifest}, {"ddp.py", kScript}}, "gang experiment");
    std::string out;
    REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(db) +
                                  " submit --repo " + ShellQuote(repo.dir()),
                              &out) == 0);
  }
  void Serve(int machines, std::map<std::string, std::string> env = {}) {
    env["GANG_PIDS"] = pids.string();
    std::vector<std::string> argv = {TRAINQ_BINARY, "--db", db, "serve", "--machines",
                                     std::to_string(machines), "--slots", "1", "--until-idle",
                                     "--idle-grace", "1", "--poll-ms", "50", "--heartbeat", "1",
                                     "--kill-grace", "1", "--sandbox", sandbox,
                                     "--sandbox-writable", tmp.path().string()};
    for (const auto& [k, v] : env) {
      argv.push_back("--env-passthrough");
      argv.push_back(k);
    }
    auto pid = daemon.runner.Spawn({argv, env, tmp.path().string(), tmp / "serve.log"});
    REQUIRE(pid);
    daemon.pid = *pid;
  }
  std::optional<ExitStatus> WaitExit(std::chrono::seconds deadline) {
    std::optional<ExitStatus> status;
    bool exited = testing::WaitFor(
        [&] {
          status = daemon.runner.Poll(daemon.pid);
          return status.has_value();
        },
        deadline);
    if (exited) daemon.pid = 0;
    return status;
  }
  std::string Log() { return testing::Slurp(tmp / "serve.log"); }
};

TEST_CASE("gang e2e: a 2-machine x 2-process run rendezvouses over TCP through trainq serve",
          "[gang][e2e]") {
  GangServe g;
  g.Submit(Manifest(1, 2, 2));
  g.Serve(2);
  INFO("serve log:\n" << g.Log());
  auto status = g.WaitExit(120s);
  REQUIRE(status);
  CHECK(status->ok());

  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  const auto& run = runs->front();
  CHECK(run.state == RunState::kSucceeded);
  CHECK(run.attempts == 1);
  // Rank 0's metric (world 4 + ranks 1+2+3 = 10 -> 0.10), not the others' 99.
  REQUIRE(run.metric_value);
  CHECK(*run.metric_value == Approx(0.10));

  // Four processes, ranks 0..3: 0 and 1 on one machine, 2 and 3 on another
  // (each machine's worker checks out under its own directory).
  auto ranks = Ranks(g.pids, run.id, 1);
  REQUIRE(ranks.size() == 4);
  CHECK(ranks[0].cwd == ranks[1].cwd);
  CHECK(ranks[2].cwd == ranks[3].cwd);
  CHECK(ranks[0].cwd != ranks[2].cwd);
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  CHECK(machines->size() == 2);
}

TEST_CASE("gang e2e: two gangs competing for two machines both finish, one after the other",
          "[gang][e2e]") {
  GangServe g;
  g.Submit(Manifest(2, 2, 1));
  g.Serve(2, {{"GANG_SLEEP", "1.5"}});
  INFO("serve log:\n" << g.Log());

  // Watch the store while it works: a live gang always has all its members
  // and at most one gang is live at a time (two machines).
  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  std::atomic<bool> stop{false};
  std::atomic<int> samples{0}, partial{0}, overlapping{0}, seen_live{0};
  std::thread watcher([&] {
    auto watch = Store::Open(g.db, {.create = false});
    if (!watch) return;
    while (!stop.load()) {
      auto live = watch->gangs().LiveGangMembers();
      if (live) {
        std::map<std::int64_t, std::set<std::int64_t>> machines;
        for (const auto& m : *live) machines[m.run_id].insert(m.machine_id);
        for (const auto& [run, set] : machines) {
          if (set.size() != 2) ++partial;
        }
        if (machines.size() > 1) ++overlapping;
        if (!machines.empty()) ++seen_live;
        ++samples;
      }
      std::this_thread::sleep_for(10ms);
    }
  });
  auto status = g.WaitExit(180s);
  stop = true;
  watcher.join();
  REQUIRE(status);
  CHECK(status->ok());
  CHECK(samples > 10);
  CHECK(seen_live > 0);
  CHECK(partial == 0);
  CHECK(overlapping == 0);

  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 2);
  for (const auto& r : *runs) {
    INFO("run " << r.id);
    CHECK(r.state == RunState::kSucceeded);
    CHECK(r.attempts == 1);
    REQUIRE(r.metric_value);
    CHECK(*r.metric_value == Approx(0.03));  // world 2 + rank 1
    REQUIRE(r.started_ms);
    REQUIRE(r.finished_ms);
  }
  // One after the other.
  const auto& a = (*runs)[0];
  const auto& b = (*runs)[1];
  CHECK((*a.finished_ms <= *b.started_ms || *b.finished_ms <= *a.started_ms));
}

TEST_CASE("gang e2e: kill -9 of one member stops every process of the run, which is leased again",
          "[gang][e2e]") {
  GangServe g;
  g.Submit(Manifest(1, 2, 2));
  const fs::path hold = g.tmp / "hold";
  REQUIRE(WriteFile(hold, ""));
  g.sandbox = "none";  // rank 3 is killed by its pid on this host
  g.Serve(2, {{"GANG_HOLD", hold.string()}});
  INFO("serve log:\n" << g.Log());
  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);

  // Attempt 1: all four processes rendezvoused and hold.
  std::int64_t run_id = 0;
  std::map<int, RankFile> first;
  REQUIRE(testing::WaitFor(
      [&] {
        auto runs = store->runs().Runs(std::nullopt, RunState::kRunning, 0);
        if (!runs || runs->empty()) return false;
        run_id = runs->front().id;
        first = Ranks(g.pids, run_id, 1);
        return first.size() == 4;
      },
      90s));
  auto members = store->gangs().GangMembers(run_id);
  REQUIRE(members);
  REQUIRE(members->size() == 2);
  CHECK((*members)[0].machine_id != (*members)[1].machine_id);
  CHECK((*members)[0].master_port > 0);

  // kill -9 of rank 3 (node 1, local rank 1).
  REQUIRE(::kill(first[3].pid, SIGKILL) == 0);
  // Every other process of the attempt is stopped, on both machines.
  for (const auto& [rank, f] : first) {
    INFO("rank " << rank << " pid " << f.pid);
    CHECK(testing::WaitFor([&] { return testing::ProcessGone(f.pid); }, 30s));
  }
  // The run failed as a whole (one attempt used) and is leased again as a
  // unit: attempt 2 has its four ranks, and succeeds.
  auto status = g.WaitExit(180s);
  REQUIRE(status);
  CHECK(status->ok());
  auto run = store->runs().Run(run_id);
  REQUIRE(run);
  REQUIRE(*run);
  CHECK((*run)->state == RunState::kSucceeded);
  CHECK((*run)->attempts == 2);
  CHECK(Ranks(g.pids, run_id, 2).size() == 4);
  CHECK(g.Log().find("node 1") != std::string::npos);
  // No process of either attempt is left.
  for (int attempt : {1, 2}) {
    for (const auto& [rank, f] : Ranks(g.pids, run_id, attempt)) {
      INFO("attempt " << attempt << " rank " << rank);
      CHECK(testing::ProcessGone(f.pid));
    }
  }
}

TEST_CASE("gang e2e: a gang larger than the pool is unservable, and serve says so",
          "[gang][e2e]") {
  GangServe g;
  g.Submit(Manifest(1, 3, 1));
  g.Serve(2);
  auto status = g.WaitExit(60s);
  INFO("serve log:\n" << g.Log());
  REQUIRE(status);
  CHECK(status->code == 1);
  CHECK(g.Log().find("a gang of 3 machines, but pool local has at most 2") != std::string::npos);
  // Issue 27: the knob named is the one serve has (there is no max_machines).
  CHECK(g.Log().find("has at most 2 (trainq serve --machines)") != std::string::npos);
  CHECK(g.Log().find("max_machines") == std::string::npos);
}

// Issue 38.3: once a servable gang had run, an unservable one left queued
// kept `serve --until-idle` from ever exiting: its machine "held work" (the
// unservable run counted as work it could take), logged 5 times a second, and
// the idle drain was called off every second.
TEST_CASE("gang e2e: serve --until-idle ends when only an unservable gang is left after a "
          "servable one ran, and logs no line over and over",
          "[gang][e2e]") {
  GangServe g;
  g.Submit("version: 1\n"
           "defaults: {repeats: 1, timeout: 3m, max_attempts: 3}\n"
           "experiments:\n"
           "  ddp:\n"
           "    command: python3 ddp.py\n"
           "    resources: {nodes: 1, processes_per_node: 2}\n"
           "  ddp-wide:\n"
           "    command: python3 ddp.py\n"
           "    resources: {nodes: 2, processes_per_node: 1}\n");
  g.Serve(1);
  auto status = g.WaitExit(90s);
  const std::string log = g.Log();
  INFO("serve log:\n" << log);
  REQUIRE(status);
  // The same message and exit code as when only the unservable run is queued.
  CHECK(status->code == 1);
  CHECK(log.find("1 queued run(s) can never start (1 run(s): unservable: a gang of 2 machines, "
                 "but pool local has at most 1 (trainq serve --machines)); exiting "
                 "(--until-idle)") != std::string::npos);
  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  int succeeded = 0;
  for (const auto& r : *runs) {
    if (r.experiment == "ddp" && r.state == RunState::kSucceeded) ++succeeded;
    if (r.experiment == "ddp-wide") CHECK(r.state == RunState::kQueued);
  }
  CHECK(succeeded == 1);
  // No line (less its time stamp) more than a few times.
  std::map<std::string, int> lines;
  for (const auto& line : Split(log, '\n')) {
    auto space = line.find(' ');
    if (space != std::string_view::npos) ++lines[std::string(line.substr(space + 1))];
  }
  for (const auto& [line, n] : lines) {
    INFO(line);
    CHECK(n <= 3);
  }
}

TEST_CASE("gang e2e: rank 3 fails on the second machine: the run's error is rank 3's, and "
          "trainq logs prints every rank's log",
          "[gang][e2e][logs]") {
  GangServe g;
  // Rank 3 prints a line, raises on stderr and exits 7 before the rendezvous;
  // the others wait for it until their member is told the run failed. Rank 3
  // fails once rank 2 (its node's other rank) has printed its line, so that
  // line is there to check, whatever the machine's speed.
  std::string script =
      std::string("import os, sys, time\n"
                  "print('rank', os.environ['RANK'], 'starting', flush=True)\n"
                  "mark = os.path.join(os.environ['GANG_PIDS'], 'printed-' + os.environ['RANK'])\n"
                  "open(mark, 'w').close()\n"
                  "if os.environ.get('RANK') == os.environ.get('GANG_FAIL_RANK'):\n"
                  "    other = os.path.join(os.environ['GANG_PIDS'], 'printed-2')\n"
                  "    end = time.time() + 60\n"
                  "    while not os.path.exists(other) and time.time() < end:\n"
                  "        time.sleep(0.05)\n"
                  "    sys.stderr.write('RuntimeError: boom on rank 3\\n')\n"
                  "    sys.exit(7)\n") +
      kScript;
  fs::create_directories(g.pids);
  g.repo.Commit({{"trainq.yaml",
                  "version: 1\n"
                  "defaults: {repeats: 1, timeout: 3m, max_attempts: 1}\n"
                  "experiments:\n"
                  "  ddp:\n"
                  "    command: python3 ddp.py\n"
                  "    resources: {nodes: 2, processes_per_node: 2}\n"},
                 {"ddp.py", script}},
                "gang that fails");
  std::string out;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(g.db) +
                                " submit --repo " + ShellQuote(g.repo.dir()),
                            &out) == 0);
  g.Serve(2, {{"GANG_FAIL_RANK", "3"}});
  auto status = g.WaitExit(120s);
  INFO("serve log:\n" << g.Log());
  REQUIRE(status);
  CHECK(status->code == 1);  // a dead run

  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  const RunRow run = runs->front();
  INFO("error: " << run.last_error);
  CHECK(run.state == RunState::kDead);
  CHECK(run.last_error.starts_with("node 1 ("));
  CHECK(run.last_error.find("): rank 3: exit code 7") != std::string::npos);
  CHECK(run.last_error.find("RuntimeError: boom on rank 3") != std::string::npos);
  CHECK(run.last_error.find("rank 3 starting") != std::string::npos);
  CHECK(run.last_error.find("rank 2 starting") == std::string::npos);  // not node 1's rank 0

  // Every rank's log is on the server, beside the run's output.log.
  REQUIRE_FALSE(run.log_path.empty());
  CHECK(fs::exists(run.log_path));
  std::string tq = ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(g.db);
  REQUIRE(testing::RunShell(tq + " runs --json", &out) == 0);
  CHECK(out.find(run.log_path) != std::string::npos);
  REQUIRE(testing::RunShell(tq + " logs " + std::to_string(run.id), &out) == 0);
  INFO(out);
  for (int k = 0; k < 4; ++k) {
    CHECK(out.find("==> run " + std::to_string(run.id) + " rank " + std::to_string(k) + " <==") !=
          std::string::npos);
  }
  REQUIRE(testing::RunShell(tq + " logs " + std::to_string(run.id) + " --rank 3", &out) == 0);
  CHECK(out.find("rank 3 starting") != std::string::npos);
  CHECK(out.find("RuntimeError: boom on rank 3") != std::string::npos);
  REQUIRE(testing::RunShell(tq + " logs " + std::to_string(run.id) + " --rank 2", &out) == 0);
  CHECK(out.find("rank 2 starting") != std::string::npos);
  CHECK(out.find("boom") == std::string::npos);
}

TEST_CASE("gang e2e: serve --inproc runs a one-machine gang of 3 processes", "[gang][e2e]") {
  GangServe g;
  g.Submit(Manifest(1, 1, 3));
  auto pid = g.daemon.runner.Spawn({{TRAINQ_BINARY, "--db", g.db, "serve", "--inproc",
                                     "--slots", "1", "--until-idle", "--poll-ms", "50",
                                     "--env-passthrough", "GANG_PIDS"},
                                    {{"GANG_PIDS", g.pids.string()}},
                                    g.tmp.path().string(),
                                    g.tmp / "serve.log"});
  REQUIRE(pid);
  g.daemon.pid = *pid;
  auto status = g.WaitExit(60s);
  INFO("serve log:\n" << g.Log());
  REQUIRE(status);
  CHECK(status->ok());
  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  CHECK(runs->front().state == RunState::kSucceeded);
  REQUIRE(runs->front().metric_value);
  CHECK(*runs->front().metric_value == Approx(0.06));  // world 3 + ranks 1+2
  CHECK(Ranks(g.pids, runs->front().id, 1).size() == 3);
}

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

TEST_CASE("gang e2e on real Slurm: a 2-node gang over two sbatch jobs", "[gang][slurm][e2e]") {
  GangServe g;
  auto cluster = testing::SlurmCluster::Start();
  INFO((cluster ? std::string() : cluster.error()));
  REQUIRE(cluster);
  g.Submit(Manifest(1, 2, 1));
  REQUIRE(WriteFile(g.tmp / "server.yaml",
                    "pools:\n"
                    "  - name: hpc\n"
                    "    provider: slurm\n"
                    "    max: 2\n"
                    "    slots: 1\n"
                    "    idle_grace: 1s\n"
                    "    boot_timeout: 2m\n"
                    "    allow_loopback: true\n"  // a one-node cluster on this host
                    "    env_passthrough: [GANG_PIDS]\n"
                    "    sandbox_writable: [" + g.tmp.path().string() + "]\n"
                    "    params:\n"
                    "      partition: " + (*cluster)->partition() + "\n"
                    "      slurm_conf: " + (*cluster)->conf() + "\n"
                    "      output: " + (g.tmp / "slurm-%j.out") + "\n"));
  auto env = (*cluster)->env();
  env["GANG_PIDS"] = g.pids.string();
  auto pid = g.daemon.runner.Spawn({{TRAINQ_BINARY, "--db", g.db, "serve", "--config",
                                     g.tmp / "server.yaml", "--listen", "auto", "--until-idle",
                                     "--poll-ms", "50", "--heartbeat", "1"},
                                    env,
                                    g.tmp.path().string(),
                                    g.tmp / "serve.log"});
  REQUIRE(pid);
  g.daemon.pid = *pid;
  auto status = g.WaitExit(180s);
  INFO("serve log:\n" << g.Log() << "\nworkers (Slurm output):\n"
                      << SlurpAll(g.tmp.path(), "slurm-"));
  REQUIRE(status);
  CHECK(status->ok());
  auto store = Store::Open(g.db, {.create = false});
  REQUIRE(store);
  auto runs = store->runs().Runs(std::nullopt, std::nullopt, 0);
  REQUIRE(runs);
  REQUIRE(runs->size() == 1);
  CHECK(runs->front().state == RunState::kSucceeded);
  REQUIRE(runs->front().metric_value);
  CHECK(*runs->front().metric_value == Approx(0.03));
  auto machines = store->machines().List(true);
  REQUIRE(machines);
  REQUIRE(machines->size() == 2);
  std::set<std::string> jobs;
  for (const auto& m : *machines) {
    CHECK(m.provider == "slurm");
    jobs.insert(m.provider_id);
  }
  CHECK(jobs.size() == 2);  // two Slurm jobs, one per node of the gang
  auto ranks = Ranks(g.pids, runs->front().id, 1);
  REQUIRE(ranks.size() == 2);
  CHECK(ranks[0].cwd != ranks[1].cwd);
}

}  // namespace
}  // namespace trainq
