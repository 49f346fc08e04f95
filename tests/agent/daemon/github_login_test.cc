// "Sign in with GitHub" (issue 41) through Server::Handle, against the fake
// GitHub (tests/support/fake_forge_login.py) on loopback, which speaks GitHub's
// OAuth and REST wire format: the whole code flow with state and PKCE, roles
// from each watched repository's permissions, hidden repositories answering
// 404, a read person refused an action, and each refused sign-in (missing,
// forged or another browser's state, a replayed code, no access) a clear page
// and a log line with nothing granted.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/server.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/daemon/signin_fixture.h"
#include "tests/support/log_capture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

constexpr const char* kModel = "https://github.com/acme/model.git";
constexpr const char* kSecret = "https://github.com/acme/secret.git";

using namespace testing::signin;

struct GithubDoor {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  FakeService gh{tmp, "fake_forge_login.py",
                 json{{"client_id", "Iv1.trainqtest"},
                      {"client_secret", "oauth-secret-42"},
                      {"as", "octocat"},
                      {"users",
                       {{"octocat", {{"acme/model", "write"}}},
                        {"reader", {{"acme/model", "read"}, {"acme/secret", "read"}}},
                        {"stranger", json::object()}}}}};
  std::string fake = gh.url;  // http://127.0.0.1:PORT
  CurlHttpClient& http = gh.http;
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::vector<std::int64_t> model_runs, secret_runs;

  explicit GithubDoor(const std::string& extra = "") {
    clock.Set(1'800'000'000'000);
    REQUIRE(WriteFile(tmp / "gh-secret", "oauth-secret-42\n"));
    config =
        ParseServerConfig(
            "repositories:\n"
            "  - {url: " +
                std::string(kModel) +
                ", forge: github}\n"
                "  - {url: " +
                std::string(kSecret) +
                ", forge: github}\n"
                "auth:\n"
                "  github: {client_id: Iv1.trainqtest, client_secret: {file: " +
                (tmp / "gh-secret") + "}, web_url: " + fake + ", api_url: " + fake + "}\n" + extra,
            "server.yaml")
            .value();
    auto store = Store::Open(db).value();
    for (const char* repo : {kModel, kSecret}) {
      CommitInfo c;
      c.sha = std::string(40, repo == kModel ? 'a' : 'b');
      c.message = "a commit";
      BatchSpec spec;
      spec.experiment = repo == kModel ? "digits" : "hidden";
      spec.command = "true";
      spec.repeats = 2;
      REQUIRE(store.runs().Submit(repo, c, {spec}, clock.Now()));
    }
    auto batches = store.runs().Batches(false, 0).value();
    for (const auto& b : batches) {
      auto runs = store.runs().Runs(b.id, std::nullopt, 0).value();
      for (const auto& r : runs) {
        (b.repo == "model" ? model_runs : secret_runs).push_back(r.id);
      }
    }
    REQUIRE(model_runs.size() == 2);
    REQUIRE(secret_runs.size() == 2);
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  void As(const std::string& login) { gh.Post("/_fake/config", {{"as", login}}); }
  // The browser's trip: /signin/github, GitHub's authorize page (approves
  // at once), back with code and state. Returns what the callback got.
  struct Trip {
    std::string oauth_cookie;  // trainq_oauth=...
    std::vector<std::pair<std::string, std::string>> back;  // code, state
    std::string authorize_url;
  };
  Trip Start() {
    auto r = server->Handle(Req("GET", "/signin/github", {}, {{"next", "/experiment/digits"}}));
    REQUIRE(r.status == 302);
    Trip t;
    t.oauth_cookie = CookiePair(Header(r, "Set-Cookie"));
    CHECK(Header(r, "Set-Cookie").find("SameSite=Lax") != std::string::npos);
    CHECK(Header(r, "Set-Cookie").find("HttpOnly") != std::string::npos);
    t.authorize_url = Header(r, "Location");
    HttpRequest a;
    a.url = t.authorize_url;
    auto ar = http.Send(a).value();
    REQUIRE(ar.status == 302);
    std::string back = ar.Header("Location").value_or("");
    REQUIRE(back.starts_with("http://127.0.0.1:8080/signin/github/callback?"));
    t.back = QueryOf(back);
    return t;
  }
  HttpServerReply Callback(const std::vector<std::pair<std::string, std::string>>& query,
                           const std::string& cookie) {
    HttpHeaders h;
    if (!cookie.empty()) h.push_back({"Cookie", cookie});
    return server->Handle(Req("GET", "/signin/github/callback", h, query));
  }
  // A whole sign-in as `login`: the session cookie.
  std::string SignIn(const std::string& login) {
    As(login);
    Trip t = Start();
    auto r = Callback(t.back, t.oauth_cookie);
    REQUIRE(r.status == 200);
    std::string session = SessionCookie(r);
    REQUIRE(!session.empty());
    return session;
  }
  HttpServerReply Get(const std::string& cookie, const std::string& path) {
    return server->Handle(Req("GET", path, {{"Cookie", cookie}}));
  }
  json Session(const std::string& cookie) {
    auto r = Get(cookie, "/dash/api/session");
    return r.status == 200 ? json::parse(r.body) : json();
  }
  HttpServerReply Action(const std::string& cookie, const json& body) {
    std::string csrf = Session(cookie).value("csrf", "");
    return server->Handle(Req("POST", "/dash/api/action",
                              {{"Cookie", cookie},
                               {"Content-Type", "application/json"},
                               {"X-CSRF-Token", csrf}},
                              {}, body.dump()));
  }
  std::vector<json> Requests() { return gh.Requests(); }
  int Count(const std::string& path) { return gh.Count(path); }
};

TEST_CASE("github: the code flow with state and PKCE signs octocat in, and roles follow repository "
          "access", "[github]") {
  GithubDoor f;
  testing::LogCapture log;
  auto page = f.server->Handle(Req("GET", "/signin"));
  CHECK(page.body.find("Sign in with GitHub") != std::string::npos);

  std::string cookie = f.SignIn("octocat");
  // The authorize request carried state and an S256 challenge; the token
  // request the verifier and the secret (in the body).
  auto reqs = f.Requests();
  json authorize, token;
  for (const auto& r : reqs) {
    if (r["path"] == "/login/oauth/authorize") authorize = r;
    if (r["path"] == "/login/oauth/access_token") token = r;
  }
  CHECK(authorize["query_keys"] == json({"allow_signup", "client_id", "code_challenge",
                                         "code_challenge_method", "redirect_uri", "scope",
                                         "state"}));
  CHECK(token["keys"] == json({"client_id", "client_secret", "code", "code_verifier",
                               "redirect_uri"}));
  CHECK(token["accept"] == "application/json");

  json s = f.Session(cookie);
  CHECK(s["who"] == "octocat (github)");
  CHECK(s["role"] == "write");
  CHECK(log.Count("dashboard: octocat (github) signed in (github, write)") == 1);
  CHECK(log.text().find("oauth-secret-42") == std::string::npos);
  CHECK(log.text().find("gho_") == std::string::npos);

  // acme/secret is not octocat's: its experiment, commit and runs are 404.
  auto ex = f.Get(cookie, "/dash/api/experiments");
  REQUIRE(ex.status == 200);
  auto exj = json::parse(ex.body);
  REQUIRE(exj["experiments"].size() == 1);
  CHECK(exj["experiments"][0]["experiment"] == "digits");
  CHECK(f.Get(cookie, "/dash/api/experiment/digits").status == 200);
  CHECK(f.Get(cookie, "/dash/api/experiment/hidden").status == 404);
  CHECK(f.Get(cookie, "/dash/api/commit/" + std::string(40, 'a')).status == 200);
  CHECK(f.Get(cookie, "/dash/api/commit/" + std::string(40, 'b')).status == 404);
  CHECK(f.Get(cookie, "/dash/api/run/" + std::to_string(f.model_runs[0])).status == 200);
  CHECK(f.Get(cookie, "/dash/api/run/" + std::to_string(f.secret_runs[0])).status == 404);
  CHECK(f.Get(cookie, "/dash/api/run/" + std::to_string(f.secret_runs[0]) + "/log").status == 404);
  CHECK(f.Get(cookie, "/dash/api/report").status == 404);
  auto st = json::parse(f.Get(cookie, "/dash/api/status").body);
  CHECK(st.dump().find("hidden") == std::string::npos);

  // Write on acme/model: cancel, and the log and audit say who.
  auto c = f.Action(cookie, {{"action", "cancel_run"}, {"run", f.model_runs[0]}});
  CHECK(c.status == 200);
  CHECK(log.Count("dashboard: octocat (github) cancelled run " + std::to_string(f.model_runs[0])) ==
        1);
  // Nothing on acme/secret, not even its existence.
  auto h = f.Action(cookie, {{"action", "cancel_run"}, {"run", f.secret_runs[0]}});
  CHECK(h.status == 404);
  {
    auto store = Store::Open(f.db).value();
    CHECK(store.runs().Run(f.secret_runs[0]).value().value().state == RunState::kQueued);
  }
  // Personal tokens would not follow the repository access.
  std::string csrf = f.Session(cookie).value("csrf", "");
  auto tok = f.server->Handle(Req("POST", "/dash/api/tokens",
                                  {{"Cookie", cookie}, {"X-CSRF-Token", csrf}}, {},
                                  json{{"name", "x"}, {"role", "read"}, {"days", 1}}.dump()));
  CHECK(tok.status == 403);

  // Roles are cached: requests within 5 minutes read nothing from GitHub.
  int before = f.Count("/repos/acme/model");
  for (int i = 0; i < 5; ++i) f.Get(cookie, "/dash/api/experiments");
  CHECK(f.Count("/repos/acme/model") == before);
  // After 5 minutes they are read again: octocat lost access, the session ends.
  HttpRequest lose;
  lose.method = "POST";
  lose.url = f.fake + "/_fake/config";
  lose.headers = {{"Content-Type", "application/json"}};
  lose.body = json{{"users", {{"octocat", json::object()}}}}.dump();
  REQUIRE(f.http.Send(lose).value().status == 200);
  f.clock.Advance(5 * 60'000 + 1);
  CHECK(f.Get(cookie, "/dash/api/experiments").status == 401);
  CHECK(f.Count("/repos/acme/model") == before + 1);
  CHECK(log.Count("octocat (github) no longer has access to any watched repository") == 1);
}

TEST_CASE("github: a read person sees both repositories and is refused cancel", "[github]") {
  GithubDoor f;
  testing::LogCapture log;
  std::string cookie = f.SignIn("reader");
  CHECK(f.Session(cookie)["role"] == "read");
  CHECK(json::parse(f.Get(cookie, "/dash/api/experiments").body)["experiments"].size() == 2);
  auto c = f.Action(cookie, {{"action", "cancel_run"}, {"run", f.model_runs[0]}});
  CHECK(c.status == 403);
  CHECK(log.Count("dashboard: reader (github) (read) was refused an action") == 1);
  auto store = Store::Open(f.db).value();
  CHECK(store.runs().Run(f.model_runs[0]).value().value().state == RunState::kQueued);
}

TEST_CASE("github: missing, forged, another browser's or used state, a replayed code and no "
          "access are refused with a page and a log line", "[github]") {
  GithubDoor f;
  testing::LogCapture log;
  auto refused = [&](const HttpServerReply& r, const std::string& page_says) {
    CHECK(r.status == 403);
    CHECK(r.body.find(page_says) != std::string::npos);
    CHECK(r.body.find("Nothing was granted.") != std::string::npos);
    for (const auto& [k, v] : r.headers) CHECK(!(k == "Set-Cookie" && v.starts_with("trainq_dash=")));
  };
  auto t = f.Start();
  // Missing state.
  refused(f.Callback({{"code", Get(t.back, "code")}}, t.oauth_cookie), "missing or unknown state");
  CHECK(log.Count("GitHub: a callback without state") == 1);
  // Forged state.
  f.clock.Advance(61'000);  // the failed sign-in lines are one a minute
  refused(f.Callback({{"code", Get(t.back, "code")}, {"state", "0123456789abcdef"}},
                     t.oauth_cookie),
          "missing or unknown state");
  CHECK(log.Count("GitHub: an unknown, used or expired state") == 1);
  // The real state, but from a browser without its cookie: refused, and the
  // state is spent.
  f.clock.Advance(61'000);
  refused(f.Callback(t.back, "trainq_oauth=someone-elses"), "another browser");
  CHECK(log.Count("GitHub: a state from another browser") == 1);
  f.clock.Advance(61'000);
  refused(f.Callback(t.back, t.oauth_cookie), "missing or unknown state");
  CHECK(log.Count("GitHub: an unknown, used or expired state") == 2);

  // A code used once is refused the second time (GitHub's bad_verification_code).
  auto ok = f.Start();
  REQUIRE(f.Callback(ok.back, ok.oauth_cookie).status == 200);
  auto again = f.Start();
  f.clock.Advance(61'000);
  refused(f.Callback({{"code", Get(ok.back, "code")}, {"state", Get(again.back, "state")}},
                     again.oauth_cookie),
          "GitHub refused the code (bad_verification_code)");
  CHECK(log.Count("GitHub: the code was refused (200 bad_verification_code)") == 1);
  // A foreign code: one GitHub gave another sign-in (another browser's),
  // brought here with this browser's own state and cookie. PKCE stops it:
  // this sign-in's verifier is not the one that code was asked with.
  auto mine = f.Start();
  auto theirs = f.Start();
  f.clock.Advance(61'000);
  refused(f.Callback({{"code", Get(theirs.back, "code")}, {"state", Get(mine.back, "state")}},
                     mine.oauth_cookie),
          "GitHub refused the code (bad_verification_code)");
  CHECK(log.Count("GitHub: the code was refused (200 bad_verification_code)") == 2);

  // A GitHub user with no access to any watched repository.
  f.As("stranger");
  auto st = f.Start();
  f.clock.Advance(61'000);
  refused(f.Callback(st.back, st.oauth_cookie), "no access to any repository");
  CHECK(log.Count("GitHub: stranger has no access to any watched repository") == 1);

  // Each refusal is a login_failed row; no session was made but the one.
  auto store = Store::Open(f.db).value();
  int failed = 0, logins = 0;
  auto rows = store.access().AuditSince(0, 100).value();
  for (const auto& r : rows) {
    failed += r.action == "login_failed";
    logins += r.action == "login";
  }
  CHECK(failed == 7);
  CHECK(logins == 1);
}

TEST_CASE("github: with an https public_url the door's cookies are Secure, the session's Strict",
          "[github][signin]") {
  GithubDoor f("public_url: https://trainq.example\n");
  auto r = f.server->Handle(Req("GET", "/signin/github", {}, {{"next", "/"}}));
  REQUIRE(r.status == 302);
  const std::string oauth = Header(r, "Set-Cookie");
  CHECK_THAT(oauth, Catch::Contains("HttpOnly") && Catch::Contains("SameSite=Lax") &&
                        Catch::Contains("; Secure") && Catch::Contains("Path=/signin/github;"));
  CHECK_THAT(Header(r, "Location"),
             Catch::Contains("redirect_uri=" +
                             UrlEncode("https://trainq.example/signin/github/callback")));
  // GitHub sends the browser back to the public address.
  HttpRequest a;
  a.url = Header(r, "Location");
  auto ar = f.http.Send(a).value();
  const std::string back = ar.Header("Location").value_or("");
  REQUIRE(back.starts_with("https://trainq.example/signin/github/callback?"));
  auto cb = f.Callback(QueryOf(back), CookiePair(oauth));
  REQUIRE(cb.status == 200);
  std::string session, cleared;
  for (const auto& [k, v] : cb.headers) {
    if (k != "Set-Cookie") continue;
    (v.starts_with("trainq_dash=") ? session : cleared) = v;
  }
  CHECK_THAT(session, Catch::Contains("HttpOnly") && Catch::Contains("SameSite=Strict") &&
                          Catch::Contains("; Secure"));
  CHECK_THAT(cleared, Catch::StartsWith("trainq_oauth=;") && Catch::Contains("Max-Age=0") &&
                          Catch::Contains("; Secure"));
}

TEST_CASE("github: auth.github config errors name the file, line and key", "[github]") {
  auto e = ParseServerConfig("auth:\n  github: {client_id: x}\n", "server.yaml");
  REQUIRE(!e);
  CHECK(e.error().message.find("server.yaml:2") != std::string::npos);
  CHECK(e.error().message.find("auth.github") != std::string::npos);
  CHECK(e.error().message.find("client_secret") != std::string::npos);
  auto u = ParseServerConfig(
      "auth:\n  github: {client_id: x, client_secret: {env: HOME}, web_url: ftp://x}\n",
      "server.yaml");
  REQUIRE(!u);
  CHECK(u.error().message.find("auth.github.web_url") != std::string::npos);
  auto k = ParseServerConfig(
      "auth:\n  github: {client_id: x, client_secret: {env: HOME}, secret: y}\n", "server.yaml");
  REQUIRE(!k);
  CHECK(k.error().message.find("secret") != std::string::npos);
}

}  // namespace
}  // namespace trainq
