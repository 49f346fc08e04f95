// `trainq serve`: the daemon. It answers webhooks and the worker protocol
// over HTTP, turns pushes into batches, and runs the fleet: machines booted
// by each pool's provider run `trainq worker`, which leases runs over HTTP.
// `--inproc` runs the queue on this process's own slots instead (no workers,
// no HTTP needed), the way trainq worked before machines existed.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>
#include <thread>

#include "agent/cli/cli.h"
#include "agent/daemon/fleet.h"
#include "agent/daemon/inproc_lease_client.h"
#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/daemon/worker_api.h"
#include "agent/repo/git_repo.h"
#include "agent/results/retention.h"
#include "agent/results/sweep.h"
#include "agent/runner/gpu_detect.h"
#include "agent/runner/run_process.h"
#include "agent/runner/sandbox.h"
#include "agent/runner/worker.h"
#include "agent/triggers/push_pipeline.h"
#include "agent/triggers/server_config.h"
#include "agent/triggers/webhook.h"
#include "cloud/provider.h"
#include "core/fatal_signals.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "queue/wal_check.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

// Sweeps (agent/results/sweep.h) add their next points from the daemon's main loop:
// off the lease (HTTP) and webhook (push worker) paths.
void StepSweepsLogged(SweepDriver& driver, Store& store, TimeMs now) {
  auto added = driver.Step(store, now);
  if (!added) {
    spdlog::warn("sweeps: {} (will retry)", added.error().message);
  } else if (*added > 0) {
    spdlog::info("sweeps: {} point(s) queued", *added);
  }
}

// With the queue drained, a running sweep either queues its next points or
// is done: true when it queued some (so --until-idle goes on).
bool SweepsQueuedMore(Store& store, TimeMs now) {
  auto added = StepSweeps(store, now);
  return added && *added > 0;
}

std::string DataDir(const ServeOptions& o) {
  std::string d = o.data_dir;
  if (d.empty()) d = (fs::absolute(o.db).parent_path() / "trainq-data").string();
  return fs::absolute(d).string();
}

// A free TCP port on 127.0.0.1 (for a listener that only local workers use).
Result<int> FreeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Fail(ErrorKind::kUnavailable, "socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return Fail(ErrorKind::kUnavailable, "cannot find a free port on 127.0.0.1");
  }
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

// Every run outcome, learnt from the store (fleet workers report over HTTP,
// so serve sees their results only there): logged once each when `log`, and
// the runs that ended dead counted for `--until-idle`'s exit status.
class OutcomeLog {
 public:
  OutcomeLog(TimeMs start, bool log) : finished_ms_(start), log_(log) {}

  void Step(Store& store) {
    while (true) {
      auto rows = store.runs().RunsFinishedAfter(finished_ms_, run_id_, 200);
      if (!rows) {
        spdlog::warn("run outcomes: {}", rows.error().message);
        return;
      }
      for (const auto& r : *rows) {
        finished_ms_ = r.finished_ms.value_or(finished_ms_);
        run_id_ = r.id;
        if (r.state == RunState::kDead) ++dead_;
        if (!log_) continue;
        std::string who = r.experiment + " seed " + std::to_string(r.seed) + " (attempt " +
                          std::to_string(r.attempts) + "/" + std::to_string(r.max_attempts) +
                          (r.worker.empty() ? "" : ", " + r.worker) + ")";
        if (r.state == RunState::kSucceeded) {
          spdlog::info("run {} succeeded: {}: {}", r.id, who,
                       r.metric_value ? FormatDouble(*r.metric_value, 4) : "-");
        } else if (r.state == RunState::kCancelled) {
          spdlog::info("run {} cancelled: {} seed {} (batch {})", r.id, r.experiment, r.seed,
                       r.batch_id);
        } else if (r.state == RunState::kFailed) {
          spdlog::warn("run {} failed, will retry: {}: {}", r.id, who, r.last_error);
        } else {
          spdlog::error("run {} dead: {}: {}", r.id, who, r.last_error);
        }
      }
      if (rows->size() < 200) return;
    }
  }
  int dead() const { return dead_; }

 private:
  TimeMs finished_ms_;
  std::int64_t run_id_ = 0;
  bool log_;
  int dead_ = 0;
};

// --until-idle: an error when runs of this session ended dead.
Status DeadRunsStatus(const OutcomeLog& outcomes) {
  if (outcomes.dead() == 0) return {};
  return Fail(ErrorKind::kConflict,
              std::to_string(outcomes.dead()) + " run(s) ended dead; see `trainq runs --state "
                                                "dead` for why");
}

// The daemon's store. Before SQLite replays a WAL left by a crash, the WAL is
// read for committed transactions SQLite would drop without a word
// (queue/wal_check.h); the first serve creates a missing database, but an
// existing file that holds none is refused (Store::Open); and PRAGMA
// quick_check says whether the file is sound. Both findings are logged; serve
// goes on either way (a refusal to start would not bring the data back).
Result<Store> OpenServeStore(const std::string& db) {
  if (auto wal = InspectWal(db); !wal) {
    spdlog::warn("{}", wal.error().message);
  } else if (auto problem = wal->Problem(db + "-wal"); !problem.empty()) {
    spdlog::error("database {}: {}; restore the database from a backup if those "
                  "transactions matter",
                  db, problem);
  } else if (wal->present) {
    spdlog::info("database {}: WAL of {} bytes left by an earlier process: {} frame(s), {} "
                 "commit(s), all replayed",
                 db, wal->bytes, wal->replayed, wal->commits);
  }
  std::error_code ec;
  const bool existed = std::filesystem::exists(db, ec);
  ASSIGN_OR_RETURN(auto store, Store::Open(db));
  if (!existed) spdlog::info("database {}: created (the first serve)", db);
  const auto t0 = std::chrono::steady_clock::now();
  auto check = store.QuickCheck();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - t0)
                      .count();
  if (!check) {
    spdlog::error("database {}: quick_check could not run: {}", db, check.error().message);
  } else if (check->size() == 1 && (*check)[0] == "ok") {
    spdlog::info("database {}: quick_check ok ({} ms)", db, ms);
  } else {
    spdlog::error("database {}: quick_check found {} problem(s) ({} ms): {}; stop serve and "
                  "restore from a backup (or `sqlite3 {} .recover`) before more is written",
                  db, check->size(), ms, fmt::join(*check, "; "), db);
  }
  return store;
}

// Watched repositories: the push worker (pushes, polls, statuses).
Result<std::unique_ptr<ServerWorker>> StartPushWorker(const ServeOptions& o,
                                                      const ServerConfig& config,
                                                      HttpClient& http, const Clock& clock,
                                                      const std::string& data_dir) {
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the daemon
  WorkerOptions wo;
  wo.data_dir = data_dir;
  auto worker = std::make_unique<ServerWorker>(o.db, config, http, clock, wo);
  TRY(worker->Start());
  for (const auto& r : config.repositories) {
    spdlog::info("watching {} ({}; branches {}; webhook secret {}; polling {}; statuses {})",
                 UrlForLog(r.url), ForgeName(r.forge), fmt::join(r.branches, ", "),
                 r.secret.empty() ? "none" : "from " + r.secret.source,
                 r.poll_interval_s ? "every " + FormatDuration(r.poll_interval_s * 1000) : "off",
                 r.status ? "on" : "off");
    bool ssh = r.url.starts_with("ssh://") ||
               (r.url.find("://") == std::string::npos && r.url.find('@') != std::string::npos);
    if (ssh && !GitSupportsSsh()) {
      spdlog::warn("{}: this libgit2 was built without ssh; fetches will fail (use https with "
                   "a token)", UrlForLog(r.url));
    }
  }
  return worker;
}

// `--inproc`: the runs on this process's own slots, by the one run engine: a
// Worker (agent/runner/worker.h) on a thread, leasing through an in-process
// LeaseClient from this serve's Server (agent/daemon/inproc_lease_client.h),
// so each call goes through the same server code as a worker's over HTTP.
// The worker registers as a machine of the `local` pool (a hand-started one:
// it is stopped when serve ends) and shares serve's data dir: worktrees/,
// runs/<id>/ (output/, metrics.jsonl, the server's output.log). Runs start
// without a sandbox, as they always did here. This loop steps the sweeps,
// returns expired leases to the queue and decides --until-idle.
Status ServeInProcess(const ServeOptions& o, const ServerConfig& config,
                      std::optional<ListenAddress> address, const std::string& listen,
                      const Clock& clock, const std::atomic<bool>& stop) {
  ASSIGN_OR_RETURN(auto store, OpenServeStore(o.db));
  const std::string data_dir = DataDir(o);
  TRY(EnsurePoolTokens(store, config, data_dir, clock.Now()));
  const std::string pool = config.pools.empty() || config.FindPool(kDefaultPool)
                               ? kDefaultPool
                               : config.pools.front().name();
  ASSIGN_OR_RETURN(const std::string token, PoolToken(config, data_dir, pool));

  ServerOptions so;
  so.data_dir = data_dir;
  so.lease_ms = o.lease_s * 1000;
  so.heartbeat_ms = o.heartbeat_s * 1000;
  Server server(config, o.db, clock, so);
  TRY(server.Open());

  WorkerConfig wc;
  wc.server = "http://127.0.0.1";  // this host (a one-machine gang's address)
  wc.token = token;
  wc.slots = o.slots;
  if (!o.gpus.empty()) { ASSIGN_OR_RETURN(wc.gpus, ResolveGpus(o.gpus)); }
  wc.fuse_max = o.fuse_max;
  wc.data_dir = data_dir;
  wc.process_log = "process.log";
  wc.bin_dir = SelfDir();
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  wc.hostname = host;
  wc.pid = static_cast<int>(getpid());
  wc.cpus = static_cast<int>(std::thread::hardware_concurrency());
  wc.lease_wait_ms = o.poll_ms;  // how soon a free slot sees work submitted elsewhere
  wc.kill_grace_ms = o.kill_grace_s * 1000;
  wc.env_passthrough = o.env_passthrough;
  PosixProcessRunner runner;
  InProcLeaseClient client(server, token);
  Worker engine(client, runner, clock, std::move(wc));
  spdlog::info("serving {} with {} in-process slot(s); run files in {}", o.db, o.slots, data_dir);

  CurlHttpClient http;
  std::unique_ptr<ServerWorker> worker;
  std::unique_ptr<HttpListener> listener;
  if (address || !config.repositories.empty()) {
    ASSIGN_OR_RETURN(worker, StartPushWorker(o, config, http, clock, data_dir));
  }
  if (address) {
    server.set_on_push([w = worker.get()] { w->Wake(); });
    ASSIGN_OR_RETURN(listener,
                     HttpListener::Start(
                         *address, kMaxWebhookBodyBytes,
                         [&server](const HttpServerRequest& r) { return server.Handle(r); },
                         [&server](const HttpServerRequest& h) { return server.Admit(h); }));
    spdlog::info("listening on http://{}", listen);
    spdlog::info("dashboard: {}", server.DashboardUrl(listen));
  }

  std::atomic<bool> engine_stop{false};
  std::atomic<bool> engine_done{false};
  Result<int> engine_result = 0;
  std::thread engine_thread([&] {
    engine_result = engine.Run(engine_stop);
    engine_done = true;
  });
  OutcomeLog outcomes(clock.Now(), /*log=*/false);  // the worker logs its own runs
  Status result;
  SweepDriver sweeps;
  RetentionStepper retention(config.retention);  // server.yaml `retention:`
  while (!stop.load()) {
    if (engine_done.load()) {  // it ends only on an error: nothing would run the queue
      if (engine_result) {
        result = Fail(ErrorKind::kUnavailable, "the in-process worker ended (exit code " +
                                                   std::to_string(*engine_result) + ")");
      } else {
        result = std::unexpected(engine_result.error());
      }
      break;
    }
    const TimeMs now = clock.Now();
    StepSweepsLogged(sweeps, store, now);
    retention.StepLogged(store, now);
    // Leases of a silent holder (a serve killed before this one) go back.
    if (auto expired = store.runs().ExpireLeases(now); !expired) {
      spdlog::warn("{} (will retry)", expired.error().message);
    } else if (*expired > 0) {
      spdlog::warn("{} run(s) whose lease expired went back to the queue", *expired);
    }
    if (o.until_idle) {
      // Nothing queued, leased, running or waiting for a retry: every run the
      // worker holds is leased or running in the store until it reports.
      auto counts = store.runs().CountByState();
      bool drained = counts.has_value();
      for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
        if (drained && (*counts)[static_cast<int>(s)] > 0) drained = false;
      }
      auto pending_push = store.pushes().NextPushDue();
      if (drained && (!worker || (pending_push && !*pending_push)) &&
          !SweepsQueuedMore(store, clock.Now())) {
        spdlog::info("queue is empty; exiting (--until-idle)");
        outcomes.Step(store);
        if (result) result = DeadRunsStatus(outcomes);
        break;
      }
    }
    outcomes.Step(store);
    clock.SleepFor(o.poll_ms);
  }
  engine_stop = true;
  server.StopWaiting();  // a waiting lease answers now; so do the dashboard's event streams
  engine_thread.join();
  if (listener) listener->Stop();
  if (worker) worker->Stop();
  spdlog::info("trainq serve stopped ({})", stop.load() ? "signal"
                                            : result  ? "nothing left to run"
                                                      : "error: " + result.error().message);
  return result;
}

// When every queued run is one that no pool can serve (and nothing runs or
// waits for a retry): why, naming each (pool, GPUs) demand; else "".
std::string UnservableOnly(Store& store, const Fleet& fleet,
                           const std::array<std::int64_t, kRunStateCount>& counts, TimeMs now) {
  for (auto s : {RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
    if (counts[static_cast<int>(s)] > 0) return "";
  }
  if (counts[static_cast<int>(RunState::kQueued)] == 0) return "";
  auto demand = store.machines().RunnableDemand(now);
  if (!demand || demand->empty()) return "";
  std::int64_t runs = 0;
  std::string why;
  for (const auto& d : *demand) {
    if (PoolForDemand(fleet.pools(), d.pool, d.gpus, d.nodes)) return "";
    runs += d.runnable;
    why += (why.empty() ? "" : "; ") + std::to_string(d.runnable) + " run(s): " +
           UnservableReason(fleet.pools(), d.pool, d.gpus, d.nodes);
  }
  return std::to_string(runs) + " queued run(s) can never start (" + why + ")";
}

// What runs of local workers must not see (FleetOptions::sandbox_hide): the
// database and its side files, the config, every `{file:}` secret and ssh
// key it names, and serve's data dir (tokens, outbox, other runs).
std::vector<std::string> SandboxHidden(const ServeOptions& o, const ServerConfig& config,
                                       const std::string& data_dir) {
  std::vector<std::string> out;
  std::string db = fs::absolute(o.db).string();
  for (const char* suffix : {"", "-wal", "-shm", "-journal"}) out.push_back(db + suffix);
  if (!config.path.empty()) out.push_back(fs::absolute(config.path).string());
  auto secret = [&](const SecretValue& s) {
    if (s.source.starts_with("file ")) out.push_back(fs::absolute(s.source.substr(5)).string());
  };
  for (const auto& r : config.repositories) {
    secret(r.secret);
    secret(r.token);
    if (!r.ssh_key.empty()) out.push_back(fs::absolute(r.ssh_key).string());
  }
  secret(config.read_token);
  for (const auto& p : config.pools) {
    secret(p.token);
    if (auto it = p.params.find("token_file"); it != p.params.end()) {
      out.push_back(fs::absolute(it->second).string());
    }
  }
  out.push_back(data_dir);
  return out;
}

// The pool used when the config names none: local worker processes.
PoolSpec DefaultLocalPool(const ServeOptions& o) {
  PoolSpec p;
  p.scaling.name = "local";
  p.scaling.min = 0;
  p.scaling.max = o.machines;  // 0: only workers started by hand
  p.scaling.slots = o.slots;
  p.fuse_max = o.fuse_max;
  p.env_passthrough = o.env_passthrough;
  p.sandbox = o.sandbox;
  p.sandbox_writable = o.sandbox_writable;
  p.scaling.idle_grace_ms = o.idle_grace_s * 1000;
  p.scaling.boot_timeout_ms = 60'000;
  p.provider = "local";
  p.orphan_timeout_ms = 10 * 60'000;
  if (!o.gpus.empty()) {
    p.params["worker_gpus"] = o.gpus;
    p.gpus = static_cast<int>(Split(o.gpus, ',').size());
  }
  return p;
}

}  // namespace

Status CmdServe(const ServeOptions& o, const Clock& clock, const std::atomic<bool>& stop) {
  // Not dumpable: /proc/<serve>/environ, mem and fd links become root's only,
  // and no process of the same user may ptrace this one (its secrets).
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Room for the HTTP listener's connections (1,024 at most) beside the
  // database and the workers' pipes: the soft descriptor limit up to the hard.
  if (rlimit rl{}; getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 &&
                   rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 65536);
    setrlimit(RLIMIT_NOFILE, &rl);
  }
  TRY(CheckSandboxMode(o.sandbox, "--sandbox"));
  if (o.slots <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--slots: expected a positive integer, got " + std::to_string(o.slots));
  }
  if (o.fuse_max <= 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--fuse-max: expected a positive integer, got " + std::to_string(o.fuse_max));
  }
  if (o.machines < 0) {
    return Fail(ErrorKind::kInvalidArgument,
                "--machines: expected 0 (hand-started workers only) or more, got " +
                    std::to_string(o.machines));
  }
  ServerConfig config;
  if (!o.config.empty()) { ASSIGN_OR_RETURN(config, LoadServerConfig(o.config)); }
  std::string listen = o.listen                ? *o.listen
                       : !config.listen.empty() ? config.listen
                       : o.until_idle && o.config.empty() ? "auto"
                                                          : "127.0.0.1:8080";
  if (o.inproc) {
    if (listen == "auto") listen = "off";
    std::optional<ListenAddress> address;
    if (listen != "off") { ASSIGN_OR_RETURN(address, ParseListenAddress(listen)); }
    return ServeInProcess(o, config, address, listen, clock, stop);
  }
  {
    std::error_code ec;
    auto abs = fs::absolute(o.db, ec);
    spdlog::info("database {} (other trainq commands read it with --db or TRAINQ_DB)",
                 ec ? o.db : abs.string());
  }
  if (listen == "off") {
    return Fail(ErrorKind::kInvalidArgument,
                "--listen off: workers reach the server over HTTP; use --inproc to run on this "
                "process's own slots without a listener");
  }
  if (listen == "auto") {
    ASSIGN_OR_RETURN(int port, FreeLoopbackPort());
    listen = "127.0.0.1:" + std::to_string(port);
  }
  ASSIGN_OR_RETURN(auto address, ParseListenAddress(listen));
  if (config.pools.empty()) config.pools.push_back(DefaultLocalPool(o));
  // What workers on this host connect to; remote pools need their own
  // server_url unless serve listens on an address other hosts can reach.
  const std::string default_server_url =
      "http://" + (address.loopback() || address.host == "0.0.0.0"
                       ? "127.0.0.1:" + std::to_string(address.port)
                       : listen);
  TRY(CheckWorkerUrls(config, default_server_url, listen));

  const std::string data_dir = DataDir(o);
  for (const auto& p : config.pools) {
    // A sandbox asked for but not installed is said now, not at each boot.
    if (p.provider != "local") continue;
    auto bwrap = ResolveSandbox(p.sandbox);
    if (!bwrap) {
      return Fail(ErrorKind::kInvalidArgument, (config.path.empty() ? "" : config.path + ": ") +
                                                   "pool " + p.name() + ": " +
                                                   bwrap.error().message);
    }
    if (bwrap->empty()) {
      spdlog::warn("pool {}: runs start without a sandbox ({}): a run can read what serve's user "
                   "can read (see docs/deployment.md#security)",
                   p.name(), p.sandbox == "none" ? "sandbox: none" : "bwrap is not installed");
    }
  }
  ASSIGN_OR_RETURN(auto store, OpenServeStore(o.db));
  TRY(EnsurePoolTokens(store, config, data_dir, clock.Now()));
  ASSIGN_OR_RETURN(auto instance, InstanceId(data_dir));

  CurlHttpClient http;
  PosixProcessRunner runner;
  std::vector<FleetPool> pools;
  for (const auto& spec : config.pools) {
    cloud::ProviderDeps deps;
    deps.runner = &runner;
    deps.http = &http;
    deps.clock = &clock;
    deps.state_dir = (fs::path(data_dir) / "providers").string();
    auto provider = cloud::MakeProvider(spec.provider, spec.params, deps);
    if (!provider) {
      return Fail(provider.error().kind, (config.path.empty() ? "" : config.path + ": ") +
                                             "pool " + spec.name() + ": " +
                                             provider.error().message);
    }
    pools.push_back({spec, std::move(*provider)});
  }

  std::unique_ptr<ServerWorker> worker;
  if (!config.repositories.empty() || !o.until_idle) {
    ASSIGN_OR_RETURN(worker, StartPushWorker(o, config, http, clock, data_dir));
  }
  ServerOptions so;
  so.data_dir = data_dir;
  so.lease_ms = o.lease_s * 1000;
  so.heartbeat_ms = o.heartbeat_s * 1000;
  Server server(config, o.db, clock, so);
  TRY(server.Open());
  server.set_on_push([w = worker.get()] {
    if (w) w->Wake();
  });
  ASSIGN_OR_RETURN(auto listener,
                   HttpListener::Start(
                       address, kMaxWebhookBodyBytes,
                       [&server](const HttpServerRequest& r) { return server.Handle(r); },
                       [&server](const HttpServerRequest& h) { return server.Admit(h); }));
  if (!address.loopback()) {
    spdlog::warn("listening beyond loopback on {}: webhooks and /healthz answer anyone who can "
                 "reach it (everything that shows runs needs a token)", listen);
  }
  spdlog::info("listening on http://{} (webhooks, worker API, /api/v1/status, /metrics)",
               listen);
  spdlog::info("dashboard: {}", server.DashboardUrl(listen));

  FleetOptions fo;
  fo.instance = instance;
  fo.server_url = default_server_url;
  fo.trainq_path = (fs::path(SelfDir()) / "trainq").string();
  fo.data_dir = data_dir;
  fo.sandbox_hide = SandboxHidden(o, config, data_dir);
  fo.budget = config.budget;
  if (config.budget.per_day > 0 || config.budget.per_month > 0) {
    spdlog::info("budget of all pools: {}{}{}",
                 config.budget.per_day > 0 ? fmt::format("${:.2f} per UTC day", config.budget.per_day)
                                           : "",
                 config.budget.per_month > 0
                     ? fmt::format("{}${:.2f} per UTC month", config.budget.per_day > 0 ? ", " : "",
                                   config.budget.per_month)
                     : "",
                 config.budget.drain_at_cap ? "; machines drained at the cap" : "");
  }
  Fleet fleet(store, clock, std::move(pools), fo);
  for (const auto& p : fleet.pools()) {
    const auto& sc = p.spec.scaling;
    spdlog::info("pool {}: {} provider, {}..{} machine(s) x {} slot(s), idle grace {}{}{}",
                 p.spec.name(), p.spec.provider, sc.min, sc.max, sc.slots,
                 FormatDuration(sc.idle_grace_ms),
                 sc.budget_per_day > 0 || sc.budget_per_month > 0
                     ? fmt::format(", budget{}{}{}",
                                   sc.budget_per_day > 0
                                       ? fmt::format(" ${:.2f}/day", sc.budget_per_day)
                                       : "",
                                   sc.budget_per_month > 0
                                       ? fmt::format(" ${:.2f}/month", sc.budget_per_month)
                                       : "",
                                   sc.drain_at_cap ? " (drain at cap)" : "")
                     : "",
                 sc.list_interval_ms > 0
                     ? ", lists machines every " + FormatDuration(sc.list_interval_ms) + " (" +
                           FormatDuration(std::max(sc.list_interval_ms, sc.list_interval_idle_ms)) +
                           " while nothing changes)"
                     : "");
  }

  // Leases that expired while no serve could take a heartbeat (it was down or
  // restarting) were not the workers' fault: one more lease to come back,
  // and no attempt used if they do not.
  if (auto n = store.runs().GraceLeases(clock.Now(), clock.Now(), so.lease_ms,
                                 "trainq serve was down when it expired");
      n && *n > 0) {
    spdlog::info("{} run(s) whose lease expired while trainq serve was down get {} to report back",
                 *n, FormatDuration(so.lease_ms));
  }
  OutcomeLog outcomes(clock.Now(), /*log=*/true);
  Status result;
  TimeMs next_step = 0;
  TimeMs last_loop = clock.Now();
  SweepDriver sweeps;
  RetentionStepper retention(config.retention);  // server.yaml `retention:`
  while (!stop.load()) {
    TimeMs now = clock.Now();
    if (now - last_loop > std::max<TimeMs>(so.lease_ms / 2, 5'000)) {
      // This process stalled (stopped, swapped, a slow disk): heartbeats were
      // not taken meanwhile either.
      if (auto n = store.runs().GraceLeases(now, now, so.lease_ms, "trainq serve stalled for " +
                                                                FormatDuration(now - last_loop));
          n && *n > 0) {
        spdlog::warn("trainq serve stalled for {}: {} expired lease(s) renewed",
                     FormatDuration(now - last_loop), *n);
      }
    }
    last_loop = now;
    StepSweepsLogged(sweeps, store, now);
    retention.StepLogged(store, now);
    if (now >= next_step) {
      auto st = fleet.Step();
      if (!st) {
        if (!st.error().retryable()) {
          result = st;
          break;
        }
        spdlog::warn("{} (will retry)", st.error().message);
      }
      server.NotifyWork();
      next_step = now + o.scale_interval_ms;
    }
    if (o.until_idle) {
      auto counts = store.runs().CountByState();
      auto pending_push = store.pushes().NextPushDue();
      bool drained = counts.has_value();
      if (counts) {
        for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning,
                       RunState::kFailed}) {
          if ((*counts)[static_cast<int>(s)] > 0) drained = false;
        }
      }
      // Queued runs that no pool can serve would wait forever: give up on them.
      std::string stuck;
      if (!drained && counts && (!worker || (pending_push && !*pending_push))) {
        stuck = UnservableOnly(store, fleet, *counts, now);
      }
      if ((drained && !SweepsQueuedMore(store, now)) || !stuck.empty()) {
        TRY(fleet.StopAll());
        auto live = fleet.LiveMachines();
        if (live && *live == 0) {
          outcomes.Step(store);
          if (!stuck.empty()) {
            result = Fail(ErrorKind::kConflict, stuck + "; exiting (--until-idle)");
          } else {
            spdlog::info("queue is empty and every machine stopped; exiting (--until-idle)");
            result = DeadRunsStatus(outcomes);
          }
          break;
        }
      }
    }
    outcomes.Step(store);
    clock.SleepFor(o.poll_ms);
  }
  if (stop.load() || !result) {
    // Local workers are this host's processes: stop them with the daemon
    // (their runs go back to the queue). Cloud machines keep running and
    // reconnect when serve is back; their dead-man switch stops them if it
    // never is.
    server.StopWaiting();  // a worker in a long poll sees its SIGTERM at once
    auto st = fleet.StopAll(/*local_only=*/true);
    if (!st) {
      // The orderly stop failed (a full disk, say): the workers this serve
      // started still get their SIGTERM, and hand their runs back.
      spdlog::warn("stopping local workers: {}; sent SIGTERM to the {} this serve started",
                   st.error().message, StopRegisteredGroups());
    }
  }
  server.StopWaiting();  // lease long polls answer now, before the listener closes
  listener->Stop();
  if (worker) worker->Stop();
  spdlog::info("trainq serve stopped ({})", stop.load() ? "signal"
                                            : result  ? "nothing left to run"
                                                      : "error: " + result.error().message);
  return result;
}

// `trainq serve`.
void AddServeCommand(CLI::App& app, const CliContext& ctx) {
  // serve
  auto serve = std::make_shared<ServeOptions>();
  auto* c_serve = app.add_subcommand(
      "serve", "The daemon: webhooks, the worker API, and machines that run the queue");
  c_serve->add_option("--slots", serve->slots,
                      "Runs at once per machine of the default local pool")
      ->capture_default_str();
  c_serve->add_option("--machines", serve->machines,
                      "Most worker processes the default local pool starts (0: only workers started by hand)")
      ->capture_default_str();
  c_serve->add_option("--env-passthrough", serve->env_passthrough,
                      "A variable of serve's environment that runs of the default local pool also "
                      "get (NAME or PREFIX*; repeatable)")
      ->delimiter(',');
  c_serve->add_option("--fuse-max", serve->fuse_max,
                      "Seeds of a trainer: experiment that a worker of the default local pool fuses into one "
                      "trainq-train process")
      ->capture_default_str();
  c_serve->add_option("--idle-grace", serve->idle_grace_s,
                      "How long a machine of the default local pool may idle before it is "
                      "stopped (90s, 2m; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--sandbox", serve->sandbox,
                      "Where runs of the default local pool start: bwrap, none, or auto (bwrap "
                      "when installed); see docs/deployment.md#security")
      ->capture_default_str();
  c_serve->add_option("--sandbox-writable", serve->sandbox_writable,
                      "A directory runs of the default local pool may write besides their own "
                      "(repeatable)");
  c_serve->add_flag("--inproc", serve->inproc,
                    "Run on this process's own slots: no workers, no machines");
  c_serve->add_flag("--until-idle", serve->until_idle, "Exit once the queue is empty");
  c_serve->add_option("--data-dir", serve->data_dir,
                      "Run logs, metrics and checkouts (default: trainq-data next to the db)");
  c_serve->add_option("--gpus", serve->gpus, "GPU ids to hand out, e.g. 0,1 (CUDA_VISIBLE_DEVICES)");
  c_serve->add_option("--lease", serve->lease_s, "Lease length (60s, 2m; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--heartbeat", serve->heartbeat_s,
                      "Heartbeat interval (10s; a bare number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--poll-ms", serve->poll_ms, "Queue poll interval in milliseconds")
      ->capture_default_str();
  c_serve->add_option("--kill-grace", serve->kill_grace_s,
                      "Time between SIGTERM and SIGKILL when a run is stopped (10s; a bare "
                      "number is seconds)")
      ->transform(DurationSeconds())
      ->capture_default_str();
  c_serve->add_option("--listen", serve->listen,
                      "HTTP server address HOST:PORT, or off with --inproc (default: the config's, "
                      "else 127.0.0.1:8080; a free loopback port with --until-idle and no "
                      "--config)");
  c_serve->add_option("--config", serve->config,
                      "Server config (YAML): watched repositories, webhook secrets, polling, "
                      "commit statuses");
  c_serve->callback([=] {
    serve->db = *ctx.db;
    CatchStopSignals();
    *ctx.exit_code = ReportStatus(CmdServe(*serve, *ctx.clock, StopFlag()));
  });
}

}  // namespace trainq
