// The client side of the read routes: `trainq report --server` and
// `trainq gate --server` (the server side is agent/daemon/read_api.cc).
#include "agent/cli/read_client.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "agent/cli/credentials.h"
#include "core/clock.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

namespace {

Result<std::string> TokenFrom(const std::string& token_file, const char* env_name,
                              const std::string& what, const std::string& server) {
  if (!token_file.empty()) {
    auto text = ReadFile(token_file);
    if (!text) return std::unexpected(text.error().Wrap("--token-file"));
    std::string t(Trim(*text));
    if (t.empty()) return Fail(ErrorKind::kInvalidArgument, "--token-file " + token_file + " is empty");
    return t;
  }
  const char* env = std::getenv(env_name);
  if (env && !Trim(env).empty()) return std::string(Trim(env));
  // A personal token kept by `trainq login` for this server.
  ASSIGN_OR_RETURN(auto stored, StoredToken(server));
  if (stored) return *stored;
  return Fail(ErrorKind::kInvalidArgument, "--server needs the server's " + what +
                                               ": --token-file FILE, $" + env_name +
                                               ", or a personal token kept by `trainq login "
                                               "--server URL`");
}

}  // namespace

Result<std::string> ReadToken(const std::string& token_file, const std::string& server) {
  return TokenFrom(token_file, "TRAINQ_READ_TOKEN", "read token", server);
}

Result<std::string> ReadAdminToken(const std::string& token_file, const std::string& server) {
  return TokenFrom(token_file, "TRAINQ_ADMIN_TOKEN", "admin token (server.yaml admin_token)",
                   server);
}

ReadClient::ReadClient(std::string server, std::string token)
    : base_(std::move(server)), token_(std::move(token)) {
  while (!base_.empty() && base_.back() == '/') base_.pop_back();
}

Result<std::string> ReadClient::Get(const std::string& path, const QueryParams& query) {
  return Send("GET", path, query, "");
}

Result<std::string> ReadClient::Post(const std::string& path, const json& body) {
  return Send("POST", path, {}, body.dump());
}

Result<std::string> ReadClient::Send(const std::string& method, const std::string& path,
                                     const QueryParams& query, const std::string& body) {
  std::string url = base_ + path;
  char sep = '?';
  for (const auto& [k, v] : query) {
    url += sep + UrlEncode(k) + "=" + UrlEncode(v);
    sep = '&';
  }
  HttpRequest req;
  req.method = method;
  req.url = url;
  req.headers = {{"Authorization", "Bearer " + token_}, {"User-Agent", "trainq"}};
  if (method == "POST") {
    req.headers.emplace_back("Content-Type", "application/json");
    req.body = body;
  }
  req.timeout_ms = 120'000;  // a report over a large store takes a while
  auto resp = http_.Send(req);
  std::string where = "--server " + UrlForLog(base_) + ": " + method + " " + path;
  if (!resp) return std::unexpected(resp.error().Wrap(where));
  if (resp->ok()) return std::move(resp->body);
  std::string reason;
  auto j = json::parse(resp->body, nullptr, false);
  if (j.is_object() && j.contains("reason") && j["reason"].is_string()) {
    reason = j["reason"].get<std::string>();
  }
  std::string msg = where + ": HTTP " + std::to_string(resp->status);
  if (resp->status == 401 && path == "/dash/api/login-link") {
    msg += ": the token was refused (--token-file or $TRAINQ_READ_TOKEN, with --admin "
           "$TRAINQ_ADMIN_TOKEN, must hold the server's read_token or admin_token)";
  } else if (resp->status == 401 && method == "POST") {
    msg += ": the admin token was refused (--token-file or $TRAINQ_ADMIN_TOKEN must hold the "
           "server's admin_token, or `trainq login` keep a personal token of a write role)";
  } else if (resp->status == 401) {
    msg += ": the read token was refused (--token-file or $TRAINQ_READ_TOKEN must hold the "
           "server's read_token, or `trainq login` keep a live personal token)";
  } else if (!reason.empty()) {
    msg += ": " + reason;
  }
  ErrorKind kind = resp->status >= 500 ? ErrorKind::kUnavailable
                   : resp->status == 404 ? ErrorKind::kNotFound
                   : resp->status == 409 ? ErrorKind::kConflict
                                         : ErrorKind::kInvalidArgument;
  return Fail(kind, msg);
}

Result<std::string> ReadClient::Report(const ReportQuery& q) {
  QueryParams query = {{"format", q.format}};
  if (!q.since.empty()) query.emplace_back("since", q.since);
  for (const auto& e : q.experiments) query.emplace_back("experiment", e);
  if (q.limit) query.emplace_back("limit", std::to_string(*q.limit));
  return Get("/api/v1/report", query);
}

Result<RemoteLogChunk> ReadClient::Logs(std::int64_t run, std::optional<int> rank,
                                        std::int64_t offset) {
  QueryParams query = {{"run", std::to_string(run)}, {"offset", std::to_string(offset)}};
  if (rank) query.emplace_back("rank", std::to_string(*rank));
  ASSIGN_OR_RETURN(auto body, Get("/api/v1/logs", query));
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("bytes") || !j["bytes"].is_string() ||
      !j.contains("next_offset") || !j["next_offset"].is_number_integer()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base_) + ": GET /api/v1/logs did not answer a log");
  }
  RemoteLogChunk c;
  c.bytes = j["bytes"].get<std::string>();
  c.next_offset = j["next_offset"].get<std::int64_t>();
  c.run_ended = j.value("run_ended", false);
  if (j.contains("ranks") && j["ranks"].is_array()) {
    for (const auto& k : j["ranks"]) {
      if (k.is_number_integer()) c.ranks.push_back(k.get<int>());
    }
  }
  return c;
}

Result<json> ReadClient::Retry(std::int64_t id, bool batch) {
  ASSIGN_OR_RETURN(auto body, Post("/api/v1/retry", json{{batch ? "batch" : "run", id}}));
  auto j = json::parse(body, nullptr, false);
  bool ok = j.is_object() && j.contains("retried") && j["retried"].is_array();
  for (const auto& d : ok ? j["retried"] : json::array()) {
    ok = ok && d.is_object() && d.contains("run") && d["run"].is_number_integer() &&
         d.contains("was") && d["was"].is_string() && d.contains("attempts") &&
         d["attempts"].is_number_integer() && d.contains("max_attempts") &&
         d["max_attempts"].is_number_integer();
  }
  if (!ok) {
    return Fail(ErrorKind::kInvalidArgument,
                "--server " + UrlForLog(base_) + ": POST /api/v1/retry did not answer what it retried");
  }
  return j;
}

Result<RemoteGate> ReadClient::Gate(const std::string& rev, const std::string& baseline,
                                    const std::string& repo,
                                    const std::vector<std::string>& experiments,
                                    const std::string& correction) {
  QueryParams query = {{"rev", rev}, {"baseline", baseline}};
  if (!correction.empty()) query.emplace_back("correction", correction);
  if (!repo.empty()) query.emplace_back("repo", repo);
  for (const auto& e : experiments) query.emplace_back("experiment", e);
  ASSIGN_OR_RETURN(auto body, Get("/api/v1/gate", query));
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("exit_code") || !j["exit_code"].is_number_integer() ||
      !j.contains("text") || !j["text"].is_string() || !j.contains("finished") ||
      !j["finished"].is_boolean()) {
    return Fail(ErrorKind::kInvalidArgument, "--server " + UrlForLog(base_) +
                                                 ": GET /api/v1/gate did not answer a gate "
                                                 "decision");
  }
  RemoteGate g;
  g.exit_code = j["exit_code"].get<int>();
  g.text = j["text"].get<std::string>();
  g.json = j.value("json", json());
  g.finished = j["finished"].get<bool>();
  return g;
}

Result<int> GateFromServer(const GateOptions& o, std::int64_t wait_ms, bool as_json,
                           std::ostream& out) {
  ASSIGN_OR_RETURN(auto token, ReadToken(o.token_file, o.server));
  ReadClient client(o.server, token);
  // Waited through the Clock, as every loop of trainq's logic is.
  const Clock& clock = SystemClock::Get();
  const TimeMs deadline = clock.Now() + wait_ms;
  for (;;) {
    auto g = client.Gate(o.rev, o.baseline, o.repo, o.experiments, o.correction);
    bool waiting = clock.Now() < deadline;
    if (g && (g->finished || !waiting)) {
      if (as_json) {
        out << g->json.dump(2) << "\n";
      } else {
        out << g->text;
        if (!g->finished && wait_ms > 0) {
          out << "(gave up waiting after " << FormatDuration(wait_ms) << ")\n";
        }
      }
      return g->exit_code;
    }
    // While waiting, a server that does not answer (a restart, a proxy's
    // 502) is asked again; a refusal (401, a bad revision) is final.
    if (!g && (!waiting || (g.error().kind != ErrorKind::kUnavailable &&
                            g.error().kind != ErrorKind::kTimeout))) {
      return std::unexpected(g.error());
    }
    const TimeMs interval =
        std::chrono::duration_cast<std::chrono::milliseconds>(kGatePollInterval).count();
    clock.SleepFor(std::clamp<TimeMs>(deadline - clock.Now(), 0, interval));
  }
}

Result<json> ReadClient::Whoami() {
  ASSIGN_OR_RETURN(auto body, Get("/api/v1/whoami", {}));
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("who") || !j["who"].is_string() || !j.contains("role") ||
      !j["role"].is_string()) {
    return Fail(ErrorKind::kInvalidArgument, "--server " + UrlForLog(base_) +
                                                 ": GET /api/v1/whoami did not answer who (a "
                                                 "trainq serve older than this trainq?)");
  }
  return j;
}

Result<json> ReadClient::Audit(const std::string& since, int limit) {
  QueryParams query = {{"limit", std::to_string(limit)}};
  if (!since.empty()) query.emplace_back("since", since);
  ASSIGN_OR_RETURN(auto body, Get("/api/v1/audit", query));
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("audit") || !j["audit"].is_array()) {
    return Fail(ErrorKind::kInvalidArgument, "--server " + UrlForLog(base_) +
                                                 ": GET /api/v1/audit did not answer an audit "
                                                 "trail");
  }
  return j;
}

Result<json> ReadClient::LoginLink() {
  ASSIGN_OR_RETURN(auto body, Post("/dash/api/login-link", json::object()));
  auto j = json::parse(body, nullptr, false);
  if (!j.is_object() || !j.contains("url") || !j["url"].is_string()) {
    return Fail(ErrorKind::kInvalidArgument, "--server " + UrlForLog(base_) +
                                                 ": POST /dash/api/login-link did not answer a "
                                                 "link (a trainq serve older than this trainq?)");
  }
  return j;
}

}  // namespace trainq
