#include "agent/daemon/server.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "agent/daemon/read_api.h"
#include "core/strings.h"
#include "agent/results/retry.h"
#include "agent/results/status.h"
#include "agent/triggers/forge.h"
#include "agent/triggers/webhook.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"

using nlohmann::json;

namespace trainq {

namespace {

HttpServerReply Json(int status, const json& body) {
  return {status, "application/json", body.dump() + "\n"};
}

std::string Label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// /metrics' gauges from the store: runs, pushes and machines by state, and the
// pools' failed boots, spend and budget caps.
void WriteStoreGauges(Store& store, std::ostream& out) {
  auto counts = store.runs().CountByState();
  if (counts) {
    out << "# HELP trainq_runs Runs by state; queued, leased, running and failed are the "
           "queue.\n# TYPE trainq_runs gauge\n";
    for (int i = 0; i < kRunStateCount; ++i) {
      out << "trainq_runs{state=\"" << RunStateName(static_cast<RunState>(i)) << "\"} "
          << (*counts)[i] << "\n";
    }
    out << "# HELP trainq_runs_finished_total Runs that ended, by outcome.\n"
           "# TYPE trainq_runs_finished_total counter\n";
    for (auto s : {RunState::kSucceeded, RunState::kDead, RunState::kCancelled}) {
      out << "trainq_runs_finished_total{outcome=\"" << RunStateName(s) << "\"} "
          << (*counts)[static_cast<int>(s)] << "\n";
    }
  }
  if (auto pushes = store.pushes().CountPushesByState()) {
    out << "# HELP trainq_pushes Pushes recorded (webhooks and polls), by state.\n"
           "# TYPE trainq_pushes gauge\n";
    std::map<std::string, std::int64_t> by_state = {
        {"pending", 0}, {"done", 0}, {"skipped", 0}, {"failed", 0}};
    for (const auto& [s, n] : *pushes) by_state[s] = n;
    for (const auto& [s, n] : by_state) {
      out << "trainq_pushes{state=\"" << Label(s) << "\"} " << n << "\n";
    }
  }
  if (auto machines = store.machines().List(true)) {
    std::map<std::string, std::int64_t> by_state;
    for (const auto& m : *machines) ++by_state[m.state];
    out << "# HELP trainq_machines Machines by state.\n# TYPE trainq_machines gauge\n";
    for (const auto& [s, n] : by_state) {
      out << "trainq_machines{state=\"" << Label(s) << "\"} " << n << "\n";
    }
  }
  if (auto states = store.machines().PoolStates()) {
    out << "# HELP trainq_pool_failed_boots Failed boots in a row (machines that never became a "
           "working worker).\n# TYPE trainq_pool_failed_boots gauge\n";
    for (const auto& s : *states) {
      if (s.pool == "*") continue;
      out << "trainq_pool_failed_boots{pool=\"" << Label(s.pool) << "\"} " << s.failed_boots
          << "\n";
    }
    out << "# HELP trainq_pool_failing 1 while a pool boots nothing after failed boots (until "
           "`trainq pools reset`).\n# TYPE trainq_pool_failing gauge\n";
    for (const auto& s : *states) {
      if (s.pool == "*") continue;
      out << "trainq_pool_failing{pool=\"" << Label(s.pool) << "\"} " << (s.failing ? 1 : 0)
          << "\n";
    }
    out << "# HELP trainq_pool_spend_dollars Billed time x hourly_cost in the current UTC "
           "window, for pools with a budget (pool \"*\": all).\n"
           "# TYPE trainq_pool_spend_dollars gauge\n";
    for (const auto& s : *states) {
      if (s.budget_per_day <= 0 && s.budget_per_month <= 0) continue;
      out << "trainq_pool_spend_dollars{pool=\"" << Label(s.pool) << "\",window=\"day\"} "
          << s.spent_day << "\n"
          << "trainq_pool_spend_dollars{pool=\"" << Label(s.pool) << "\",window=\"month\"} "
          << s.spent_month << "\n";
    }
    out << "# HELP trainq_pool_budget_capped 1 while a budget cap holds a pool's boots back.\n"
           "# TYPE trainq_pool_budget_capped gauge\n";
    for (const auto& s : *states) {
      if (s.budget_per_day <= 0 && s.budget_per_month <= 0) continue;
      out << "trainq_pool_budget_capped{pool=\"" << Label(s.pool) << "\"} "
          << (s.cap.empty() ? 0 : 1) << "\n";
    }
  }
}

}  // namespace

Server::Server(const ServerConfig& config, std::string db_path, const Clock& clock,
               ServerOptions options)
    : ctx_(config, std::move(db_path), clock, std::move(options)) {
  dashboard_ =
      std::make_unique<Dashboard>(ctx_.config(), ctx_.db_path(), ctx_.DataDir(), ctx_.clock());
}

Server::~Server() { StopWaiting(); }

Status Server::Open() { return ctx_.Open(); }

void Server::StopWaiting() {
  worker_api_.StopWaiting();
  if (dashboard_) dashboard_->Stop();  // its event streams answer now
}

std::span<const Server::Route> Server::Routes() {
  using M = Route::Match;
  // In order: the first row whose path matches answers.
  static constexpr Route kRoutes[] = {
      {"/hooks/github", M::kExact, false, &Server::HookRoute, &Server::AdmitHook},
      {"/hooks/gitlab", M::kExact, false, &Server::HookRoute, &Server::AdmitHook},
      {"/hooks/gitea", M::kExact, false, &Server::HookRoute, &Server::AdmitHook},
      {"/hooks/", M::kPrefix, true, &Server::NoRoute, &Server::AdmitAnonymous},
      {"/api/v1/workers/", M::kPrefix, false, &Server::WorkerRoute, &Server::AdmitWorker},
      {"/api/v1/runs/", M::kPrefix, false, &Server::WorkerRoute, &Server::AdmitWorker},
      {"", M::kDashboard, false, &Server::DashboardRoute},
      {"/api/v1/retry", M::kExact, false, &Server::RetryRoute},
      {"/healthz", M::kExact, true, &Server::HealthRoute},
      // What shows runs needs the read token: the status document, the
      // counters (a Prometheus scrape sends it as a bearer token) and the
      // read routes. /healthz shows nothing and stays open.
      {"/api/v1/whoami", M::kExact, true, &Server::WhoamiRoute},
      {"/api/v1/audit", M::kExact, true, &Server::AuditRoute},
      {"/api/v1/status", M::kExact, true, &Server::StatusRoute},
      {"/api/v1/report", M::kExact, true, &Server::ReadRoute},
      {"/api/v1/gate", M::kExact, true, &Server::ReadRoute},
      {"/api/v1/logs", M::kExact, true, &Server::ReadRoute},
      {"/metrics", M::kExact, true, &Server::MetricsRoute},
  };
  return kRoutes;
}

const Server::Route* Server::Find(const std::string& path) {
  for (const Route& r : Routes()) {
    bool match = r.match == Route::Match::kExact    ? path == r.path
                 : r.match == Route::Match::kPrefix ? path.starts_with(r.path)
                                                    : Dashboard::Owns(path);
    if (match) return &r;
  }
  return nullptr;
}

ForgeKind Server::HookForge(const std::string& path) {
  static const std::map<std::string, ForgeKind> kHooks = {{"/hooks/github", ForgeKind::kGithub},
                                                          {"/hooks/gitlab", ForgeKind::kGitlab},
                                                          {"/hooks/gitea", ForgeKind::kGitea}};
  auto it = kHooks.find(path);
  return it == kHooks.end() ? ForgeKind::kNone : it->second;
}

HttpServerReply Server::HealthRoute(const HttpServerRequest&, const std::string&) {
  {
    MutexLock lock(ctx_.read_mu);
    if (!ctx_.read_store || ctx_.read_store->schema_version() < 0) {
      return {503, "text/plain; charset=utf-8", "store unavailable\n"};
    }
  }
  if (const HttpListener* listener = listener_.load()) {
    // Degraded while requests of workers (or token holders) are refused for
    // lack of body memory: machines may be declared lost meanwhile.
    ListenerStats st = listener->Stats();
    if (st.ms_since_trusted_refusal >= 0 && st.ms_since_trusted_refusal < kDegradedForMs) {
      return {503, "text/plain; charset=utf-8",
              "degraded: requests of workers or token holders were refused for lack of "
              "request-body memory " +
                  std::to_string(st.ms_since_trusted_refusal / 1000) + " s ago (" +
                  std::to_string(st.trusted_refusals) + " since start; " +
                  std::to_string(st.trusted_body_bytes >> 20) + " MB of trusted and " +
                  std::to_string(st.anonymous_body_bytes >> 20) +
                  " MB of anonymous bodies held now)\n"};
    }
  }
  return {200, "text/plain; charset=utf-8", "ok\n"};
}

HttpServerReply Server::Handle(const HttpServerRequest& req) {
  std::string path = req.path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const Route* route = Find(path);
  if ((!route || route->get_only) && req.method != "GET" && req.method != "HEAD") {
    return Json(405, {{"result", "error"}, {"reason", req.method + " is not allowed here"}});
  }
  if (!route) return NoRoute(req, path);
  return (this->*route->handle)(req, path);
}

HttpServerReply Server::HookRoute(const HttpServerRequest& req, const std::string& path) {
  if (req.method != "POST") {
    return Json(405, {{"result", "error"}, {"reason", "webhooks are POSTed"}});
  }
  return Webhook(HookForge(path), req);
}

HttpServerReply Server::WorkerRoute(const HttpServerRequest& req, const std::string& path) {
  return worker_api_.Handle(req, path);
}

HttpServerReply Server::DashboardRoute(const HttpServerRequest& req, const std::string& path) {
  return dashboard_->Handle(req, path);
}

HttpServerReply Server::ReadRoute(const HttpServerRequest& req, const std::string& path) {
  return read_api_.Handle(req, path);
}

HttpServerReply Server::NoRoute(const HttpServerRequest&, const std::string& path) {
  return Json(404, {{"result", "error"}, {"reason", "no route " + path}});
}

std::optional<HttpServerReply> Server::RefuseRead(const HttpServerRequest& req,
                                                  const std::string& path) {
  switch (ctx_.ReadAccess(req)) {
    case 0:
      return std::nullopt;
    case 403:
      return Json(403, {{"result", "error"},
                        {"reason", path + " is off: the server config has no read_token"}});
    default:
      return Json(401, {{"result", "error"}, {"reason", "missing or wrong read token"}});
  }
}

HttpServerReply Server::StatusRoute(const HttpServerRequest& req, const std::string& path) {
  if (auto refused = RefuseRead(req, path)) return *refused;
  MutexLock lock(ctx_.read_mu);
  auto j = StatusJson(*ctx_.read_store, ctx_.db_path(), ctx_.clock().Now());
  if (!j) return Json(503, {{"result", "error"}, {"reason", j.error().message}});
  return {200, "application/json", j->dump(2) + "\n"};
}

HttpServerReply Server::MetricsRoute(const HttpServerRequest& req, const std::string& path) {
  if (auto refused = RefuseRead(req, path)) return *refused;
  return {200, "text/plain; version=0.0.4; charset=utf-8", MetricsText()};
}

HttpServerReply Server::RetryRoute(const HttpServerRequest& req, const std::string&) {
  if (req.method != "POST") {
    return Json(405, {{"result", "error"}, {"reason", "/api/v1/retry is POSTed"}});
  }
  Principal who = ctx_.Caller(req, true);
  if (who.role < AccessRole::kWrite) {
    if (who.role == AccessRole::kRead) {
      spdlog::warn("api: {} (read) was refused POST /api/v1/retry", who.who);
      std::string why = "/api/v1/retry needs a write role; " + who.who + " is read";
      if (ctx_.config().admin_token.empty() && !who.person) {
        why += " (and the server config has no admin_token: only a personal token of a write "
               "role retries)";
      }
      return Json(403, {{"result", "error"}, {"reason", why}});
    }
    if (ctx_.config().admin_token.empty() && !who.person && who.refused.empty()) {
      return Json(403, {{"result", "error"},
                        {"reason", "/api/v1/retry is off: the server config has no admin_token "
                                   "and no personal token was given"}});
    }
    spdlog::warn("api: POST /api/v1/retry with a missing or wrong token was refused{}",
                 who.refused.empty() ? "" : " (" + who.refused + ")");
    return Json(401, {{"result", "error"}, {"reason", "missing or wrong read token"}});
  }
  if (req.body_too_large) return Json(413, {{"result", "error"}, {"reason", "body too large"}});
  json body = json::parse(req.body, nullptr, false);
  bool run = body.is_object() && body.contains("run");
  bool batch = body.is_object() && body.contains("batch");
  const char* key = batch ? "batch" : "run";
  if (run == batch || !body[key].is_number_integer() || body[key].get<std::int64_t>() < 1) {
    return Json(400, {{"result", "error"},
                      {"reason", R"(expected a JSON object {"run": ID} or {"batch": ID})"}});
  }
  std::int64_t id = body[key].get<std::int64_t>();
  Result<json> retried;
  {
    MutexLock lock(ctx_.write_mu);
    retried = RetryRuns(*ctx_.write_store, id, batch, ctx_.clock().Now(), who.who);
  }
  if (!retried) {
    int status = retried.error().kind == ErrorKind::kNotFound   ? 404
                 : retried.error().kind == ErrorKind::kConflict ? 409
                                                                : 503;
    return Json(status, {{"result", "error"}, {"reason", retried.error().message}});
  }
  size_t n = (*retried)["retried"].size();
  {
    MutexLock lock(ctx_.write_mu);
    RecordAudit(
        *ctx_.write_store,
        {0, ctx_.clock().Now(), who.who, batch ? "retry_batch" : "retry_run",
         std::string(key) + " " + std::to_string(id), std::to_string(n) + " run(s)", req.peer},
        "api",
        "retried " + std::string(key) + " " + std::to_string(id) + " (" + std::to_string(n) +
            " run(s))");
  }
  if (n > 0) NotifyWork();
  return Json(200, *retried);
}

HttpServerReply Server::WhoamiRoute(const HttpServerRequest& req, const std::string&) {
  if (req.method != "GET") return Json(405, {{"result", "error"}, {"reason", "GET only"}});
  Principal p = ctx_.Caller(req, true);
  if (p.role == AccessRole::kNone) {
    return Json(401, {{"result", "error"},
                      {"reason", p.refused.empty() ? "missing or wrong token" : p.refused}});
  }
  json j = {{"who", p.who}, {"role", RoleName(p.role)}, {"personal", p.person}};
  if (p.token_id) j["token"] = p.token_id;
  if (p.expires_ms) j["expires_ms"] = *p.expires_ms;
  return Json(200, j);
}

HttpServerReply Server::AuditRoute(const HttpServerRequest& req, const std::string&) {
  if (req.method != "GET") return Json(405, {{"result", "error"}, {"reason", "GET only"}});
  Principal p = ctx_.Caller(req, true);
  if (p.role != AccessRole::kAdmin) {
    return Json(p.role == AccessRole::kNone ? 401 : 403,
                {{"result", "error"}, {"reason", "the audit trail is for admins"}});
  }
  TimeMs since = 0;
  int limit = 1000;
  for (const auto& [k, v] : req.query) {
    if (k == "since") {
      auto s = ParseDurationSeconds(v);
      if (!s) return Json(400, {{"result", "error"}, {"reason", "since: " + s.error().message}});
      since = ctx_.clock().Now() - *s * 1000;
    } else if (k == "limit") {
      int n = 0;
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec != std::errc() || end != v.data() + v.size() || n < 1 || n > 100'000) {
        return Json(400, {{"result", "error"}, {"reason", "limit: expected 1 to 100000"}});
      }
      limit = n;
    } else {
      return Json(400, {{"result", "error"},
                        {"reason", "unknown parameter '" + k + "' (expected since, limit)"}});
    }
  }
  Result<std::vector<Access::AuditRow>> rows;
  {
    MutexLock lock(ctx_.read_mu);
    rows = ctx_.read_store->access().AuditSince(since, limit);
  }
  if (!rows) return Json(503, {{"result", "error"}, {"reason", rows.error().message}});
  return Json(200, {{"audit", AuditJson(*rows)}});
}

Admission Server::Admit(const HttpServerRequest& head) {
  std::string path = head.path;
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const Route* route = Find(path);
  if (route && route->admit) return (this->*route->admit)(head, path);
  return AdmitByToken(head, path);
}

Admission Server::AdmitHook(const HttpServerRequest& head, const std::string& path) {
  if (head.method != "POST") return AdmitAnonymous(head, path);
  return AdmitWebhook(HookForge(path), head);
}

Admission Server::AdmitAnonymous(const HttpServerRequest&, const std::string&) {
  return {kMaxOtherBodyBytes, std::nullopt};
}

Admission Server::AdmitWorker(const HttpServerRequest& head, const std::string& path) {
  HttpServerRequest probe = head;
  probe.headers_only = true;
  HttpServerReply r = worker_api_.Handle(probe, path);
  if (r.status != 0) return {0, r};  // no or a wrong token: the body is never read
  // A machine of a pool: never evicted for anonymous traffic, and its body
  // draws from the trusted budget (server_http.h).
  return {kMaxWorkerBodyBytes, std::nullopt, /*trusted=*/true};
}

// The read or admin token, a live personal token, or a dashboard session:
// trusted as well.
Admission Server::AdmitByToken(const HttpServerRequest& head, const std::string&) {
  bool trusted = dashboard_->SignedIn(head);
  if (!trusted) {
    MutexLock lock(ctx_.read_mu);
    trusted = IdentifyBearer(ctx_.config(), ctx_.read_store ? &*ctx_.read_store : nullptr,
                             head.headers, ctx_.clock().Now())
                  .role != AccessRole::kNone;
  }
  return {kMaxOtherBodyBytes, std::nullopt, trusted};
}

// A webhook's headers: signed with a GitLab token that matches, it is
// trusted; with a well-formed GitHub or Gitea signature it is read as an
// anonymous body (the HMAC covers the body); without one that any
// repository's secret could verify, it is refused unread, as the handler
// would refuse it after reading.
Admission Server::AdmitWebhook(ForgeKind forge, const HttpServerRequest& head) {
  WebhookPrecheck best = WebhookPrecheck::kRefused;
  for (const auto& r : ctx_.config().repositories) {
    if (r.forge != forge) continue;
    best = std::max(best, PrecheckWebhook(forge, head.headers, r.secret.value));
  }
  if (best == WebhookPrecheck::kVerified) return {kMaxWebhookBodyBytes, std::nullopt, true};
  if (best == WebhookPrecheck::kNeedsBody) return {kMaxWebhookBodyBytes, std::nullopt, false};
  {
    MutexLock lock(counters_mu_);
    ++deliveries_[{std::string(ForgeName(forge)), "unauthorized"}];
  }
  if (auto skipped = unsigned_log_.Allow(ctx_.clock().Now())) {
    spdlog::warn("{} webhook refused unread: no signature or token that a configured secret "
                 "could verify{}",
                 ForgeName(forge),
                 *skipped ? " (" + std::to_string(*skipped) + " more since the last such line)"
                          : std::string());
  }
  return {0, Json(401, {{"result", "unauthorized"},
                        {"reason", "signature or token missing or wrong for every repository of "
                                   "this forge"}})};
}

HttpServerReply Server::Webhook(ForgeKind forge, const HttpServerRequest& req) {
  auto start = std::chrono::steady_clock::now();
  WebhookReply r;
  if (req.body_too_large) {
    r = {413, R"({"reason":"body over 25 MB","result":"too_large"})", "too_large", 0};
    spdlog::warn("{} webhook refused: body over the 25 MB limit", ForgeName(forge));
  } else {
    MutexLock lock(ctx_.write_mu);
    r = HandleWebhook(ctx_.config(), *ctx_.write_store, forge, req.headers, req.body,
                      ctx_.clock().Now(), &webhook_limiter_);
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  {
    MutexLock lock(counters_mu_);
    ++deliveries_[{std::string(ForgeName(forge)), r.result}];
    if (r.push_id) {
      for (size_t i = 0; i < kBuckets.size(); ++i) {
        if (seconds <= kBuckets[i]) ++latency_buckets_[i];
      }
      ++latency_count_;
      latency_sum_ += seconds;
    }
  }
  if (r.push_id && r.status == 202 && on_push_) on_push_();
  HttpServerReply reply{r.status, "application/json", r.body + "\n"};
  if (r.retry_after_s > 0) reply.headers.emplace_back("Retry-After", std::to_string(r.retry_after_s));
  return reply;
}

std::string Server::MetricsText() {
  std::ostringstream out;
  {
    MutexLock lock(ctx_.read_mu);
    WriteStoreGauges(*ctx_.read_store, out);
  }
  const auto worker_requests = worker_api_.RequestCounts();
  MutexLock lock(counters_mu_);
  out << "# HELP trainq_webhook_deliveries_total Webhook deliveries since start, by forge and "
         "result.\n# TYPE trainq_webhook_deliveries_total counter\n";
  for (const auto& [key, n] : deliveries_) {
    out << "trainq_webhook_deliveries_total{forge=\"" << Label(key.first) << "\",result=\""
        << Label(key.second) << "\"} " << n << "\n";
  }
  out << "# HELP trainq_worker_requests_total Worker protocol requests since start, by route "
         "and HTTP status.\n# TYPE trainq_worker_requests_total counter\n";
  for (const auto& [key, n] : worker_requests) {
    out << "trainq_worker_requests_total{route=\"" << Label(key.first) << "\",status=\""
        << key.second << "\"} " << n << "\n";
  }
  if (const HttpListener* listener = listener_.load()) {
    ListenerStats st = listener->Stats();
    out << "# HELP trainq_http_body_bytes Request bodies received and not yet answered, by "
           "budget.\n# TYPE trainq_http_body_bytes gauge\n"
        << "trainq_http_body_bytes{caller=\"trusted\"} " << st.trusted_body_bytes << "\n"
        << "trainq_http_body_bytes{caller=\"anonymous\"} " << st.anonymous_body_bytes << "\n"
        << "# HELP trainq_http_body_refusals_total Requests answered 503 because their body did "
           "not fit their budget, since start.\n# TYPE trainq_http_body_refusals_total counter\n"
        << "trainq_http_body_refusals_total{caller=\"trusted\"} " << st.trusted_refusals << "\n"
        << "trainq_http_body_refusals_total{caller=\"anonymous\"} " << st.anonymous_refusals
        << "\n"
        << "# HELP trainq_http_anonymous_bodies_cut_total Anonymous bodies closed for falling "
           "behind their pace.\n# TYPE trainq_http_anonymous_bodies_cut_total counter\n"
        << "trainq_http_anonymous_bodies_cut_total " << st.anonymous_cut << "\n";
  }
  out << "# HELP trainq_webhook_receive_to_stored_seconds From a push webhook's arrival to its "
         "durable record.\n# TYPE trainq_webhook_receive_to_stored_seconds histogram\n";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    out << "trainq_webhook_receive_to_stored_seconds_bucket{le=\"" << kBuckets[i] << "\"} "
        << latency_buckets_[i] << "\n";
  }
  out << "trainq_webhook_receive_to_stored_seconds_bucket{le=\"+Inf\"} " << latency_count_ << "\n"
      << "trainq_webhook_receive_to_stored_seconds_sum " << latency_sum_ << "\n"
      << "trainq_webhook_receive_to_stored_seconds_count " << latency_count_ << "\n";
  return out.str();
}

}  // namespace trainq
