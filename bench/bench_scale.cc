// One coordinator at scale (issue 30): how the store's read and dispatch
// paths grow with history and with the depth of the queue.
//
// Builds a store of --runs runs with bulk SQL in one transaction (history:
// succeeded runs with metric points, done by machines long stopped, one push
// per commit), with --queued queued runs on top (the live queue), then
// measures, each figure with the SQLite VM steps it took (the count that the
// regression tests bound; a timing only shows what it costs here):
//   - `trainq status` in process (StatusJson + the text view) and as the
//     binary (process start included), `trainq show <commit>`, `trainq report
//     --since 1d`;
//   - lease + complete cycles against the deep queue, through Store::Lease
//     (serve --inproc) and Store::LeaseForMachine (the worker API);
//   - the fleet's read of demand (RunnableDemand) and the waiting notes;
//   - `trainq show`, `trainq report` (no --since: the newest 50) and the
//     per-batch costs in process, with their VM steps;
//   - with --http: a real `trainq serve` on the store, and the dashboard's
//     data routes and the read API (status, report) over loopback;
//   - the file's size.
// --fleet M [--boot-delay-ms D --boot-fail P]: the fleet at M machines, its
// provider taking D ms per boot and failing a fraction P of them.
// Prints one `figure name=value` line per figure (bench/scale.sh collects
// them into bench/results/scale/*.csv).
//
//   bench_scale --runs 1000000 [--queued 10000] [--dir /tmp] [--trainq build/agent/trainq]
//               [--keep] [--db PATH: measure an existing store, no fill] [--http]
//   bench_scale --fleet 1000 [--boot-delay-ms 20] [--boot-fail 0.1]
//   bench_scale --runs 1000000 --queued 0 --retention [--points 10] [--points-kept 3]
//               [--log-files 2000] [--runs-per-tick 200] [--retention-seconds 900] [--upgrade]
// --retention: fills the history with --points step points per run (and a
// log_path on each run, --log-files of them real 8 KiB files), then runs
// serve's RetentionStepper (agent/results/retention.h) as serve would,
// every run due, one step after another until a step finds nothing: the
// steps, time and VM steps per step, and the file before and after.
// --upgrade (with --retention): first takes the filled store back to schema
// 15 (drops what migrations 16 and 17 add) and times Store::Open's upgrade.
#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <signal.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <random>
#include <thread>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "agent/cli/cli.h"
#include "agent/daemon/fleet.h"
#include "agent/results/commit_view.h"
#include "agent/results/report.h"
#include "agent/results/retention.h"
#include "agent/results/status.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "cloud/provider.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

extern char** environ;

using namespace trainq;
using Steady = std::chrono::steady_clock;

namespace {

double Ms(Steady::time_point a, Steady::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

void Die(const std::string& what, const Error& e) {
  std::fprintf(stderr, "bench_scale: %s: %s\n", what.c_str(), e.message.c_str());
  std::exit(1);
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r) Die(what, r.error());
  return std::move(*r);
}
void Must(Status s, const std::string& what) {
  if (!s) Die(what, s.error());
}

void Figure(const std::string& name, double value) {
  std::printf("figure %s=%.6g\n", name.c_str(), value);
  std::fflush(stdout);
}

// The history and the queue, written in one transaction with set-based SQL
// (a recursive counter), never through the per-run API.
void Fill(const std::string& path, std::int64_t runs, std::int64_t queued, TimeMs now,
          int step_points = 1, const std::string& log_dir = "") {
  { auto s = Must(Store::Open(path), "open"); }  // the schema
  auto db = Must(sql::Db::Open(path, false, 60'000), "open raw");
  const std::int64_t per_batch = 100, experiments = 5;
  const std::int64_t hist_batches = std::max<std::int64_t>(0, (runs - queued) / per_batch);
  const std::int64_t live_batches = (queued + per_batch - 1) / per_batch;
  const std::int64_t batches = hist_batches + live_batches;
  const std::int64_t commits = (batches + experiments - 1) / experiments;
  const std::int64_t old_machines = std::max<std::int64_t>(1, hist_batches);
  auto exec = [&](const std::string& sql) { Must(db.Exec(sql), sql.substr(0, 60)); };
  auto n = [](std::int64_t v) { return std::to_string(v); };
  auto t0 = Steady::now();
  exec("PRAGMA synchronous=OFF; PRAGMA cache_size=-200000; BEGIN IMMEDIATE");
  exec("INSERT INTO repos (id, url, name, created_ms) VALUES (1, '/bench/repo', 'repo', 0)");
  // Commit k: sha = k as 40 hex digits; a batch per (commit, experiment);
  // history runs an hour apart per batch, each run 60 s.
  exec("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < " + n(commits) +
       ") INSERT INTO commits (id, repo_id, sha, parent_sha, subject, committed_ms, created_ms) "
       "SELECT i, 1, printf('%040x', i), printf('%040x', i - 1), 'commit ' || i, " + n(now) +
       " - (" + n(commits) + " - i) * 3600000, " + n(now) + " - (" + n(commits) +
       " - i) * 3600000 FROM k");
  exec("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < " + n(batches) +
       ") INSERT INTO batches (id, commit_id, experiment, command, metric_name, metric_goal, "
       "repeats, seed_start, timeout_s, max_attempts, created_ms) SELECT i, (i - 1) / " +
       n(experiments) + " + 1, 'exp' || ((i - 1) % " + n(experiments) +
       "), 'true', 'acc', 'max', " + n(per_batch) + ", 1, 3600, 3, " + n(now) + " - (" +
       n(batches) + " - i) * 720000 FROM k");
  // Machines of the past, stopped: each did one batch.
  exec("WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < " +
       n(old_machines) +
       ") INSERT INTO machines (id, pool, provider, provider_id, state, slots, gpus, created_ms, "
       "booted_ms, last_seen_ms, name, hourly_cost, ready_ms, stopped_ms) SELECT i, 'cpu', 'fake', "
       "'old-' || i, 'stopped', 4, 0, " + n(now) + " - 4000000, " + n(now) +
       " - 4000000, " + n(now) + " - 3000000, 'old-' || i, 0.1, " + n(now) + " - 3900000, " +
       n(now) + " - 3000000 FROM k");
  std::int64_t hist = hist_batches * per_batch;
  if (hist > 0) exec("WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < " + n(hist) +
       " - 1) INSERT INTO runs (id, batch_id, seed, repeat, state, attempts, lease_token, worker, "
       "started_ms, finished_ms, exit_code, metric_value, created_ms, updated_ms, machine_id) "
       "SELECT i + 1, i / " + n(per_batch) + " + 1, i % " + n(per_batch) + " + 1, i % " +
       n(per_batch) + ", 'succeeded', 1, 1, 'old', b.created_ms + 1000, b.created_ms + 61000, 0, "
       "0.9 + (i % 97) / 1000.0, b.created_ms, b.created_ms + 61000, i / " + n(per_batch) +
       " + 1 FROM k JOIN batches b ON b.id = i / " + n(per_batch) + " + 1");
  // Metric points per history run: `step_points` steps (one by default)
  // and the final value.
  exec("WITH RECURSIVE s(j) AS (SELECT 1 UNION ALL SELECT j + 1 FROM s WHERE j < " +
       n(step_points) + ") INSERT INTO metrics (run_id, name, step, value, final, recorded_ms) "
       "SELECT id, 'acc', 100 * j, metric_value - 0.01 * (" + n(step_points) +
       " - j + 1), 0, finished_ms - 1000 * (" + n(step_points) + " - j + 1) FROM runs, s "
       "ORDER BY id, j");
  if (!log_dir.empty()) {
    exec("UPDATE runs SET log_path = '" + log_dir + "/' || id || '/output.log'");
  }
  exec("INSERT INTO metrics (run_id, name, step, value, final, recorded_ms) "
       "SELECT id, 'acc', NULL, metric_value, 1, finished_ms FROM runs");
  if (queued > 0) exec("WITH RECURSIVE k(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM k WHERE i < " + n(queued) +
       " - 1) INSERT INTO runs (id, batch_id, seed, repeat, state, created_ms, updated_ms) "
       "SELECT " + n(hist) + " + i + 1, " + n(hist_batches) + " + i / " + n(per_batch) +
       " + 1, i % " + n(per_batch) + " + 1, i % " + n(per_batch) + ", 'queued', " + n(now) + ", " +
       n(now) + " FROM k");
  // One push per commit, processed.
  exec("INSERT INTO pushes (source, delivery_id, repo_url, ref, before_sha, after_sha, state, "
       "result, received_ms, updated_ms) SELECT 'github', 'd-' || id, '/bench/repo', "
       "'refs/heads/main', parent_sha, sha, 'done', 'queued', created_ms, created_ms FROM commits");
  exec("COMMIT");
  // No ANALYZE: a store that grew through trainq has no planner statistics.
  // The fill went through the WAL: fold it into the file now, so that no
  // figure below pays for checkpointing hundreds of megabytes.
  exec("PRAGMA wal_checkpoint(TRUNCATE)");
  auto t1 = Steady::now();
  Figure("fill_s", Ms(t0, t1) / 1000);
}

// Median wall time of `reps` calls, and the VM steps of one.
template <typename Fn>
void Measure(const std::string& name, int reps, Fn&& fn) {
  std::vector<double> times;
  std::int64_t steps = 0;
  for (int i = 0; i < reps; ++i) {
    std::int64_t s0 = sql::VmSteps();
    auto t0 = Steady::now();
    fn();
    times.push_back(Ms(t0, Steady::now()));
    steps = sql::VmSteps() - s0;
  }
  std::sort(times.begin(), times.end());
  Figure(name + "_ms", times[times.size() / 2]);
  Figure(name + "_vm_steps", static_cast<double>(steps));
}

// A command as its own process: median wall time and peak RSS.
void MeasureProcess(const std::string& name, const std::vector<std::string>& args, int reps) {
  std::vector<double> times;
  long rss_kb = 0;
  for (int i = 0; i < reps; ++i) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    auto t0 = Steady::now();
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) {
      std::fprintf(stderr, "bench_scale: cannot start %s\n", argv[0]);
      std::exit(1);
    }
    int status = 0;
    struct rusage ru {};
    wait4(pid, &status, 0, &ru);
    times.push_back(Ms(t0, Steady::now()));
    posix_spawn_file_actions_destroy(&fa);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "bench_scale: %s exited %d\n", name.c_str(), status);
    }
    rss_kb = std::max(rss_kb, ru.ru_maxrss);
  }
  std::sort(times.begin(), times.end());
  Figure(name + "_ms", times[times.size() / 2]);
  // ru_maxrss survives execve: the child starts from this process's size, so
  // this is an upper bound (serve's RSS comes from bench_heartbeats, /proc).
  Figure(name + "_rss_bound_mb", rss_kb / 1024.0);
}


// A provider whose boots take `delay_ms` and fail with probability `fail`
// (a slow cloud API, a region out of capacity), over the in-memory one.
class SlowFlakyProvider final : public cloud::Provider {
 public:
  SlowFlakyProvider(int delay_ms, double fail) : delay_ms_(delay_ms), fail_(fail) {}
  // Called from the fleet's boot threads, several at once.
  Result<std::string> Boot(const cloud::BootSpec& spec) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms_));
    bool fail = false;
    {
      std::lock_guard lock(mu_);
      ++boots;
      fail = std::uniform_real_distribution<double>(0, 1)(rng_) < fail_;
      failed += fail;
    }
    if (fail) return Fail(ErrorKind::kUnavailable, "bench: insufficient capacity");
    return inner_.Boot(spec);
  }
  Result<std::vector<cloud::ListedMachine>> List(const cloud::MachineTag& tag) override {
    return inner_.List(tag);
  }
  Status Stop(const std::string& id) override { return inner_.Stop(id); }
  std::atomic<int> boots = 0, failed = 0;

 private:
  std::mutex mu_;
  int delay_ms_;
  double fail_;
  std::mt19937 rng_{42};
  cloud::FakeProvider inner_;
};

// Waits (up to 10 min) until the boots a Step asked for have answered; the
// next Step records them. A template so that this bench also builds against
// the fleet of earlier commits, whose Step booted synchronously (nothing to
// wait for), for before/after figures.
template <typename F>
void AwaitBoots(F& fleet) {
  if constexpr (requires { fleet.AwaitBoots(TimeMs{}); }) {
    if (!fleet.AwaitBoots(600'000)) {
      std::fprintf(stderr, "bench_scale: boots still in flight after 10 min\n");
      std::exit(1);
    }
  }
}

// The fleet at `machines` machines: one pool of a provider (instant, or
// slow and failing), the queue 4 runs deep per machine. Ticks until they are
// all up (each worker registering), leases every slot, then times Steps with
// nothing to change (the steady state of a busy fleet) and with a tenth of
// the machines idle.
void FleetBench(const std::string& dir, int machines, TimeMs now, int boot_delay_ms,
                double boot_fail) {
  std::string path = dir + "/fleet.db";
  auto store = Must(Store::Open(path), "open");
  FakeClock clock(now);
  PoolSpec spec;
  spec.scaling.name = "cpu";
  spec.scaling.max = machines;
  spec.scaling.slots = 4;
  spec.scaling.lost_after_ms = 0;
  spec.provider = "command";
  std::unique_ptr<cloud::Provider> provider;
  SlowFlakyProvider* slow = nullptr;
  if (boot_delay_ms > 0 || boot_fail > 0) {
    auto p = std::make_unique<SlowFlakyProvider>(boot_delay_ms, boot_fail);
    slow = p.get();
    provider = std::move(p);
  } else {
    provider = std::make_unique<cloud::FakeProvider>();
  }
  std::vector<FleetPool> pools;
  pools.push_back({spec, std::move(provider)});
  FleetOptions fo;
  fo.instance = "bench";
  fo.server_url = "http://127.0.0.1:1";
  fo.trainq_path = "/usr/bin/trainq";
  fo.data_dir = dir + "/data";
  Fleet fleet(store, clock, std::move(pools), fo);
  BatchSpec b;
  b.experiment = "exp";
  b.command = "true";
  b.repeats = machines * 4;
  CommitInfo c;
  c.sha = std::string(40, 'a');
  Must(store.runs().Submit("/bench/repo", c, {b}, now), "submit");
  // Ticks until every machine is up: each tick boots what the autoscaler
  // wants; the boots run off the tick (the fleet's boot threads), and the
  // bench waits for them to answer before the next tick, which records
  // them. Each booted machine's worker registers before the next tick (a
  // machine nobody registers on is lost after boot_timeout). Failed boots
  // are retried after the pool's backoff: the fake clock moves a minute
  // (past it) per tick. At most 200 ticks.
  auto t0 = Steady::now();
  std::vector<double> ticks_ms;
  bool all_up = false;
  while (!all_up && ticks_ms.size() < 200) {
    if (!ticks_ms.empty()) clock.Advance(61'000);
    auto t1 = Steady::now();
    Must(fleet.Step(), "fleet boot step");
    ticks_ms.push_back(Ms(t1, Steady::now()));
    AwaitBoots(fleet);
    int up = 0;
    for (const auto& m : Must(store.machines().List(false, clock.Now()), "machines")) {
      if (m.state == "booting") {
        Machines::WorkerRegistration r;
        r.pool = "cpu";
        r.name = m.name;
        r.hostname = m.name;
        r.slots = 4;
        Must(store.machines().RegisterWorker(r, clock.Now()), "register");
      }
      up += m.state == "booting" || m.state == "ready";
    }
    all_up = up >= machines;
  }
  Figure("fleet_boot_until_up_s", Ms(t0, Steady::now()) / 1000);
  Figure("fleet_boot_step_s", ticks_ms.front() / 1000);
  Figure("fleet_boot_ticks", static_cast<double>(ticks_ms.size()));
  Figure("fleet_boot_tick_max_s", *std::max_element(ticks_ms.begin(), ticks_ms.end()) / 1000);
  std::vector<double> sorted = ticks_ms;
  std::sort(sorted.begin(), sorted.end());
  Figure("fleet_boot_tick_median_s", sorted[sorted.size() / 2] / 1000);
  if (slow) {
    Figure("fleet_boot_delay_ms", boot_delay_ms);
    Figure("fleet_boot_fail", boot_fail);
    Figure("fleet_boots", slow->boots);
    Figure("fleet_boots_failed", slow->failed);
  }
  now = clock.Now();
  auto live = Must(store.machines().List(false, now), "machines");
  Figure("fleet_machines_booted", static_cast<double>(live.size()));
  t0 = Steady::now();
  std::vector<std::int64_t> ids;
  for (const auto& m : live) {
    Machines::WorkerRegistration r;
    r.pool = "cpu";
    r.name = m.name;
    r.hostname = m.name;
    r.slots = 4;
    ids.push_back(Must(store.machines().RegisterWorker(r, now), "register").id);
  }
  Figure("fleet_register_per_s", ids.size() / (Ms(t0, Steady::now()) / 1000));
  Machines::LeaseLimits lim;
  lim.max_runs = 4;
  t0 = Steady::now();
  std::vector<LeasedRun> held;
  for (auto id : ids) {
    auto l = Must(store.machines().LeaseForMachine(id, lim, now, 3'600'000), "lease");
    held.insert(held.end(), l.begin(), l.end());
  }
  Figure("fleet_lease4_per_s", ids.size() / (Ms(t0, Steady::now()) / 1000));
  Measure("fleet_tick_busy", 5, [&] { Must(fleet.Step(), "fleet step"); });
  // Heartbeats through the store, one per run, as the worker API records them.
  t0 = Steady::now();
  std::int64_t s0 = sql::VmSteps();
  int beats = 0;
  for (size_t i = 0; i < held.size() && i < 5000; ++i, ++beats) {
    Must(store.runs().Heartbeat(held[i].run_id, held[i].token, now, 3'600'000), "heartbeat");
  }
  Figure("store_heartbeat_per_s", beats / (Ms(t0, Steady::now()) / 1000));
  Figure("store_heartbeat_vm_steps", (sql::VmSteps() - s0) / double(std::max(1, beats)));
  // A tenth of the machines finish their runs and go idle.
  for (size_t i = 0; i < held.size() / 10; ++i) {
    Must(store.runs().Complete(held[i].run_id, held[i].token, now, 0.5), "complete");
  }
  Measure("fleet_tick_some_idle", 5, [&] { Must(fleet.Step(), "fleet step"); });
}


int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    std::fprintf(stderr, "bench_scale: no free port\n");
    std::exit(1);
  }
  int port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

// A real `trainq serve` on the store (its pool boots nothing: max 0), then
// the dashboard's data routes (signed in with the read token) and the read
// API, each the median of `reps` GETs over loopback.
void HttpBench(const std::string& db, const std::string& trainq, const std::string& dir,
               const std::string& sha) {
  std::filesystem::create_directories(dir);
  const std::string token = "bench-read-token-0123456789abcdef";
  if (!WriteFile(dir + "/read.token", token) || !WriteFile(dir + "/pool.token", token + "-pool") ||
      !WriteFile(dir + "/server.yaml", "read_token: {file: " + dir + "/read.token}\n"
                 "pools:\n  - name: cpu\n    max: 0\n    token: {file: " + dir +
                 "/pool.token}\n")) {
    std::fprintf(stderr, "bench_scale: cannot write %s\n", dir.c_str());
    std::exit(1);
  }
  std::filesystem::permissions(dir + "/read.token", std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_write);
  std::filesystem::permissions(dir + "/pool.token", std::filesystem::perms::owner_read |
                                                        std::filesystem::perms::owner_write);
  int port = FreePort();
  std::string base = "http://127.0.0.1:" + std::to_string(port);
  PosixProcessRunner runner;
  auto pid = runner.Spawn({{trainq, "--db", db, "serve", "--config", dir + "/server.yaml",
                            "--listen", "127.0.0.1:" + std::to_string(port), "--data-dir",
                            dir + "/data"},
                           {},
                           dir,
                           dir + "/serve.log"});
  if (!pid) Die("serve", pid.error());
  CurlHttpClient http;
  auto deadline = Steady::now() + std::chrono::seconds(60);
  while (true) {
    auto r = http.Send({"GET", base + "/healthz", {}, "", 1000});
    if (r && r->status == 200) break;
    if (Steady::now() > deadline) {
      std::fprintf(stderr, "bench_scale: serve did not come up; see %s/serve.log\n", dir.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto login = http.Send({"POST",
                          base + "/signin",
                          {{"Content-Type", "application/x-www-form-urlencoded"}},
                          "next=%2F&token=" + UrlEncode(token),
                          10'000});
  std::string cookie;
  if (login) {
    if (auto c = login->Header("Set-Cookie")) cookie = c->substr(0, c->find(';'));
  }
  if (cookie.empty()) {
    std::fprintf(stderr, "bench_scale: the dashboard gave no session\n");
    std::exit(1);
  }
  auto get = [&](const std::string& name, const std::string& path, bool dash) {
    std::vector<double> times;
    size_t bytes = 0;
    for (int i = 0; i < 5; ++i) {
      HttpHeaders h = dash ? HttpHeaders{{"Cookie", cookie}}
                           : HttpHeaders{{"Authorization", "Bearer " + token}};
      auto t0 = Steady::now();
      auto r = http.Send({"GET", base + path, h, "", 120'000});
      times.push_back(Ms(t0, Steady::now()));
      if (!r || r->status != 200) {
        std::fprintf(stderr, "bench_scale: GET %s: %d\n", path.c_str(), r ? r->status : -1);
        Figure(name + "_failed", 1);
        return;
      }
      bytes = r->body.size();
    }
    // The first answer is cold: serve's bootstrap memo has none of its
    // comparisons yet (stats/bootstrap.h); the median is warm.
    Figure(name + "_first_ms", times.front());
    std::sort(times.begin(), times.end());
    Figure(name + "_ms", times[times.size() / 2]);
    Figure(name + "_kb", bytes / 1024.0);
  };
  get("http_dash_status", "/dash/api/status", true);
  get("http_dash_experiments", "/dash/api/experiments", true);
  get("http_dash_sweeps", "/dash/api/sweeps", true);
  get("http_dash_report_1d", "/dash/api/report?since=1d", true);
  get("http_dash_experiment", "/dash/api/experiment/exp1", true);
  get("http_dash_experiment_500", "/dash/api/experiment/exp1?per_page=500", true);
  get("http_dash_commit", "/dash/api/commit/" + sha, true);
  get("http_dash_run", "/dash/api/run/1", true);
  get("http_status", "/api/v1/status", false);
  get("http_report_table", "/api/v1/report?format=table", false);
  get("http_report_1d", "/api/v1/report?format=table&since=1d", false);
  // The overview page's data all at once, as a browser asks for it.
  {
    std::vector<double> times;
    for (int i = 0; i < 5; ++i) {
      auto t0 = Steady::now();
      std::vector<std::thread> ts;
      for (const char* p : {"/dash/api/status", "/dash/api/experiments", "/dash/api/sweeps"}) {
        ts.emplace_back([&, p] {
          CurlHttpClient c;
          (void)c.Send({"GET", base + p, {{"Cookie", cookie}}, "", 120'000});
        });
      }
      for (auto& t : ts) t.join();
      times.push_back(Ms(t0, Steady::now()));
    }
    std::sort(times.begin(), times.end());
    Figure("http_dash_overview_ms", times[times.size() / 2]);
  }
  ::kill(*pid, SIGTERM);
  runner.Wait(*pid);
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

double PragmaInt(const std::string& path, const std::string& pragma) {
  auto db = Must(sql::Db::Open(path, false, 60'000), "open raw");
  auto q = Must(db.Prepare("PRAGMA " + pragma), pragma);
  return Must(q.Step(), pragma) ? static_cast<double>(q.Int(0)) : -1;
}

double Count(const std::string& path, const std::string& table) {
  auto db = Must(sql::Db::Open(path, false, 60'000), "open raw");
  auto q = Must(db.Prepare("SELECT count(*) FROM " + table), "count");
  return Must(q.Step(), "count") ? static_cast<double>(q.Int(0)) : -1;
}

// The filled store back to schema 15 (what migrations 16 and 17 add
// dropped), then Store::Open's upgrade from 15 to the current schema timed.
void UpgradeBench(const std::string& path) {
  {
    auto db = Must(sql::Db::Open(path, false, 600'000), "open raw");
    auto t0 = Steady::now();
    for (const char* st :
         {"DROP INDEX IF EXISTS runs_by_finished",  // schema 17
          "DROP INDEX runs_points_due", "DROP INDEX runs_logs_due",
          "DROP INDEX batches_by_experiment", "ALTER TABLE runs DROP COLUMN points_compacted",
          "ALTER TABLE runs DROP COLUMN log_archived", "PRAGMA user_version = 15",
          "PRAGMA wal_checkpoint(TRUNCATE)"}) {
      Must(db.Exec(st), st);
    }
    Figure("downgrade_to_15_s", Ms(t0, Steady::now()) / 1000);
  }
  Figure("schema15_db_mb", std::filesystem::file_size(path) / 1e6);
  std::int64_t s0 = sql::VmSteps();
  auto t0 = Steady::now();
  auto store = Must(Store::Open(path), "open (upgrade from 15)");
  Figure("upgrade_from_15_s", Ms(t0, Steady::now()) / 1000);
  Figure("upgrade_from_15_vm_steps", static_cast<double>(sql::VmSteps() - s0));
  Figure("schema_after_upgrade", store.schema_version());
}

// serve's retention steps, one after another, until one finds nothing due.
void RetentionBench(const std::string& path, const std::string& log_dir, int points_kept,
                    int runs_per_tick, double max_seconds) {
  Figure("retention_db_mb_before", std::filesystem::file_size(path) / 1e6);
  Figure("retention_metric_points_before", Count(path, "metrics"));
  auto store = Must(Store::Open(path), "open");
  RetentionPolicy policy;
  policy.metric_points_ms = 1;  // every finished run is due
  policy.logs_ms = 1;
  policy.points_kept = points_kept;
  policy.runs_per_tick = runs_per_tick;
  RetentionStepper stepper(policy, /*interval_ms=*/1, /*catch_up_ms=*/1);
  TimeMs now = SystemClock::Get().Now() + 86'400'000;
  std::vector<double> ms, steps;
  std::int64_t runs = 0, points = 0, log_runs = 0, files = 0;
  auto start = Steady::now();
  bool finished = false;
  while (Ms(start, Steady::now()) < max_seconds * 1000) {
    now += 1000;
    std::int64_t s0 = sql::VmSteps();
    auto t0 = Steady::now();
    auto d = Must(stepper.Step(store, now), "retention step");
    double took = Ms(t0, Steady::now());
    if (!d.ran) continue;
    if (d.compacted_runs == 0 && d.archived_runs == 0) {
      finished = true;
      Figure("retention_empty_step_ms", took);
      Figure("retention_empty_step_vm_steps", static_cast<double>(sql::VmSteps() - s0));
      break;
    }
    ms.push_back(took);
    steps.push_back(static_cast<double>(sql::VmSteps() - s0));
    runs += d.compacted_runs;
    points += d.points_deleted;
    log_runs += d.archived_runs;
    files += d.archived_files;
    if (ms.size() % 500 == 0) {
      std::fprintf(stderr, "retention: %zu steps, %lld runs compacted, %.0f s\n", ms.size(),
                   static_cast<long long>(runs), Ms(start, Steady::now()) / 1000);
    }
  }
  double total = 0, vm = 0;
  for (double x : ms) total += x;
  for (double x : steps) vm += x;
  Figure("retention_finished", finished ? 1 : 0);
  Figure("retention_steps", static_cast<double>(ms.size()));
  Figure("retention_total_s", total / 1000);
  Figure("retention_step_ms_mean", ms.empty() ? 0 : total / static_cast<double>(ms.size()));
  Figure("retention_step_ms_p50", Percentile(ms, 0.5));
  Figure("retention_step_ms_p99", Percentile(ms, 0.99));
  Figure("retention_step_ms_max", Percentile(ms, 1.0));
  Figure("retention_step_vm_steps_mean", steps.empty() ? 0 : vm / static_cast<double>(steps.size()));
  Figure("retention_step_vm_steps_max", Percentile(steps, 1.0));
  Figure("retention_runs_compacted", static_cast<double>(runs));
  Figure("retention_points_deleted", static_cast<double>(points));
  Figure("retention_log_runs_marked", static_cast<double>(log_runs));
  Figure("retention_log_files_archived", static_cast<double>(files));
  std::error_code ec;
  Figure("retention_db_mb_after", std::filesystem::file_size(path) / 1e6);
  Figure("retention_wal_mb_after", std::filesystem::file_size(path + "-wal", ec) / 1e6);
  double page = PragmaInt(path, "page_size");
  Figure("retention_free_mb_after", PragmaInt(path, "freelist_count") * page / 1e6);
  Figure("retention_metric_points_after", Count(path, "metrics"));
  std::uintmax_t logs_bytes = 0;
  for (auto it = std::filesystem::recursive_directory_iterator(log_dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) logs_bytes += it->file_size(ec);
  }
  Figure("retention_logs_mb_after", static_cast<double>(logs_bytes) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  std::int64_t runs = 100'000, queued = 10'000;
  int cycles = 2'000;
  std::string base = std::filesystem::temp_directory_path().string();
  std::string trainq_bin, base_bin, existing;
  bool keep = false;
  int fleet_machines = 0, boot_delay_ms = 0;
  double boot_fail = 0;
  bool http_bench = false;
  bool retention = false, upgrade = false;
  int step_points = 1, points_kept = 3, runs_per_tick = 200;
  std::int64_t log_files = 0;
  double retention_seconds = 900;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--runs") runs = std::atoll(next().c_str());
    else if (a == "--queued") queued = std::atoll(next().c_str());
    else if (a == "--cycles") cycles = std::atoi(next().c_str());
    else if (a == "--dir") base = next();
    else if (a == "--trainq") trainq_bin = next();
    else if (a == "--base-trainq") base_bin = next();
    else if (a == "--db") existing = next();
    else if (a == "--keep") keep = true;
    else if (a == "--fleet") fleet_machines = std::atoi(next().c_str());
    else if (a == "--boot-delay-ms") boot_delay_ms = std::atoi(next().c_str());
    else if (a == "--boot-fail") boot_fail = std::atof(next().c_str());
    else if (a == "--http") http_bench = true;
    else if (a == "--retention") retention = true;
    else if (a == "--upgrade") upgrade = true;
    else if (a == "--points") step_points = std::atoi(next().c_str());
    else if (a == "--points-kept") points_kept = std::atoi(next().c_str());
    else if (a == "--log-files") log_files = std::atoll(next().c_str());
    else if (a == "--runs-per-tick") runs_per_tick = std::atoi(next().c_str());
    else if (a == "--retention-seconds") retention_seconds = std::atof(next().c_str());
    else {
      std::fprintf(stderr, "bench_scale: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  spdlog::set_level(spdlog::level::warn);  // the fleet logs every boot
  queued = std::min(queued, runs);
  const TimeMs now = SystemClock::Get().Now();
  std::string dir = base + "/trainq-scale-" + std::to_string(getpid());
  if (fleet_machines > 0) {
    std::filesystem::create_directories(dir);
    Figure("machines", fleet_machines);
    FleetBench(dir, fleet_machines, now, boot_delay_ms, boot_fail);
    if (!keep) std::filesystem::remove_all(dir);
    return 0;
  }
  if (retention) {
    std::string path = dir + "/scale.db", logs = dir + "/runs";
    std::filesystem::create_directories(dir);
    Fill(path, runs, queued, now, step_points, logs);
    // The oldest --log-files runs get a real log (8 KiB of training lines).
    std::string text;
    for (int i = 0; text.size() < 8192; ++i) {
      text += "epoch " + std::to_string(i) + " loss 0." + std::to_string(1000 + i * 7) + "\n";
    }
    for (std::int64_t id = 1; id <= std::min(log_files, runs - queued); ++id) {
      std::filesystem::create_directories(logs + "/" + std::to_string(id));
      Must(WriteFile(logs + "/" + std::to_string(id) + "/output.log", text), "log");
    }
    Figure("runs", static_cast<double>(runs));
    Figure("step_points", step_points);
    Figure("log_files", static_cast<double>(log_files));
    if (upgrade) UpgradeBench(path);
    RetentionBench(path, logs, points_kept, runs_per_tick, retention_seconds);
    if (!keep) std::filesystem::remove_all(dir);
    return 0;
  }
  std::string path = existing;
  if (path.empty()) {
    std::filesystem::create_directories(dir);
    path = dir + "/scale.db";
    Fill(path, runs, queued, now);
  }
  Figure("runs", static_cast<double>(runs));
  Figure("queued", static_cast<double>(queued));
  Figure("db_mb", std::filesystem::file_size(path) / 1e6);
  auto store = Must(Store::Open(path), "open");
  // Live machines: 10 registered workers.
  std::vector<std::int64_t> machines;
  for (int i = 0; i < 10; ++i) {
    Machines::WorkerRegistration r;
    r.pool = "cpu";
    r.name = "live-" + std::to_string(i);
    r.hostname = "h" + std::to_string(i);
    r.slots = 4;
    machines.push_back(Must(store.machines().RegisterWorker(r, now), "register").id);
  }

  StatusOptions so;
  so.db = path;
  std::ostringstream sink;
  const auto& clock = SystemClock::Get();
  Measure("status_json", 5, [&] { Must(StatusJson(store, path, now), "status json"); });
  Measure("status", 5, [&] {
    sink.str("");
    Must(CmdStatus(so, clock, sink), "status");
  });
  Measure("count_by_state", 5, [&] { Must(store.runs().CountByState(), "counts"); });
  Measure("active_batches", 5, [&] { Must(store.runs().Batches(true, 0), "batches"); });
  Measure("costs", 5, [&] { Must(store.machines().Costs(now, false), "costs"); });
  Measure("machines", 5, [&] { Must(store.machines().List(false, now), "machines"); });
  Measure("runnable_demand", 5, [&] { Must(store.machines().RunnableDemand(now), "demand"); });
  Measure("waiting_batches", 5, [&] { Must(store.machines().WaitingBatches(now), "waiting"); });
  Measure("may_lease", 5, [&] { Must(store.machines().MayLease(machines[0], now), "may lease"); });
  Measure("batches_since_1d", 3, [&] { Must(store.runs().BatchesSince(now - 86'400'000), "since"); });
  // A commit of the history with a parent: `trainq show`'s document.
  char mid_sha[64];
  std::snprintf(mid_sha, sizeof mid_sha, "%040x", 2);
  Measure("show", 3, [&] { Must(LoadCommitView(store, mid_sha), "show"); });
  Measure("report_table", 3, [&] {
    Must(ReportBytes(store, {"", {}, "table", std::nullopt}, now), "report");
  });
  Measure("report_experiment", 3, [&] {
    Must(CheckReportExperiments(store, {"exp1"}, "--experiment", path), "experiment");
    Must(ReportBytes(store, {"", {"exp1"}, "table", std::nullopt}, now), "report");
  });
  Measure("costs_per_batch", 3, [&] { Must(store.machines().Costs(now, true, 50), "costs"); });
  if (!trainq_bin.empty()) {
    MeasureProcess("cli_status", {trainq_bin, "--db", path, "status"}, 5);
    MeasureProcess("cli_status_json", {trainq_bin, "--db", path, "status", "--json"}, 3);
    char sha[64];
    std::snprintf(sha, sizeof sha, "%040x", 1);
    MeasureProcess("cli_show", {trainq_bin, "--db", path, "show", sha}, 3);
    MeasureProcess("cli_report_1d", {trainq_bin, "--db", path, "report", "--since", "1d"}, 3);
    MeasureProcess("cli_report", {trainq_bin, "--db", path, "report"}, 3);
    MeasureProcess("cli_machines_batches", {trainq_bin, "--db", path, "machines", "--batches"}, 3);
  }
  if (http_bench && !trainq_bin.empty()) HttpBench(path, trainq_bin, dir + "/http", mid_sha);

  // The same commands from a build before schema 12 (--base-trainq), on a
  // copy of this store taken back to schema 11.
  if (!base_bin.empty()) {
    std::string old_path = dir + "/schema11.db";
    std::filesystem::create_directories(dir);
    {
      auto src = Must(sql::Db::Open(path, false, 60'000), "open");
      Must(src.Exec("VACUUM INTO '" + old_path + "'"), "copy");
    }
    auto db = Must(sql::Db::Open(old_path, false, 60'000), "open copy");
    auto drop = Must(db.Prepare("SELECT type, name FROM sqlite_master WHERE name IN ("
                                "'run_counts', 'batch_counts', 'recent_durations', "
                                "'machine_runs', 'pool_runs', 'pool_ended', 'push_counts') "
                                "OR (type = 'trigger') OR name IN ('machines_live', "
                                "'batches_by_created', 'batch_counts_by_state')"),
                     "list");
    std::vector<std::string> stmts;
    while (Must(drop.Step(), "list")) {
      if (drop.Text(0) == "table" || drop.Text(0) == "trigger" || drop.Text(0) == "index") {
        stmts.push_back("DROP " + drop.Text(0) + " IF EXISTS " + drop.Text(1));
      }
    }
    drop.Reset();
    for (const auto& st : stmts) Must(db.Exec(st), st);
    Must(db.Exec("PRAGMA user_version = 11"), "downgrade");
    char sha[64];
    std::snprintf(sha, sizeof sha, "%040x", 1);
    MeasureProcess("base_cli_status", {base_bin, "--db", old_path, "status"}, 3);
    MeasureProcess("base_cli_show", {base_bin, "--db", old_path, "show", sha}, 3);
    MeasureProcess("base_cli_report_1d",
                   {base_bin, "--db", old_path, "report", "--since", "1d"}, 3);
  }

  // Dispatch with the queue deep: lease + complete, one run per transaction
  // pair, as serve --inproc does (Lease) and as the worker API does
  // (LeaseForMachine).
  // Each of the four takes at most a quarter of the queue, so the last one
  // still leases from a queue as deep as the first did (within 25 %).
  cycles = static_cast<int>(std::min<std::int64_t>(cycles, queued / 4));
  auto dispatch = [&](const std::string& name, auto&& lease, int max_runs) {
    int done = 0;
    std::int64_t s0 = sql::VmSteps();
    auto t0 = Steady::now();
    while (done < cycles) {
      auto leased = lease(max_runs);
      if (leased.empty()) break;
      for (auto& r : leased) {
        Must(store.runs().Complete(r.run_id, r.token, now + 1, 0.5), "complete");
        ++done;
      }
    }
    double ms = Ms(t0, Steady::now());
    Figure(name + "_runs_per_s", done / (ms / 1000));
    Figure(name + "_vm_steps_per_run", done ? (sql::VmSteps() - s0) / double(done) : 0);
  };
  if (queued > 0) {
    dispatch("lease1", [&](int k) { return Must(store.runs().Lease("bench", now, 60'000, k), "lease"); },
             1);
    dispatch("lease8", [&](int k) { return Must(store.runs().Lease("bench", now, 60'000, k), "lease"); },
             8);
    Machines::LeaseLimits lim;
    lim.max_runs = 1;
    dispatch("machine_lease1", [&](int k) {
      lim.max_runs = k;
      return Must(store.machines().LeaseForMachine(machines[1], lim, now, 60'000), "lease for machine");
    }, 1);
    dispatch("machine_lease4", [&](int k) {
      lim.max_runs = k;
      return Must(store.machines().LeaseForMachine(machines[2], lim, now, 60'000), "lease for machine");
    }, 4);
  }
  if (!keep && existing.empty()) std::filesystem::remove_all(dir);
  if (keep) std::printf("store: %s\n", path.c_str());
  return 0;
}
