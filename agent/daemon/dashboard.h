// The live web dashboard of `trainq serve`, on its HTTP listener:
//   GET  /, /experiment/NAME, /commit/SHA, /run/ID, /machines, /sweeps
//                                   the page (one HTML page, its ES modules and CSS compiled in)
//   GET  /signin, POST /signin      the sign-in page and its form (token=, next=)
//   GET  /signin/FORGE[/callback]   "Sign in with GitHub" (auth.github; gitlab, gitea alike): the OAuth
//                                   code flow with state and PKCE; roles from the
//                                   person's access to each watched repository
//   GET  /signin/oidc[/callback]    "Sign in with OIDC" (auth.oidc): discovery, the
//                                   code flow with PKCE and nonce, the ID token
//                                   verified against the issuer's keys (oidc.h)
//   GET  /dash/NAME.mjs             the modules (agent/daemon/web/*.mjs), with a session
//   GET  /dash/app.css, /dash/palette.css
//                                   the style and the colours (agent/results/palette.h)
//   GET  /dash/api/...              the documents the CLI prints (status, show --json,
//                                   report json), a run's log tail and metric curve
//   GET  /dash/events               server-sent events: "the store changed"
//   GET  /account, /audit           a person's tokens; the audit trail (admins)
//   POST /dash/api/action           cancel a batch or a run, add seeds (a write role)
//   GET  /dash/api/tokens           the session's person's personal tokens (an admin: all)
//   POST /dash/api/tokens           a new personal token, shown once
//   POST /dash/api/tokens/revoke    revokes one (its owner, or an admin)
//   GET  /dash/api/audit            the audit trail (admins)
//   POST /dash/api/logout           ends the session (its CSRF token)
//   POST /dash/api/login-link       a one-time sign-in link, for the bearer of the
//                                   read or admin token (`trainq dashboard-link`)
// Access (issue 36): a session, made by the sign-in form (the read or admin
// token POSTed, never in an address) or by a one-time link (`?login=CODE`,
// made by serve at start or by login-link, valid login_link_ms, gone once
// used), is kept in this process's memory and named by an HttpOnly,
// SameSite=Strict cookie (Secure when public_url is https). A session ends
// after session_idle_ms without a request, session_max_ms after sign-in, at
// log-out, or when serve stops. Without a session a page answers the sign-in
// page (401) and every other route 401 with no data. Actions and log-out need
// the session's CSRF token in the X-CSRF-Token header; actions need a write
// role and are audited with who (agent/daemon/access.h).
// People (issue 41): the sign-in form also takes a personal token, and the
// session is then that person's, with their token's role, until the token
// expires or is revoked (revoking ends its sessions at once).
// Threading: Handle() is called from the listener's threads at once; each
// data request opens its own read connection. One watcher thread (started by
// the first events request) polls the store's data_version and wakes the
// event streams. The sessions and codes are behind their own mutex.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "agent/daemon/access.h"
#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/log.h"
#include "core/thread_annotations.h"

namespace trainq {

struct DashboardOptions {
  TimeMs event_hold_ms = 15'000;  // an events request waits this long for a change
  TimeMs watch_ms = 200;          // the watcher reads data_version this often
  int max_streams = 64;           // events requests waiting at once; more answer at once
  std::int64_t max_log_bytes = 64 << 10;  // one log request returns at most this much
  TimeMs session_idle_ms = 12 * 3600'000LL;      // a session unused this long ends
  TimeMs session_max_ms = 30 * 24 * 3600'000LL;  // and any session this long after sign-in
  TimeMs login_link_ms = 10 * 60'000;            // a one-time link is good this long
  std::size_t max_sessions = 4096;  // past it, the least recently used session ends
  std::size_t max_login_links = 256;  // unused links kept; past it, the oldest goes
  TimeMs wrong_token_log_ms = 60'000;  // one "wrong token" warning per this, with a count
  TimeMs oauth_state_ms = 10 * 60'000;    // a forge sign-in must come back within this
  TimeMs forge_refresh_ms = 5 * 60'000;   // a forge person's repository roles are read again
                                          // at most this often (never on every request)
};

class OidcIssuer;

class Dashboard {
 public:
  Dashboard(const ServerConfig& config, std::string db_path, std::string data_dir,
            const Clock& clock, DashboardOptions options = {});
  ~Dashboard();  // stops the watcher
  Dashboard(const Dashboard&) = delete;
  Dashboard& operator=(const Dashboard&) = delete;

  // Whether `path` (trailing slashes removed) is one of the dashboard's.
  static bool Owns(const std::string& path);
  HttpServerReply Handle(const HttpServerRequest& request, const std::string& path);
  // The line serve logs at start for `listen` ("127.0.0.1:8080"): a one-time
  // read link, "http://127.0.0.1:8080/?login=CODE", and how to sign in after
  // it was used or expired.
  std::string StartLine(const std::string& listen);
  // Whether the request's cookie names a live session (the listener's trust).
  bool SignedIn(const HttpServerRequest& request);
  // Waiting event streams answer now and new ones do not wait (shutdown).
  void Stop();

 private:
  using Role = AccessRole;
  struct Session {
    Role role = Role::kNone;
    std::string id;   // the cookie's nonce
    std::string who;  // ada@example.com, or "admin token (session 7c1e03aa)"
    std::int64_t token_id = 0;  // the personal token it was made with
    bool person = false;
    // A forge sign-in: the role on each watched repository (by the store's
    // name of it, RepoName); absent
    // = hidden (404). Null: every repository at `role`.
    std::shared_ptr<const std::map<std::string, Role>> repos = nullptr;
  };
  // The session's role on repository `repo` (kNone: hidden from it).
  static Role RoleOn(const Session& s, const std::string& repo);
  // "Sign in with GitHub/GitLab/Gitea" (auth.github, gitlab, gitea): GET
  // /signin/FORGE starts the OAuth code flow (state + PKCE S256); GET
  // /signin/FORGE/callback finishes it. One door for the three: they differ
  // in endpoints and in how a repository's permission reads (dashboard.cc).
  HttpServerReply ForgeStart(const HttpServerRequest& req, const ForgeAuthConfig& f);
  HttpServerReply ForgeCallback(const HttpServerRequest& req, const ForgeAuthConfig& f);
  // The person's role on each watched repository of forge `f`, read with
  // their own token (GitHub, Gitea: GET /repos/OWNER/NAME's `permissions`;
  // GitLab: GET /projects/PATH's access levels).
  Result<std::map<std::string, Role>> ForgeRepoRoles(const ForgeAuthConfig& f,
                                                     const std::string& token);
  // The session's role from those: the highest, but admin only when admin
  // on every one (admin pages span all repositories).
  static Role OverallRole(const std::map<std::string, Role>& roles);
  // "Sign in with OIDC" (auth.oidc): GET /signin/oidc (discovery, then the
  // code flow with state, PKCE and nonce); GET /signin/oidc/callback checks
  // the ID token (OidcIssuer) and gives the role of auth.oidc's lists.
  HttpServerReply OidcStart(const HttpServerRequest& req);
  HttpServerReply OidcCallback(const HttpServerRequest& req);
  struct OAuthPending;
  // What every door shares. OAuthRedirect: a one-time state (bound to this
  // browser by a SameSite=Lax cookie on /signin/DOOR), a PKCE S256
  // challenge and, `with_nonce`, a nonce; the 302 to `authorize` with
  // `params` and those. OAuthReturn: the callback's state (spent at once),
  // browser, error and code checks; a refusal page, or nullopt with
  // `pending` and `code` filled. FinishSignIn: the session and the page
  // that moves on to `next`. RefuseSignIn: the 403 page, a log line and a
  // login_failed row ("LABEL: why").
  std::string CallbackUrl(const HttpServerRequest& req, const std::string& door) const;
  HttpServerReply OAuthRedirect(const HttpServerRequest& req, const std::string& door,
                                const std::string& authorize, const std::string& params,
                                bool with_nonce);
  std::optional<HttpServerReply> OAuthReturn(const HttpServerRequest& req, const std::string& door,
                                             const std::string& label, OAuthPending* pending,
                                             std::string* code);
  HttpServerReply FinishSignIn(const Principal& p, const OAuthPending& pending,
                               const std::string& door, const std::string& peer,
                               const std::string& forge_token, const std::string& name);
  HttpServerReply RefuseSignIn(const HttpServerRequest& req, const std::string& door,
                               const std::string& label, const std::string& why,
                               const std::string& page);
  // Reads a forge session's roles again when forge_refresh_ms passed; false
  // when its token no longer works (the session was ended).
  bool RefreshForgeRoles(Session& s);
  // The live session the cookie names (kNone when none); `touch` counts this
  // request as use (the idle clock starts again).
  Session SessionOf(const HttpServerRequest& req, bool touch);
  // auth.trusted_header: the person the proxy's header names, when the
  // request came from a listed address (kNone otherwise). A header from any
  // other address sets `refused` (the caller answers 403 and grants nothing).
  Session HeaderSession(const HttpServerRequest& req, std::string* refused);
  std::string CsrfToken(const Session& s) const;
  // A new session of `p` and the 303 to `next` that sets its cookie; the
  // sign-in is audited as from `peer`.
  HttpServerReply StartSession(const Principal& p, const std::string& next, const char* how,
                               const std::string& peer, const std::string& forge_token = "",
                               const ForgeAuthConfig* forge = nullptr);
  // A one-time code for a session of `p`, good for login_link_ms.
  std::string NewLoginCode(const Principal& p);
  // A failed sign-in: a log line and an audit row, at most one of each per
  // wrong_token_log_ms and door ("token" for tokens and one-time links,
  // "trusted header", "github", "gitlab", "gitea", "oidc"), with the count of
  // the others: a token guesser cannot hide a refused GitHub sign-in.
  void FailedSignIn(const std::string& peer, const std::string& why, const std::string& door);
  HttpServerReply Tokens(const HttpServerRequest& req, const Session& s, const std::string& path);
  HttpServerReply AuditPage(const HttpServerRequest& req, const Session& s);
  bool CsrfOk(const HttpServerRequest& req, const Session& s) const;
  HttpServerReply LinkLogin(const HttpServerRequest& req, const std::string& path,
                            const std::string& code);
  HttpServerReply SignInPage(int status, const std::string& next, const std::string& notice);
  HttpServerReply SignInForm(const HttpServerRequest& req);
  HttpServerReply Logout(const HttpServerRequest& req, const Session& s);
  HttpServerReply LoginLinkRoute(const HttpServerRequest& req);
  // "http://HOST:PORT" as a browser reaches serve: public_url, else the Host.
  std::string BaseUrl(const HttpServerRequest& req) const;
  std::string CookieAttributes() const;
  HttpServerReply Data(const HttpServerRequest& req, const std::string& path, const Session& s);
  HttpServerReply Events(const HttpServerRequest& req);
  HttpServerReply Action(const HttpServerRequest& req, const Session& s);
  void StartWatcher() REQUIRES(mu_);
  void Watch();

  const ServerConfig& config_;
  std::string db_path_;
  std::string data_dir_;
  const Clock& clock_;
  DashboardOptions options_;
  std::string read_token_;    // the config's (may be empty)
  std::string signin_token_;  // without a read_token: made at start, logged, a read session
  std::string key_;           // made at start: signs cookies and CSRF tokens
  std::string boot_;          // this process's event ids start with it
  bool secure_cookie_ = false;  // public_url is https
  LogLimiter wrong_token_log_;

  struct SessionEntry {
    Principal who;
    TimeMs created_ms = 0;
    TimeMs seen_ms = 0;
    std::string forge_token;  // a forge sign-in's OAuth token (memory only, never logged)
    const ForgeAuthConfig* forge = nullptr;  // its forge (the config's)
    TimeMs roles_ms = 0;      // when its repository roles were read
    bool refreshing = false;
  };
  struct OAuthPending {
    std::string door;      // "github", "oidc": the callback must be this door's
    std::string verifier;  // PKCE code_verifier
    std::string browser;   // the SHA-256 of the cookie that binds it to one browser
    std::string nonce;     // OIDC: the ID token must carry it ("" for the forges)
    std::string next;
    TimeMs expires_ms = 0;
  };
  std::unique_ptr<HttpClient> http_;  // to the forge, the OIDC issuer
  std::unique_ptr<OidcIssuer> oidc_;  // auth.oidc (null without it)
  struct LoginCode {
    Principal who;
    TimeMs expires_ms = 0;
  };
  // Who is signed in, and the sign-ins under way.
  Mutex sessions_mu_;
  std::map<std::string, SessionEntry> sessions_ GUARDED_BY(sessions_mu_);  // by nonce
  std::map<std::string, LoginCode> codes_ GUARDED_BY(sessions_mu_);  // by the code's SHA-256
  std::map<std::string, OAuthPending> oauth_ GUARDED_BY(sessions_mu_);  // by the state's SHA-256

  // The store's changes, for the event streams.
  Mutex mu_;
  std::condition_variable cv_;
  std::uint64_t generation_ GUARDED_BY(mu_) = 0;  // store changes seen since start
  int streams_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread watcher_ GUARDED_BY(mu_);
};

}  // namespace trainq
