#include "agent/daemon/dashboard.h"

#include <spdlog/spdlog.h>
#include <strings.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/daemon/branch_history.h"
#include "agent/daemon/oidc.h"
#include "agent/daemon/read_api.h"
#include "agent/results/analysis.h"
#include "agent/results/commit_view.h"
#include "agent/results/palette.h"
#include "agent/results/report.h"
#include "agent/results/run_logs.h"
#include "agent/results/status.h"
#include "agent/results/sweep.h"
#include "agent/results/sweep_plot.h"
#include "agent/triggers/mlflow.h"
#include "agent/triggers/notify.h"
#include "core/crypto.h"
#include "core/http_client.h"
#include "core/log.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "queue/sweeps.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace trainq {

// agent/daemon/web/*, compiled in by agent/daemon/web/embed.cmake: the file's
// bytes, empty for a name that is not there.
std::string_view DashboardAsset(std::string_view name);

namespace {

constexpr const char* kCookie = "trainq_dash";

HttpServerReply JsonReply(int status, const json& body) {
  HttpServerReply r{status, "application/json",
                    body.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"};
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

HttpServerReply Refuse(int status, const std::string& reason) {
  return JsonReply(status, {{"result", "error"}, {"reason", reason}});
}

HttpServerReply Unauthorized() {
  HttpServerReply r{401, "text/plain; charset=utf-8",
                    "401: not signed in. Sign in at /signin with the read or admin token, or "
                    "open the one-time link `trainq serve` logged at start.\n"};
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

int StatusFor(const trainq::Error& e) {
  switch (e.kind) {
    case ErrorKind::kInvalidArgument:
      return 400;
    case ErrorKind::kNotFound:
      return 404;
    case ErrorKind::kConflict:
      return 409;
    default:
      return 503;
  }
}

bool IsPage(const std::string& path) {
  return path == "/" || path == "/machines" || path == "/sweeps" || path == "/account" ||
         path == "/audit" ||
         path.starts_with("/experiment/") || path.starts_with("/commit/") ||
         path.starts_with("/run/");
}

// One of the dashboard's ES modules: /dash/NAME.mjs, NAME an embedded file.
bool IsModule(const std::string& path) {
  if (!path.starts_with("/dash/") || !path.ends_with(".mjs")) return false;
  std::string_view name = std::string_view(path).substr(6);
  return name.find('/') == std::string_view::npos && !DashboardAsset(name).empty();
}

std::optional<std::string> Param(const HttpServerRequest& req, const std::string& name) {
  for (const auto& [k, v] : req.query) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::optional<std::int64_t> ParseId(std::string_view s) {
  if (s.empty() || s.size() > 18) return std::nullopt;
  std::int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

// The value of cookie `name` in the request's Cookie header(s).
std::string CookieValue(const HttpHeaders& headers, std::string_view name) {
  for (const auto& [k, v] : headers) {
    if (k.size() != 6 || strncasecmp(k.c_str(), "cookie", 6) != 0) continue;
    for (const auto& part : Split(v, ';')) {
      auto t = Trim(part);
      if (t.size() > name.size() && t.starts_with(name) && t[name.size()] == '=') {
        return std::string(t.substr(name.size() + 1));
      }
    }
  }
  return "";
}

bool SameSecret(const std::string& given, const std::string& want) {
  if (want.empty() || given.empty()) return false;
  return ConstantTimeEquals(Sha256Hex(given), Sha256Hex(want));
}

// A query string of `query` without `drop`, for the redirect after login.
std::string QueryWithout(const HttpServerRequest& req, const std::string& drop) {
  std::string q;
  for (const auto& [k, v] : req.query) {
    if (k == drop) continue;
    q += (q.empty() ? "?" : "&") + UrlEncode(k) + "=" + UrlEncode(v);
  }
  return q;
}

// Where to go after sign-in: one of the dashboard's pages on this server,
// with its query; anything else (another host, "//x", a control character)
// is "/".
std::string SafeNext(std::string_view next) {
  std::string_view path = next.substr(0, next.find('?'));
  bool ok = !next.empty() && next.front() == '/' && !next.starts_with("//") &&
            IsPage(std::string(path)) && next.find('\\') == std::string_view::npos &&
            std::none_of(next.begin(), next.end(), [](char c) {
              return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
            });
  return ok ? std::string(next) : "/";
}

// `next` (a decoded path and an encoded query) as a Location: the bytes a URL
// cannot hold as they are percent-encoded, and a '%' of the path too.
std::string LocationOf(std::string_view next) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  const auto query = next.find('?');
  for (std::size_t i = 0; i < next.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(next[i]);
    bool encode = c <= 0x20 || c >= 0x7f || std::strchr("\"<>\\^`{|}", c) != nullptr ||
                  (c == '%' && i < query);
    if (encode) {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// An HTML form's body (application/x-www-form-urlencoded) -> its fields.
std::map<std::string, std::string> FormFields(std::string_view body) {
  std::map<std::string, std::string> out;
  for (const auto& part : Split(body, '&')) {
    if (part.empty()) continue;
    auto eq = part.find('=');
    out[UrlDecode(std::string_view(part).substr(0, eq), true)] =
        eq == std::string::npos ? "" : UrlDecode(std::string_view(part).substr(eq + 1), true);
  }
  return out;
}

// The page's own headers: no framing, no inline script, no sniffing.
void PageHeaders(HttpServerReply& r) {
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"X-Frame-Options", "DENY"});
  r.headers.push_back(
      {"Content-Security-Policy",
       "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
       // No form-action: the sign-in page's doors are GET forms that
       // /signin/<door> redirects to the forge or issuer, and Chromium
       // applies form-action to that redirect too.
       "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
       // Only markup made by the `html` template reaches innerHTML (core.mjs).
       "require-trusted-types-for 'script'; trusted-types trainq"});
}

// "http://a:1" from a URL such as "http://a:1/x/" (scheme and authority).
std::string OriginOf(std::string_view url) {
  auto scheme = url.find("://");
  if (scheme == std::string_view::npos) return "";
  auto end = url.find('/', scheme + 3);
  return std::string(url.substr(0, end));
}

std::string SessionWho(const Principal& p, const std::string& nonce) {
  if (p.person) return p.who;
  return p.who + " (session " + nonce.substr(0, 8) + ")";
}

std::optional<Store> OpenRead(const std::string& db) {
  StoreOptions so;
  so.create = false;
  auto s = Store::Open(db, so);
  if (!s) return std::nullopt;
  return std::move(*s);
}

}  // namespace

Dashboard::Dashboard(const ServerConfig& config, std::string db_path, std::string data_dir,
                     const Clock& clock, DashboardOptions options)
    : config_(config),
      db_path_(std::move(db_path)),
      data_dir_(std::move(data_dir)),
      clock_(clock),
      options_(options),
      wrong_token_log_(options.wrong_token_log_ms) {
  read_token_ = config_.read_token.value;
  // Without a configured read_token, a read sign-in token made at each start
  // (and logged) lets people sign in after the one-time link was used.
  if (read_token_.empty()) signin_token_ = RandomHex(16).value_or("");
  // Sessions live in this process: a key of this start's own signs them.
  key_ = RandomHex(32).value_or("");
  if (key_.empty()) key_ = Sha256Hex("trainq dashboard " + std::to_string(clock_.Now()));
  boot_ = RandomHex(4).value_or("0");
  secure_cookie_ = config_.public_url.starts_with("https://");
  http_ = std::make_unique<CurlHttpClient>(1 << 20);
  if (config_.auth.oidc.enabled()) {
    oidc_ = std::make_unique<OidcIssuer>(config_.auth.oidc, *http_, clock_);
  }
}

Dashboard::~Dashboard() {
  Stop();
  if (watcher_.joinable()) watcher_.join();
}

bool Dashboard::Owns(const std::string& path) {
  return IsPage(path) || path == "/signin" || path.starts_with("/signin/") ||
         path.starts_with("/dash/");
}

std::string Dashboard::StartLine(const std::string& listen) {
  std::string base = "http://" + listen;
  Principal reader;
  reader.role = Role::kRead;
  reader.who = "one-time link";
  std::string line = base + "/?login=" + NewLoginCode(reader) +
                     " (a one-time read link, good for " +
                     FormatDuration(options_.login_link_ms) + "; after that sign in at " + base +
                     "/signin with the read or admin token";
  if (!signin_token_.empty()) line += ", or this start's sign-in token " + signin_token_;
  return line + ")";
}

std::string Dashboard::NewLoginCode(const Principal& who) {
  std::string code = RandomHex(16).value_or("");
  if (code.empty()) return code;
  const TimeMs now = clock_.Now();
  MutexLock lock(sessions_mu_);
  std::erase_if(codes_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
  while (codes_.size() >= options_.max_login_links) {
    auto oldest = std::min_element(codes_.begin(), codes_.end(), [](const auto& a, const auto& b) {
      return a.second.expires_ms < b.second.expires_ms;
    });
    codes_.erase(oldest);
  }
  codes_[Sha256Hex(code)] = {who, now + options_.login_link_ms};
  return code;
}

void Dashboard::Stop() {
  MutexLock lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

Dashboard::Session Dashboard::SessionOf(const HttpServerRequest& req, bool touch) {
  // "<r|a>.<nonce>.<hmac>": the HMAC turns away made-up cookies before the
  // lookup; the session itself is the entry in sessions_.
  std::string c = CookieValue(req.headers, kCookie);
  auto parts = Split(c, '.');
  if (parts.size() != 3 || (parts[0] != "r" && parts[0] != "w" && parts[0] != "a")) return {};
  std::string want = HmacSha256Hex(key_, parts[0] + "." + parts[1]);
  if (!ConstantTimeEquals(Sha256Hex(parts[2]), Sha256Hex(want))) return {};
  const TimeMs now = clock_.Now();
  MutexLock lock(sessions_mu_);
  auto it = sessions_.find(parts[1]);
  if (it == sessions_.end()) return {};
  SessionEntry& e = it->second;
  if (now - e.seen_ms >= options_.session_idle_ms || now - e.created_ms >= options_.session_max_ms ||
      (e.who.expires_ms && *e.who.expires_ms <= now)) {
    sessions_.erase(it);
    return {};
  }
  if (e.who.role == Role::kAdmin && !e.who.person && config_.admin_token.empty()) return {};
  if (touch) e.seen_ms = std::max(e.seen_ms, now);
  return {e.who.role, parts[1], SessionWho(e.who, parts[1]), e.who.token_id, e.who.person,
          e.who.repos};
}

Dashboard::Role Dashboard::RoleOn(const Session& s, const std::string& repo) {
  if (!s.repos) return s.role;
  auto it = s.repos->find(repo);
  return it == s.repos->end() ? Role::kNone : it->second;
}

bool Dashboard::SignedIn(const HttpServerRequest& req) {
  if (SessionOf(req, false).role != Role::kNone) return true;
  std::string refused;
  return HeaderSession(req, &refused).role != Role::kNone;
}

Dashboard::Session Dashboard::HeaderSession(const HttpServerRequest& req, std::string* refused) {
  const AuthConfig& auth = config_.auth;
  if (!auth.trusted_header()) return {};
  auto user = FindHeader(req.headers, auth.user_header);
  if (!user) return {};
  bool listed = std::any_of(auth.from.begin(), auth.from.end(),
                            [&](const Cidr& c) { return CidrContains(c, req.peer); });
  if (!listed) {
    *refused = auth.user_header + " from " + req.peer +
               ", which is not one of auth.trusted_header.from";
    return {};
  }
  std::string who(Trim(*user));
  if (who.empty() || who.size() > 200 ||
      std::any_of(who.begin(), who.end(),
                  [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
    *refused = "an empty or malformed " + auth.user_header;
    return {};
  }
  std::vector<std::string> groups;
  if (!auth.groups_header.empty()) {
    for (const auto& g : Split(FindHeader(req.headers, auth.groups_header).value_or(""), ',')) {
      if (!Trim(g).empty()) groups.emplace_back(Trim(g));
    }
  }
  Role role = RoleFromLists(auth, who, groups);
  if (role == Role::kNone) {
    *refused = who + " is in none of auth's admins, writers or viewers";
    return {};
  }
  // No cookie: the proxy vouches for each request. The id names the person
  // for the CSRF token.
  return {role, "hdr-" + Sha256Hex(who).substr(0, 16), who, 0, true};
}

std::string Dashboard::CsrfToken(const Session& s) const {
  return HmacSha256Hex(key_, "csrf." + s.id);
}

std::string Dashboard::CookieAttributes() const {
  return "; Path=/; HttpOnly; SameSite=Strict" + std::string(secure_cookie_ ? "; Secure" : "");
}

HttpServerReply Dashboard::StartSession(const Principal& who, const std::string& next,
                                        const char* how, const std::string& peer,
                                        const std::string& forge_token,
                                        const ForgeAuthConfig* forge) {
  const Role role = who.role;
  auto nonce = RandomHex(12);
  if (!nonce) return Refuse(503, nonce.error().message);
  const TimeMs now = clock_.Now();
  {
    MutexLock lock(sessions_mu_);
    std::erase_if(sessions_, [&](const auto& kv) {
      return now - kv.second.seen_ms >= options_.session_idle_ms ||
             now - kv.second.created_ms >= options_.session_max_ms;
    });
    while (sessions_.size() >= options_.max_sessions) {
      auto lru = std::min_element(sessions_.begin(), sessions_.end(),
                                  [](const auto& a, const auto& b) {
                                    return a.second.seen_ms < b.second.seen_ms;
                                  });
      sessions_.erase(lru);
    }
    sessions_[*nonce] = {who, now, now, forge_token, forge, now, false};
  }
  const char* r = role == Role::kAdmin ? "a" : role == Role::kWrite ? "w" : "r";
  std::string value = std::string(r) + "." + *nonce;
  value += "." + HmacSha256Hex(key_, value);
  HttpServerReply reply{303, "text/plain; charset=utf-8", "signed in\n"};
  reply.headers.push_back({"Location", LocationOf(SafeNext(next))});
  reply.headers.push_back({"Set-Cookie", std::string(kCookie) + "=" + value + CookieAttributes() +
                                             "; Max-Age=" +
                                             std::to_string(options_.session_max_ms / 1000)});
  reply.headers.push_back({"Cache-Control", "no-store"});
  if (auto store = OpenRead(db_path_)) {
    RecordAudit(*store,
                {0, now, SessionWho(who, *nonce), "login", "",
                 std::string(how) + ", " + RoleName(role), peer},
                "dashboard", std::string("signed in (") + how + ", " + RoleName(role) + ")");
  } else {
    spdlog::info("dashboard: {} signed in ({}, {})", SessionWho(who, *nonce), how,
                 RoleName(role));
  }
  return reply;
}

HttpServerReply Dashboard::SignInPage(int status, const std::string& next,
                                      const std::string& notice) {
  std::string html(DashboardAsset("signin.html"));
  auto put = [&](const std::string& key, const std::string& value) {
    for (auto at = html.find(key); at != std::string::npos; at = html.find(key, at + value.size())) {
      html.replace(at, key.size(), value);
    }
  };
  put("{{next}}", HtmlEscape(SafeNext(next)));
  put("{{notice}}", HtmlEscape(notice));
  put("{{notice_hidden}}", notice.empty() ? " hidden" : "");
  put("{{github_hidden}}", config_.auth.github.enabled() ? "" : " hidden");
  put("{{gitlab_hidden}}", config_.auth.gitlab.enabled() ? "" : " hidden");
  put("{{gitea_hidden}}", config_.auth.gitea.enabled() ? "" : " hidden");
  put("{{oidc_hidden}}", config_.auth.oidc.enabled() ? "" : " hidden");
  put("{{oidc_label}}", HtmlEscape(config_.auth.oidc.label));
  HttpServerReply r{status, "text/html; charset=utf-8", std::move(html)};
  r.headers.push_back({"Cache-Control", "no-store"});
  PageHeaders(r);
  return r;
}

// POST /signin: the form's token= and next=. The token travels in the body,
// so it is in no address, history or proxy log.
HttpServerReply Dashboard::SignInForm(const HttpServerRequest& req) {
  // A form posted from another site is refused (login CSRF); a client that
  // sends no Origin (curl) is not a browser on another site.
  if (auto origin = FindHeader(req.headers, "Origin"); origin && *origin != "null") {
    std::string host = FindHeader(req.headers, "Host").value_or("");
    bool same = *origin == "http://" + host || *origin == "https://" + host ||
                (!config_.public_url.empty() && *origin == OriginOf(config_.public_url));
    if (!same) return Refuse(403, "a sign-in form from another site is refused");
  }
  if (req.body_too_large) return Refuse(413, "body too large");
  auto fields = FormFields(req.body);
  std::string next = fields.count("next") ? fields["next"] : "/";
  std::string token(Trim(fields["token"]));
  Principal who;
  if (SameSecret(token, signin_token_)) {
    who.role = Role::kRead;
    who.who = "start's sign-in token";
  } else {
    auto store = OpenRead(db_path_);
    who = Identify(config_, store ? &*store : nullptr, token, clock_.Now());
  }
  if (who.role == Role::kNone) {
    FailedSignIn(req.peer, who.refused.empty() ? "a wrong token" : who.refused, "token");
    bool revoked = who.refused.find("revoked") != std::string::npos;
    bool expired = who.refused.find("expired") != std::string::npos;
    return SignInPage(401, next,
                      revoked   ? "That personal token was revoked."
                      : expired ? "That personal token has expired."
                                : "That token is not the read or admin token, nor a personal "
                                  "token.");
  }
  return StartSession(who, next, "sign-in form", req.peer);
}

void Dashboard::FailedSignIn(const std::string& peer, const std::string& why,
                             const std::string& door) {
  int skipped = 0;
  if (!wrong_token_log_.Allow(door, clock_.Now(), &skipped)) return;
  std::string more =
      skipped ? " (" + std::to_string(skipped) + " more since the last such line)" : "";
  spdlog::warn("dashboard: a sign-in from {} was refused: {}{}", peer, why, more);
  StoreOptions so;
  so.create = false;
  if (auto store = Store::Open(db_path_, so)) {
    if (auto id = store->access().AddAudit(
            {0, clock_.Now(), "?", "login_failed", "", why + more, peer});
        !id) {
      spdlog::error("dashboard: the audit row of a failed sign-in could not be written: {}",
                    id.error().message);
    }
  }
}

// GET PAGE?login=CODE: a one-time link. Used or expired, it shows the
// sign-in page and says so.
HttpServerReply Dashboard::LinkLogin(const HttpServerRequest& req, const std::string& path,
                                     const std::string& code) {
  std::string next = path + QueryWithout(req, "login");
  Principal who;
  {
    const TimeMs now = clock_.Now();
    MutexLock lock(sessions_mu_);
    auto it = codes_.find(Sha256Hex(code));
    if (it != codes_.end()) {
      if (it->second.expires_ms > now) who = it->second.who;
      codes_.erase(it);  // once
    }
  }
  if (who.role == Role::kNone) {
    FailedSignIn(req.peer, "a sign-in link that is unknown, used or expired", "token");
    return SignInPage(401, next,
                      "This sign-in link was used already or has expired: sign in with a token.");
  }
  return StartSession(who, next, "one-time link", req.peer);
}

bool Dashboard::CsrfOk(const HttpServerRequest& req, const Session& s) const {
  auto csrf = FindHeader(req.headers, "X-CSRF-Token");
  return csrf && ConstantTimeEquals(Sha256Hex(*csrf), Sha256Hex(CsrfToken(s)));
}

HttpServerReply Dashboard::Logout(const HttpServerRequest& req, const Session& s) {
  if (!CsrfOk(req, s)) return Refuse(403, "missing or wrong X-CSRF-Token");
  {
    MutexLock lock(sessions_mu_);
    sessions_.erase(s.id);
  }
  spdlog::info("dashboard: {} signed out", s.who);
  HttpServerReply r = JsonReply(200, {{"result", "ok"}, {"signed_out", s.id.substr(0, 8)}});
  r.headers.push_back({"Set-Cookie", std::string(kCookie) + "=" + CookieAttributes() +
                                         "; Max-Age=0"});
  return r;
}

std::string Dashboard::BaseUrl(const HttpServerRequest& req) const {
  if (!config_.public_url.empty()) {
    std::string u = config_.public_url;
    while (u.ends_with("/")) u.pop_back();
    return u;
  }
  return "http://" + FindHeader(req.headers, "Host").value_or("127.0.0.1");
}

// POST /dash/api/login-link with the read or admin token as a bearer token:
// a one-time link for a session of that role.
HttpServerReply Dashboard::LoginLinkRoute(const HttpServerRequest& req) {
  if (req.method != "POST") return Refuse(405, "login links are POSTed");
  Principal who;
  {
    auto store = OpenRead(db_path_);
    who = IdentifyBearer(config_, store ? &*store : nullptr, req.headers, clock_.Now());
  }
  Role role = who.role;
  if (role == Role::kNone) {
    return Refuse(401, "expected the read or admin token, or a personal token, as "
                       "\"Authorization: Bearer TOKEN\"");
  }
  std::string code = NewLoginCode(who);
  if (code.empty()) return Refuse(503, "no random bytes for a sign-in code");
  return JsonReply(200, {{"url", BaseUrl(req) + "/?login=" + code},
                         {"role", RoleName(role)},
                         {"expires_in_s", options_.login_link_ms / 1000}});
}

HttpServerReply Dashboard::Handle(const HttpServerRequest& req, const std::string& path) {
  if (path == "/signin") {
    if (req.method == "POST") return SignInForm(req);
    if (req.method != "GET" && req.method != "HEAD") return Refuse(405, "GET or POST /signin");
    return SignInPage(200, Param(req, "next").value_or("/"), "");
  }
  if (path.starts_with("/signin/")) {
    // /signin/DOOR and /signin/DOOR/callback, one pair per configured door.
    if (req.method != "GET" && req.method != "HEAD") return Refuse(405, "GET " + path);
    std::string door = path.substr(8);
    const bool back = door.ends_with("/callback");
    if (back) door.resize(door.size() - 9);
    for (const ForgeAuthConfig* f : {&config_.auth.github, &config_.auth.gitlab,
                                     &config_.auth.gitea}) {
      if (door == ForgeName(f->kind) && f->enabled()) {
        return back ? ForgeCallback(req, *f) : ForgeStart(req, *f);
      }
    }
    if (door == "oidc" && config_.auth.oidc.enabled()) {
      return back ? OidcCallback(req) : OidcStart(req);
    }
    return Refuse(404, "no such sign-in is configured (auth.github, gitlab, gitea, oidc)");
  }
  if (path == "/dash/api/login-link") return LoginLinkRoute(req);
  if (IsPage(path) && (req.method == "GET" || req.method == "HEAD")) {
    if (auto code = Param(req, "login")) return LinkLogin(req, path, *code);
    if (Param(req, "token")) {
      // The old `/?token=` login: a long-lived token in an address stays in
      // the browser's history, so it is no longer taken (and not logged).
      return SignInPage(401, path + QueryWithout(req, "token"),
                        "A token in the address is no longer accepted (it would stay in the "
                        "browser's history): enter it here instead.");
    }
  }
  if ((path == "/dash/app.css" || path == "/dash/palette.css") &&
      (req.method == "GET" || req.method == "HEAD")) {
    // No data: the sign-in page uses them too. The colours are the report's
    // (agent/results/palette.h).
    HttpServerReply r{
        200, "text/css; charset=utf-8",
        path == "/dash/palette.css" ? PaletteCss() : std::string(DashboardAsset("app.css"))};
    r.headers.push_back({"Cache-Control", "no-cache"});
    PageHeaders(r);
    return r;
  }
  Session s = SessionOf(req, true);
  if (config_.auth.trusted_header() && FindHeader(req.headers, config_.auth.user_header)) {
    // The proxy's header, honoured only from its listed addresses: from any
    // other, the request is refused whatever else it carries.
    std::string refused;
    Session h = HeaderSession(req, &refused);
    if (!refused.empty()) {
      FailedSignIn(req.peer, "a trusted header: " + refused,
                   "trusted header");  // logged and audited
      HttpServerReply r{403, "text/plain; charset=utf-8",
                        "403: refused: " + refused + ". Nothing was granted.\n"};
      r.headers.push_back({"Cache-Control", "no-store"});
      return r;
    }
    if (s.role == Role::kNone) s = h;
  }
  if (s.repos && !RefreshForgeRoles(s)) s = {};
  if (s.role == Role::kNone) {
    if (IsPage(path) && (req.method == "GET" || req.method == "HEAD")) {
      return SignInPage(401, path + QueryWithout(req, ""), "");
    }
    return Unauthorized();
  }
  if (path == "/dash/api/action") {
    if (req.method != "POST") return Refuse(405, "actions are POSTed");
    return Action(req, s);
  }
  if (path == "/dash/api/logout") {
    if (req.method != "POST") return Refuse(405, "log-out is POSTed");
    return Logout(req, s);
  }
  if (path == "/dash/api/tokens" || path == "/dash/api/tokens/revoke") {
    return Tokens(req, s, path);
  }
  if (path == "/dash/api/audit") {
    if (req.method != "GET") return Refuse(405, "GET /dash/api/audit");
    return AuditPage(req, s);
  }
  if (req.method != "GET" && req.method != "HEAD") {
    return Refuse(405, req.method + " is not allowed here");
  }
  if (IsPage(path) || IsModule(path)) {
    std::string name = IsPage(path) ? "index.html" : path.substr(6);
    std::string type =
        name.ends_with(".mjs") ? "text/javascript; charset=utf-8" : "text/html; charset=utf-8";
    HttpServerReply r{200, type, std::string(DashboardAsset(name))};
    r.headers.push_back({"Cache-Control", "no-cache"});
    PageHeaders(r);
    return r;
  }
  if (path == "/dash/events") return Events(req);
  if (path.starts_with("/dash/api/")) return Data(req, path, s);
  return Refuse(404, "no route " + path);
}

namespace {

// The data routes, one function each (Dashboard::Data dispatches).

// Every experiment with batches: how many, its newest commit (from the
// batches alone: reading their runs grew with the whole history), and that
// batch's verdict as its commit status says it (CompareInFamily: the same
// family, correction and interval), null while it runs or has no baseline.
HttpServerReply ExperimentsRoute(Store& store) {
  auto summaries = store.runs().ExperimentSummaries();
  if (!summaries) return Refuse(503, summaries.error().message);
  json out = json::array();
  for (const auto& e : *summaries) {
    const auto& b = e.latest;
    json verdict = nullptr;
    if (auto c = CompareInFamily(store, b, /*compare_running=*/false);
        c && *c && ((*c)->cmp || (*c)->unchanged)) {
      verdict = {{"verdict", VerdictWord(**c)},
                 {"text", ComparisonText(**c)},
                 {"baseline_commit", (*c)->b.sha}};
    }
    out.push_back({{"repo", e.repo}, {"experiment", e.experiment}, {"metric", b.metric_name},
                   {"batches", e.batches}, {"latest_commit", b.sha},
                   {"latest_subject", b.subject}, {"latest_created_ms", b.created_ms},
                   {"latest_verdict", verdict}});
  }
  return JsonReply(200, {{"experiments", out}});
}

// Sweeps still adding points: the overview's list (the sweeps page reads the
// report's sweeps, with winners).
HttpServerReply SweepsRoute(Store& store) {
  auto sweeps = store.sweeps().List("running");
  if (!sweeps) return Refuse(503, sweeps.error().message);
  json out = json::array();
  for (const auto& sw : *sweeps) {
    auto points = store.sweeps().SweepPoints(sw.id);
    if (!points) return Refuse(503, points.error().message);
    json commit = json::parse(sw.commit_json, nullptr, false);
    out.push_back({{"id", sw.id},
                   {"experiment", sw.experiment},
                   {"commit", commit.is_object() ? commit.value("sha", "") : ""},
                   {"state", sw.state},
                   {"points", points->size()},
                   {"created_ms", sw.created_ms}});
  }
  return JsonReply(200, {{"sweeps", out}});
}

// The report's sweep plots (agent/results/sweep_plot.h), drawn from the store
// at each request: `ID` lists them, `ID/NAME.svg` is one.
HttpServerReply SweepPlotRoute(Store& store, const std::string& rest) {
  auto parts = Split(rest, '/');
  auto id = parts.empty() ? std::nullopt : ParseId(parts[0]);
  if (!id || parts.size() > 2) return Refuse(400, "expected /dash/api/sweep/ID[/NAME.svg]");
  auto view = LoadSweepView(store, *id);
  if (!view) return Refuse(StatusFor(view.error()), view.error().message);
  auto plots = SweepPlots(*view);
  if (parts.size() == 1) {
    json names = json::array();
    for (const auto& [name, svg] : plots) names.push_back(name);
    return JsonReply(200, {{"id", *id}, {"plots", names}});
  }
  auto it = plots.find(parts[1]);
  if (it == plots.end()) return Refuse(404, "sweep " + parts[0] + " has no plot " + parts[1]);
  HttpServerReply r{200, "image/svg+xml; charset=utf-8", it->second};
  r.headers.push_back({"Cache-Control", "no-store"});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'"});
  return r;
}

// The report's JSON (report.json of `trainq report --out`) for all
// experiments.
HttpServerReply ReportRoute(Store& store, const HttpServerRequest& req, TimeMs now) {
  ReportQuery q;
  q.format = "json";
  if (auto since = Param(req, "since")) q.since = *since;
  auto bytes = ReportBytes(store, q, now);
  if (!bytes) return Refuse(StatusFor(bytes.error()), bytes.error().message);
  HttpServerReply r{200, "application/json", std::move(*bytes)};
  r.headers.push_back({"Cache-Control", "no-store"});
  return r;
}

// A whole number query parameter in [lo, hi] (`fallback` when absent);
// kInvalidArgument naming it otherwise.
Result<size_t> SizeParam(const HttpServerRequest& req, const std::string& name, size_t fallback,
                         size_t lo, size_t hi) {
  auto text = Param(req, name);
  if (!text) return fallback;
  auto v = ParseId(*text);
  if (!v || static_cast<size_t>(*v) < lo || static_cast<size_t>(*v) > hi) {
    return Fail(ErrorKind::kInvalidArgument, name + ": expected a whole number from " +
                                                 std::to_string(lo) + " to " +
                                                 std::to_string(hi) + ", got \"" + *text + "\"");
  }
  return static_cast<size_t>(*v);
}

// The experiment page: one page of an experiment's history along a branch
// (?branch=, default each repository's default branch; ?page=, 0 the newest;
// ?per_page=), as report.json's experiments for that page's batches alone,
// each with its "history" (branch_history.h). The batch just older than the
// page is read too, for the first point's spread test, and left out.
HttpServerReply ExperimentRoute(Store& store, const HttpServerRequest& req,
                                const std::string& experiment) {
  std::vector<std::string> names{experiment};
  if (auto st = CheckReportExperiments(store, names, "experiment", "the store"); !st) {
    return Refuse(StatusFor(st.error()), st.error().message);
  }
  auto page = SizeParam(req, "page", 0, 0, 1'000'000);
  if (!page) return Refuse(400, page.error().message);
  auto per_page = SizeParam(req, "per_page", kHistoryPerPage, 1, kHistoryMaxPerPage);
  if (!per_page) return Refuse(400, per_page.error().message);
  auto pages =
      HistoryPages(store, experiment, Param(req, "branch").value_or(""), *page, *per_page);
  if (!pages) return Refuse(StatusFor(pages.error()), pages.error().message);
  ReportData all;
  all.window = "all";
  std::vector<json> histories;
  for (const auto& hp : *pages) {
    std::vector<std::int64_t> ids = hp.batch_ids;
    if (hp.before) ids.insert(ids.begin(), *hp.before);
    if (ids.empty()) ids.push_back(hp.newest);  // for the section's name and metric
    std::vector<BatchProgress> batches;
    for (auto id : ids) {
      auto b = store.runs().Batch(id);
      if (!b) return Refuse(503, b.error().message);
      if (*b) batches.push_back(std::move(**b));
    }
    auto r = ReportOfBatches(store, std::move(batches), "all", names, hp.reused_at);
    if (!r) return Refuse(StatusFor(r.error()), r.error().message);
    for (auto& er : r->experiments) {
      std::erase_if(er.entries, [&](const ReportEntry& e) {
        return std::find(hp.batch_ids.begin(), hp.batch_ids.end(), e.batch.id) ==
               hp.batch_ids.end();
      });
      for (const auto& e : er.entries) all.runs += static_cast<int>(e.runs.size());
      all.batches += static_cast<int>(er.entries.size());
      all.experiments.push_back(std::move(er));
      histories.push_back(hp.history);
    }
  }
  json j = json::parse(RenderJson(all), nullptr, false);
  if (j.is_discarded()) return Refuse(503, "the report is not JSON");
  for (size_t i = 0; i < histories.size() && i < j["experiments"].size(); ++i) {
    j["experiments"][i]["history"] = std::move(histories[i]);
  }
  return JsonReply(200, j);
}

// A run: its row, its metric's curve (at most 1000 points, evenly thinned)
// and the earlier rounds of attempts that ended before a retry
// (RunQueue::RetryRun).
HttpServerReply RunRoute(Store& store, const RunRow& run) {
  json j = {{"run", RunJson(run)}};
  std::vector<std::optional<std::int64_t>> leases;
  auto points = store.runs().Metrics(run.id, &leases);
  if (!points) return Refuse(503, points.error().message);
  // Each attempt (lease) of the run is its own curve: numbered 1, 2, ... in
  // the order they sent points (points from before schema 18 have no lease
  // and make one curve of their own).
  std::map<std::optional<std::int64_t>, int> attempt_of;
  for (const auto& lease : leases) {
    attempt_of.emplace(lease, static_cast<int>(attempt_of.size()) + 1);
  }
  json pts = json::array();
  size_t stride = std::max<size_t>(1, points->size() / 1000);
  for (size_t i = 0; i < points->size(); i += stride) {
    const auto& p = (*points)[i];
    pts.push_back({{"name", p.name},
                   {"value", p.value},
                   {"step", p.step ? json(*p.step) : json(nullptr)},
                   {"final", p.final},
                   {"attempt", attempt_of[leases[i]]}});
  }
  j["metrics"] = pts;
  j["metric_points"] = points->size();
  j["metric_attempts"] = attempt_of.size();
  auto retries = store.runs().Retries(run.id);
  if (!retries) return Refuse(503, retries.error().message);
  json rs = json::array();
  for (const auto& t : *retries) {
    rs.push_back({{"retried_ms", t.retried_ms},
                  {"who", t.who},
                  {"state", std::string(RunStateName(t.state))},
                  {"attempts", t.attempts},
                  {"exit_code", t.exit_code ? json(*t.exit_code) : json(nullptr)},
                  {"finished_ms", t.finished_ms ? json(*t.finished_ms) : json(nullptr)},
                  {"error", t.last_error}});
  }
  j["retries"] = rs;
  return JsonReply(200, j);
}

// A run's log bytes from `from` (the client's last size), at most
// `max_bytes`: the newest part when more is there. An old run's log that
// retention archived is read from its .gz, uncompressed (`archived`).
HttpServerReply RunLogRoute(const HttpServerRequest& req, const RunRow& run,
                           const std::string& data_dir, std::int64_t max_bytes) {
  std::string file = run.log_path;
  if (file.empty()) {
    file = (fs::path(data_dir) / "runs" / std::to_string(run.id) / "output.log").string();
  }
  std::int64_t from = 0;
  if (auto f = Param(req, "from")) from = ParseId(*f).value_or(0);
  auto tail = ReadLogTail(file, from, max_bytes);
  if (!tail) return Refuse(500, tail.error().message);
  return JsonReply(200, {{"run", run.id},
                         {"state", std::string(RunStateName(run.state))},
                         {"from", tail->from},
                         {"size", tail->from + static_cast<std::int64_t>(tail->bytes.size())},
                         {"skipped", tail->skipped},
                         {"archived", tail->archived},
                         {"text", tail->bytes}});
}

}  // namespace

HttpServerReply Dashboard::Data(const HttpServerRequest& req, const std::string& path,
                                const Session& s) {
  std::string rest = path.substr(std::string("/dash/api/").size());
  if (rest == "session") {
    return JsonReply(200, {{"role", RoleName(s.role)},
                           {"who", s.who},
                           {"person", s.person},
                           {"session", s.id.substr(0, 8)},
                           {"csrf", CsrfToken(s)}});
  }
  auto store = OpenRead(db_path_);
  if (!store) return Refuse(503, "the store " + db_path_ + " cannot be opened");
  const TimeMs now = clock_.Now();
  // A forge sign-in sees the repositories it has access to: every other
  // one's experiments, commits and runs answer 404, as if absent.
  auto visible = [&](const std::string& repo) { return RoleOn(s, repo) != Role::kNone; };
  // Drops the hidden repositories' entries (objects with a "repo") from
  // each top-level array of a reply.
  auto filtered = [&](HttpServerReply r) {
    if (!s.repos || r.status != 200) return r;
    json j = json::parse(r.body, nullptr, false);
    if (!j.is_object()) return r;
    for (auto& [k, v] : j.items()) {
      if (!v.is_array()) continue;
      json kept = json::array();
      for (auto& e : v) {
        if (e.is_object() && e.contains("repo") && e["repo"].is_string() &&
            !visible(e["repo"].get<std::string>())) {
          continue;
        }
        kept.push_back(std::move(e));
      }
      v = std::move(kept);
    }
    return JsonReply(200, j);
  };
  bool some_hidden = false;
  std::vector<RunQueue::ExperimentSummary> summaries;
  if (s.repos) {
    auto sums = store->runs().ExperimentSummaries();
    if (!sums) return Refuse(503, sums.error().message);
    summaries = std::move(*sums);
    for (const auto& e : summaries) some_hidden = some_hidden || !visible(e.repo);
  }
  if (rest == "status") {
    auto j = StatusJson(*store, db_path_, now);
    if (!j) return Refuse(503, j.error().message);
    return filtered(JsonReply(200, *j));
  }
  if (rest == "experiments") return filtered(ExperimentsRoute(*store));
  if (rest == "sweeps") {
    if (some_hidden) return JsonReply(200, {{"sweeps", json::array()}});
    return SweepsRoute(*store);
  }
  if ((rest.starts_with("sweep/") || rest == "report") && some_hidden) {
    return Refuse(404, "the report and sweeps span repositories " + s.who +
                           " has no access to; see each experiment's page");
  }
  if (rest == "notify") {  // each notify target's last delivery and last error (issue 43)
    auto j = NotifyTargetsJson(*store, config_);
    if (!j) return Refuse(503, j.error().message);
    return JsonReply(200, *j);
  }
  if (rest == "mlflow") {  // the MLflow export: last export, last error (issue 43)
    auto j = MlflowStatusJson(*store, config_);
    if (!j) return Refuse(503, j.error().message);
    if (s.repos && j->contains("servers")) {  // a repository this person cannot see is not named
      auto& servers = (*j)["servers"];
      for (auto it = servers.begin(); it != servers.end();) {
        const std::string scope = it->value("scope", "");
        it = scope != "every repository" && !visible(scope) ? servers.erase(it) : it + 1;
      }
    }
    return JsonReply(200, *j);
  }
  if (rest.starts_with("sweep/")) return SweepPlotRoute(*store, rest.substr(6));
  if (rest == "report") return ReportRoute(*store, req, now);
  if (rest.starts_with("experiment/")) {
    std::string name = rest.substr(std::string("experiment/").size());
    if (s.repos && std::none_of(summaries.begin(), summaries.end(), [&](const auto& e) {
          return e.experiment == name && visible(e.repo);
        })) {
      return Refuse(404, "no experiment \"" + name + "\"");
    }
    return ExperimentRoute(*store, req, name);
  }
  if (rest.starts_with("commit/")) {
    auto j = LoadCommitView(*store, rest.substr(7));
    if (!j) return Refuse(StatusFor(j.error()), j.error().message);
    if (s.repos && !visible(j->value("repo", ""))) {
      return Refuse(404, "no commit " + rest.substr(7));
    }
    return JsonReply(200, *j);
  }
  if (rest.starts_with("run/")) {
    auto parts = Split(rest.substr(4), '/');
    auto id = parts.empty() ? std::nullopt : ParseId(parts[0]);
    if (!id || parts.size() > 2) return Refuse(400, "expected /dash/api/run/ID[/log]");
    auto run = store->runs().Run(*id);
    if (!run) return Refuse(503, run.error().message);
    if (!*run) return Refuse(404, "no run " + parts[0]);
    if (s.repos) {
      auto b = store->runs().Batch((*run)->batch_id);
      if (!b) return Refuse(503, b.error().message);
      if (!*b || !visible((*b)->repo)) return Refuse(404, "no run " + parts[0]);
    }
    if (parts.size() == 1) {
      HttpServerReply r = RunRoute(*store, **run);
      if (r.status != 200) return r;
      // Who cancelled, retried or added seeds to this run or its batch.
      auto rows = store->access().AuditSince(
          0, 100, {"run " + std::to_string((*run)->id), "batch " + std::to_string((*run)->batch_id)});
      if (!rows) return Refuse(503, rows.error().message);
      json j = json::parse(r.body, nullptr, false);
      j["audit"] = AuditJson(*rows);
      return JsonReply(200, j);
    }
    if (parts[1] != "log") return Refuse(404, "no route " + path);
    return RunLogRoute(req, **run, data_dir_, options_.max_log_bytes);
  }
  return Refuse(404, "no route " + path);
}

HttpServerReply Dashboard::Action(const HttpServerRequest& req, const Session& s) {
  if (s.role < Role::kWrite) {
    spdlog::warn("dashboard: {} (read) was refused an action", s.who);
    return Refuse(403, "actions need a write role (" + s.who + " is read)");
  }
  if (!CsrfOk(req, s)) {
    spdlog::warn("dashboard: {}: an action without its CSRF token was refused", s.who);
    return Refuse(403, "missing or wrong X-CSRF-Token");
  }
  if (req.body_too_large) return Refuse(413, "body too large");
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object()) return Refuse(400, "the body is not a JSON object");
  std::string what = body.value("action", "");
  auto num = [&](const char* k) -> std::optional<std::int64_t> {
    if (!body.contains(k) || !body[k].is_number_integer()) return std::nullopt;
    return body[k].get<std::int64_t>();
  };
  StoreOptions so;
  so.create = false;
  auto store = Store::Open(db_path_, so);
  if (!store) return Refuse(503, store.error().message);
  TimeMs now = clock_.Now();
  const std::string& who = s.who;
  if (s.repos) {
    // A forge person's role is the one on the target's repository.
    std::optional<std::int64_t> batch_id = num("batch");
    if (what == "cancel_run" || what == "retry_run") {
      if (auto rid = num("run")) {
        auto run = store->runs().Run(*rid);
        if (!run) return Refuse(503, run.error().message);
        batch_id = *run ? std::optional((*run)->batch_id) : std::nullopt;
        if (!*run) return Refuse(404, "no run " + std::to_string(*rid));
      }
    }
    if (batch_id) {
      auto b = store->runs().Batch(*batch_id);
      if (!b) return Refuse(503, b.error().message);
      Role r = *b ? RoleOn(s, (*b)->repo) : Role::kNone;
      if (r == Role::kNone) return Refuse(404, "no batch " + std::to_string(*batch_id));
      if (r < Role::kWrite) {
        spdlog::warn("dashboard: {} (read on {}) was refused {}", s.who, (*b)->repo, what);
        return Refuse(403, "actions need a write role on the repository (" + s.who +
                               " can read " + (*b)->repo + ")");
      }
    }
  }
  auto audit = [&](const std::string& action, const std::string& target, const std::string& detail,
                   const std::string& text) {
    RecordAudit(*store, {0, now, who, action, target, detail, req.peer}, "dashboard", text);
  };
  if (what == "reset_pool") {
    // A pool spans every repository: resetting one is an admin's (a forge
    // person admin on every watched repository, an OIDC or trusted-header
    // admin, an admin token), as `trainq pools reset` is the operator's.
    if (s.role != Role::kAdmin) {
      spdlog::warn("dashboard: {} ({}) was refused reset_pool", s.who, RoleName(s.role));
      return Refuse(
          403, "resetting a pool needs an admin role (" + s.who + " is " + RoleName(s.role) + ")");
    }
    if (!body.contains("pool") || !body["pool"].is_string() ||
        body["pool"].get<std::string>().empty()) {
      return Refuse(400, "pool: expected a pool's name");
    }
    const std::string pool = body["pool"].get<std::string>();
    auto states = store->machines().PoolStates();
    if (!states) return Refuse(503, states.error().message);
    int failed = -1;
    for (const auto& p : *states) {
      if (p.pool == pool && (p.failed_boots > 0 || p.failing)) failed = p.failed_boots;
    }
    auto changed = failed < 0 ? Result<bool>(false) : store->machines().ResetPoolBoots(pool, now);
    if (!changed) return Refuse(503, changed.error().message);
    if (!*changed)
      return Refuse(409, "pool " + pool + ": no failed boots on record; nothing to reset");
    audit("pool_reset", "pool " + pool, std::to_string(failed) + " failed boot(s)",
          "reset pool " + pool + " (" + std::to_string(failed) + " failed boot(s) forgotten)");
    return JsonReply(200, {{"result", "ok"}, {"reset", pool}, {"failed_boots", failed}});
  }
  if (what == "cancel_batch" || what == "cancel_run") {
    bool batch = what == "cancel_batch";
    auto id = num(batch ? "batch" : "run");
    if (!id) return Refuse(400, std::string(batch ? "batch" : "run") + ": expected an id");
    auto n = batch ? store->runs().CancelBatch(*id, now) : store->runs().CancelRun(*id, now);
    if (!n) return Refuse(StatusFor(n.error()), n.error().message);
    std::string target = std::string(batch ? "batch " : "run ") + std::to_string(*id);
    audit(what, target, std::to_string(*n) + " run(s)",
          "cancelled " + target + " (" + std::to_string(*n) + " run(s))");
    return JsonReply(200, {{"result", "ok"}, {"cancelled", *n}});
  }
  if (what == "retry_run") {
    auto id = num("run");
    if (!id) return Refuse(400, "run: expected an id");
    if (auto st = store->runs().RetryRun(*id, now, who); !st) {
      return Refuse(StatusFor(st.error()), st.error().message);
    }
    audit(what, "run " + std::to_string(*id), "", "retried run " + std::to_string(*id));
    return JsonReply(200, {{"result", "ok"}, {"retried", *id}});
  }
  if (what == "add_seeds") {
    auto id = num("batch");
    auto k = num("seeds");
    if (!id) return Refuse(400, "batch: expected an id");
    if (!k || *k < 1 || *k > 100) return Refuse(400, "seeds: expected 1 to 100");
    auto b = store->runs().Batch(*id);
    if (!b) return Refuse(503, b.error().message);
    if (!*b) return Refuse(404, "no batch " + std::to_string(*id));
    std::int64_t total = 0;
    for (auto c : (*b)->counts) total += c;
    auto n = store->runs().ExtendBatch(*id, static_cast<int>(total + *k), now);
    if (!n) return Refuse(StatusFor(n.error()), n.error().message);
    audit(what, "batch " + std::to_string(*id), std::to_string(*n) + " seed(s)",
          "added " + std::to_string(*n) + " seed(s) to batch " + std::to_string(*id));
    return JsonReply(200, {{"result", "ok"}, {"added", *n}});
  }
  return Refuse(
      400, "action: expected cancel_batch, cancel_run, retry_run, add_seeds or reset_pool, got \"" +
               what + "\"");
}

void Dashboard::StartWatcher() {
  // REQUIRES: mu_ held.
  if (watcher_.joinable() || stopping_) return;
  watcher_ = std::thread([this] { Watch(); });
}

void Dashboard::Watch() {
  // The data version changes when another connection commits: the server's
  // own writes, workers' results and CLI submits alike (sql::Db::DataVersion,
  // on SQLite or PostgreSQL).
  std::optional<sql::Db> db;
  std::int64_t last = -1;
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.Unlock();
    if (!db) {
      auto d = sql::Db::Open(db_path_, false, 1000);
      if (d) db.emplace(std::move(*d));
    }
    std::int64_t v = -1;
    if (db) v = db->DataVersion().value_or(-1);
    lock.Lock();
    if (v >= 0 && v != last) {
      if (last >= 0) {
        ++generation_;
        cv_.notify_all();
      }
      last = v;
    }
    cv_.wait_for(lock.native(), std::chrono::milliseconds(options_.watch_ms),
                 [&]() REQUIRES(mu_) { return stopping_; });
  }
}

HttpServerReply Dashboard::Events(const HttpServerRequest& req) {
  // Last-Event-ID (or ?last=): "<boot>-<generation>". A client that missed a
  // change (another boot, an older generation) hears at once; else the
  // request waits for the next change, up to event_hold_ms, and the browser's
  // EventSource comes back after `retry`.
  std::string last = FindHeader(req.headers, "Last-Event-ID").value_or("");
  if (last.empty()) last = Param(req, "last").value_or("");
  MutexLock lock(mu_);
  StartWatcher();
  auto dash = last.find('-');
  bool known = dash != std::string::npos && last.substr(0, dash) == boot_;
  std::uint64_t seen = known ? ParseId(last.substr(dash + 1)).value_or(0) : 0;
  bool changed = !known || seen < generation_;
  if (!changed && !stopping_ && streams_ < options_.max_streams) {
    ++streams_;
    cv_.wait_for(lock.native(), std::chrono::milliseconds(options_.event_hold_ms),
                 [&]() REQUIRES(mu_) { return stopping_ || generation_ > seen; });
    --streams_;
    changed = generation_ > seen;
  }
  std::string id = boot_ + "-" + std::to_string(generation_);
  lock.Unlock();
  std::string body = "retry: 300\n";
  if (changed) {
    body += "id: " + id + "\nevent: change\ndata: {\"id\":\"" + id + "\"}\n\n";
  } else {
    body += ": nothing changed\n\n";
  }
  HttpServerReply r{200, "text/event-stream; charset=utf-8", body};
  r.headers.push_back({"Cache-Control", "no-store"});
  r.headers.push_back({"X-Accel-Buffering", "no"});
  return r;
}

namespace {

json TokenJson(const Access::TokenRow& t, TimeMs now) {
  return {{"id", t.id},
          {"name", t.name},
          {"owner", t.owner},
          {"role", t.role},
          {"created_by", t.created_by},
          {"created_ms", t.created_ms},
          {"expires_ms", t.expires_ms ? json(*t.expires_ms) : json(nullptr)},
          {"last_used_ms", t.last_used_ms ? json(*t.last_used_ms) : json(nullptr)},
          {"last_used_from", t.last_used_from},
          {"revoked_ms", t.revoked_ms ? json(*t.revoked_ms) : json(nullptr)},
          {"live", t.live(now)}};
}

// A token's name or owner: printable, at most 200 bytes.
bool PlainText(const std::string& s) {
  return !s.empty() && s.size() <= 200 && std::none_of(s.begin(), s.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
}

}  // namespace

// The account page's data. A person (a session made with a personal token)
// sees and makes their own tokens, with at most their own role; an admin
// sees everyone's and may make one for another person (`owner`), which is
// how the first personal tokens are given out. A shared read session has no
// person to own a token.
HttpServerReply Dashboard::Tokens(const HttpServerRequest& req, const Session& s,
                                  const std::string& path) {
  const bool admin = s.role == Role::kAdmin;
  if (!s.person && !admin) {
    return Refuse(403, "personal tokens belong to people: sign in with your own token (" + s.who +
                           " is a shared token)");
  }
  StoreOptions so;
  so.create = false;
  auto store = Store::Open(db_path_, so);
  if (!store) return Refuse(503, store.error().message);
  const TimeMs now = clock_.Now();
  if (req.method == "GET" && path == "/dash/api/tokens") {
    auto rows = store->access().ListTokens(admin ? "" : s.who);
    if (!rows) return Refuse(503, rows.error().message);
    json out = json::array();
    for (const auto& t : *rows) out.push_back(TokenJson(t, now));
    return JsonReply(200, {{"tokens", out}, {"who", s.who}, {"role", RoleName(s.role)}});
  }
  if (req.method != "POST") return Refuse(405, "GET or POST " + path);
  if (s.repos && path == "/dash/api/tokens") {
    // A token would carry one role to every repository, not the person's
    // per-repository access.
    return Refuse(403, "a GitHub sign-in cannot make personal tokens (they would not follow "
                       "the person's repository access); an admin makes them");
  }
  if (!CsrfOk(req, s)) {
    spdlog::warn("dashboard: {}: a token change without its CSRF token was refused", s.who);
    return Refuse(403, "missing or wrong X-CSRF-Token");
  }
  if (req.body_too_large) return Refuse(413, "body too large");
  json body = json::parse(req.body, nullptr, false);
  if (!body.is_object()) return Refuse(400, "the body is not a JSON object");
  if (path == "/dash/api/tokens/revoke") {
    if (!body.contains("id") || !body["id"].is_number_integer()) {
      return Refuse(400, "id: expected a token's id");
    }
    std::int64_t id = body["id"].get<std::int64_t>();
    auto t = store->access().GetToken(id);
    if (!t) return Refuse(503, t.error().message);
    if (!*t || (!admin && (*t)->owner != s.who)) return Refuse(404, "no token " + std::to_string(id));
    auto done = store->access().RevokeToken(id, now);
    if (!done) return Refuse(503, done.error().message);
    if (!*done) return Refuse(409, "token " + std::to_string(id) + " was revoked already");
    int ended = 0;
    {
      // Its sessions end now, not at their expiry.
      MutexLock lock(sessions_mu_);
      ended = static_cast<int>(std::erase_if(
          sessions_, [&](const auto& kv) { return kv.second.who.token_id == id; }));
      // And its unused one-time links (trainq dashboard-link with the token).
      std::erase_if(codes_, [&](const auto& kv) { return kv.second.who.token_id == id; });
    }
    std::string target = "token " + std::to_string(id) + " (" + (*t)->name + ")";
    RecordAudit(*store, {0, now, s.who, "token_revoked", target, "of " + (*t)->owner, req.peer},
                "dashboard",
                "revoked " + target + " of " + (*t)->owner + " (" + std::to_string(ended) +
                    " session(s) ended)");
    return JsonReply(200, {{"result", "ok"}, {"revoked", id}, {"sessions_ended", ended}});
  }
  if (path != "/dash/api/tokens") return Refuse(404, "no route " + path);
  std::string name = body.value("name", "");
  if (!PlainText(name)) return Refuse(400, "name: expected 1 to 200 printable characters");
  std::string owner = s.person ? s.who : "";
  if (body.contains("owner") && body["owner"].is_string() && !body["owner"].get<std::string>().empty()) {
    owner = body["owner"].get<std::string>();
  }
  if (owner != s.who && !admin) return Refuse(403, "only an admin makes tokens for others");
  if (!PlainText(owner)) {
    return Refuse(400, "owner: expected the person's name or email (1 to 200 printable characters)");
  }
  Role role = s.role;
  if (body.contains("role")) {
    auto r = body["role"].is_string() ? ParseRole(body["role"].get<std::string>()) : std::nullopt;
    if (!r) return Refuse(400, "role: expected read, write or admin");
    if (*r > s.role) {
      return Refuse(403, std::string("role: ") + RoleName(*r) + " is above your own (" +
                             RoleName(s.role) + ")");
    }
    role = *r;
  }
  std::optional<TimeMs> expires;
  std::int64_t days = 90;
  if (body.contains("days")) {
    if (!body["days"].is_number_integer() || body["days"].get<std::int64_t>() < 0 ||
        body["days"].get<std::int64_t>() > 3650) {
      return Refuse(400, "days: expected 0 (never expires) to 3650");
    }
    days = body["days"].get<std::int64_t>();
  }
  if (days > 0) expires = now + days * 24 * 3600'000LL;
  if (s.person && expires && s.token_id) {
    // A token made by a person expires no later than the token they signed in with.
    auto mine = store->access().GetToken(s.token_id);
    if (mine && *mine && (*mine)->expires_ms) expires = std::min(*expires, *(*mine)->expires_ms);
  }
  if (s.person && !expires && s.token_id) {
    auto mine = store->access().GetToken(s.token_id);
    if (mine && *mine && (*mine)->expires_ms) expires = (*mine)->expires_ms;
  }
  auto secret = NewPersonalToken();
  if (!secret) return Refuse(503, secret.error().message);
  Access::TokenRow t;
  t.hash = PersonalTokenHash(*secret);
  t.name = name;
  t.owner = owner;
  t.role = RoleName(role);
  t.created_by = s.who;
  t.created_ms = now;
  t.expires_ms = expires;
  auto id = store->access().AddToken(t);
  if (!id) return Refuse(503, id.error().message);
  std::string target = "token " + std::to_string(*id) + " (" + name + ")";
  RecordAudit(*store,
              {0, now, s.who, "token_created", target,
               "for " + owner + ", " + t.role +
                   (expires ? ", expires " + FormatTimestamp(*expires) + " UTC" : ", no expiry"),
               req.peer},
              "dashboard", "made " + target + " for " + owner + " (" + t.role + ")");
  t.id = *id;
  json j = TokenJson(t, now);
  j["token"] = *secret;  // shown once: the store keeps its hash only
  return JsonReply(200, j);
}

// The audit trail, for admins: ?since=7d (default), ?limit= (default 500).
HttpServerReply Dashboard::AuditPage(const HttpServerRequest& req, const Session& s) {
  if (s.role != Role::kAdmin) return Refuse(403, "the audit trail is for admins");
  std::int64_t since_s = 7 * 24 * 3600;
  if (auto since = Param(req, "since")) {
    auto v = ParseDurationSeconds(*since);
    if (!v) return Refuse(400, "since: " + v.error().message);
    since_s = *v;
  }
  auto limit = SizeParam(req, "limit", 500, 1, 10'000);
  if (!limit) return Refuse(400, limit.error().message);
  auto store = OpenRead(db_path_);
  if (!store) return Refuse(503, "the store " + db_path_ + " cannot be opened");
  auto rows = store->access().AuditSince(clock_.Now() - since_s * 1000, static_cast<int>(*limit));
  if (!rows) return Refuse(503, rows.error().message);
  return JsonReply(200, {{"audit", AuditJson(*rows)}, {"since_s", since_s}});
}

// ---- "Sign in with GitHub" (issue 41): the OAuth 2.0 code flow with state
// and PKCE (RFC 6749 section 4.1, RFC 7636), at GitHub's documented endpoints
// (docs.github.com, "Authorizing OAuth apps": /login/oauth/authorize,
// /login/oauth/access_token; REST: GET /user, GET /repos/OWNER/REPO).

namespace {

constexpr const char* kOAuthCookie = "trainq_oauth";

HttpServerReply RefusedSignIn(const std::string& text) {
  HttpServerReply r{403, "text/html; charset=utf-8",
                    "<!doctype html><meta charset=utf-8><title>Sign-in refused · trainq</title>"
                    "<link rel=stylesheet href=/dash/palette.css>"
                    "<link rel=stylesheet href=/dash/app.css><header><span class=brand>trainq"
                    "</span></header><main class=signin><section class=card><h1>Sign-in "
                    "refused</h1><p id=refused>" +
                        HtmlEscape(text) +
                        " Nothing was granted.</p><p><a href=/signin>Back to sign-in</a></p>"
                        "</section></main>\n"};
  r.headers.push_back({"Cache-Control", "no-store"});
  PageHeaders(r);
  return r;
}

// j[k] when it is a string, else "" (json::value would throw on another
// type, and these documents are the forge's or issuer's to choose).
std::string JsonStr(const json& j, const char* k) {
  auto it = j.is_object() ? j.find(k) : j.end();
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string ScopeList(const std::vector<std::string>& scopes) {
  std::string out;
  for (const auto& s : scopes) out += (out.empty() ? "" : " ") + s;
  return out;
}

HttpHeaders GithubApiHeaders(const std::string& token) {
  return {{"Accept", "application/vnd.github+json"},
          {"Authorization", "Bearer " + token},
          {"X-GitHub-Api-Version", "2022-11-28"},
          {"User-Agent", "trainq"}};
}

}  // namespace

std::string Dashboard::CallbackUrl(const HttpServerRequest& req, const std::string& door) const {
  return BaseUrl(req) + "/signin/" + door + "/callback";
}

HttpServerReply Dashboard::OAuthRedirect(const HttpServerRequest& req, const std::string& door,
                                         const std::string& authorize, const std::string& params,
                                         bool with_nonce) {
  auto state = RandomHex(16);
  auto verifier = RandomHex(32);  // 64 characters of [0-9a-f]: a valid code_verifier
  auto browser = RandomHex(16);
  auto nonce = RandomHex(16);
  if (!state || !verifier || !browser || !nonce) return Refuse(503, "no random bytes for a sign-in");
  const TimeMs now = clock_.Now();
  {
    MutexLock lock(sessions_mu_);
    std::erase_if(oauth_, [&](const auto& kv) { return kv.second.expires_ms <= now; });
    while (oauth_.size() >= options_.max_login_links) {
      auto oldest = std::min_element(oauth_.begin(), oauth_.end(), [](const auto& a, const auto& b) {
        return a.second.expires_ms < b.second.expires_ms;
      });
      oauth_.erase(oldest);
    }
    oauth_[Sha256Hex(*state)] = {door, *verifier, Sha256Hex(*browser),
                                 with_nonce ? *nonce : std::string(),
                                 SafeNext(Param(req, "next").value_or("/")),
                                 now + options_.oauth_state_ms};
  }
  std::string url = authorize + (authorize.find('?') == std::string::npos ? "?" : "&") + params +
                    "&redirect_uri=" + UrlEncode(CallbackUrl(req, door)) + "&state=" + *state +
                    "&code_challenge=" + Sha256Base64Url(*verifier) +
                    "&code_challenge_method=S256" + (with_nonce ? "&nonce=" + *nonce : "");
  HttpServerReply r{302, "text/plain; charset=utf-8", "to the sign-in\n"};
  r.headers.push_back({"Location", url});
  r.headers.push_back({"Cache-Control", "no-store"});
  // Lax: the browser sends it back on the forge's or issuer's redirect (a
  // top-level GET from another site); it binds the state to this browser.
  r.headers.push_back(
      {"Set-Cookie", std::string(kOAuthCookie) + "=" + *browser + "; Path=/signin/" + door +
                         "; HttpOnly; SameSite=Lax; Max-Age=" +
                         std::to_string(options_.oauth_state_ms / 1000) +
                         (secure_cookie_ ? "; Secure" : "")});
  return r;
}

HttpServerReply Dashboard::RefuseSignIn(const HttpServerRequest& req, const std::string& door,
                                        const std::string& label, const std::string& why,
                                        const std::string& page) {
  FailedSignIn(req.peer, label + ": " + why, door);
  HttpServerReply r = RefusedSignIn(page);
  r.headers.push_back({"Set-Cookie", std::string(kOAuthCookie) + "=; Path=/signin/" + door +
                                         "; HttpOnly; SameSite=Lax; Max-Age=0" +
                                         (secure_cookie_ ? "; Secure" : "")});
  return r;
}

std::optional<HttpServerReply> Dashboard::OAuthReturn(const HttpServerRequest& req,
                                                      const std::string& door,
                                                      const std::string& label,
                                                      OAuthPending* pending, std::string* code) {
  std::string state = Param(req, "state").value_or("");
  bool found = false;
  {
    const TimeMs now = clock_.Now();
    MutexLock lock(sessions_mu_);
    auto it = state.empty() ? oauth_.end() : oauth_.find(Sha256Hex(state));
    if (it != oauth_.end()) {
      // Another door's state is as unknown here as a forged one.
      found = it->second.expires_ms > now && it->second.door == door;
      *pending = it->second;
      oauth_.erase(it);  // once, whatever follows
    }
  }
  if (!found) {
    return RefuseSignIn(req, door, label,
                        state.empty() ? "a callback without state" : "an unknown, used or expired state",
                        "This sign-in did not start here, was used already or took too long "
                        "(a missing or unknown state). Start again from the sign-in page.");
  }
  if (!ConstantTimeEquals(Sha256Hex(CookieValue(req.headers, kOAuthCookie)), pending->browser)) {
    return RefuseSignIn(req, door, label, "a state from another browser",
                        "This sign-in was started in another browser (its state is not this "
                        "browser's).");
  }
  if (auto err = Param(req, "error")) {
    std::string e = err->substr(0, 64);
    return RefuseSignIn(req, door, label, label + " answered " + e,
                        label + " did not authorize trainq (" + e + ").");
  }
  *code = Param(req, "code").value_or("");
  if (code->empty()) {
    return RefuseSignIn(req, door, label, "a callback without code", label + " sent no code.");
  }
  return std::nullopt;
}

HttpServerReply Dashboard::FinishSignIn(const Principal& p, const OAuthPending& pending,
                                        const std::string& door, const std::string& peer,
                                        const std::string& forge_token, const std::string& name) {
  const ForgeAuthConfig* forge = door == "github"   ? &config_.auth.github
                                 : door == "gitlab" ? &config_.auth.gitlab
                                 : door == "gitea"  ? &config_.auth.gitea
                                                    : nullptr;
  HttpServerReply r = StartSession(p, pending.next, door.c_str(), peer, forge_token, forge);
  if (r.status != 303) return r;
  // The session cookie is SameSite=Strict, and this answer ends a redirect
  // from another site: a page of this site moves on, so the cookie goes along.
  std::string to = LocationOf(SafeNext(pending.next));
  r.status = 200;
  r.content_type = "text/html; charset=utf-8";
  r.body = "<!doctype html><meta charset=utf-8><meta http-equiv=refresh content=\"0;url=" +
           HtmlEscape(to) + "\"><title>Signed in</title><p>Signed in as " + HtmlEscape(name) +
           ". <a href=\"" + HtmlEscape(to) + "\">Continue</a></p>\n";
  std::erase_if(r.headers, [](const auto& h) { return h.first == "Location"; });
  r.headers.push_back({"Set-Cookie", std::string(kOAuthCookie) + "=; Path=/signin/" + door +
                                         "; HttpOnly; SameSite=Lax; Max-Age=0" +
                                         (secure_cookie_ ? "; Secure" : "")});
  PageHeaders(r);
  return r;
}

// ---- The forge doors: GitHub, GitLab and Gitea differ only in where the
// OAuth pages and API calls are and in how a repository's permission reads.
//   GitHub (docs.github.com, "Authorizing OAuth apps"; REST "Get a repository"):
//     WEB/login/oauth/authorize, WEB/login/oauth/access_token, API/user (login),
//     API/repos/OWNER/NAME's permissions {admin, maintain, push, triage, pull}.
//   GitLab (docs.gitlab.com, "OAuth 2.0 identity provider API"; "Projects API"):
//     WEB/oauth/authorize, WEB/oauth/token, API/user (username),
//     API/projects/ENCODED_PATH's permissions.{project,group}_access.access_level.
//   Gitea (docs.gitea.com, "OAuth2 provider"; API "repoGet"):
//     WEB/login/oauth/authorize, WEB/login/oauth/access_token, API/user
//     (login), API/repos/OWNER/NAME's permissions {admin, push, pull}.

namespace {

struct ForgeSpec {
  const char* door;   // "github": /signin/github
  const char* label;  // "GitHub": pages and log lines
  const char* authorize;
  const char* token;
  const char* scope;
  const char* extra;  // more authorize parameters
  const char* user_field;
};

const ForgeSpec& SpecOf(ForgeKind kind) {
  static const ForgeSpec github{"github", "GitHub", "/login/oauth/authorize",
                                "/login/oauth/access_token", "repo", "&allow_signup=false",
                                "login"};
  static const ForgeSpec gitlab{"gitlab", "GitLab", "/oauth/authorize", "/oauth/token",
                                "read_api", "&response_type=code", "username"};
  static const ForgeSpec gitea{"gitea", "Gitea", "/login/oauth/authorize",
                               "/login/oauth/access_token", "read:user read:repository",
                               "&response_type=code", "login"};
  return kind == ForgeKind::kGitlab ? gitlab : kind == ForgeKind::kGitea ? gitea : github;
}

HttpHeaders ForgeApiHeaders(ForgeKind kind, const std::string& token) {
  if (kind == ForgeKind::kGithub) return GithubApiHeaders(token);
  return {{"Accept", "application/json"},
          {"Authorization", "Bearer " + token},
          {"User-Agent", "trainq"}};
}

// The role a repository's answer gives (kNone: none).
AccessRole RoleOfRepository(ForgeKind kind, const json& j) {
  if (!j.is_object() || !j.contains("permissions") || !j["permissions"].is_object()) {
    return AccessRole::kNone;
  }
  const json& perm = j["permissions"];
  if (kind == ForgeKind::kGitlab) {
    // 10 guest, 20 reporter, 30 developer, 40 maintainer, 50 owner; the
    // higher of the project's own and its group's. A guest cannot read a
    // private project's code, so it sees nothing here.
    int level = 0;
    for (const char* k : {"project_access", "group_access"}) {
      const json a = perm.contains(k) ? perm[k] : json();
      if (a.is_object() && a.contains("access_level") && a["access_level"].is_number_integer()) {
        level = std::max(level, a["access_level"].get<int>());
      }
    }
    return level >= 40 ? AccessRole::kAdmin
           : level >= 30 ? AccessRole::kWrite
           : level >= 20 ? AccessRole::kRead
                         : AccessRole::kNone;
  }
  auto flag = [&](const char* k) {
    auto it = perm.find(k);
    return it != perm.end() && it->is_boolean() && it->get<bool>();
  };
  return flag("admin")                     ? AccessRole::kAdmin
         : flag("maintain") || flag("push") ? AccessRole::kWrite
         : flag("triage") || flag("pull")   ? AccessRole::kRead
                                            : AccessRole::kNone;
}

}  // namespace

HttpServerReply Dashboard::ForgeStart(const HttpServerRequest& req, const ForgeAuthConfig& f) {
  const ForgeSpec& spec = SpecOf(f.kind);
  return OAuthRedirect(req, spec.door, f.web_url + spec.authorize,
                       "client_id=" + UrlEncode(f.client_id) + "&scope=" + UrlEncode(spec.scope) +
                           spec.extra,
                       false);
}

HttpServerReply Dashboard::ForgeCallback(const HttpServerRequest& req, const ForgeAuthConfig& f) {
  const ForgeSpec& spec = SpecOf(f.kind);
  const std::string label = spec.label;
  auto refuse = [&](const std::string& why, const std::string& page) {
    return RefuseSignIn(req, spec.door, label, why, page);
  };
  OAuthPending pending;
  std::string code;
  if (auto r = OAuthReturn(req, spec.door, label, &pending, &code)) return *r;
  // The code for a token: the secret travels in the body only.
  HttpRequest tr;
  tr.method = "POST";
  tr.url = f.web_url + spec.token;
  tr.headers = {{"Accept", "application/json"},
                {"Content-Type", "application/x-www-form-urlencoded"},
                {"User-Agent", "trainq"}};
  tr.body = "client_id=" + UrlEncode(f.client_id) +
            "&client_secret=" + UrlEncode(f.client_secret.value) + "&code=" + UrlEncode(code) +
            "&redirect_uri=" + UrlEncode(CallbackUrl(req, spec.door)) +
            "&code_verifier=" + UrlEncode(pending.verifier);
  // RFC 6749 section 4.1.3 (GitLab and Gitea require it; GitHub needs none).
  if (f.kind != ForgeKind::kGithub) tr.body += "&grant_type=authorization_code";
  auto tresp = http_->Send(tr);
  if (!tresp) {
    return refuse("the token request failed: " + tresp.error().message,
                  label + " could not be reached to finish the sign-in.");
  }
  json tj = json::parse(tresp->body, nullptr, false);
  std::string token = JsonStr(tj, "access_token");
  if (!tresp->ok() || token.empty()) {
    std::string e = JsonStr(tj, "error").substr(0, 64);
    return refuse("the code was refused (" + std::to_string(tresp->status) + " " +
                      (e.empty() ? "no access_token" : e) + ")",
                  label + " refused the code (" + (e.empty() ? "no token" : e) +
                      "): it was used already, expired or is not this app's.");
  }
  HttpRequest ur;
  ur.url = f.api_url + "/user";
  ur.headers = ForgeApiHeaders(f.kind, token);
  auto uresp = http_->Send(ur);
  json uj = uresp && uresp->ok() ? json::parse(uresp->body, nullptr, false) : json();
  std::string login = JsonStr(uj, spec.user_field);
  if (login.empty() || login.size() > 100 ||
      std::any_of(login.begin(), login.end(), [](char c) {
        return !(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.');
      })) {
    return refuse("GET /user gave no " + std::string(spec.user_field),
                  label + " did not say who you are.");
  }
  auto roles = ForgeRepoRoles(f, token);
  if (!roles) {
    return refuse(login + ": the repository access could not be read: " + roles.error().message,
                  "Your access to the watched repositories could not be read from " + label + ".");
  }
  Principal p;
  p.who = login + " (" + spec.door + ")";
  p.person = true;
  p.role = OverallRole(*roles);
  if (p.role == Role::kNone) {
    return refuse(login + " has no access to any watched repository",
                  login + " on " + label + " has no access to any repository this server watches.");
  }
  p.repos = std::make_shared<const std::map<std::string, Role>>(std::move(*roles));
  return FinishSignIn(p, pending, spec.door, req.peer, token, login);
}

Dashboard::Role Dashboard::OverallRole(const std::map<std::string, Role>& roles) {
  Role top = Role::kNone;
  bool all_admin = !roles.empty();
  for (const auto& [repo, role] : roles) {
    top = std::max(top, role);
    all_admin = all_admin && role == Role::kAdmin;
  }
  // Admin (the audit trail, everyone's tokens) spans every repository.
  return top == Role::kAdmin && !all_admin ? Role::kWrite : top;
}

Result<std::map<std::string, Dashboard::Role>> Dashboard::ForgeRepoRoles(const ForgeAuthConfig& f,
                                                                        const std::string& token) {
  std::map<std::string, Role> out;
  for (const auto& repo : config_.repositories) {
    if (repo.forge != f.kind || repo.project.empty()) continue;
    HttpRequest r;
    r.url = f.kind == ForgeKind::kGitlab ? f.api_url + "/projects/" + UrlEncode(repo.project)
                                         : f.api_url + "/repos/" + repo.project;
    r.headers = ForgeApiHeaders(f.kind, token);
    ASSIGN_OR_RETURN(auto resp, http_->Send(r));
    // Each forge's answer for a private repository one cannot see.
    if (resp.status == 404) continue;
    if (resp.status == 401) {
      return Fail(ErrorKind::kInvalidArgument,
                  "the " + std::string(SpecOf(f.kind).label) + " token is no longer valid");
    }
    if (!resp.ok()) {
      return Fail(ErrorKind::kUnavailable,
                  "GET " + UrlForLog(r.url).substr(f.api_url.size()) + " answered " +
                      std::to_string(resp.status));
    }
    Role role = RoleOfRepository(f.kind, json::parse(resp.body, nullptr, false));
    // By the store's name of the repository (batches' `repo`); two watched
    // repositories of one name get the lower of the two roles.
    std::string name = RepoName(repo.url);
    auto [it, fresh] = out.emplace(name, role);
    if (!fresh) it->second = std::min(it->second, role);
  }
  std::erase_if(out, [](const auto& kv) { return kv.second == Role::kNone; });
  return out;
}

// ---- "Sign in with OIDC" (issue 41): discovery, the code flow with PKCE and
// nonce (OpenID Connect Core 1.0, section 3.1), the ID token checked by
// OidcIssuer (agent/daemon/oidc.h); roles from auth.oidc's lists (else
// auth's), by the token's email and groups.

HttpServerReply Dashboard::OidcStart(const HttpServerRequest& req) {
  const OidcAuthConfig& c = config_.auth.oidc;
  auto e = oidc_->Discover();
  if (!e) {
    spdlog::warn("dashboard: OIDC: {}", e.error().message);
    return RefusedSignIn("The identity provider (" + c.issuer + ") could not be reached.");
  }
  return OAuthRedirect(req, "oidc", e->authorization,
                       "response_type=code&client_id=" + UrlEncode(c.client_id) +
                           "&scope=" + UrlEncode(ScopeList(c.scopes)),
                       true);
}

HttpServerReply Dashboard::OidcCallback(const HttpServerRequest& req) {
  const OidcAuthConfig& c = config_.auth.oidc;
  const std::string label = c.label;
  auto refuse = [&](const std::string& why, const std::string& page) {
    return RefuseSignIn(req, "oidc", label, why, page);
  };
  OAuthPending pending;
  std::string code;
  if (auto r = OAuthReturn(req, "oidc", label, &pending, &code)) return *r;
  auto e = oidc_->Discover();
  if (!e) return refuse(e.error().message, "The identity provider could not be reached.");
  // The code for tokens (section 3.1.3.1): the client authenticates with
  // HTTP Basic (client_secret_basic) unless the issuer takes only the body.
  HttpRequest tr;
  tr.method = "POST";
  tr.url = e->token;
  tr.headers = {{"Accept", "application/json"},
                {"Content-Type", "application/x-www-form-urlencoded"},
                {"User-Agent", "trainq"}};
  tr.body = "grant_type=authorization_code&code=" + UrlEncode(code) +
            "&redirect_uri=" + UrlEncode(CallbackUrl(req, "oidc")) +
            "&code_verifier=" + UrlEncode(pending.verifier);
  if (e->basic_auth) {
    // RFC 6749 section 2.3.1: each form-encoded, then joined by ':'.
    tr.headers.push_back({"Authorization", "Basic " + Base64(UrlEncode(c.client_id) + ":" +
                                                             UrlEncode(c.client_secret.value))});
  } else {
    tr.body += "&client_id=" + UrlEncode(c.client_id) +
               "&client_secret=" + UrlEncode(c.client_secret.value);
  }
  auto tresp = http_->Send(tr);
  if (!tresp) {
    return refuse("the token request failed: " + tresp.error().message,
                  "The identity provider could not be reached to finish the sign-in.");
  }
  json tj = json::parse(tresp->body, nullptr, false);
  std::string id_token = JsonStr(tj, "id_token");
  if (!tresp->ok() || id_token.empty()) {
    std::string err = JsonStr(tj, "error");
    err = err.substr(0, 64);
    return refuse("the code was refused (" + std::to_string(tresp->status) + " " +
                      (err.empty() ? "no id_token" : err) + ")",
                  "The identity provider refused the code (" + (err.empty() ? "no ID token" : err) +
                      "): it was used already, expired or is not this client's.");
  }
  auto claims = oidc_->Verify(id_token, pending.nonce);
  if (!claims) {
    return refuse(claims.error().message,
                  "The identity provider's answer did not pass trainq's checks: " +
                      claims.error().message + ".");
  }
  // Who: the email, when the issuer does not say it is unverified; else the
  // preferred user name; else the subject.
  auto str = [&](const char* k) {
    auto it = claims->find(k);
    return it != claims->end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto verified = claims->find("email_verified");
  const bool unverified = verified != claims->end() &&
                          (*verified == false || *verified == "false");  // Cognito sends a string
  std::string email = unverified ? "" : str("email");
  std::string name = !email.empty()                       ? email
                     : !str("preferred_username").empty() ? str("preferred_username")
                                                          : str("sub");
  name = name.substr(0, 200);
  std::vector<std::string> groups;
  if (auto g = claims->find("groups"); g != claims->end() && g->is_array()) {
    for (const auto& x : *g) {
      if (x.is_string()) groups.push_back(x);
    }
  }
  const RoleLists& lists = c.roles_given ? c.roles : static_cast<const RoleLists&>(config_.auth);
  Principal p;
  p.who = name + " (oidc)";
  p.person = true;
  p.role = RoleFromLists(lists, name, groups);
  if (p.role == Role::kNone) {
    return refuse(name + " is in none of the admins, writers or viewers lists",
                  name + " is in none of this server's admins, writers or viewers lists.");
  }
  return FinishSignIn(p, pending, "oidc", req.peer, "", name);
}

bool Dashboard::RefreshForgeRoles(Session& s) {
  const TimeMs now = clock_.Now();
  std::string token;
  const ForgeAuthConfig* forge = nullptr;
  {
    MutexLock lock(sessions_mu_);
    auto it = sessions_.find(s.id);
    if (it == sessions_.end()) return s.id.starts_with("hdr-");
    SessionEntry& e = it->second;
    if (e.forge_token.empty() || e.refreshing || now - e.roles_ms < options_.forge_refresh_ms) {
      return true;
    }
    e.refreshing = true;  // one request reads them; the others go on with the cached roles
    token = e.forge_token;
    forge = e.forge;
  }
  if (forge == nullptr) return true;
  auto roles = ForgeRepoRoles(*forge, token);
  MutexLock lock(sessions_mu_);
  auto it = sessions_.find(s.id);
  if (it == sessions_.end()) return false;
  SessionEntry& e = it->second;
  e.refreshing = false;
  if (!roles) {
    if (roles.error().kind == ErrorKind::kInvalidArgument) {
      spdlog::info("dashboard: {}: the {} token was revoked; the session ends", s.who,
                   SpecOf(forge->kind).label);
      sessions_.erase(it);
      return false;
    }
    spdlog::warn("dashboard: {}: the repository access could not be read again ({}); the "
                 "roles read before are kept", s.who, roles.error().message);
    e.roles_ms = now;
    return true;
  }
  Role top = OverallRole(*roles);
  e.who.repos = std::make_shared<const std::map<std::string, Role>>(std::move(*roles));
  e.who.role = top;
  e.roles_ms = now;
  if (top == Role::kNone) {
    spdlog::info("dashboard: {} no longer has access to any watched repository; the session ends",
                 s.who);
    sessions_.erase(it);
    return false;
  }
  s.role = top;
  s.repos = e.who.repos;
  return true;
}

}  // namespace trainq
