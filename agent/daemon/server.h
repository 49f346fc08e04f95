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
// Server composes the parts, each its own class with its own fields and
// mutexes, through one route table (Server::Routes, server.cc): WorkerApi
// (agent/daemon/worker_api.h), ReadApi (agent/daemon/read_api.h), the
// Dashboard, and the webhooks, health, status, metrics, retry, whoami and
// audit routes written here. What they share (config, clock, the two store
// connections, who a token names) is a ServerContext
// (agent/daemon/server_context.h).
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
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "agent/daemon/dashboard.h"
#include "agent/daemon/read_api.h"
#include "agent/daemon/server_context.h"
#include "agent/daemon/server_http.h"
#include "agent/daemon/worker_api.h"
#include "agent/triggers/server_config.h"
#include "agent/triggers/webhook.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/thread_annotations.h"

namespace trainq {

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
  static constexpr std::int64_t kMaxMetricPointsPerRun = WorkerApi::kMaxMetricPointsPerRun;
  static constexpr std::int64_t kMaxLogBytesPerAttempt = WorkerApi::kMaxLogBytesPerAttempt;
  // Called after a push was recorded (wakes the worker).
  void set_on_push(std::function<void()> on_push) { on_push_ = std::move(on_push); }

  std::string MetricsText();

  // Work may be leasable (a submit, a push, a completion, a run back in the
  // queue): waiting lease calls look at the store again now.
  void NotifyWork() { worker_api_.NotifyWork(); }
  // Waiting lease calls answer now and new ones do not wait, and the
  // dashboard's event streams end (shutdown).
  void StopWaiting();
  // Lease calls waiting right now.
  int WaitingPolls() { return worker_api_.WaitingPolls(); }
  // The dashboard's one-time sign-in link and how to sign in after it, for
  // the log line at start (Dashboard::StartLine).
  std::string DashboardUrl(const std::string& listen) { return dashboard_->StartLine(listen); }
  const ServerOptions& options() const { return ctx_.options(); }

 private:
  // One row of the route table (Routes()): the first row whose path matches
  // answers the request, and the listener's question before the body (Admit).
  struct Route {
    enum class Match { kExact, kPrefix, kDashboard };  // kDashboard: Dashboard::Owns
    std::string_view path;
    Match match;
    bool get_only;  // other methods get the table's one 405
    HttpServerReply (Server::*handle)(const HttpServerRequest& request, const std::string& path);
    // null: trusted with the read or admin token, a personal token or a
    // dashboard session (AdmitByToken).
    Admission (Server::*admit)(const HttpServerRequest& head, const std::string& path) = nullptr;
  };
  static std::span<const Route> Routes();
  // The first row of Routes() for `path`; null when none.
  static const Route* Find(const std::string& path);

  // The table's handlers.
  HttpServerReply HookRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply WorkerRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply DashboardRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply ReadRoute(const HttpServerRequest& request, const std::string& path);
  // POST /api/v1/retry (agent/results/retry.h RetryRuns): a write role.
  HttpServerReply RetryRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply HealthRoute(const HttpServerRequest& request, const std::string& path);
  // GET /api/v1/whoami (any role) and GET /api/v1/audit (admin).
  HttpServerReply WhoamiRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply AuditRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply StatusRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply MetricsRoute(const HttpServerRequest& request, const std::string& path);
  HttpServerReply NoRoute(const HttpServerRequest& request, const std::string& path);
  // The table's admissions.
  Admission AdmitHook(const HttpServerRequest& head, const std::string& path);
  Admission AdmitAnonymous(const HttpServerRequest& head, const std::string& path);
  Admission AdmitWorker(const HttpServerRequest& head, const std::string& path);
  Admission AdmitByToken(const HttpServerRequest& head, const std::string& path);

  HttpServerReply Webhook(ForgeKind forge, const HttpServerRequest& request);
  Admission AdmitWebhook(ForgeKind forge, const HttpServerRequest& head);
  // /hooks/github -> kGithub ...; kNone for any other path.
  static ForgeKind HookForge(const std::string& path);
  // Status and metrics need the read token: null when the caller may read,
  // else the refusal.
  std::optional<HttpServerReply> RefuseRead(const HttpServerRequest& request,
                                            const std::string& path);

  // Set before the listener starts; read by every thread.
  ServerContext ctx_;
  std::function<void()> on_push_;

  // The parts (thread-safe themselves; declared after the context's stores:
  // they go first).
  WorkerApi worker_api_{ctx_};
  ReadApi read_api_{ctx_};
  std::unique_ptr<Dashboard> dashboard_;
  std::atomic<const HttpListener*> listener_{nullptr};
  LogLimiter unsigned_log_{60'000};  // webhooks refused from their headers

  // The webhooks' per-repository rate limit (webhook_rate_limit), with the writes.
  WebhookLimiter webhook_limiter_ GUARDED_BY(ctx_.write_mu);

  // /metrics: webhook deliveries by (forge, result) since start and how long
  // receive-to-stored took (a histogram, seconds). The worker requests are
  // WorkerApi's.
  Mutex counters_mu_;
  std::map<std::pair<std::string, std::string>, std::int64_t> deliveries_
      GUARDED_BY(counters_mu_);
  static constexpr std::array<double, 10> kBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025,
                                                      0.05,  0.1,    0.25,  0.5,  1.0};
  std::array<std::int64_t, kBuckets.size()> latency_buckets_ GUARDED_BY(counters_mu_){};
  std::int64_t latency_count_ GUARDED_BY(counters_mu_) = 0;
  double latency_sum_ GUARDED_BY(counters_mu_) = 0;
};

}  // namespace trainq
