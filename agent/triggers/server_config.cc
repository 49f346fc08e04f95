#include "agent/triggers/server_config.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/repo/change_detect.h"
#include "agent/triggers/database_config.h"
#include "cloud/provider.h"
#include "core/http_client.h"
#include "core/process.h"
#include "core/strings.h"
#include "core/yaml_reader.h"
#include "queue/sqlite.h"  // IsPostgresUrl, RedactUrl

namespace fs = std::filesystem;

namespace trainq {

namespace {

// A YAML value as JSON; scalars stay strings (the reader of the JSON
// converts what it needs).
nlohmann::json YamlToJson(const YAML::Node& n) {
  if (n.IsMap()) {
    nlohmann::json j = nlohmann::json::object();
    for (const auto& kv : n) j[kv.first.Scalar()] = YamlToJson(kv.second);
    return j;
  }
  if (n.IsSequence()) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& item : n) j.push_back(YamlToJson(item));
    return j;
  }
  if (n.IsScalar()) return n.Scalar();
  return nullptr;
}

// The server.yaml reader: the shared YAML layer (core/yaml_reader.h) plus
// what only server.yaml reads.
class ConfigParser : public YamlReader {
 public:
  using YamlReader::YamlReader;

  // server.yaml's strings are names, urls and paths: never empty.
  Result<std::string> Str(const YAML::Node& n, const std::string& path) const {
    return NonEmptyStr(n, path);
  }

  Result<RepoConfig> Repo(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) return Err(n, path, "expected a mapping, got " + Show(n));
    TRY(CheckKeys(n, path,
                  {"url", "forge", "project", "branches", "default_branch", "secret", "token",
                   "username", "ssh_key", "api_url", "status", "status_context", "poll_interval",
                   "per_commit", "tags", "fail_on", "limits", "pull_requests",
                   "fork_pull_requests", "pr_comments", "report_url", "webhook_rate_limit",
                   "coalesce", "catch_up", "mlflow"}));
    RepoConfig r;
    r.line = n.Mark().line + 1;
    if (!n["url"]) return Err(n, path + ".url", "missing (the repository to fetch)");
    ASSIGN_OR_RETURN(r.url, Str(n["url"], path + ".url"));
    if (auto f = n["forge"]) {
      ASSIGN_OR_RETURN(auto name, Str(f, path + ".forge"));
      auto kind = ParseForgeKind(name);
      if (!kind) return Err(f, path + ".forge", "expected github, gitlab, gitea or none, got " +
                                                    Show(f));
      r.forge = *kind;
    }
    if (auto p = n["project"]) { ASSIGN_OR_RETURN(r.project, Str(p, path + ".project")); }
    if (r.project.empty()) r.project = ProjectFromUrl(r.url);
    if (auto b = n["branches"]) { ASSIGN_OR_RETURN(r.branches, StrList(b, path + ".branches")); }
    if (r.branches.empty()) r.branches = {"**"};
    if (auto d = n["default_branch"]) {
      ASSIGN_OR_RETURN(r.default_branch, Str(d, path + ".default_branch"));
    }
    if (auto s = n["secret"]) { ASSIGN_OR_RETURN(r.secret, Secret(s, path + ".secret")); }
    if (auto t = n["token"]) { ASSIGN_OR_RETURN(r.token, Secret(t, path + ".token")); }
    if (auto u = n["username"]) { ASSIGN_OR_RETURN(r.username, Str(u, path + ".username")); }
    if (r.username.empty()) {
      r.username = r.forge == ForgeKind::kGitlab ? "oauth2" : "x-access-token";
    }
    if (auto k = n["ssh_key"]) { ASSIGN_OR_RETURN(r.ssh_key, Str(k, path + ".ssh_key")); }
    if (auto a = n["api_url"]) { ASSIGN_OR_RETURN(r.api_url, Str(a, path + ".api_url")); }
    if (r.api_url.empty()) r.api_url = DefaultApiUrl(r.forge, r.url);
    if (auto s = n["status"]) { ASSIGN_OR_RETURN(r.status, Bool(s, path + ".status")); }
    if (auto c = n["status_context"]) {
      ASSIGN_OR_RETURN(r.status_context, Str(c, path + ".status_context"));
    }
    if (auto p = n["poll_interval"]) {
      if (!p.IsScalar()) return Err(p, path + ".poll_interval", "expected a duration such as "
                                                                "30s or 5m, got " + Show(p));
      if (p.Scalar() == "0" || p.Scalar() == "off") {
        r.poll_interval_s = 0;
      } else {
        auto d = ParseDurationSeconds(p.Scalar());
        if (!d) return Err(p, path + ".poll_interval", d.error().message);
        r.poll_interval_s = *d;
      }
    }
    if (auto c = n["catch_up"]) {
      if (!c.IsScalar()) return Err(c, path + ".catch_up", "expected a duration such as "
                                                           "5m, or off, got " + Show(c));
      if (c.Scalar() == "0" || c.Scalar() == "off") {
        r.catch_up_s = 0;
      } else {
        auto d = ParseDurationSeconds(c.Scalar());
        if (!d) return Err(c, path + ".catch_up", d.error().message);
        r.catch_up_s = *d;
      }
    }
    if (auto c = n["per_commit"]) { ASSIGN_OR_RETURN(r.per_commit, Bool(c, path + ".per_commit")); }
    if (auto t = n["tags"]) { ASSIGN_OR_RETURN(r.tags, Bool(t, path + ".tags")); }
    if (auto f = n["fail_on"]) {
      ASSIGN_OR_RETURN(r.fail_on, Str(f, path + ".fail_on"));
      if (r.fail_on != "worse" && r.fail_on != "not_better" && r.fail_on != "never") {
        return Err(f, path + ".fail_on", "expected worse, not_better or never, got \"" +
                                             r.fail_on + "\"");
      }
    }
    if (auto l = n["limits"]) {
      const std::string lp = path + ".limits";
      if (!l.IsMap()) return Err(l, lp, "expected {experiments: N, runs: N}, got " + Show(l));
      TRY(CheckKeys(l, lp, {"experiments", "runs"}));
      if (auto e = l["experiments"]) {
        ASSIGN_OR_RETURN(auto v, Int(e, lp + ".experiments", 1));
        r.limits.max_experiments = static_cast<int>(std::min<std::int64_t>(v, 1'000'000));
      }
      if (auto e = l["runs"]) { ASSIGN_OR_RETURN(r.limits.max_runs, Int(e, lp + ".runs", 1)); }
    }
    if (auto p = n["pull_requests"]) {
      ASSIGN_OR_RETURN(r.pull_requests, Bool(p, path + ".pull_requests"));
    }
    if (auto p = n["fork_pull_requests"]) {
      ASSIGN_OR_RETURN(r.fork_pull_requests, Bool(p, path + ".fork_pull_requests"));
    }
    r.pr_comments = r.status;
    if (auto p = n["pr_comments"]) { ASSIGN_OR_RETURN(r.pr_comments, Bool(p, path + ".pr_comments")); }
    if (auto u = n["report_url"]) { ASSIGN_OR_RETURN(r.report_url, Str(u, path + ".report_url")); }
    if (auto m = n["mlflow"]) {
      if (m.IsScalar() && m.Scalar() == "off") {
        r.mlflow = MlflowConfig{};  // no tracking_uri: this repository's batches stay here
        r.mlflow->line = m.Mark().line + 1;
      } else {
        ASSIGN_OR_RETURN(r.mlflow, ParseMlflowConfig(*this, m, path + ".mlflow"));
      }
    }
    if (auto w = n["webhook_rate_limit"]) {
      ASSIGN_OR_RETURN(auto v, Int(w, path + ".webhook_rate_limit", 0));
      r.webhook_rate_limit = static_cast<int>(std::min<std::int64_t>(v, 1'000'000));
    }
    if (auto c = n["coalesce"]) {
      ASSIGN_OR_RETURN(auto v, Str(c, path + ".coalesce"));
      if (v == "branches") {
        r.coalesce = RepoConfig::Coalesce::kBranches;
      } else if (v == "all") {
        r.coalesce = RepoConfig::Coalesce::kAll;
      } else if (v == "off") {
        r.coalesce = RepoConfig::Coalesce::kOff;
      } else {
        return Err(c, path + ".coalesce", "expected branches, all or off, got \"" + v + "\"");
      }
    }
    if (r.fork_pull_requests && !r.pull_requests) {
      return Err(n["fork_pull_requests"], path + ".fork_pull_requests",
                 "needs `pull_requests: true` (forks are pull requests too)");
    }

    if (r.pr_comments && n["pr_comments"]) {
      const YAML::Node& at = n["pr_comments"];
      if (r.forge == ForgeKind::kNone) {
        return Err(at, path + ".pr_comments", "needs `forge` (github, gitlab or gitea)");
      }
      if (r.token.empty()) {
        return Err(at, path + ".pr_comments", "needs `token` for the forge's API");
      }
      if (r.api_url.empty()) {
        return Err(at, path + ".pr_comments", "needs `api_url` (cannot tell it from the url)");
      }
      if (r.project.empty()) {
        return Err(at, path + ".pr_comments",
                   "needs `project` (owner/name; cannot tell it from the url)");
      }
    }
    if (r.status) {
      const YAML::Node& at = n["status"];
      if (r.forge == ForgeKind::kNone) {
        return Err(at, path + ".status", "needs `forge` (github, gitlab or gitea)");
      }
      if (r.token.empty()) return Err(at, path + ".status", "needs `token` for the forge's API");
      if (r.api_url.empty()) {
        return Err(at, path + ".status", "needs `api_url` (cannot tell it from the url)");
      }
      if (r.project.empty()) {
        return Err(at, path + ".status", "needs `project` (owner/name; cannot tell it from the url)");
      }
    }
    if (!r.secret.empty() && r.forge == ForgeKind::kNone) {
      return Err(n["secret"], path + ".secret",
                 "webhooks need `forge` (github, gitlab or gitea) to know the signature format");
    }
    return r;
  }

  Result<std::int64_t> Int(const YAML::Node& n, const std::string& path, std::int64_t min) const {
    std::string what = "a whole number >= " + std::to_string(min);
    return YamlReader::Int(n, path, min, what.c_str());
  }

  Result<std::int64_t> DurationMs(const YAML::Node& n, const std::string& path) const {
    ASSIGN_OR_RETURN(auto s, DurationSeconds(n, path));
    return s * 1000;
  }

  Result<std::int64_t> ZeroOrDurationMs(const YAML::Node& n, const std::string& path) const {
    if (n.IsScalar() && (n.Scalar() == "0" || n.Scalar() == "off")) return 0;
    return DurationMs(n, path);
  }

  Result<double> Money(const YAML::Node& n, const std::string& path) const {
    if (n.IsScalar()) {
      try {
        size_t used = 0;
        double x = std::stod(n.Scalar(), &used);
        if (used == n.Scalar().size() && x > 0 && x < 1e12) return x;
      } catch (...) {
      }
    }
    return Err(n, path, "expected an amount above 0, got " + Show(n));
  }

  // {metric_points: 90d, logs: 30d, audit: 400d, points_kept: 200}
  Result<RetentionPolicy> Retention(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) {
      return Err(n, path,
                 "expected {metric_points: DURATION, logs: DURATION, audit: DURATION, "
                 "points_kept: N}, got " +
                     Show(n));
    }
    TRY(CheckKeys(n, path, {"metric_points", "logs", "audit", "points_kept"}));
    RetentionPolicy r;
    if (auto v = n["metric_points"]) {
      ASSIGN_OR_RETURN(r.metric_points_ms, ZeroOrDurationMs(v, path + ".metric_points"));
    }
    if (auto v = n["logs"]) { ASSIGN_OR_RETURN(r.logs_ms, ZeroOrDurationMs(v, path + ".logs")); }
    if (auto v = n["audit"]) {
      ASSIGN_OR_RETURN(r.audit_ms, ZeroOrDurationMs(v, path + ".audit"));
    }
    if (auto v = n["points_kept"]) {
      ASSIGN_OR_RETURN(auto k, Int(v, path + ".points_kept", 2));
      if (k > 100'000) return Err(v, path + ".points_kept", "at most 100000, got " + Show(v));
      r.points_kept = static_cast<int>(k);
    }
    return r;
  }

  // admins, writers, viewers of the map `n`.
  Result<RoleLists> Lists(const YAML::Node& n, const std::string& path) const {
    RoleLists l;
    if (auto v = n["admins"]) { ASSIGN_OR_RETURN(l.admins, StrList(v, path + ".admins")); }
    if (auto v = n["writers"]) { ASSIGN_OR_RETURN(l.writers, StrList(v, path + ".writers")); }
    if (auto v = n["viewers"]) {
      ASSIGN_OR_RETURN(l.viewers, StrList(v, path + ".viewers"));
      l.viewers_given = true;
    }
    return l;
  }

  // {client_id, client_secret, web_url, api_url} of one forge; `f` holds the
  // forge's defaults.
  Status Forge(const YAML::Node& g, const std::string& gp, ForgeAuthConfig* f) const {
    if (!g.IsMap()) {
      return Err(g, gp, "expected {client_id: ID, client_secret: {file: PATH}, web_url: URL, "
                        "api_url: URL}, got " + Show(g));
    }
    TRY(CheckKeys(g, gp, {"client_id", "client_secret", "web_url", "api_url"}));
    if (!g["client_id"]) return Err(g, gp, "client_id: the OAuth app's client ID is required");
    ASSIGN_OR_RETURN(f->client_id, NonEmptyStr(g["client_id"], gp + ".client_id"));
    if (!g["client_secret"]) {
      return Err(g, gp, "client_secret: the OAuth app's client secret is required, as "
                        "{file: PATH} or {env: NAME}");
    }
    ASSIGN_OR_RETURN(f->client_secret, Secret(g["client_secret"], gp + ".client_secret"));
    bool api_given = false;
    for (const char* k : {"web_url", "api_url"}) {
      if (!g[k]) continue;
      ASSIGN_OR_RETURN(std::string u, NonEmptyStr(g[k], gp + "." + k));
      if (!u.starts_with("https://") && !u.starts_with("http://")) {
        return Err(g[k], gp + "." + k, "expected an http(s) URL, got " + Show(g[k]));
      }
      while (u.ends_with("/")) u.pop_back();
      (std::string(k) == "web_url" ? f->web_url : f->api_url) = u;
      api_given = api_given || std::string(k) == "api_url";
    }
    if (f->web_url.empty()) {
      return Err(g, gp, "web_url: the forge's address is required (e.g. https://gitea.example)");
    }
    // A self-hosted GitLab or Gitea: its API is under its own address.
    if (!api_given && f->kind == ForgeKind::kGitlab) f->api_url = f->web_url + "/api/v4";
    if (!api_given && f->kind == ForgeKind::kGitea) f->api_url = f->web_url + "/api/v1";
    return {};
  }

  // {issuer, client_id, client_secret, scopes, label, admins, writers, viewers}
  Result<OidcAuthConfig> Oidc(const YAML::Node& o, const std::string& op) const {
    if (!o.IsMap()) {
      return Err(o, op, "expected {issuer: URL, client_id: ID, client_secret: {file: PATH}, "
                        "admins: [...]}, got " + Show(o));
    }
    TRY(CheckKeys(o, op, {"issuer", "client_id", "client_secret", "scopes", "label", "admins",
                          "writers", "viewers"}));
    OidcAuthConfig c;
    if (!o["issuer"]) return Err(o, op, "issuer: the identity provider's issuer URL is required");
    ASSIGN_OR_RETURN(c.issuer, NonEmptyStr(o["issuer"], op + ".issuer"));
    // Plain http only to this host (a test stand-in): discovery and the keys
    // that check every ID token must not travel where they can be changed.
    const bool https = c.issuer.starts_with("https://");
    if (!https && !c.issuer.starts_with("http://")) {
      return Err(o["issuer"], op + ".issuer", "expected an https URL, got " + Show(o["issuer"]));
    }
    if (!https) {
      auto host = UrlHost(c.issuer);
      if (!host || HostReachableFromElsewhere(*host)) {
        return Err(o["issuer"], op + ".issuer",
                   "expected an https URL (plain http only to this host), got " + Show(o["issuer"]));
      }
    }
    while (c.issuer.ends_with("/")) c.issuer.pop_back();
    if (!o["client_id"]) return Err(o, op, "client_id: the client ID registered at the issuer is required");
    ASSIGN_OR_RETURN(c.client_id, NonEmptyStr(o["client_id"], op + ".client_id"));
    if (!o["client_secret"]) {
      return Err(o, op, "client_secret: the client secret is required, as {file: PATH} or "
                        "{env: NAME}");
    }
    ASSIGN_OR_RETURN(c.client_secret, Secret(o["client_secret"], op + ".client_secret"));
    if (auto v = o["scopes"]) {
      ASSIGN_OR_RETURN(c.scopes, StrList(v, op + ".scopes"));
      if (std::find(c.scopes.begin(), c.scopes.end(), "openid") == c.scopes.end()) {
        return Err(v, op + ".scopes", "must include openid (without it there is no ID token)");
      }
    }
    if (auto v = o["label"]) { ASSIGN_OR_RETURN(c.label, NonEmptyStr(v, op + ".label")); }
    ASSIGN_OR_RETURN(c.roles, Lists(o, op));
    c.roles_given = o["admins"] || o["writers"] || o["viewers"];
    return c;
  }

  // {trusted_header: {user, groups, from}, admins, writers, viewers}
  Result<AuthConfig> Auth(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) {
      return Err(n, path, "expected {github: {...}, oidc: {...}, trusted_header: {...}, admins: "
                          "[...], writers: [...], viewers: [...]}, got " + Show(n));
    }
    TRY(CheckKeys(n, path, {"trusted_header", "github", "gitlab", "gitea", "oidc", "admins",
                            "writers", "viewers"}));
    AuthConfig a;
    if (auto o = n["oidc"]) { ASSIGN_OR_RETURN(a.oidc, Oidc(o, path + ".oidc")); }
    for (ForgeAuthConfig* f : {&a.github, &a.gitlab, &a.gitea}) {
      const std::string name(ForgeName(f->kind));
      if (auto g = n[name]) { TRY(Forge(g, path + "." + name, f)); }
    }
    ASSIGN_OR_RETURN(static_cast<RoleLists&>(a), Lists(n, path));
    if (auto t = n["trusted_header"]) {
      std::string tp = path + ".trusted_header";
      if (!t.IsMap()) {
        return Err(t, tp, "expected {user: HEADER, groups: HEADER, from: [CIDR, ...]}, got " +
                              Show(t));
      }
      TRY(CheckKeys(t, tp, {"user", "groups", "from"}));
      if (!t["user"]) return Err(t, tp, "user: the header that names the user is required");
      ASSIGN_OR_RETURN(a.user_header, NonEmptyStr(t["user"], tp + ".user"));
      if (auto g = t["groups"]) { ASSIGN_OR_RETURN(a.groups_header, NonEmptyStr(g, tp + ".groups")); }
      if (!t["from"]) {
        return Err(t, tp, "from: the proxy's addresses are required (the header is honoured "
                          "from them only), e.g. [127.0.0.1/32]");
      }
      ASSIGN_OR_RETURN(a.from_text, StrList(t["from"], tp + ".from"));
      if (a.from_text.empty()) return Err(t["from"], tp + ".from", "give at least one address");
      for (size_t i = 0; i < a.from_text.size(); ++i) {
        auto c = ParseCidr(a.from_text[i]);
        if (!c) {
          return Err(t["from"][i], tp + ".from",
                     "expected an address or range such as 127.0.0.1/32 or fd00::/8, got \"" +
                         a.from_text[i] + "\"");
        }
        a.from.push_back(*c);
      }
    }
    return a;
  }

  // {per_day: 50, per_month: 800, drain_at_cap: true}
  Result<cloud::OverallBudget> Budget(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) {
      return Err(n, path, "expected {per_day: AMOUNT, per_month: AMOUNT, drain_at_cap: BOOL}, "
                          "got " + Show(n));
    }
    TRY(CheckKeys(n, path, {"per_day", "per_month", "drain_at_cap"}));
    cloud::OverallBudget b;
    if (auto v = n["per_day"]) { ASSIGN_OR_RETURN(b.per_day, Money(v, path + ".per_day")); }
    if (auto v = n["per_month"]) { ASSIGN_OR_RETURN(b.per_month, Money(v, path + ".per_month")); }
    if (auto v = n["drain_at_cap"]) {
      ASSIGN_OR_RETURN(b.drain_at_cap, Bool(v, path + ".drain_at_cap"));
    }
    if (b.per_day <= 0 && b.per_month <= 0) {
      return Err(n, path, "give per_day or per_month (or both)");
    }
    return b;
  }

  // A pool's entry, read in named steps. The steps read the keys in the order
  // the checks always ran, so the first bad key is still the one reported.
  Result<PoolSpec> Pool(const YAML::Node& n, const std::string& path) const {
    if (!n.IsMap()) return Err(n, path, "expected a mapping, got " + Show(n));
    TRY(CheckKeys(n, path,
                  {"name", "provider", "min", "max", "slots", "gpus", "runs_per_gpu", "fuse_max",
                   "idle_grace", "boot_timeout", "lost_after", "orphan_timeout", "self_stop",
                   "hourly_cost",
                   "token", "params", "env_passthrough", "allow_loopback", "failing_after",
                   "min_bill", "budget", "list_interval", "list_interval_idle", "boot_backoff",
                   "sandbox", "sandbox_writable"}));
    PoolSpec p;
    p.line = n.Mark().line + 1;
    TRY(PoolNameAndProvider(n, path, p));
    TRY(PoolSize(n, path, p));
    TRY(PoolTimeouts(n, path, p));
    TRY(PoolRunEnvironment(n, path, p));
    if (auto v = n["hourly_cost"]) {
      ASSIGN_OR_RETURN(p.scaling.hourly_cost, HourlyCost(v, path + ".hourly_cost"));
    }
    if (auto v = n["token"]) { ASSIGN_OR_RETURN(p.token, Secret(v, path + ".token")); }
    if (auto v = n["params"]) { TRY(PoolParams(v, path + ".params", p)); }
    if (auto v = n["allow_loopback"]) {
      ASSIGN_OR_RETURN(p.allow_loopback, Bool(v, path + ".allow_loopback"));
    }
    TRY(PoolBootsAndBudget(n, path, p));
    TRY(PoolListIntervals(n, path, p));
    TRY(CheckPoolParams(n, path, p));
    return p;
  }

  // name (lowercase letters, digits and -) and provider.
  Status PoolNameAndProvider(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    if (!n["name"]) return Err(n, path + ".name", "missing (the pool's name, such as gpu)");
    ASSIGN_OR_RETURN(p.scaling.name, Str(n["name"], path + ".name"));
    for (char c : p.scaling.name) {
      if (!(c >= 'a' && c <= 'z') && !(c >= '0' && c <= '9') && c != '-') {
        return Err(n["name"], path + ".name",
                   "only lowercase letters, digits and - are allowed, got " + Show(n["name"]));
      }
    }
    if (auto v = n["provider"]) {
      ASSIGN_OR_RETURN(p.provider, Str(v, path + ".provider"));
      if (p.provider != "local" && p.provider != "slurm" && p.provider != "ec2" &&
          p.provider != "kubernetes" && p.provider != "command") {
        return Err(v, path + ".provider",
                   "expected local, slurm, ec2, kubernetes or command, got " + Show(v));
      }
    }
    return {};
  }

  // min <= max machines, and each machine's slots, gpus, runs_per_gpu, fuse_max.
  Status PoolSize(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    if (auto v = n["min"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".min", 0));
      p.scaling.min = static_cast<int>(x);
    }
    if (auto v = n["max"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".max", 0));
      p.scaling.max = static_cast<int>(x);
    }
    if (p.scaling.min > p.scaling.max) {
      return Err(n["min"] ? n["min"] : n, path + ".min",
                 "min (" + std::to_string(p.scaling.min) + ") is above max (" +
                     std::to_string(p.scaling.max) + ")");
    }
    if (auto v = n["slots"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".slots", 1));
      p.scaling.slots = static_cast<int>(x);
    }
    if (auto v = n["gpus"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".gpus", 0));
      p.gpus = static_cast<int>(x);
    }
    if (auto v = n["runs_per_gpu"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".runs_per_gpu", 1));
      p.runs_per_gpu = static_cast<int>(x);
    }
    if (auto v = n["fuse_max"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".fuse_max", 1));
      p.fuse_max = static_cast<int>(x);
    }
    return {};
  }

  // idle_grace, boot_timeout, lost_after, orphan_timeout, and the self_stop command.
  Status PoolTimeouts(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    if (auto v = n["idle_grace"]) {
      ASSIGN_OR_RETURN(p.scaling.idle_grace_ms, DurationMs(v, path + ".idle_grace"));
    }
    if (auto v = n["boot_timeout"]) {
      ASSIGN_OR_RETURN(p.scaling.boot_timeout_ms, DurationMs(v, path + ".boot_timeout"));
    }
    if (auto v = n["lost_after"]) {
      ASSIGN_OR_RETURN(p.scaling.lost_after_ms, ZeroOrDurationMs(v, path + ".lost_after"));
    }
    if (auto v = n["orphan_timeout"]) {
      ASSIGN_OR_RETURN(p.orphan_timeout_ms, DurationMs(v, path + ".orphan_timeout"));
    }
    if (auto v = n["self_stop"]) { ASSIGN_OR_RETURN(p.self_stop, Str(v, path + ".self_stop")); }
    return {};
  }

  // What a run on the pool's machines sees: env_passthrough, sandbox, sandbox_writable.
  Status PoolRunEnvironment(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    if (auto v = n["env_passthrough"]) {
      if (!v.IsSequence()) {
        return Err(v, path + ".env_passthrough",
                   "expected a list of variable names such as [WANDB_API_KEY, \"CONDA_*\"], got " +
                       Show(v));
      }
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::string at = path + ".env_passthrough[" + std::to_string(i) + "]";
        ASSIGN_OR_RETURN(auto name, Str(v[i], at));
        if (!ValidEnvPattern(name)) {
          return Err(v[i], at, "expected a variable name or PREFIX*, got " + Show(v[i]));
        }
        p.env_passthrough.push_back(name);
      }
    }
    if (auto v = n["sandbox"]) {
      ASSIGN_OR_RETURN(p.sandbox, Str(v, path + ".sandbox"));
      if (p.sandbox != "auto" && p.sandbox != "bwrap" && p.sandbox != "none") {
        return Err(v, path + ".sandbox", "expected auto, bwrap or none, got " + Show(v));
      }
    }
    if (auto v = n["sandbox_writable"]) {
      if (!v.IsSequence()) {
        return Err(v, path + ".sandbox_writable",
                   "expected a list of directories such as [/data/cache], got " + Show(v));
      }
      for (std::size_t i = 0; i < v.size(); ++i) {
        std::string at = path + ".sandbox_writable[" + std::to_string(i) + "]";
        ASSIGN_OR_RETURN(auto dir, Str(v[i], at));
        if (!dir.starts_with("/")) return Err(v[i], at, "expected an absolute path, got " + Show(v[i]));
        p.sandbox_writable.push_back(dir);
      }
    }
    return {};
  }

  Result<double> HourlyCost(const YAML::Node& v, const std::string& path) const {
    if (v.IsScalar()) {
      try {
        size_t used = 0;
        double x = std::stod(v.Scalar(), &used);
        if (used == v.Scalar().size() && x >= 0 && x < 1e9) return x;
      } catch (...) {
      }
    }
    return Err(v, path, "expected a cost >= 0, got " + Show(v));
  }

  // params (at `path`): strings and numbers; for kubernetes also mappings and
  // lists, carried as their JSON text (the provider checks them).
  Status PoolParams(const YAML::Node& v, const std::string& path, PoolSpec& p) const {
    if (!v.IsMap()) return Err(v, path, "expected a mapping, got " + Show(v));
    for (const auto& kv : v) {
      std::string key = kv.first.Scalar();
      if (!kv.second.IsScalar()) {
        // Kubernetes' node_selector, tolerations, labels...
        if (p.provider == "kubernetes" && (kv.second.IsMap() || kv.second.IsSequence())) {
          p.params[key] = YamlToJson(kv.second).dump();
          p.param_lines[key] = kv.first.Mark().line + 1;
          continue;
        }
        return Err(kv.second, path + "." + key,
                   "expected a string or number, got " + Show(kv.second));
      }
      p.params[key] = kv.second.Scalar();
      p.param_lines[key] = kv.first.Mark().line + 1;
    }
    return {};
  }

  // When boots count as failing, the back-off after one, the billing
  // minimum, and the pool's budget (which needs hourly_cost).
  Status PoolBootsAndBudget(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    if (auto v = n["failing_after"]) {
      ASSIGN_OR_RETURN(auto x, Int(v, path + ".failing_after", 1));
      p.scaling.failing_after = static_cast<int>(x);
    }
    if (auto v = n["boot_backoff"]) {
      ASSIGN_OR_RETURN(p.scaling.boot_backoff_ms, DurationMs(v, path + ".boot_backoff"));
    }
    if (auto v = n["min_bill"]) {
      ASSIGN_OR_RETURN(p.scaling.min_bill_ms, DurationMs(v, path + ".min_bill"));
    }
    if (auto v = n["budget"]) {
      ASSIGN_OR_RETURN(auto b, Budget(v, path + ".budget"));
      p.scaling.budget_per_day = b.per_day;
      p.scaling.budget_per_month = b.per_month;
      p.scaling.drain_at_cap = b.drain_at_cap;
      if ((b.per_day > 0 || b.per_month > 0) && p.scaling.hourly_cost <= 0) {
        return Err(v, path + ".budget", "needs hourly_cost (the spend is billed time x "
                                        "hourly_cost)");
      }
    }
    return {};
  }

  // How often the provider is listed: its default, then list_interval and
  // list_interval_idle.
  Status PoolListIntervals(const YAML::Node& n, const std::string& path, PoolSpec& p) const {
    // Cloud APIs throttle list calls per account; local processes and files do not.
    if (p.provider == "ec2" || p.provider == "command") {
      p.scaling.list_interval_ms = 15'000;
      p.scaling.list_interval_idle_ms = 120'000;
    } else if (p.provider == "slurm" || p.provider == "kubernetes") {
      p.scaling.list_interval_ms = 5'000;
      p.scaling.list_interval_idle_ms = 60'000;
    }
    if (auto v = n["list_interval"]) {
      ASSIGN_OR_RETURN(p.scaling.list_interval_ms, ZeroOrDurationMs(v, path + ".list_interval"));
    }
    if (auto v = n["list_interval_idle"]) {
      ASSIGN_OR_RETURN(p.scaling.list_interval_idle_ms,
                       ZeroOrDurationMs(v, path + ".list_interval_idle"));
    }
    return {};
  }

  // The provider's own check of its params, the error pointed at the key.
  Status CheckPoolParams(const YAML::Node& n, const std::string& path, const PoolSpec& p) const {
    auto st = cloud::CheckProviderParams(p.provider, p.params);
    if (st) return {};
    // The message starts with "params.<key>: ..."; point at that key, else
    // at `params:` (reset() rebinds; yaml-cpp's operator= would overwrite).
    const auto& m = st.error().message;
    YAML::Node at;
    at.reset(n);
    for (const auto& kv : n) {
      if (kv.first.Scalar() == "params") at.reset(kv.first);
    }
    if (m.starts_with("params.") && n["params"]) {
      // "params.tolerations[0].effect: ..." points at tolerations.
      std::string key = m.substr(7, m.find_first_of(":.[", 7) - 7);
      for (const auto& kv : n["params"]) {
        if (kv.first.Scalar() == key) at.reset(kv.first);
      }
    }
    return Err(at, path + " (" + p.provider + " pool " + p.scaling.name + ")", m);
  }

};

}  // namespace

bool RepoConfig::Watches(std::string_view ref) const {
  if (ref.starts_with("refs/tags/")) return tags;
  if (!ref.starts_with("refs/heads/")) return false;
  std::string_view branch = ref.substr(std::string_view("refs/heads/").size());
  for (const auto& glob : branches) {
    if (GlobMatch(glob, branch)) return true;
  }
  return false;
}

const RepoConfig* ServerConfig::FindRepo(std::string_view url) const {
  std::string n = NormaliseRepoUrl(url);
  for (const auto& r : repositories) {
    if (NormaliseRepoUrl(r.url) == n) return &r;
  }
  return nullptr;
}

namespace {

// public_url: an absolute http(s) URL with a host and no query or fragment;
// its trailing '/' is dropped (pages are PUBLIC_URL/commit/SHA).
Status CheckPublicUrl(const ConfigParser& p, const YAML::Node& n, std::string& url) {
  auto bad = [&](const std::string& why) {
    return p.Err(n, "public_url", why + ", got \"" + url +
                                      "\" (expected e.g. https://trainq.example)");
  };
  if (!url.starts_with("https://") && !url.starts_with("http://")) {
    return bad("expected an http:// or https:// URL");
  }
  if (url.find_first_of("?# \t") != std::string::npos) {
    return bad("expected no query, fragment or space");
  }
  if (auto host = UrlHost(url); !host || host->empty()) return bad("expected a host");
  while (url.ends_with("/")) url.pop_back();
  return {};
}

}  // namespace

namespace {

// A key whose value is a file to keep from runs: every `{file: ...}` and
// every *_file, *_key and kubeconfig, but for public ones (a CA bundle: runs
// may need the system's for their own downloads).
bool NamesPath(std::string_view key) {
  if (key == "ca_file") return false;
  return key == "file" || key == "kubeconfig" || key.ends_with("_file") || key.ends_with("_key");
}

void WalkNamedPaths(const YAML::Node& n, bool named, std::vector<std::string>& out) {
  if (!n) return;
  if (n.IsScalar()) {
    if (!named) return;
    const std::string v = n.Scalar();
    if (v.empty() || v.find('\n') != std::string::npos) return;
    std::error_code ec;
    auto abs = fs::absolute(v, ec);
    if (!ec) out.push_back(abs.lexically_normal().string());
  } else if (n.IsSequence()) {
    for (const auto& e : n) WalkNamedPaths(e, named, out);
  } else if (n.IsMap()) {
    for (const auto& kv : n) {
      const std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
      WalkNamedPaths(kv.second, NamesPath(key), out);
    }
  }
}

}  // namespace

std::vector<std::string> ConfigNamedPaths(const YAML::Node& root) {
  std::vector<std::string> out;
  WalkNamedPaths(root, false, out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<Cidr> ParseCidr(std::string_view text) {
  std::string t(Trim(text));
  Cidr c;
  std::string addr = t;
  int prefix = -1;
  if (auto slash = t.find('/'); slash != std::string::npos) {
    addr = t.substr(0, slash);
    std::string p = t.substr(slash + 1);
    if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit)) return std::nullopt;
    prefix = std::stoi(p);
  }
  if (::inet_pton(AF_INET, addr.c_str(), c.bytes) == 1) {
    c.family = AF_INET;
    c.prefix = prefix < 0 ? 32 : prefix;
    if (c.prefix > 32) return std::nullopt;
  } else if (::inet_pton(AF_INET6, addr.c_str(), c.bytes) == 1) {
    c.family = AF_INET6;
    c.prefix = prefix < 0 ? 128 : prefix;
    if (c.prefix > 128) return std::nullopt;
  } else {
    return std::nullopt;
  }
  return c;
}

bool CidrContains(const Cidr& cidr, std::string_view address) {
  std::string a(address);
  unsigned char bytes[16] = {};
  int family = ::inet_pton(AF_INET, a.c_str(), bytes) == 1    ? AF_INET
               : ::inet_pton(AF_INET6, a.c_str(), bytes) == 1 ? AF_INET6
                                                               : 0;
  if (family == 0 || family != cidr.family) return false;
  int full = cidr.prefix / 8, rest = cidr.prefix % 8;
  if (std::memcmp(bytes, cidr.bytes, static_cast<size_t>(full)) != 0) return false;
  if (rest == 0) return true;
  unsigned char mask = static_cast<unsigned char>(0xff << (8 - rest));
  return (bytes[full] & mask) == (cidr.bytes[full] & mask);
}

Result<ServerConfig> ParseServerConfig(std::string_view text, std::string_view filename) {
  ConfigParser p(filename);
  ASSIGN_OR_RETURN(YAML::Node root, p.Load(text, "not valid YAML"));
  ServerConfig c;
  c.path = std::string(filename);
  if (!root || root.IsNull()) return c;
  c.named_paths = ConfigNamedPaths(root);
  if (!root.IsMap()) return p.Err(root, "", "expected a mapping at the top level");
  TRY(p.CheckKeys(root, "",
                  {"listen", "database", "repositories", "pools", "read_token", "admin_token",
                   "budget", "public_url", "retention", "auth", "notify", "mlflow"}));
  if (auto a = root["auth"]) { ASSIGN_OR_RETURN(c.auth, p.Auth(a, "auth")); }
  if (auto r = root["retention"]) { ASSIGN_OR_RETURN(c.retention, p.Retention(r, "retention")); }
  if (auto b = root["budget"]) { ASSIGN_OR_RETURN(c.budget, p.Budget(b, "budget")); }
  if (auto n = root["notify"]) { ASSIGN_OR_RETURN(c.notify, ParseNotifyTargets(p, n, "notify")); }
  if (auto m = root["mlflow"]) { ASSIGN_OR_RETURN(c.mlflow, ParseMlflowConfig(p, m, "mlflow")); }
  if (auto l = root["listen"]) { ASSIGN_OR_RETURN(c.listen, p.Str(l, "listen")); }
  if (auto d = root["database"]) {
    // Read again by serve (LoadDatabaseConfig); checked here so that a bad
    // value fails at load like every other key.
    ASSIGN_OR_RETURN(auto database, ParseDatabaseConfig(p, d, "database"));
    (void)database;
  }
  if (auto t = root["read_token"]) { ASSIGN_OR_RETURN(c.read_token, p.Secret(t, "read_token")); }
  if (auto t = root["admin_token"]) { ASSIGN_OR_RETURN(c.admin_token, p.Secret(t, "admin_token")); }
  if (auto u = root["public_url"]) {
    ASSIGN_OR_RETURN(c.public_url, p.Str(u, "public_url"));
    TRY(CheckPublicUrl(p, u, c.public_url));
  }
  if (auto repos = root["repositories"]) {
    if (!repos.IsSequence()) {
      return p.Err(repos, "repositories", "expected a list, got " + ConfigParser::Show(repos));
    }
    for (size_t i = 0; i < repos.size(); ++i) {
      std::string path = "repositories[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(auto r, p.Repo(repos[i], path));
      if (c.FindRepo(r.url)) {
        return p.Err(repos[i]["url"], path + ".url", "listed twice (" + r.url + ")");
      }
      c.repositories.push_back(std::move(r));
    }
  }
  if (auto pools = root["pools"]) {
    if (!pools.IsSequence()) {
      return p.Err(pools, "pools", "expected a list, got " + ConfigParser::Show(pools));
    }
    for (size_t i = 0; i < pools.size(); ++i) {
      std::string path = "pools[" + std::to_string(i) + "]";
      ASSIGN_OR_RETURN(auto pool, p.Pool(pools[i], path));
      if (c.FindPool(pool.name())) {
        return p.Err(pools[i]["name"], path + ".name", "pool " + pool.name() + " is listed twice");
      }
      c.pools.push_back(std::move(pool));
    }
  }
  return c;
}

std::string PoolServerUrl(const PoolSpec& pool, const std::string& default_url) {
  auto it = pool.params.find("server_url");
  return it != pool.params.end() ? it->second : default_url;
}

Status CheckWorkerUrls(const ServerConfig& config, const std::string& default_url,
                       const std::string& listen) {
  const std::string file = config.path.empty() ? "server config" : config.path;
  for (size_t i = 0; i < config.pools.size(); ++i) {
    const PoolSpec& p = config.pools[i];
    if (!p.remote() || p.allow_loopback) continue;
    const std::string url = PoolServerUrl(p, default_url);
    const bool own = p.params.count("server_url") > 0;
    const std::string key = "pools[" + std::to_string(i) + "]" + (own ? ".params.server_url" : "");
    const int line = own && p.param_lines.count("server_url") ? p.param_lines.at("server_url")
                                                                : p.line;
    const std::string where = file + (line > 0 ? ":" + std::to_string(line) : "") + ": " + key +
                              " (" + p.provider + " pool " + p.name() + "): ";
    auto host = UrlHost(url);
    if (!host) return Fail(ErrorKind::kInvalidArgument, where + host.error().message);
    if (HostReachableFromElsewhere(*host)) continue;
    const std::string what =
        own ? "workers would connect to " + UrlForLog(url)
            : "no params.server_url, so workers would connect to " + UrlForLog(url) +
                  " (from the listen address " + listen + ")";
    return Fail(ErrorKind::kInvalidArgument,
                where + what + ", which a machine elsewhere cannot reach: it would boot, never " +
                    "register, and be billed until boot_timeout, again and again. Set " +
                    "params.server_url to an address of this host the machines can reach " +
                    "(such as http://10.0.0.5:8080) and listen on it, or `allow_loopback: true` " +
                    "if this pool's machines run on this host (a test)");
  }
  return {};
}

Result<DatabaseConfig> ParseDatabaseConfig(const YamlReader& reader, const YAML::Node& n,
                                           const std::string& path) {
  DatabaseConfig c;
  YAML::Node url = n;
  std::string url_path = path;
  if (n.IsMap()) {
    TRY(reader.CheckKeys(n, path, {"url", "password"}));
    if (!n["url"]) {
      return reader.Err(n, path + ".url", "missing (a postgres:// URL or a SQLite file)");
    }
    url.reset(n["url"]);  // rebinds; `url = ...` would overwrite `n` itself
    url_path = path + ".url";
    if (auto pw = n["password"]) {
      ASSIGN_OR_RETURN(c.password, reader.Secret(pw, path + ".password"));
    }
  } else if (!n.IsScalar()) {
    return reader.Err(n, path,
                      "expected a postgres:// URL, a SQLite file, or {url: URL, password: {file: "
                      "PATH}}, got " +
                          YamlReader::Show(n));
  }
  ASSIGN_OR_RETURN(c.url, reader.NonEmptyStr(url, url_path));
  if (sql::IsPostgresUrl(c.url) && sql::RedactUrl(c.url) != c.url) {
    return reader.Err(url, url_path,
                      "a password in the URL (" + sql::RedactUrl(c.url) +
                          ") belongs in a file: database: {url: URL without it, password: "
                          "{file: PATH}}, or libpq's PGPASSFILE");
  }
  if (!c.password.empty() && !sql::IsPostgresUrl(c.url)) {
    return reader.Err(n["password"], path + ".password",
                      "a password is for a postgres:// URL; " + c.url + " is a SQLite file");
  }
  return c;
}

Result<std::optional<DatabaseConfig>> LoadDatabaseConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return std::unexpected(text.error().Wrap("--config"));
  YamlReader reader(path);
  ASSIGN_OR_RETURN(YAML::Node root, reader.Load(*text, "not valid YAML"));
  if (!root || !root.IsMap() || !root["database"]) return std::nullopt;
  ASSIGN_OR_RETURN(auto c, ParseDatabaseConfig(reader, root["database"], "database"));
  return c;
}

Result<ServerConfig> LoadServerConfig(const std::string& path) {
  auto text = ReadFile(path);
  if (!text) return std::unexpected(text.error().Wrap("--config"));
  return ParseServerConfig(*text, path);
}

}  // namespace trainq
