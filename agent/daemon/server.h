// The routes of `trainq serve`'s HTTP server, independent of sockets:
//   POST /hooks/github, /hooks/gitlab, /hooks/gitea   webhooks (agent/triggers/webhook.h)
//   GET  /api/v1/status                               what `trainq status --json` prints
//   GET  /healthz                                     200 "ok" while the store answers;
//                                                     503 "degraded: ..." while requests
//                                                     of workers were refused for lack of
//                                                     body memory (the last minute)
//   GET  /metrics                                     Prometheus text format
//   GET  /api/v1/report, /api/v1/gate                 reports and gate decisions for
//                                                     hosted CI (agent/daemon/read_api.h)
//   GET  /api/v1/logs                                 a run's log, for `trainq logs --server`
//   POST /api/v1/retry                                {"run": N} or {"batch": N}: `trainq
//                                                     retry --server` (a write role)
//   GET  /api/v1/whoami                               who the bearer token is (`trainq login`)
//   GET  /api/v1/audit                                the audit trail (`trainq audit --server`,
//                                                     an admin)
//   POST /api/v1/workers/*, /api/v1/runs/*            the worker protocol
//                                                     (agent/daemon/worker_api.h)
//   GET  /, /dash/* and the dashboard's pages          the web dashboard
//                                                     (agent/daemon/dashboard.h)
// Every state-changing route is authenticated (webhooks by signature or
// token, retry by the admin token or a personal token of a write role,
// agent/daemon/access.h), and so are the report and the gate (the read
// token or any personal token); status,
// health and metrics are open, which is why the default listen address is
// loopback only.
// Threading: Handle() is called from the listener's threads at once; the
// server keeps one Store for writes and one for reads, each behind a mutex;
// which mutex guards which field is written beside it (GUARDED_BY, checked
// by clang: core/thread_annotations.h).
// A lease long poll holds its connection's thread while it waits (one thread
// per connection, server_http.cc); at most `max_long_polls` wait at once,
// further lease calls answer at once.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/daemon/access.h"
#include "agent/triggers/server_config.h"
#include "agent/triggers/webhook.h"
#include "agent/daemon/dashboard.h"
#include "agent/daemon/server_http.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/thread_annotations.h"
#include "queue/store.h"

namespace trainq {

struct ServerOptions {
  std::string data_dir;             // runs/<id>/output.log; "" = the database's directory
  TimeMs lease_ms = 60'000;         // a worker's lease, extended by each heartbeat
  TimeMs heartbeat_ms = 10'000;     // told to workers at registration
  TimeMs max_wait_ms = 20'000;      // a lease long poll waits at most this long
  TimeMs recheck_ms = 250;          // ... and re-reads the store this often (submits from
                                    // other processes do not call NotifyWork)
  int max_long_polls = 32;          // lease calls waiting at once; more answer at once
};

class Server {
 public:
  Server(const ServerConfig& config, std::string db_path, const Clock& clock,
         ServerOptions options = {});
  ~Server();  // wakes waiting lease calls
  // Opens the server's own store connections.
  Status Open();
  HttpServerReply Handle(const HttpServerRequest& request);
  // The listener's question with a request's headers, before any body is read
  // (HttpListener::Admit): webhooks may send 25 MB (GitHub's limit) and only
  // with a signature header a configured secret could verify (refused unread
  // otherwise; a matching GitLab token is trusted), the worker API
  // kMaxWorkerBodyBytes and only with a known pool token (refused unread
  // otherwise, trusted), every other route kMaxOtherBodyBytes (trusted with
  // the read or admin token or a dashboard session).
  Admission Admit(const HttpServerRequest& head);
  // The listener in front of this server, whose counters /healthz and
  // /metrics show (null: none). It must outlive its use here: set it back to
  // null, or stop the listener, before destroying it.
  void set_listener(const HttpListener* listener) { listener_.store(listener); }
  // /healthz says degraded this long after a trusted request was refused.
  static constexpr std::int64_t kDegradedForMs = 60'000;
  static constexpr std::size_t kMaxWorkerBodyBytes = 4u << 20;  // a 1 MB log chunk, escaped
  static constexpr std::size_t kMaxOtherBodyBytes = 64u << 10;
  // Per run (log: per attempt): past these, points are refused (413) and log
  // bytes dropped after a "truncated" line.
  static constexpr std::int64_t kMaxMetricPointsPerRun = 100'000;
  static constexpr std::int64_t kMaxLogBytesPerAttempt = std::int64_t{256} << 20;
  // Called after a push was recorded (wakes the worker).
  void set_on_push(std::function<void()> on_push) { on_push_ = std::move(on_push); }

  std::string MetricsText();

  // Work may be leasable (a submit, a push, a completion, a run back in the
  // queue): waiting lease calls look at the store again now.
  void NotifyWork();
  // Waiting lease calls answer now and new ones do not wait (shutdown).
  void StopWaiting();
  // Lease calls waiting right now.
  int WaitingPolls();
  // The dashboard's one-time sign-in link and how to sign in after it, for
  // the log line at start (Dashboard::StartLine).
  std::string DashboardUrl(const std::string& listen) { return dashboard_->StartLine(listen); }
  const ServerOptions& options() const { return options_; }

 private:
  HttpServerReply Webhook(ForgeKind forge, const HttpServerRequest& request);
  Admission AdmitWebhook(ForgeKind forge, const HttpServerRequest& head);
  HttpServerReply Health();
  // /hooks/github -> kGithub ...; kNone for any other path.
  static ForgeKind HookForge(const std::string& path);
  // GET /api/v1/report and /api/v1/gate (agent/daemon/read_api.cc).
  HttpServerReply ReadRoute(const HttpServerRequest& request, const std::string& path);
  // GET /api/v1/logs (agent/daemon/read_api.cc), after ReadRoute's token check.
  HttpServerReply LogsRoute(const HttpServerRequest& request);
  // POST /api/v1/retry (agent/results/retry.h RetryRuns): a write role.
  HttpServerReply RetryRoute(const HttpServerRequest& request);
  // Who the bearer token names (agent/daemon/access.h): the shared tokens or a
  // personal token (read from the store; `touch` records its use).
  Principal Caller(const HttpServerRequest& request, bool touch);
  // 0 when the caller may read; else 401 (no or a refused token, logged) or
  // 403 (no read token configured and no personal token given).
  int ReadAccess(const HttpServerRequest& request);
  // GET /api/v1/whoami (any role) and GET /api/v1/audit (admin).
  HttpServerReply WhoamiRoute(const HttpServerRequest& request);
  HttpServerReply AuditRoute(const HttpServerRequest& request);

  // The worker protocol (agent/daemon/worker_api.cc).
  HttpServerReply WorkerRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply WorkerRouteInner(const HttpServerRequest& request, const std::string& path,
                                   std::string& route);
  HttpServerReply Register(const std::string& pool, const HttpServerRequest& request);
  HttpServerReply LeaseRoute(const std::string& pool, std::int64_t machine,
                             const HttpServerRequest& request);
  // POST /api/v1/runs/{id}/{what}: checks the token and that the run is
  // leased to a machine of the caller's pool, then calls RunRoutes()[what].
  HttpServerReply RunRoute(const std::string& pool, std::int64_t run_id, const std::string& what,
                           const HttpServerRequest& request);
  struct RunCall {
    std::int64_t run_id;
    std::int64_t token;
    std::int64_t machine;  // the machine the run is leased to (the caller's)
    TimeMs now;
    nlohmann::json body;   // null for `log`, whose body is the log bytes
    const HttpServerRequest& req;
  };
  using RunHandler = HttpServerReply (Server::*)(RunCall&);
  static const std::map<std::string, RunHandler, std::less<>>& RunRoutes();
  HttpServerReply HeartbeatRoute(RunCall& call);
  HttpServerReply MetricsRoute(RunCall& call);
  HttpServerReply CompleteRoute(RunCall& call);
  HttpServerReply LogRoute(RunCall& call);
  HttpServerReply RunSourceRoute(RunCall& call);
  HttpServerReply GangRoute(const std::string& pool, std::int64_t run_id,
                            const HttpServerRequest& request);
  HttpServerReply AppendLog(std::int64_t run_id, std::int64_t token,
                            const HttpServerRequest& request);
  std::string DataDir() const;

  HttpServerReply SourceRoute(std::int64_t run_id);
  HttpServerReply LeaveRoute(const std::string& pool, std::int64_t machine);

  // Set before the listener starts; read by every thread.
  const ServerConfig& config_;
  std::string db_path_;
  const Clock& clock_;
  ServerOptions options_;
  std::function<void()> on_push_;

  // Every write to the store, and the webhooks' per-repository rate limit.
  Mutex write_mu_;
  std::optional<Store> write_store_ GUARDED_BY(write_mu_);
  WebhookLimiter webhook_limiter_ GUARDED_BY(write_mu_);  // per-repository webhook_rate_limit

  // The reads of the routes that only read (tokens, report, gate, logs).
  Mutex read_mu_;
  std::optional<Store> read_store_ GUARDED_BY(read_mu_);

  // Thread-safe themselves (declared after the stores: the dashboard goes first).
  std::unique_ptr<Dashboard> dashboard_;
  std::atomic<const HttpListener*> listener_{nullptr};
  LogLimiter unsigned_log_{60'000};  // webhooks refused from their headers
  LogLimiter refused_token_log_{60'000};  // personal tokens refused (revoked, expired)

  // Lease long polls wait on work_cv_; work_generation_ counts NotifyWork() calls.
  Mutex work_mu_;
  std::condition_variable work_cv_;
  std::uint64_t work_generation_ GUARDED_BY(work_mu_) = 0;
  int waiting_polls_ GUARDED_BY(work_mu_) = 0;
  bool stop_waiting_ GUARDED_BY(work_mu_) = false;

  // Appends to run logs (the files under data_dir; no fields).
  Mutex log_mu_;

  // The last packfile served (repo dir + sha -> pack): the runs of one batch
  // on several machines ask for the same commit.
  Mutex pack_mu_;
  std::string pack_key_ GUARDED_BY(pack_mu_);
  std::string pack_ GUARDED_BY(pack_mu_);

  // /metrics: webhook deliveries by (forge, result) since start, how long
  // receive-to-stored took (a histogram, seconds), worker requests by
  // (route, status).
  Mutex counters_mu_;
  std::map<std::pair<std::string, std::string>, std::int64_t> deliveries_
      GUARDED_BY(counters_mu_);
  static constexpr std::array<double, 10> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,  0.1,    0.25,  0.5,  1.0};
  std::array<std::int64_t, kBuckets.size()> latency_buckets_ GUARDED_BY(counters_mu_){};
  std::int64_t latency_count_ GUARDED_BY(counters_mu_) = 0;
  double latency_sum_ GUARDED_BY(counters_mu_) = 0;
  std::map<std::pair<std::string, int>, std::int64_t> worker_requests_
      GUARDED_BY(counters_mu_);  // (route, status)
};

}  // namespace trainq
