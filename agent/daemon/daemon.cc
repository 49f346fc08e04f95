#include "agent/daemon/daemon.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "agent/daemon/inproc_lease_client.h"
#include "agent/daemon/server.h"
#include "agent/daemon/worker_api.h"
#include "agent/repo/git_repo.h"
#include "agent/repo/mirror.h"
#include "agent/results/retention.h"
#include "agent/results/sweep.h"
#include "agent/runner/run_process.h"
#include "agent/triggers/notify.h"
#include "agent/triggers/poller.h"
#include "agent/triggers/push_pipeline.h"
#include "agent/triggers/webhook.h"
#include "cloud/provider.h"
#include "core/fatal_signals.h"
#include "core/http_client.h"
#include "core/log.h"
#include "core/process.h"
#include "core/strings.h"
#include "core/thread_annotations.h"
#include "queue/duty_lock.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "queue/wal_check.h"

namespace fs = std::filesystem;

namespace trainq {

namespace {

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
        if (log_) Log(r);
      }
      if (rows->size() < 200) return;
    }
  }
  int dead() const { return dead_; }

 private:
  static void Log(const RunRow& r) {
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

// Sweeps (agent/results/sweep.h) add their next points from the daemon's main loop:
// off the lease (HTTP) and webhook (push pipeline) paths.
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

// The daemon's store. Before SQLite replays a WAL left by a crash, the WAL is
// read for committed transactions SQLite would drop without a word
// (queue/wal_check.h); the first serve creates a missing database, but an
// existing file that holds none is refused (Store::Open); and PRAGMA
// quick_check says whether the file is sound. Both findings are logged; serve
// goes on either way (a refusal to start would not bring the data back).
Result<Store> OpenServeStore(const std::string& db) {
  // PostgreSQL keeps and checks its own WAL and pages; the URL is not
  // logged here (it may hold a password: Store::Open's errors print it
  // without one).
  if (sql::IsPostgresUrl(db)) return Store::Open(db);
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

// Watched repositories: the push pipeline (pushes, polls, statuses).
Result<std::unique_ptr<PushPipeline>> StartPushPipeline(const std::string& db,
                                                        const ServerConfig& config,
                                                        HttpClient& http, const Clock& clock,
                                                        const std::string& data_dir) {
  signal(SIGPIPE, SIG_IGN);  // a client that hangs up must not kill the daemon
  PushPipelineOptions po;
  po.data_dir = data_dir;
  auto pipeline = std::make_unique<PushPipeline>(db, config, http, clock, po);
  TRY(pipeline->Start());
  for (const auto& r : config.repositories) {
    spdlog::info("watching {} ({}; branches {}; webhook secret {}; polling {}; statuses {})",
                 UrlForLog(r.url), ForgeName(r.forge), fmt::join(r.branches, ", "),
                 r.secret.empty() ? "none" : "from " + r.secret.source,
                 r.poll_interval_s ? "every " + FormatDuration(r.poll_interval_s * 1000)
                 : CatchesUp(r)    ? "off, catch-up at start and every " +
                                      FormatDuration(r.catch_up_s * 1000)
                                   : std::string("off"),
                 r.status ? "on" : "off");
    bool ssh = r.url.starts_with("ssh://") ||
               (r.url.find("://") == std::string::npos && r.url.find('@') != std::string::npos);
    if (ssh && !GitSupportsSsh()) {
      spdlog::warn("{}: this libgit2 was built without ssh; fetches will fail (use https with "
                   "a token)", UrlForLog(r.url));
    }
  }
  return pipeline;
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

// "$5.00 per UTC day, $100.00 per UTC month; machines drained at the cap".
void LogOverallBudget(const cloud::OverallBudget& b) {
  if (b.per_day <= 0 && b.per_month <= 0) return;
  spdlog::info("budget of all pools: {}{}{}",
               b.per_day > 0 ? fmt::format("${:.2f} per UTC day", b.per_day) : "",
               b.per_month > 0
                   ? fmt::format("{}${:.2f} per UTC month", b.per_day > 0 ? ", " : "", b.per_month)
                   : "",
               b.drain_at_cap ? "; machines drained at the cap" : "");
}

void LogPool(const FleetPool& p) {
  const auto& sc = p.spec.scaling;
  std::string budget;
  if (sc.budget_per_day > 0 || sc.budget_per_month > 0) {
    budget = fmt::format(
        ", budget{}{}{}", sc.budget_per_day > 0 ? fmt::format(" ${:.2f}/day", sc.budget_per_day) : "",
        sc.budget_per_month > 0 ? fmt::format(" ${:.2f}/month", sc.budget_per_month) : "",
        sc.drain_at_cap ? " (drain at cap)" : "");
  }
  std::string listing;
  if (sc.list_interval_ms > 0) {
    listing = ", lists machines every " + FormatDuration(sc.list_interval_ms) + " (" +
              FormatDuration(std::max(sc.list_interval_ms, sc.list_interval_idle_ms)) +
              " while nothing changes)";
  }
  spdlog::info("pool {}: {} provider, {}..{} machine(s) x {} slot(s), idle grace {}{}{}",
               p.spec.name(), p.spec.provider, sc.min, sc.max, sc.slots,
               FormatDuration(sc.idle_grace_ms), budget, listing);
}

}  // namespace

// Declared in the order they are built; destroyed in reverse (the listener
// before the server whose handler it calls, the fleet before the store).
struct Daemon::Parts {
  Parts(ServerConfig c, DaemonOptions o, const Clock& clk)
      : clock(clk), config(std::move(c)), options(std::move(o)),
        outcomes(clk.Now(), /*log=*/!options.inproc) {}
  // Run() joins the worker thread; this covers a Daemon never run.
  ~Parts() {
    engine_stop = true;
    if (server) server->StopWaiting();
    if (engine_thread.joinable()) engine_thread.join();
  }

  const Clock& clock;
  const ServerConfig config;
  const DaemonOptions options;
  std::optional<Store> store;
  CurlHttpClient http;
  PosixProcessRunner runner;
  // The push pipeline is one of the duties (below): the loop thread starts
  // and stops it while the listener's threads wake it.
  Mutex pipeline_mu;
  std::unique_ptr<PushPipeline> pipeline GUARDED_BY(pipeline_mu);
  std::unique_ptr<Notifier> notifier;  // server.yaml `notify:` (agent/triggers/notify.h)
  std::unique_ptr<Server> server;
  std::unique_ptr<HttpListener> listener;
  std::unique_ptr<Fleet> fleet;  // not inproc
  // inproc: the Worker on its thread, leasing from `server` in-process.
  std::unique_ptr<InProcLeaseClient> inproc_client;
  std::unique_ptr<Worker> engine;
  std::thread engine_thread;
  std::atomic<bool> engine_stop{false};
  std::atomic<bool> engine_done{false};
  Result<int> engine_result = 0;
  SweepDriver sweeps;
  RetentionStepper retention{config.retention};  // server.yaml `retention:`
  OutcomeLog outcomes;
  LogLimiter repeats{10'000};  // a warning each pass would repeat: once per 10 s
  TimeMs next_fleet_step = 0;
  TimeMs last_pass = 0;
  // What must happen once per store (queue/duty_lock.h): the fleet, the
  // push pipeline (pushes, polls, statuses, comments), the notifier, sweeps,
  // retention. Held by this process (`leader`) or by another replica.
  DutyLock duties{options.db};
  bool leader = false;
  bool want_pipeline = false;
  TimeMs next_duty_try = 0;
  FleetOptions fleet_options;                         // with the instance id
  std::optional<std::vector<FleetPool>> first_pools;  // made and checked at Open

  Status OpenInProcess();
  Status OpenFleet();
  Result<std::vector<FleetPool>> MakePools();
  Status OpenServer();
  Status Listen();
  Status StartEngine(std::string token);
  Status StartNotifier();
  Status StepDuties(TimeMs now, bool first);
  Status TakeDuties(TimeMs now, bool first);
  void DropDuties();
  Status EngineEnded() const;
  void RenewLeasesAfterStall(TimeMs now);
  Status StepQueue(TimeMs now);
  std::optional<Status> IdleExit(TimeMs now);
  void Wait();
  void Shutdown(bool signalled, const Status& result);
};

Daemon::Daemon(std::unique_ptr<Parts> parts) : p_(std::move(parts)) {}
Daemon::~Daemon() = default;

Result<std::unique_ptr<Daemon>> Daemon::Open(ServerConfig config, DaemonOptions options,
                                             const Clock& clock) {
  auto parts = std::make_unique<Parts>(std::move(config), std::move(options), clock);
  ASSIGN_OR_RETURN(auto store, OpenServeStore(parts->options.db));
  parts->store.emplace(std::move(store));
  TRY(parts->options.inproc ? parts->OpenInProcess() : parts->OpenFleet());
  // SQLite: this process holds the duties, and takes them now. PostgreSQL:
  // when another replica holds them, this one serves the worker API,
  // webhooks, reads and the dashboard, and the loop tries every few seconds.
  TRY(parts->StepDuties(clock.Now(), /*first=*/true));
  return std::unique_ptr<Daemon>(new Daemon(std::move(parts)));
}

// server.yaml `notify:` and MLflow: the outbox's sender (one of the duties).
Status Daemon::Parts::StartNotifier() {
  if (config.notify.empty() && !config.MlflowAny()) return {};
  NotifyOptions no;
  no.data_dir = options.data_dir;
  notifier = std::make_unique<Notifier>(options.db, config, http, clock, no);
  TRY(notifier->Start());
  for (const auto& t : config.notify) {
    spdlog::info("notify {}: {} on {}", t.name,
                 t.kind == NotifyTarget::Kind::kSlack ? "Slack webhook from " + t.slack_url.source
                                                      : "webhook " + UrlForLog(t.url),
                 fmt::join(t.on, ", "));
  }
  if (config.mlflow.enabled()) {
    // The token is a secret: only where it was read from.
    spdlog::info("mlflow: exporting finished batches to {} (experiments {}*){}",
                 UrlForLog(config.mlflow.tracking_uri), config.mlflow.experiment_prefix,
                 config.mlflow.token.empty() ? "" : ", token from " + config.mlflow.token.source);
  }
  for (const auto& r : config.repositories) {
    if (!r.mlflow) continue;
    if (!r.mlflow->enabled()) {
      spdlog::info("mlflow: {}: not exported (mlflow: off)", UrlForLog(r.url));
      continue;
    }
    spdlog::info("mlflow: {}: exporting its batches to {} (experiments {}*){}", UrlForLog(r.url),
                 UrlForLog(r.mlflow->tracking_uri), r.mlflow->experiment_prefix,
                 r.mlflow->token.empty() ? "" : ", token from " + r.mlflow->token.source);
  }
  return {};
}

// The one run engine on this process's slots: a Worker (agent/runner/
// worker.h) on a thread, leasing through an in-process LeaseClient from this
// serve's Server, so each call goes through the same server code as a
// worker's over HTTP. It registers as a machine of the `local` pool (a
// hand-started one: stopped when serve ends) and shares serve's data dir:
// worktrees/, runs/<id>/ (work/, process.log, the server's output.log).
// Runs start without a sandbox, as they always did here. The push pipeline
// runs when there is a listener or a watched repository; the listener only
// when asked for.
Status Daemon::Parts::OpenInProcess() {
  TRY(EnsurePoolTokens(*store, config, options.data_dir, clock.Now()));
  const std::string pool = config.pools.empty() || config.FindPool(kDefaultPool)
                               ? kDefaultPool
                               : config.pools.front().name();
  ASSIGN_OR_RETURN(std::string token, PoolToken(config, options.data_dir, pool));
  want_pipeline = options.address || !config.repositories.empty();
  TRY(OpenServer());
  if (options.address) {
    TRY(Listen());
    spdlog::info("listening on http://{}", options.listen);
    spdlog::info("dashboard: {}", server->DashboardUrl(options.listen));
  }
  return StartEngine(std::move(token));
}

Status Daemon::Parts::StartEngine(std::string token) {
  WorkerConfig wc = *options.inproc;
  wc.server = "http://127.0.0.1";  // this host (a one-machine gang's address)
  wc.token = token;
  wc.data_dir = options.data_dir;
  wc.process_log = "process.log";
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  wc.hostname = host;
  wc.pid = static_cast<int>(getpid());
  wc.cpus = static_cast<int>(std::thread::hardware_concurrency());
  wc.lease_wait_ms = options.poll_ms;  // how soon a free slot sees work submitted elsewhere
  wc.ship_ms = 1'000;  // in-process calls cost no round trip: the dashboard follows runs live
  const int slots = wc.slots;
  inproc_client = std::make_unique<InProcLeaseClient>(*server, std::move(token));
  engine = std::make_unique<Worker>(*inproc_client, runner, clock, std::move(wc));
  spdlog::info("serving {} with {} in-process slot(s); run files in {}",
               sql::RedactUrl(options.db), slots,
               options.data_dir);
  engine_thread = std::thread([this] {
    engine_result = engine->Run(engine_stop);
    engine_done = true;
  });
  return {};
}

// The in-process worker ends only on an error: nothing would run the queue.
Status Daemon::Parts::EngineEnded() const {
  if (!engine_done.load()) return {};
  if (!engine_result) return std::unexpected(engine_result.error());
  return Fail(ErrorKind::kUnavailable,
              "the in-process worker ended (exit code " + std::to_string(*engine_result) + ")");
}

// Pool tokens and providers, the push pipeline (unless a one-off
// --until-idle run watches no repository), the server and the fleet. Leases
// that expired while no serve could take a heartbeat (it was down or
// restarting) were not the workers' fault: one more lease to come back, and
// no attempt used if they do not.
Status Daemon::Parts::OpenFleet() {
  TRY(EnsurePoolTokens(*store, config, options.data_dir, clock.Now()));
  fleet_options = options.fleet;
  ASSIGN_OR_RETURN(fleet_options.instance, InstanceId(options.data_dir));
  ASSIGN_OR_RETURN(first_pools, MakePools());
  want_pipeline = !config.repositories.empty() || !options.until_idle;
  TRY(OpenServer());
  TRY(Listen());
  if (!options.address->loopback()) {
    spdlog::warn("listening beyond loopback on {}: webhooks and /healthz answer anyone who can "
                 "reach it (everything that shows runs needs a token)", options.listen);
  }
  spdlog::info("listening on http://{} (webhooks, worker API, /api/v1/status, /metrics)",
               options.listen);
  spdlog::info("dashboard: {}", server->DashboardUrl(options.listen));

  LogOverallBudget(config.budget);
  last_pass = clock.Now();
  return {};
}

// Every kDutyTryMs: a replica without the duties tries to take them; the
// holder checks that the connection holding them lives, and gives them up
// at once when it does not (another replica may have them by then).
constexpr TimeMs kDutyTryMs = 2'000;

Status Daemon::Parts::StepDuties(TimeMs now, bool first) {
  if (now < next_duty_try) return {};
  next_duty_try = now + kDutyTryMs;
  auto held = duties.Hold();
  if (!held || (!*held && leader)) {
    const std::string why = held ? "the duties lock is held elsewhere" : held.error().message;
    if (leader) {
      spdlog::error(
          "duties: lost ({}); this replica stops its fleet, push pipeline, sweeps, "
          "retention and outboxes, and tries again every {}",
          why, FormatDuration(kDutyTryMs));
      DropDuties();
    } else if (int n = 0; repeats.Allow(why, now, &n)) {
      spdlog::warn("duties: {} (will retry){}", why, LogLimiter::HeldBackNote(n));
    }
    return {};
  }
  if (!*held) {
    if (first) {
      spdlog::info(
          "duties: held by another replica; this one answers webhooks, workers, reads "
          "and the dashboard, and tries for them every {}",
          FormatDuration(kDutyTryMs));
    }
    return {};
  }
  if (leader) return {};
  return TakeDuties(now, first);
}

// The duties, in this order: the fleet (it reconciles from the store and the
// providers' listings: machines the previous holder booted are adopted or
// stopped, never booted twice), the push pipeline, the notifier. Sweeps and
// retention run from the loop while `leader`. A failure gives the lock up;
// at start it ends serve, later the loop tries again.
Status Daemon::Parts::TakeDuties(TimeMs now, bool first) {
  if (duties.shared()) {
    spdlog::info("duties: {} (fleet, push pipeline and polling, sweeps, retention, outboxes)",
                 first ? "this replica holds them" : "taken over by this replica");
  }
  leader = true;
  auto st = [&]() -> Status {
    if (!options.inproc) {
      std::vector<FleetPool> pools;
      if (first_pools) {
        pools = std::move(*first_pools);
        first_pools.reset();
      } else {
        ASSIGN_OR_RETURN(pools, MakePools());
      }
      fleet = std::make_unique<Fleet>(*store, clock, std::move(pools), fleet_options);
      for (const auto& p : fleet->pools()) LogPool(p);
      // At a start, leases that expired while no serve took heartbeats were
      // not the workers' fault. (At a takeover other replicas took them.)
      if (first) {
        if (auto n = store->runs().GraceLeases(now, now, options.lease_ms,
                                               "trainq serve was down when it expired");
            n && *n > 0) {
          spdlog::info(
              "{} run(s) whose lease expired while trainq serve was down get {} to "
              "report back",
              *n, FormatDuration(options.lease_ms));
        }
      }
      next_fleet_step = 0;
    }
    if (want_pipeline) {
      ASSIGN_OR_RETURN(auto started,
                       StartPushPipeline(options.db, config, http, clock, options.data_dir));
      MutexLock lock(pipeline_mu);
      pipeline = std::move(started);
    }
    return StartNotifier();
  }();
  if (!st) {
    spdlog::error("duties: could not start them: {}; given up", st.error().message);
    DropDuties();
    duties.Release();
  }
  return st;
}

void Daemon::Parts::DropDuties() {
  leader = false;
  std::unique_ptr<PushPipeline> stopping;
  {
    MutexLock lock(pipeline_mu);
    stopping = std::move(pipeline);
  }
  if (stopping) stopping->Stop();
  if (notifier) notifier->Stop();
  notifier.reset();
  fleet.reset();  // records its boots in flight; its machines are the next holder's
}

// Each pool of the config with its provider (cloud/make_provider.cc).
Result<std::vector<FleetPool>> Daemon::Parts::MakePools() {
  std::vector<FleetPool> pools;
  for (const auto& spec : config.pools) {
    cloud::ProviderDeps deps;
    deps.runner = &runner;
    deps.http = &http;
    deps.clock = &clock;
    deps.state_dir = (fs::path(options.data_dir) / "providers").string();
    auto provider = cloud::MakeProvider(spec.provider, spec.params, deps);
    if (!provider) {
      return Fail(provider.error().kind, (config.path.empty() ? "" : config.path + ": ") +
                                             "pool " + spec.name() + ": " +
                                             provider.error().message);
    }
    pools.push_back({spec, std::move(*provider)});
  }
  return pools;
}

// The server (webhooks, the worker API, read routes, the dashboard), woken
// by each recorded push.
Status Daemon::Parts::OpenServer() {
  ServerOptions so;
  so.data_dir = options.data_dir;
  so.lease_ms = options.lease_ms;
  so.heartbeat_ms = options.heartbeat_ms;
  server = std::make_unique<Server>(config, options.db, clock, so);
  TRY(server->Open());
  // A push recorded here wakes this process's pipeline (the holder of the
  // duties); another replica's finds it at its next pass.
  server->set_on_push([this] {
    MutexLock lock(pipeline_mu);
    if (pipeline) pipeline->Wake();
  });
  return {};
}

// The HTTP listener in front of the server.
Status Daemon::Parts::Listen() {
  // Request bodies come and go in sizes up to 25 MB: glibc would raise its
  // mmap threshold after the first such free and keep later ones in its
  // arenas, so serve's resident memory would grow past the listener's
  // budgets. A fixed threshold gives each large body back when it is done.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  ASSIGN_OR_RETURN(listener,
                   HttpListener::Start(
                       *options.address, kMaxWebhookBodyBytes,
                       [s = server.get()](const HttpServerRequest& r) { return s->Handle(r); },
                       [s = server.get()](const HttpServerRequest& h) { return s->Admit(h); }));
  server->set_listener(listener.get());
  return {};
}

// One pass of the loop, in this order:
//   0. every 2 s, the duties (queue/duty_lock.h): taken when free, given up
//      when their lock's connection failed; steps 2 and 3's fleet, sweeps and
//      retention run only in the process holding them (always on SQLite);
//   1. in-process: the loop ends if the worker thread ended (only an error
//      ends it); with a fleet, leases that expired while this process
//      stalled are renewed: their heartbeats had nobody to take them;
//   2. sweeps queue their next points (off the lease and webhook paths);
//      retention, when due, compacts and archives a bounded number of old
//      finished runs (agent/results/retention.h);
//   3. the queue runs: in-process, leases that expired go back to the queue
//      (a serve killed before this one held them; the worker thread leases
//      and runs on its own); with a fleet, at most every scale interval, one
//      autoscaler step and waiting workers told there may be work; an error
//      that is not retryable ends the loop;
//   4. --until-idle: when nothing is queued, running, due from a push or
//      added by a sweep (or every queued run is one no pool can serve), the
//      fleet's machines are stopped and the loop ends once none is left;
//   5. the run outcomes since the last pass are logged and dead runs counted;
//   6. a wait of poll_ms.
// The push pipeline and the HTTP server run on their own threads meanwhile.
Status Daemon::Run(const std::atomic<bool>& stop) {
  Parts& p = *p_;
  Status result;
  while (!stop.load()) {
    if (result = p.EngineEnded(); !result) break;
    const TimeMs now = p.clock.Now();
    if (auto st = p.StepDuties(now, /*first=*/false); !st) {
      int held = 0;
      if (p.repeats.Allow(st.error().message, now, &held)) {
        spdlog::warn("{} (will retry){}", st.error().message, LogLimiter::HeldBackNote(held));
      }
    }
    p.RenewLeasesAfterStall(now);
    if (p.leader) {
      StepSweepsLogged(p.sweeps, *p.store, now);
      p.retention.StepLogged(*p.store, now);
    }
    if (auto st = p.StepQueue(now); !st) {
      if (!st.error().retryable()) {
        result = st;
        break;
      }
      int held = 0;
      if (p.repeats.Allow(st.error().message, now, &held)) {
        spdlog::warn("{} (will retry){}", st.error().message, LogLimiter::HeldBackNote(held));
      }
    }
    if (p.options.until_idle) {
      if (auto done = p.IdleExit(now)) {
        result = *done;
        break;
      }
    }
    p.outcomes.Step(*p.store);
    p.Wait();
  }
  p.Shutdown(stop.load(), result);
  return result;
}

void Daemon::Parts::RenewLeasesAfterStall(TimeMs now) {
  if (!fleet) return;
  if (now - last_pass > std::max<TimeMs>(options.lease_ms / 2, 5'000)) {
    // This process stalled (stopped, swapped, a slow disk): heartbeats were
    // not taken meanwhile either.
    if (auto n = store->runs().GraceLeases(now, now, options.lease_ms,
                                    "trainq serve stalled for " + FormatDuration(now - last_pass));
        n && *n > 0) {
      spdlog::warn("trainq serve stalled for {}: {} expired lease(s) renewed",
                   FormatDuration(now - last_pass), *n);
    }
  }
  last_pass = now;
}

Status Daemon::Parts::StepQueue(TimeMs now) {
  if (engine) {
    if (!leader) return {};
    ASSIGN_OR_RETURN(int expired, store->runs().ExpireLeases(now));
    if (expired > 0) spdlog::warn("{} run(s) whose lease expired went back to the queue", expired);
    return {};
  }
  if (now < next_fleet_step) return {};
  if (!fleet) {  // another replica holds the duties: workers here still re-check
    server->NotifyWork();
    next_fleet_step = now + options.scale_interval_ms;
    return {};
  }
  auto st = fleet->Step();
  if (!st && !st.error().retryable()) return st;
  server->NotifyWork();
  next_fleet_step = now + options.scale_interval_ms;
  return st;
}

// Set when --until-idle is done: the loop's result.
std::optional<Status> Daemon::Parts::IdleExit(TimeMs now) {
  if (!leader) return std::nullopt;  // the holder of the duties decides
  bool has_pipeline;
  {
    MutexLock lock(pipeline_mu);
    has_pipeline = pipeline != nullptr;
  }
  auto pending_push = store->pushes().NextPushDue();
  const bool no_push_due = !has_pipeline || (pending_push && !*pending_push);
  // Nothing queued, leased, running or waiting for a retry (the in-process
  // worker's runs are leased or running in the store until it reports).
  auto counts = store->runs().CountByState();
  bool drained = counts.has_value();
  if (counts) {
    for (auto s : {RunState::kQueued, RunState::kLeased, RunState::kRunning, RunState::kFailed}) {
      if ((*counts)[static_cast<int>(s)] > 0) drained = false;
    }
  }
  if (engine) {
    if (!drained || !no_push_due || SweepsQueuedMore(*store, now)) return std::nullopt;
    spdlog::info("queue is empty; exiting (--until-idle)");
    outcomes.Step(*store);
    return DeadRunsStatus(outcomes);
  }
  // Queued runs that no pool can serve would wait forever: give up on them.
  std::string stuck;
  if (!drained && counts && no_push_due) stuck = UnservableOnly(*store, *fleet, *counts, now);
  if ((!drained || SweepsQueuedMore(*store, now)) && stuck.empty()) return std::nullopt;
  if (auto st = fleet->StopAll(); !st) return st;
  auto live = fleet->LiveMachines();
  if (!live || *live != 0) return std::nullopt;
  outcomes.Step(*store);
  if (!stuck.empty()) return Fail(ErrorKind::kConflict, stuck + "; exiting (--until-idle)");
  spdlog::info("queue is empty and every machine stopped; exiting (--until-idle)");
  return DeadRunsStatus(outcomes);
}

void Daemon::Parts::Wait() { clock.SleepFor(options.poll_ms); }

void Daemon::Parts::Shutdown(bool signalled, const Status& result) {
  if ((signalled || !result) && fleet) {
    // Local workers are this host's processes: stop them with the daemon,
    // on a signal or when the loop ended on an error (their runs go back to
    // the queue). Cloud machines keep running and
    // reconnect when serve is back; their dead-man switch stops them if it
    // never is.
    server->StopWaiting();  // a worker in a long poll sees its SIGTERM at once
    auto st = fleet->StopAll(/*local_only=*/true);
    if (!st) {
      // The orderly stop failed (a full disk, say): the workers this serve
      // started still get their SIGTERM, and hand their runs back.
      spdlog::warn("stopping local workers: {}; sent SIGTERM to the {} this serve started",
                   st.error().message, StopRegisteredGroups());
    }
  }
  // Lease long polls and the dashboard's event streams answer now, before
  // the listener closes.
  // The in-process worker's waiting lease answers now too; it stops its runs
  // and leaves.
  engine_stop = true;
  if (server) server->StopWaiting();
  if (engine_thread.joinable()) engine_thread.join();
  if (listener) listener->Stop();
  {
    MutexLock lock(pipeline_mu);
    if (pipeline) pipeline->Stop();
  }
  if (notifier) notifier->Stop();  // what it found and did not send yet is sent at the next start
  if (duties.shared() && leader) spdlog::info("duties: released");
  duties.Release();
  spdlog::info("trainq serve stopped ({})", signalled ? "signal"
                                            : result  ? "nothing left to run"
                                                      : "error: " + result.error().message);
}

}  // namespace trainq
