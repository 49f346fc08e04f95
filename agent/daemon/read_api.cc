#include "agent/daemon/read_api.h"

#include <charconv>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "agent/daemon/server_context.h"
#include "agent/repo/mirror.h"
#include "agent/results/gate.h"
#include "agent/results/report.h"
#include "agent/results/run_logs.h"
#include "agent/triggers/forge.h"
#include "core/http_client.h"
#include "core/strings.h"

using nlohmann::json;

namespace trainq {

namespace {

int CheckBearer(const SecretValue& secret, const HttpHeaders& headers) {
  if (secret.empty()) return 403;
  auto auth = FindHeader(headers, "Authorization");
  if (!auth || !auth->starts_with("Bearer ")) return 401;
  // Hashes of equal length, compared in constant time: neither the content
  // nor the length of the configured token leaks through timing.
  std::string given = Sha256Hex(Trim(auth->substr(7)));
  return ConstantTimeEquals(given, Sha256Hex(secret.value)) ? 0 : 401;
}

}  // namespace

int CheckReadToken(const ServerConfig& config, const HttpHeaders& headers) {
  return CheckBearer(config.read_token, headers);
}

int CheckAdminToken(const ServerConfig& config, const HttpHeaders& headers) {
  return CheckBearer(config.admin_token, headers);
}

namespace {

std::string ShortName(const std::string& url) {
  std::string n = NormaliseRepoUrl(url);
  while (!n.empty() && n.back() == '/') n.pop_back();
  auto slash = n.find_last_of("/:");
  std::string last = slash == std::string::npos ? n : n.substr(slash + 1);
  if (last.ends_with(".git")) last.resize(last.size() - 4);
  return last;
}

}  // namespace

Result<const RepoConfig*> ResolveServerRepo(const ServerConfig& config, const std::string& name) {
  if (name.empty()) {
    if (config.repositories.empty()) return static_cast<const RepoConfig*>(nullptr);
    if (config.repositories.size() == 1) return &config.repositories.front();
    std::string names;
    for (const auto& r : config.repositories) names += (names.empty() ? "" : ", ") + r.url;
    return Fail(ErrorKind::kInvalidArgument,
                "repo: the server watches " + std::to_string(config.repositories.size()) +
                    " repositories; name one (" + names + ")");
  }
  if (const auto* r = config.FindRepo(name)) return r;
  std::vector<const RepoConfig*> found;
  for (const auto& r : config.repositories) {
    if (r.project == name || ShortName(r.url) == name) found.push_back(&r);
  }
  if (found.size() == 1) return found.front();
  if (found.size() > 1) {
    std::string names;
    for (const auto* r : found) names += (names.empty() ? "" : ", ") + r->url;
    return Fail(ErrorKind::kInvalidArgument,
                "repo: '" + name + "' matches several repositories (" + names + "); give the url");
  }
  return Fail(ErrorKind::kNotFound, "repo: '" + name + "' is not a repository this server watches");
}

// ---- ReadApi: the routes ----------------------------------------------------

namespace {

HttpServerReply ReadError(int status, const std::string& reason) {
  return {status, "application/json", json{{"result", "error"}, {"reason", reason}}.dump() + "\n"};
}

int StatusFor(const Error& e) {
  switch (e.kind) {
    case ErrorKind::kInvalidArgument:
      return 400;
    case ErrorKind::kNotFound:
      return 404;
    default:
      return 503;
  }
}

// The query's parameters, checked against the route's names (a typo is a 400,
// not an ignored filter).
Result<std::map<std::string, std::vector<std::string>>> Params(
    const QueryParams& query, const std::set<std::string>& allowed) {
  std::map<std::string, std::vector<std::string>> out;
  for (const auto& [k, v] : query) {
    if (!allowed.count(k)) {
      std::string list;
      for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
      return Fail(ErrorKind::kInvalidArgument,
                  "unknown parameter '" + k + "' (expected " + list + ")");
    }
    out[k].push_back(v);
  }
  return out;
}

std::string One(const std::map<std::string, std::vector<std::string>>& p, const std::string& k,
                std::string fallback = "") {
  auto it = p.find(k);
  return it == p.end() || it->second.empty() ? fallback : it->second.back();
}

const char* ContentType(const std::string& format) {
  if (format == "md") return "text/markdown; charset=utf-8";
  if (format == "html") return "text/html; charset=utf-8";
  if (format == "json" || format == "batches") return "application/json";
  if (format == "csv") return "text/csv; charset=utf-8";
  return "text/plain; charset=utf-8";
}

}  // namespace

// GET /api/v1/logs?run=N[&rank=K][&offset=O]: up to 1 MiB of a run's log
// from O (agent/results/run_logs.h), with where to read next, whether the run
// has ended, and which ranks have logs. The token was checked by Handle.
HttpServerReply ReadApi::Logs(const HttpServerRequest& req) {
  const std::string path = "/api/v1/logs";
  auto params = Params(req.query, {"run", "rank", "offset"});
  if (!params) return ReadError(400, path + ": " + params.error().message);
  auto number = [&](const std::string& key) -> Result<std::optional<std::int64_t>> {
    std::string v = One(*params, key);
    if (v.empty()) return std::optional<std::int64_t>();
    std::int64_t n = -1;
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
    if (ec != std::errc() || end != v.data() + v.size() || n < 0) {
      return Fail(ErrorKind::kInvalidArgument,
                  key + ": expected a non-negative integer, got \"" + v + "\"");
    }
    return std::optional<std::int64_t>(n);
  };
  auto run = number("run");
  auto rank = number("rank");
  auto offset = number("offset");
  for (const auto* r : {&run, &rank, &offset}) {
    if (!*r) return ReadError(400, path + ": " + r->error().message);
  }
  if (!*run) return ReadError(400, path + ": run is required (a run id)");
  StoreOptions so;
  so.create = false;
  auto store = Store::Open(ctx_.db_path(), so);
  if (!store) return ReadError(503, store.error().message);
  std::optional<int> k;
  if (*rank) k = static_cast<int>(**rank);
  auto chunk = ReadRunLog(*store, **run, k, offset->value_or(0), std::int64_t{1} << 20);
  if (!chunk) return ReadError(StatusFor(chunk.error()), path + ": " + chunk.error().message);
  auto files = RunLogFiles(*store, **run);
  json ranks = json::array();
  if (files) {
    for (const auto& f : *files) {
      if (f.rank) ranks.push_back(*f.rank);
    }
  }
  json body = {{"run", **run},
               {"bytes", chunk->bytes},
               {"next_offset", chunk->next_offset},
               {"run_ended", chunk->run_ended},
               {"ranks", ranks}};
  // A log is bytes, not always UTF-8: invalid sequences become U+FFFD.
  return {200, "application/json",
          body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
}

HttpServerReply ReadApi::Handle(const HttpServerRequest& req, const std::string& path) {
  switch (ctx_.ReadAccess(req)) {
    case 0:
      break;
    case 403:
      return ReadError(403, "read routes are off: the server config has no read_token");
    default:
      return ReadError(401, "missing or wrong read token");
  }
  if (path == "/api/v1/logs") return Logs(req);
  bool report = path == "/api/v1/report";
  auto params = report ? Params(req.query, {"format", "since", "experiment", "limit"})
                       : Params(req.query, {"rev", "baseline", "repo", "experiment"});
  if (!params) return ReadError(400, path + ": " + params.error().message);
  StoreOptions so;
  so.create = false;
  // A connection per request: a report over a large store must not hold the
  // lock that /api/v1/status and /healthz share.
  auto store = Store::Open(ctx_.db_path(), so);
  if (!store) return ReadError(503, store.error().message);
  std::vector<std::string> experiments;
  if (auto it = params->find("experiment"); it != params->end()) experiments = it->second;

  if (report) {
    ReportQuery q{One(*params, "since"), experiments, One(*params, "format", "md"), std::nullopt};
    if (std::string limit = One(*params, "limit"); !limit.empty()) {
      auto n = ParseReportLimit(limit);
      if (!n) return ReadError(400, path + ": limit: " + n.error().message);
      q.limit = *n;
    }
    if (auto st = CheckReportExperiments(*store, q.experiments, "experiment", "the server's store");
        !st) {
      return ReadError(StatusFor(st.error()), path + ": " + st.error().message);
    }
    auto bytes = ReportBytes(*store, q, ctx_.clock().Now());
    if (!bytes) return ReadError(StatusFor(bytes.error()), path + ": " + bytes.error().message);
    return {200, ContentType(q.format), std::move(*bytes)};
  }

  GateRequest g;
  g.rev = One(*params, "rev");
  g.baseline = One(*params, "baseline", "main");
  g.experiments = experiments;
  if (auto c = One(*params, "correction"); !c.empty()) {
    auto parsed = stats::ParseCorrection(c);
    if (!parsed) return ReadError(400, path + ": correction: " + parsed.error().message);
    g.correction = *parsed;
  }
  if (g.rev.empty()) return ReadError(400, path + ": rev is required (a commit, branch or tag)");
  auto repo = ResolveServerRepo(ctx_.config(), One(*params, "repo"));
  if (!repo) return ReadError(StatusFor(repo.error()), path + ": " + repo.error().message);
  if (*repo) {
    // Branch names resolve in the repository's mirror; before its first
    // fetch only commit ids do.
    std::string dir = Mirror::PathFor(ctx_.DataDir(), (*repo)->url);
    if (std::filesystem::exists(dir)) {
      g.repo_dir = dir;
      g.mirror_of = !(*repo)->project.empty() ? (*repo)->project : UrlForLog((*repo)->url);
    }
  }
  auto d = DecideGate(*store, g);
  if (!d) return ReadError(StatusFor(d.error()), path + ": " + d.error().message);
  json body = {{"exit_code", d->exit_code},
               {"text", d->text},
               {"json", d->json},
               {"finished", d->finished}};
  return {200, "application/json", body.dump() + "\n"};
}

}  // namespace trainq
