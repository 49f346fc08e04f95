// trainq worker end to end: the real worker against the real Server on
// loopback (real HTTP, real SQLite, real git, real processes): runs succeed
// with their metrics, logs reach the server, a cancelled batch kills its run,
// SIGTERM hands runs back without using an attempt, the dead-man switch runs
// self_stop, fused seeds become one process. (The parsers and planners are in
// tests/agent/runner/worker_test.cc.)
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/daemon/worker_api.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/manifest.h"
#include "agent/repo/mirror.h"
#include "agent/runner/worker.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/file_size_limit.h"
#include "tests/support/git_fixture.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using namespace std::chrono_literals;

namespace trainq {
namespace {

// ---- against the real server ------------------------------------------------

// A script that reports 0.5<seed> and prints what it was given.
const char* kRunScript = R"(echo "hello from seed $TRAINQ_SEED"
echo "cuda=[${CUDA_VISIBLE_DEVICES-unset}]"
echo "$$" > "$PIDS/$TRAINQ_SEED.pid"
if [ -n "$SLEEP" ]; then sleep "$SLEEP"; fi
printf '{"name": "accuracy", "value": 0.5%s, "step": 1}\n' "$TRAINQ_SEED" >> "$TRAINQ_METRICS_FILE"
)";

constexpr const char* kWorkerTestReadToken = "worker-test-read-token";

struct Harness {
  testing::TempDir tmp;
  ServerConfig config;
  std::string db;
  std::string data;
  std::string url;
  std::string token_file;
  std::unique_ptr<Server> server;
  std::unique_ptr<HttpListener> listener;
  std::unique_ptr<Store> store;
  std::unique_ptr<testing::GitFixture> repo;
  std::string sha;

  explicit Harness(std::optional<PoolSpec> pool = std::nullopt, TimeMs heartbeat_ms = 200) {
    db = testing::StoreLocation(tmp, "trainq.db");
    data = tmp / "server-data";
    fs::create_directories(data);
    fs::create_directories(tmp / "pids");
    if (pool) config.pools.push_back(*pool);
    config.read_token.value = kWorkerTestReadToken;  // /metrics
    auto s = Store::Open(db);
    REQUIRE(s);
    store = std::make_unique<Store>(std::move(*s));
    REQUIRE(EnsurePoolTokens(*store, config, data, SystemClock::Get().Now()));
    std::string pool_name = pool ? pool->name() : kDefaultPool;
    token_file = TokenFilePath(data, pool_name);
    REQUIRE(fs::exists(token_file));
    ServerOptions so;
    so.data_dir = data;
    so.heartbeat_ms = heartbeat_ms;
    so.lease_ms = std::max<TimeMs>(5'000, 4 * heartbeat_ms);  // a lease outlives a few beats
    so.recheck_ms = 50;
    options = so;
    port = testing::FreeLoopbackPort();
    StartServer();
    url = "http://127.0.0.1:" + std::to_string(port);
    repo = std::make_unique<testing::GitFixture>(tmp / "repo");
    sha = repo->Commit({{"run.sh", kRunScript}, {"trainq.yaml", "version: 1\n"}}, "init");
  }
  ~Harness() { StopServer(); }

  ServerOptions options;
  int port = 0;
  // A new server on the same port and database (as `trainq serve` restarted).
  void StartServer() {
    server = std::make_unique<Server>(config, db, SystemClock::Get(), options);
    REQUIRE(server->Open());
    auto l = HttpListener::Start(
        ListenAddress{"127.0.0.1", port}, 64 << 20,
        [srv = server.get()](const HttpServerRequest& r) { return srv->Handle(r); },
        [srv = server.get()](const HttpServerRequest& h) { return srv->Admit(h); });
    REQUIRE(l);
    listener = std::move(*l);
  }

  void StopServer() {
    if (server) server->StopWaiting();
    if (listener) listener->Stop();
    listener.reset();
  }

  std::int64_t Submit(int repeats, const std::string& command = "sh run.sh", int gpus = 0,
                      const std::string& trainer = "", std::int64_t timeout_s = 600) {
    BatchSpec b;
    b.experiment = trainer.empty() ? "exp" : "fused";
    b.command = command;
    b.repeats = repeats;
    b.gpus = gpus;
    b.timeout_s = timeout_s;
    if (!trainer.empty()) b.spec_json = nlohmann::json{{"trainer", trainer}}.dump();
    return SubmitSpec(b);
  }

  std::int64_t SubmitSpec(const BatchSpec& b) {
    CommitInfo c;
    c.sha = sha;
    c.message = "init";
    auto r = store->runs().Submit(repo->dir(), c, {b}, SystemClock::Get().Now());
    REQUIRE(r);
    server->NotifyWork();
    return (*r)[0].batch_id;
  }

  WorkerConfig Config(int slots = 1) const {
    WorkerConfig c;
    c.server = url;
    c.token = Trim(*ReadFile(token_file));
    c.slots = slots;
    c.data_dir = tmp / "worker-data";
    c.hostname = "test-host";
    c.pid = 4242;
    c.cpus = 2;
    c.lease_wait_ms = 300;
    c.kill_grace_ms = 2'000;
    c.retry_base_ms = 100;
    c.retry_max_ms = 300;
    return c;
  }

  std::vector<RunRow> Runs(std::int64_t batch) {
    auto r = store->runs().Runs(batch, std::nullopt, 0);
    REQUIRE(r);
    return *r;
  }
  bool AllIn(std::int64_t batch, RunState s) {
    for (const auto& r : Runs(batch)) {
      if (r.state != s) return false;
    }
    return true;
  }
};

// The worker on its own thread, stopped (like SIGTERM) at the end.
struct WorkerThread {
  CurlHttpClient http;
  PosixProcessRunner runner;
  std::atomic<bool> stop{false};
  std::atomic<bool> done{false};
  Result<int> result = 0;
  std::unique_ptr<Worker> worker;
  std::thread thread;

  explicit WorkerThread(WorkerConfig c) {
    worker = std::make_unique<Worker>(http, runner, SystemClock::Get(), std::move(c));
    thread = std::thread([this] {
      result = worker->Run(stop);
      done = true;
    });
  }
  ~WorkerThread() { Join(); }
  void Join() {
    stop = true;
    if (thread.joinable()) thread.join();
  }
};

// Gone, or a zombie nobody has reaped yet (an orphan in a container whose
// init does not reap): it runs no more either way.
bool ProcessGone(int pid) {
  if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
  auto stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  auto close = stat->rfind(')');
  return close != std::string::npos && close + 2 < stat->size() && (*stat)[close + 2] == 'Z';
}

int ReadPid(const std::string& path) {
  auto t = ReadFile(path);
  return t ? std::atoi(std::string(Trim(*t)).c_str()) : 0;
}

TEST_CASE("worker e2e: runs succeed with their seeds' metrics and their logs reach the server",
          "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(3, "PIDS=" + (h.tmp / "pids") + " sh run.sh");
  auto c = h.Config(2);
  c.once = true;
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  REQUIRE(w.result);
  CHECK(*w.result == 0);
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 3);
  for (const auto& r : runs) {
    INFO("run " << r.id << " seed " << r.seed << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    REQUIRE(r.metric_value);
    CHECK(*r.metric_value == Approx(std::stod("0.5" + std::to_string(r.seed))));
    CHECK(r.attempts == 1);
    auto points = h.store->runs().Metrics(r.id);
    REQUIRE(points);
    REQUIRE(!points->empty());
    CHECK(points->front().step == 1);
    auto log = ReadFile(RunLogPath(h.data, r.id));
    REQUIRE(log);
    CHECK(log->find("hello from seed " + std::to_string(r.seed)) != std::string::npos);
    // A run that asks for no GPU sees none.
    CHECK(log->find("cuda=[]") != std::string::npos);
  }
  // The worker registered as a manual machine with its resources, and said it
  // left when --once ended it.
  auto machines = h.store->machines().List(true);
  REQUIRE(machines);
  REQUIRE(machines->size() == 1);
  CHECK(machines->front().provider == "manual");
  CHECK(machines->front().state == "stopped");
  CHECK(machines->front().last_error == "its worker left");
}

TEST_CASE("worker e2e: each GPU run gets its own CUDA_VISIBLE_DEVICES", "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(2, "PIDS=" + (h.tmp / "pids") + " SLEEP=1 sh run.sh", 1);
  auto c = h.Config(2);
  c.gpus = {GpuInfo{0, "fake", 1000}, GpuInfo{1, "fake", 1000}};
  c.runs_per_gpu = 1;
  c.once = true;
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  REQUIRE(w.result);
  std::set<std::string> seen;
  for (const auto& r : h.Runs(batch)) {
    CHECK(r.state == RunState::kSucceeded);
    auto log = ReadFile(RunLogPath(h.data, r.id)).value_or("");
    if (log.find("cuda=[0]") != std::string::npos) seen.insert("0");
    if (log.find("cuda=[1]") != std::string::npos) seen.insert("1");
  }
  // Both ran at once (SLEEP=1, 2 slots): one on each GPU.
  CHECK(seen == std::set<std::string>{"0", "1"});
}

TEST_CASE("worker e2e: a cancelled batch's run is killed (409 on its heartbeat)", "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(1, "PIDS=" + (h.tmp / "pids") + " SLEEP=300 sh run.sh");
  WorkerThread w(h.Config(1));
  std::string pid_file = (h.tmp / "pids") + "/1.pid";
  REQUIRE(testing::WaitFor(
      [&] { return h.AllIn(batch, RunState::kRunning) && ReadPid(pid_file) > 0; }, 30s));
  int pid = ReadPid(pid_file);
  REQUIRE(h.store->runs().CancelBatch(batch, SystemClock::Get().Now()));
  CHECK(testing::WaitFor([&] { return ProcessGone(pid); }, 30s));
  CHECK(h.AllIn(batch, RunState::kCancelled));
  w.Join();
  REQUIRE(w.result);
  CHECK(*w.result == 0);
}

TEST_CASE("worker e2e: a run cancelled before a heartbeat shipped its output keeps that output "
          "on the server (issue 38.8)",
          "[worker][e2e][cancel]") {
  // Heartbeats 10 s apart: the run prints, is cancelled, and its worker hears
  // of it (409) only at the next beat; what it printed must not be lost. (At
  // 3 s apart, a loaded machine shipped the output before the cancel.)
  // The run prints only once its first heartbeat shipped the banner (the
  // test says go), so what it prints waits for the next beat.
  Harness h(std::nullopt, 10'000);
  const std::string go = h.tmp / "go";
  auto batch = h.Submit(1, "while [ ! -e " + ShellQuote(go) + " ]; do sleep 0.05; done; PIDS=" +
                               (h.tmp / "pids") + " SLEEP=300 sh run.sh");
  WorkerThread w(h.Config(1));
  const std::int64_t run = h.Runs(batch).front().id;
  REQUIRE(testing::WaitFor(
      [&] {
        return h.AllIn(batch, RunState::kRunning) &&
               ReadFile(RunLogPath(h.data, run)).value_or("").find("=== trainq: run") !=
                   std::string::npos;
      },
      30s));
  REQUIRE(WriteFile(go, ""));
  std::string pid_file = (h.tmp / "pids") + "/1.pid";
  REQUIRE(testing::WaitFor([&] { return ReadPid(pid_file) > 0; }, 30s));
  int pid = ReadPid(pid_file);
  CHECK(ReadFile(RunLogPath(h.data, run)).value_or("").find("hello from seed 1") ==
        std::string::npos);  // not shipped yet
  REQUIRE(h.store->runs().CancelBatch(batch, SystemClock::Get().Now()));
  CHECK(testing::WaitFor([&] { return ProcessGone(pid); }, 30s));
  CHECK(testing::WaitFor(
      [&] {
        return ReadFile(RunLogPath(h.data, run)).value_or("").find("hello from seed 1") !=
               std::string::npos;
      },
      10s));
  CHECK(h.AllIn(batch, RunState::kCancelled));
  w.Join();
  REQUIRE(w.result);
  CHECK(*w.result == 0);
}

TEST_CASE("worker e2e: a run past its timeout is killed and fails with the reason",
          "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(1, "PIDS=" + (h.tmp / "pids") + " SLEEP=300 sh run.sh", 0, "", 1);
  WorkerThread w(h.Config(1));
  REQUIRE(testing::WaitFor([&] { return ReadPid((h.tmp / "pids") + "/1.pid") > 0; }, 30s));
  int pid = ReadPid((h.tmp / "pids") + "/1.pid");
  REQUIRE(testing::WaitFor([&] { return h.AllIn(batch, RunState::kFailed); }, 30s));
  CHECK(testing::WaitFor([&] { return ProcessGone(pid); }, 10s));
  auto runs = h.Runs(batch);
  CHECK(runs[0].last_error.find("timed out after 1s") != std::string::npos);
  CHECK(runs[0].attempts == 1);
  w.Join();
}

TEST_CASE("worker e2e: SIGTERM to `trainq worker` returns its runs to the queue, no attempt used",
          "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(2, "PIDS=" + (h.tmp / "pids") + " SLEEP=300 sh run.sh");
  PosixProcessRunner runner;
  ProcessSpec spec;
  spec.argv = {TRAINQ_BINARY,  "worker", "--server", h.url,  "--token-file", h.token_file,
               "--slots",      "2",      "--gpus",   "none", "--data-dir",   h.tmp / "bin-worker",
               "--kill-grace", "2"};
  spec.output_path = h.tmp / "worker.log";
  auto pid = runner.Spawn(spec);
  REQUIRE(pid);
  bool running = testing::WaitFor([&] { return h.AllIn(batch, RunState::kRunning); }, 30s);
  if (!running) {
    runner.KillGroup(*pid, SIGKILL);
    runner.Wait(*pid);
    FAIL("runs never ran; worker log:\n" << ReadFile(h.tmp / "worker.log").value_or(""));
  }
  int child = ReadPid((h.tmp / "pids") + "/1.pid");
  ::kill(*pid, SIGTERM);
  auto status = runner.Wait(*pid);
  INFO(ReadFile(h.tmp / "worker.log").value_or(""));
  CHECK(status.ok());
  for (const auto& r : h.Runs(batch)) {
    CHECK(r.state == RunState::kQueued);
    CHECK(r.attempts == 0);
  }
  if (child > 0) CHECK(testing::WaitFor([&] { return ProcessGone(child); }, 10s));
  // The token never reaches the log.
  // A std::string: Trim's view into ReadFile's temporary died with it (ASan).
  std::string token(Trim(*ReadFile(h.token_file)));
  CHECK(ReadFile(h.tmp / "worker.log")->find(token) == std::string::npos);
}

TEST_CASE(
    "worker e2e: with the server gone and nothing running, the dead-man switch runs "
    "self_stop and exits 3",
    "[worker][e2e]") {
  testing::TempDir marker_dir;
  std::string marker = marker_dir / "stopped";
  PoolSpec pool;
  pool.scaling.name = "gpu";
  pool.orphan_timeout_ms = 1'500;
  pool.self_stop = "touch " + ShellQuote(marker);
  Harness h(pool);
  WorkerThread w(h.Config(1));
  REQUIRE(testing::WaitFor([&] { return w.worker->registered(); }, 30s));
  h.StopServer();
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
  REQUIRE(w.result);
  CHECK(*w.result == 3);
  CHECK(fs::exists(marker));
}

TEST_CASE("worker e2e: a worker that never reaches the server runs the --self-stop it was booted "
          "with after orphan_timeout",
          "[worker][e2e]") {
  testing::TempDir tmp;
  std::string marker = tmp / "stopped";
  WorkerConfig c;
  c.server = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());  // nobody there
  c.token = "whatever";
  c.data_dir = tmp / "worker-data";
  c.hostname = "test-host";
  c.retry_base_ms = 50;
  c.retry_max_ms = 100;
  c.orphan_timeout_ms = 800;
  c.self_stop = "touch " + ShellQuote(marker);
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
  REQUIRE(w.result);
  CHECK(*w.result == 3);
  CHECK(fs::exists(marker));
  CHECK_FALSE(w.worker->registered());
}

TEST_CASE("worker e2e: a refused token stops a provider-booted machine (self-stop, exit 1) and "
          "only ends a hand-started one",
          "[worker][e2e]") {
  Harness h;
  std::string marker = h.tmp / "stopped";
  auto c = h.Config(1);
  c.token = "not-the-pool-token";
  bool booted = GENERATE(true, false);
  if (booted) c.self_stop = "touch " + ShellQuote(marker);
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
  REQUIRE_FALSE(w.result);
  CHECK(w.result.error().message.find("HTTP 401") != std::string::npos);
  CHECK(w.result.error().message.find("not-the-pool-token") == std::string::npos);
  CHECK(fs::exists(marker) == booted);
}

TEST_CASE("worker e2e: a machine that is draining is told 409 at registration, the worker exits 0",
          "[worker][e2e]") {
  Harness h;
  MachineRow m;
  m.pool = kDefaultPool;
  m.provider = "local";
  m.name = "tq-test-1";
  m.state = "booting";
  m.slots = 1;
  auto row = h.store->machines().AddMachine(m, SystemClock::Get().Now());
  REQUIRE(row);
  REQUIRE(h.store->machines().SetMachineState(*row, "draining", SystemClock::Get().Now()));
  auto batch = h.Submit(1, "PIDS=" + (h.tmp / "pids") + " sh run.sh");
  auto c = h.Config(1);
  c.machine = "tq-test-1";
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
  REQUIRE(w.result);
  CHECK(*w.result == 0);
  CHECK(h.AllIn(batch, RunState::kQueued));
}

TEST_CASE(
    "worker e2e: draining while a run runs: the run finishes, nothing more is leased, "
    "exit 0",
    "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(3, "PIDS=" + (h.tmp / "pids") + " SLEEP=3 sh run.sh");
  auto c = h.Config(1);
  c.machine = "tq-drain-1";
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return ReadPid((h.tmp / "pids") + "/1.pid") > 0; }, 30s));
  auto m = h.store->machines().MachineByName("tq-drain-1");
  REQUIRE(m);
  REQUIRE(*m);
  REQUIRE(h.store->machines().SetMachineState((*m)->id, "draining", SystemClock::Get().Now()));
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
  REQUIRE(w.result);
  CHECK(*w.result == 0);
  auto runs = h.Runs(batch);
  int succeeded = 0, queued = 0;
  for (const auto& r : runs) {
    succeeded += r.state == RunState::kSucceeded;
    queued += r.state == RunState::kQueued;
  }
  CHECK(succeeded == 1);
  CHECK(queued == 2);
}

// A stand-in for trainq-train (not built with TRAINQ_BUILD_TRAINER=OFF) that
// takes its flags and writes each seed's metric into the {seed} path, as the
// real one does.
const char* kFakeTrainer = R"(#!/bin/sh
spec=$1; shift
while [ $# -gt 0 ]; do
  case $1 in
    --seed) seed=$2; shift 2;;
    --repeats) repeats=$2; shift 2;;
    --metrics-file) metrics=$2; shift 2;;
    --output-dir) out=$2; shift 2;;
    *) shift;;
  esac
done
echo "fake trainer $spec pid $$ seeds $seed x $repeats"
i=0
while [ $i -lt $repeats ]; do
  s=$((seed + i))
  f=$(printf '%s' "$metrics" | sed "s/{seed}/$s/g")
  d=$(printf '%s' "$out" | sed "s/{seed}/$s/g")
  mkdir -p "$d" && echo "$$" > "$d/pid"
  printf '{"name":"accuracy","value":0.9%s,"step":3,"seed":%s,"final":true}\n' "$s" "$s" >> "$f"
  i=$((i + 1))
done
)";

TEST_CASE("worker e2e: fused seeds of a trainer experiment run as one trainq-train process",
          "[worker][e2e]") {
  // Without and with the sandbox: the seeds' links and the group's log are the
  // worker's, the trainer (under /tmp, like a build there) is bound read-only.
  const bool sandboxed = GENERATE(false, true);
  Harness h;
  fs::create_directories(h.tmp / "bin");
  std::string trainer = (h.tmp / "bin") + "/trainq-train";
  REQUIRE(WriteFile(trainer, kFakeTrainer));
  ::chmod(trainer.c_str(), 0755);
  auto batch = h.Submit(3, "trainq-train configs/x.yaml", 0, "configs/x.yaml");
  auto c = h.Config(1);
  c.fuse_max = 3;
  c.bin_dir = h.tmp / "bin";
  c.once = true;
  if (sandboxed) {
    c.bwrap = ResolveSandbox("auto").value_or("");
    if (c.bwrap.empty()) {
      WARN("bwrap is not installed: the sandboxed fused run is not tested");
      return;
    }
    c.sandbox.mode = "bwrap";
    c.sandbox.hide = {c.data_dir};
    c.sandbox.readable = {c.bin_dir};
    REQUIRE(ProbeSandbox("bwrap", c.bwrap, c.sandbox, c.data_dir + "/probe"));
  }
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  REQUIRE(w.result);
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 3);
  std::set<std::string> pids;
  for (const auto& r : runs) {
    INFO("run " << r.id << " seed " << r.seed << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    REQUIRE(r.metric_value);
    CHECK(*r.metric_value == Approx(std::stod("0.9" + std::to_string(r.seed))));
    auto pid = ReadFile(RunPathsFor(c.data_dir, r.id).output_dir + "/pid");
    REQUIRE(pid);
    pids.insert(std::string(Trim(*pid)));
    auto log = ReadFile(RunLogPath(h.data, r.id)).value_or("");
    CHECK(log.find("seeds 1 x 3") != std::string::npos);
  }
  CHECK(pids.size() == 1);  // one process trained every seed
}

// Requests per route and status, from the server's /metrics.
int WorkerRequests(const std::string& base, const std::string& route, int status) {
  CurlHttpClient http;
  HttpRequest r;
  r.url = base + "/metrics";
  r.headers = {{"Authorization", std::string("Bearer ") + kWorkerTestReadToken}};
  auto resp = http.Send(r);
  REQUIRE(resp);
  std::string key = "trainq_worker_requests_total{route=\"" + route + "\",status=\"" +
                    std::to_string(status) + "\"} ";
  auto at = resp->body.find(key);
  return at == std::string::npos ? 0 : std::atoi(resp->body.c_str() + at + key.size());
}

TEST_CASE("worker e2e: a worker that cannot reach the repository checks out from the server",
          "[worker][e2e]") {
  Harness h;
  // The batch names a repository URL this worker cannot fetch (as a cloud
  // machine cannot reach the server's mirror); the server has its mirror.
  const std::string url = "file:///nonexistent-trainq-test/model.git";
  {
    auto mirror = GitRepo::OpenOrInitBare(Mirror::PathFor(h.data, url));
    REQUIRE(mirror);
    auto src = GitRepo::Open(h.repo->dir());
    REQUIRE(src);
    REQUIRE(mirror->AddPack(src->PackCommit(h.sha).value()));
  }
  BatchSpec b;
  b.experiment = "exp";
  b.command = "PIDS=" + (h.tmp / "pids") + " sh run.sh";
  b.repeats = 2;
  CommitInfo c;
  c.sha = h.sha;
  auto sub = h.store->runs().Submit(url, c, {b}, SystemClock::Get().Now());
  REQUIRE(sub);
  std::int64_t batch = (*sub)[0].batch_id;
  h.server->NotifyWork();

  auto cfg = h.Config(1);
  cfg.once = true;
  WorkerThread w(cfg);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  REQUIRE(w.result);
  for (const auto& r : h.Runs(batch)) {
    INFO("run " << r.id << ": " << r.last_error);
    CHECK(r.state == RunState::kSucceeded);
    CHECK(ReadFile(RunLogPath(h.data, r.id)).value_or("").find("hello from seed") !=
          std::string::npos);
  }
  CHECK(fs::is_directory(cfg.data_dir + "/source.git"));
  // Both runs of the commit share one checkout: the source was fetched once.
  CHECK(WorkerRequests(h.url, "source", 200) == 1);
}

TEST_CASE("worker e2e: --source server fetches the commit from the server even when the path is "
          "reachable",
          "[worker][e2e]") {
  Harness h;
  auto batch = h.Submit(1, "PIDS=" + (h.tmp / "pids") + " sh run.sh");
  auto cfg = h.Config(1);
  cfg.once = true;
  cfg.source = "server";
  WorkerThread w(cfg);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  REQUIRE(w.result);
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 1);
  INFO(runs[0].last_error);
  CHECK(runs[0].state == RunState::kSucceeded);
  CHECK(WorkerRequests(h.url, "source", 200) == 1);
  auto bare = GitRepo::Open(cfg.data_dir + "/source.git");
  REQUIRE(bare);
  CHECK(bare->HasCommit(h.sha));
}

TEST_CASE("worker e2e: a commit neither the worker nor the server has fails the run, naming it",
          "[worker][e2e]") {
  Harness h;
  BatchSpec b;
  b.experiment = "exp";
  b.command = "sh run.sh";
  b.repeats = 1;
  b.max_attempts = 1;
  CommitInfo c;
  c.sha = h.sha;
  const std::string url = "file:///nonexistent-trainq-test/other.git";
  auto sub = h.store->runs().Submit(url, c, {b}, SystemClock::Get().Now());
  REQUIRE(sub);
  h.server->NotifyWork();
  auto cfg = h.Config(1);
  cfg.once = true;
  WorkerThread w(cfg);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  auto runs = h.Runs((*sub)[0].batch_id);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].state == RunState::kDead);
  CHECK(runs[0].last_error.find("no copy of " + url) != std::string::npos);
}

// Issue 16: serve's listening socket and its secrets reached every training
// command. The worker here shares its process with a live HTTP listener, an
// open SQLite store and libcurl connections, as a local worker's parent does.
TEST_CASE("worker e2e: a run holds only stdin, stdout and stderr, and gets the run variables and "
          "the chosen passthrough but none of our secrets",
          "[worker][e2e]") {
  ::setenv("TRAINQ_TEST_WEBHOOK_SECRET", "hunter2-webhook-secret", 1);
  ::setenv("TRAINQ_TEST_PASSED", "passed-value", 1);
  Harness h;
  auto batch = h.Submit(
      1,
      "for f in /proc/$$/fd/*; do [ -e \"$f\" ] && echo \"open fd $f\"; done; env; "
      "printf '{\"name\": \"accuracy\", \"value\": 1}\\n' >> \"$TRAINQ_METRICS_FILE\"");
  auto c = h.Config(1);
  c.once = true;
  c.env_passthrough = {"TRAINQ_TEST_PASS*"};
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  ::unsetenv("TRAINQ_TEST_WEBHOOK_SECRET");
  ::unsetenv("TRAINQ_TEST_PASSED");
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 1);
  INFO(runs[0].last_error);
  CHECK(runs[0].state == RunState::kSucceeded);
  auto log = ReadFile(RunLogPath(h.data, runs[0].id)).value_or("");
  INFO(log);
  std::set<std::string> fds;
  for (auto line : Split(log, '\n')) {
    if (line.starts_with("open fd ")) fds.insert(std::string(line.substr(line.rfind('/') + 1)));
  }
  CHECK(fds == std::set<std::string>{"0", "1", "2"});
  CHECK(log.find("hunter2") == std::string::npos);
  CHECK(log.find("TRAINQ_TEST_PASSED=passed-value\n") != std::string::npos);
  CHECK(log.find("TRAINQ_SEED=") != std::string::npos);
  CHECK(log.find("\nPATH=") != std::string::npos);
}

// Whoever can push writes trainq.yaml: its env_passthrough picks among the
// variables the operator lets through (the worker's --env-passthrough here),
// never beyond them.
TEST_CASE("worker e2e: trainq.yaml's env_passthrough narrows the operator's passthrough and "
          "cannot widen it, and the run's log names what was not passed without its value",
          "[worker][e2e][env]") {
  ::setenv("TRAINQ_TEST_ALLOWED_A", "value-a", 1);
  ::setenv("TRAINQ_TEST_ALLOWED_B", "value-b", 1);
  ::setenv("TRAINQ_TEST_SECRET", "s3cret-value", 1);
  Harness h;
  auto manifest = ParseManifest(
      "version: 1\n"
      "experiments:\n"
      "  exp:\n"
      "    command: env; echo acc=1\n"
      "    metric: {name: accuracy, regex: 'acc=([0-9]+)'}\n"
      "    repeats: 1\n"
      "    env_passthrough: [TRAINQ_TEST_ALLOWED_A, TRAINQ_TEST_SECRET]\n",
      "trainq.yaml");
  INFO((manifest ? "" : manifest.error().message));
  REQUIRE(manifest);
  auto batch = h.SubmitSpec(manifest->experiments.at(0).ToBatchSpec("test"));
  auto c = h.Config(1);
  c.once = true;
  c.env_passthrough = {"TRAINQ_TEST_ALLOWED_*"};
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 60s));
  ::unsetenv("TRAINQ_TEST_ALLOWED_A");
  ::unsetenv("TRAINQ_TEST_ALLOWED_B");
  ::unsetenv("TRAINQ_TEST_SECRET");
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 1);
  INFO(runs[0].last_error);
  CHECK(runs[0].state == RunState::kSucceeded);
  auto log = ReadFile(RunLogPath(h.data, runs[0].id)).value_or("");
  INFO(log);
  CHECK(log.find("TRAINQ_TEST_ALLOWED_A=value-a\n") != std::string::npos);  // allowed and asked
  CHECK(log.find("TRAINQ_TEST_ALLOWED_B") == std::string::npos);  // allowed, not asked
  CHECK(log.find("s3cret-value") == std::string::npos);           // asked, not allowed
  CHECK_THAT(log, Catch::Contains("=== trainq: env_passthrough: TRAINQ_TEST_SECRET not passed"));
  CHECK(log.find("TRAINQ_SEED=") != std::string::npos);
}

// Issue 16: a self-stop that hung blocked the worker forever, SIGTERM included.
TEST_CASE("worker e2e: a hanging self-stop is killed after its timeout, and at once on a stop "
          "signal",
          "[worker][e2e]") {
  testing::TempDir tmp;
  auto config = [&](TimeMs timeout_ms) {
    WorkerConfig c;
    c.server = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());  // nobody there
    c.token = "whatever";
    c.data_dir = tmp / "worker-data";
    c.hostname = "test-host";
    c.retry_base_ms = 50;
    c.retry_max_ms = 100;
    c.orphan_timeout_ms = 300;
    c.self_stop = "echo $$ > " + ShellQuote(tmp / "self-stop.pid") + "; exec sleep 100000";
    c.self_stop_timeout_ms = timeout_ms;
    return c;
  };
  SECTION("the timeout") {
    WorkerThread w(config(1'000));
    REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 30s));
    REQUIRE(w.result);
    CHECK(*w.result == 3);
  }
  SECTION("a stop signal while it runs") {
    WorkerThread w(config(600'000));
    REQUIRE(testing::WaitFor([&] { return fs::exists(tmp / "self-stop.pid"); }, 30s));
    REQUIRE(testing::WaitFor([&] { return ReadPid(tmp / "self-stop.pid") > 0; }, 10s));
    w.stop = true;
    REQUIRE(testing::WaitFor([&] { return w.done.load(); }, 10s));
  }
  int pid = ReadPid(tmp / "self-stop.pid");
  REQUIRE(pid > 0);
  CHECK(testing::WaitFor([&] { return ProcessGone(pid); }, 10s));
}

TEST_CASE("worker e2e: a run that ends while the server is away keeps its result on disk and "
          "delivers it when the server is back: succeeded, with its metric, no attempt used",
          "[worker][e2e][outbox]") {
  Harness h;
  const std::string go = h.tmp / "go";
  auto batch = h.Submit(1, "while [ ! -e " + ShellQuote(go) + " ]; do sleep 0.05; done; PIDS=" +
                               (h.tmp / "pids") + " sh run.sh");
  auto c = h.Config(1);
  // Register and lease back off for 10 minutes once the server is away: the
  // kept result is tried every heartbeat (200 ms) all the same, so that it
  // arrives before the lease expires.
  c.retry_base_ms = 600'000;
  c.retry_max_ms = 600'000;
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return h.AllIn(batch, RunState::kRunning); }, 30s));
  const std::int64_t run_id = h.Runs(batch)[0].id;
  h.StopServer();
  h.server.reset();
  REQUIRE(WriteFile(go, ""));
  // The worker cannot deliver: the result is kept in its data dir.
  const fs::path kept = fs::path(c.data_dir) / "outbox" / (std::to_string(run_id) + ".json");
  REQUIRE(testing::WaitFor([&] { return fs::exists(kept); }, 30s));
  auto text = ReadFile(kept.string());
  REQUIRE(text);
  CHECK_THAT(*text, Catch::Contains("\"outcome\":\"succeeded\""));
  CHECK_THAT(*text, Catch::Contains("hello from seed 1"));  // the output the server missed
  CHECK(h.Runs(batch)[0].state == RunState::kRunning);
  h.StartServer();
  REQUIRE(testing::WaitFor([&] { return h.AllIn(batch, RunState::kSucceeded); }, 30s));
  auto r = h.Runs(batch)[0];
  REQUIRE(r.metric_value);
  CHECK(*r.metric_value == Approx(0.51));
  CHECK(r.attempts == 1);
  auto points = h.store->runs().Metrics(r.id);
  REQUIRE(points);
  CHECK(!points->empty());
  CHECK_THAT(ReadFile(RunLogPath(h.data, r.id)).value_or(""),
             Catch::Contains("hello from seed 1"));
  CHECK(testing::WaitFor([&] { return !fs::exists(kept); }, 10s));
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE(
    "worker e2e: a run that turns its files into symlinks or a FIFO makes the worker open "
    "nothing outside the run's work tree, and its next attempt starts fresh (fault probe "
    "t13)",
    "[worker][e2e][sandbox]") {
  Harness h;
  // A file the worker can write and the run must not: serve's database in the
  // probe; any file outside the run's tree here.
  const std::string victim = h.tmp / "victim.txt";
  REQUIRE(WriteFile(victim, "the victim's bytes\n"));
  // Attempt 1 links its metrics file (and, where it can reach it, the log)
  // to the victim, leaves a FIFO in its work tree, lingers through a few
  // heartbeats (each ships metrics: a blocking open of the FIFO would hang
  // the worker) and fails. Attempt 2 reports normally.
  const std::string cmd =
      "if [ \"$TRAINQ_ATTEMPT\" = 1 ]; then"
      " W=$(dirname \"$TRAINQ_METRICS_FILE\");"
      " rm -f \"$TRAINQ_METRICS_FILE\"; ln -s " +
      victim +
      " \"$TRAINQ_METRICS_FILE\";"
      " ln -sf " +
      victim +
      " \"$W/../output.log\" 2>/dev/null;"
      " mkfifo \"$W/rank-1.metrics.jsonl\"; ln -s " +
      victim +
      " \"$TRAINQ_OUTPUT_DIR/model.pt\";"
      " sleep 2; exit 1; fi;"
      " printf '{\"name\": \"accuracy\", \"value\": 0.75}\\n' >> \"$TRAINQ_METRICS_FILE\"";
  BatchSpec b;
  b.experiment = "evil";
  b.command = cmd;
  b.repeats = 1;
  b.max_attempts = 2;
  b.timeout_s = 120;
  auto batch = h.SubmitSpec(b);
  auto c = h.Config(1);
  // The sandbox where this host has one (the probe's case), else none: the
  // worker's own opens are what is checked.
  c.sandbox.mode = "auto";
  c.sandbox.hide = {c.data_dir};
  c.bwrap = ResolveSandbox("auto").value_or("");
  if (!c.bwrap.empty()) {
    auto state = ProbeSandbox("auto", c.bwrap, c.sandbox, c.data_dir + "/probe");
    REQUIRE(state);
  }
  WorkerThread w(c);
  REQUIRE(testing::WaitFor([&] { return h.AllIn(batch, RunState::kSucceeded); }, 60s));
  auto runs = h.Runs(batch);
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].attempts == 2);
  REQUIRE(runs[0].metric_value);
  CHECK(*runs[0].metric_value == Approx(0.75));
  // Nothing was written to the victim, and nothing of it reached the server.
  CHECK(ReadFile(victim).value_or("") == "the victim's bytes\n");
  auto log = ReadFile(RunLogPath(h.data, runs[0].id)).value_or("");
  CHECK(log.find("the victim's bytes") == std::string::npos);
  // The second attempt's work tree is new: no link of the first is left.
  const auto paths = RunPathsFor(c.data_dir, runs[0].id);
  std::error_code ec;
  CHECK_FALSE(fs::is_symlink(paths.metrics, ec));
  CHECK_FALSE(fs::exists(fs::path(paths.output_dir) / "model.pt", ec));
  CHECK_FALSE(fs::exists(fs::path(paths.work) / "rank-1.metrics.jsonl", ec));
  CHECK_FALSE(fs::is_symlink(paths.log, ec));
}

}  // namespace
}  // namespace trainq
