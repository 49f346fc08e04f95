// "Sign in with OIDC" (issue 41) through Server::Handle, against the fake
// issuer (tests/support/fake_oidc.py) on loopback: discovery, the code flow
// with state, PKCE and nonce, real RS256 ID tokens checked against the JWKS,
// roles from auth.oidc's lists, and every refusal (a bad signature, another
// key under the published kid, another audience or issuer, expired, not yet valid, alg none, HS256
// keyed with the public key, another nonce, an unknown kid, missing or forged state, a replayed
// code, another sign-in's code) a clear page and a log line with nothing granted; a rotated key is
// fetched again (at most once a minute) and then accepted.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/oidc.h"
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

using namespace testing::signin;

constexpr std::int64_t kNowS = 1'800'000'000;
const json kAda = {{"sub", "u-ada"}, {"email", "ada@example.com"}, {"email_verified", true},
                   {"groups", {"ml-platform", "staff"}}};
const json kBob = {{"sub", "u-bob"}, {"email", "bob@example.com"}, {"groups", {"staff"}}};

struct OidcDoor {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  FakeService idp{tmp, "fake_oidc.py",
                  json{{"client_id", "trainq"},
                       {"client_secret", "oidc-secret-77"},
                       {"as", kAda},
                       {"now", kNowS}}};
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::vector<std::int64_t> runs;

  explicit OidcDoor(const std::string& lists = "admins: [ml-platform], writers: [carol@example.com]") {
    clock.Set(kNowS * 1000);
    REQUIRE(WriteFile(tmp / "oidc-secret", "oidc-secret-77\n"));
    config = ParseServerConfig(
                 "repositories:\n"
                 "  - {url: https://github.com/acme/model.git, forge: github}\n"
                 "auth:\n"
                 "  oidc: {issuer: " + idp.url + ", client_id: trainq, label: Keycloak,\n"
                 "         client_secret: {file: " + (tmp / "oidc-secret") + "}, " + lists + "}\n",
                 "server.yaml")
                 .value();
    auto store = Store::Open(db).value();
    CommitInfo c;
    c.sha = std::string(40, 'a');
    c.message = "a commit";
    BatchSpec spec;
    spec.experiment = "digits";
    spec.command = "true";
    spec.repeats = 2;
    REQUIRE(store.runs().Submit("https://github.com/acme/model.git", c, {spec}, clock.Now()));
    auto batches = store.runs().Batches(false, 0).value();
    for (const auto& b : batches) {
      auto rows = store.runs().Runs(b.id, std::nullopt, 0).value();
      for (const auto& r : rows) runs.push_back(r.id);
    }
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  // The browser's trip: /signin/oidc, the issuer's authorize page (approves
  // at once), back with code and state.
  struct Trip {
    std::string oauth_cookie;
    Query back;
    std::string authorize_url;
  };
  Trip Start() {
    auto r = server->Handle(Req("GET", "/signin/oidc", {}, {{"next", "/experiment/digits"}}));
    REQUIRE(r.status == 302);
    Trip t;
    t.oauth_cookie = CookiePair(Header(r, "Set-Cookie"));
    CHECK(Header(r, "Set-Cookie").find("Path=/signin/oidc; HttpOnly; SameSite=Lax") !=
          std::string::npos);
    t.authorize_url = Header(r, "Location");
    REQUIRE(t.authorize_url.starts_with(idp.url + "/authorize?"));
    HttpRequest a;
    a.url = t.authorize_url;
    auto ar = idp.http.Send(a).value();
    REQUIRE(ar.status == 302);
    std::string back = ar.Header("Location").value_or("");
    REQUIRE(back.starts_with("http://127.0.0.1:8080/signin/oidc/callback?"));
    t.back = QueryOf(back);
    return t;
  }
  // Time passes for trainq and the issuer alike.
  void Advance(TimeMs ms) {
    clock.Advance(ms);
    idp.Post("/_fake/config", {{"now", clock.Now() / 1000}});
  }
  HttpServerReply Callback(const Query& query, const std::string& cookie) {
    HttpHeaders h;
    if (!cookie.empty()) h.push_back({"Cookie", cookie});
    return server->Handle(Req("GET", "/signin/oidc/callback", h, query));
  }
  HttpServerReply Trip1() {
    Trip t = Start();
    return Callback(t.back, t.oauth_cookie);
  }
  std::string SignIn() {
    auto r = Trip1();
    REQUIRE(r.status == 200);
    std::string session = SessionCookie(r);
    REQUIRE(!session.empty());
    return session;
  }
  json Session(const std::string& cookie) {
    auto r = server->Handle(Req("GET", "/dash/api/session", {{"Cookie", cookie}}));
    return r.status == 200 ? json::parse(r.body) : json();
  }
  int LoginFailedRows() {
    auto store = Store::Open(db).value();
    int n = 0;
    auto rows = store.access().AuditSince(0, 1000).value();
    for (const auto& r : rows) n += r.action == "login_failed";
    return n;
  }
};

TEST_CASE("oidc: discovery, the code flow with PKCE and nonce, and roles from the lists",
          "[oidc]") {
  OidcDoor f;
  testing::LogCapture log;
  auto page = f.server->Handle(Req("GET", "/signin"));
  CHECK(page.body.find("Sign in with Keycloak") != std::string::npos);
  CHECK(page.body.find("action=\"/signin/oidc\" class=\"door\">") != std::string::npos);

  std::string cookie = f.SignIn();
  json authorize, token;
  for (const auto& r : f.idp.Requests()) {
    if (r["path"] == "/authorize") authorize = r;
    if (r["path"] == "/token") token = r;
  }
  CHECK(authorize["query_keys"] == json({"client_id", "code_challenge", "code_challenge_method",
                                         "nonce", "redirect_uri", "response_type", "scope",
                                         "state"}));
  CHECK(authorize["scope"] == "openid email profile");
  // client_secret_basic: the secret in the Authorization header, not the body.
  CHECK(token["client_auth"] == "basic");
  CHECK(token["keys"] == json({"code", "code_verifier", "grant_type", "redirect_uri"}));
  CHECK(f.idp.Count("/.well-known/openid-configuration") == 1);
  CHECK(f.idp.Count("/jwks") == 1);

  json s = f.Session(cookie);
  CHECK(s["who"] == "ada@example.com (oidc)");
  CHECK(s["role"] == "admin");  // ml-platform is in admins
  CHECK(log.Count("dashboard: ada@example.com (oidc) signed in (oidc, admin)") == 1);
  CHECK(log.text().find("oidc-secret-77") == std::string::npos);

  // Everyone else the issuer signs in reads (no viewers list): bob cannot cancel.
  f.idp.Post("/_fake/config", {{"as", kBob}});
  std::string bob = f.SignIn();
  CHECK(f.Session(bob)["role"] == "read");
  std::string csrf = f.Session(bob).value("csrf", "");
  auto c = f.server->Handle(Req("POST", "/dash/api/action",
                                {{"Cookie", bob}, {"Content-Type", "application/json"},
                                 {"X-CSRF-Token", csrf}},
                                {}, json{{"action", "cancel_run"}, {"run", f.runs[0]}}.dump()));
  CHECK(c.status == 403);
  // Discovery and the keys were read once for all of it.
  CHECK(f.idp.Count("/.well-known/openid-configuration") == 1);
  CHECK(f.idp.Count("/jwks") == 1);
}

TEST_CASE("oidc: an unverified email is not used for roles, and a viewers list shuts others out",
          "[oidc]") {
  OidcDoor f("admins: [ada@example.com], viewers: [staff]");
  testing::LogCapture log;
  f.idp.Post("/_fake/config",
             {{"as", {{"sub", "u-x"}, {"email", "ada@example.com"}, {"email_verified", false},
                      {"preferred_username", "mallory"}, {"groups", {"staff"}}}}});
  std::string m = f.SignIn();
  CHECK(f.Session(m)["who"] == "mallory (oidc)");
  CHECK(f.Session(m)["role"] == "read");
  f.idp.Post("/_fake/config", {{"as", {{"sub", "u-y"}, {"email", "eve@example.com"}}}});
  Refused(f.Trip1(), "eve@example.com is in none of this server's admins, writers or viewers");
  CHECK(log.Count("OIDC: eve@example.com is in none of the admins, writers or viewers lists") == 0);
  CHECK(log.Count("Keycloak: eve@example.com is in none of the admins, writers or viewers lists") ==
        1);
}

TEST_CASE("oidc: every flawed ID token, state or code is refused with a page and a log line",
          "[oidc]") {
  OidcDoor f;
  testing::LogCapture log;
  struct Case {
    const char* tamper;
    const char* logged;
    int lines = 1;  // the log lines saying so, so far
  };
  const Case cases[] = {
      {"bad_sig", "the ID token's signature does not verify"},
      {"wrong_key", "the ID token's signature does not verify", 2},  // as bad_sig
      {"aud", "the ID token is for another client (aud)"},
      {"iss", "the ID token is from another issuer (iss)"},
      {"expired", "the ID token expired"},
      {"nbf", "the ID token is not valid yet (nbf)"},
      {"alg_none", "the ID token is unsigned (alg none)"},
      {"hs256", "the ID token uses HS256 (an HMAC: refused, the issuer's keys are public)"},
      {"nonce", "the ID token's nonce is not this sign-in's"},
      {"unknown_kid", "no key of the issuer has the ID token's kid k-unpublished"},
  };
  int refusals = 0;
  for (const auto& c : cases) {
    INFO(c.tamper);
    f.Advance(61'000);  // failed sign-ins are logged once a minute
    f.idp.Post("/_fake/config", {{"tamper", c.tamper}});
    Refused(f.Trip1(), "did not pass trainq's checks");
    CHECK(log.Count(std::string("Keycloak: ") + c.logged) == c.lines);
    ++refusals;
  }
  // The unknown kid made trainq read the keys again once (a minute had
  // passed since the first read), and not more.
  CHECK(f.idp.Count("/jwks") == 2);

  // Missing and forged state; a state used once.
  auto t = f.Start();
  f.Advance(61'000);
  Refused(f.Callback({{"code", Get(t.back, "code")}}, t.oauth_cookie), "missing or unknown state");
  CHECK(log.Count("Keycloak: a callback without state") == 1);
  f.Advance(61'000);
  Refused(f.Callback({{"code", Get(t.back, "code")}, {"state", "0123456789abcdef"}},
                     t.oauth_cookie),
          "missing or unknown state");
  f.Advance(61'000);
  Refused(f.Callback(t.back, "trainq_oauth=another-browser"), "another browser");
  CHECK(log.Count("Keycloak: a state from another browser") == 1);
  refusals += 3;

  // A code used once is refused the second time (invalid_grant).
  auto ok = f.Start();
  REQUIRE(f.Callback(ok.back, ok.oauth_cookie).status == 200);
  auto again = f.Start();
  f.Advance(61'000);
  Refused(f.Callback({{"code", Get(ok.back, "code")}, {"state", Get(again.back, "state")}},
                     again.oauth_cookie),
          "The identity provider refused the code (invalid_grant)");
  CHECK(log.Count("Keycloak: the code was refused (400 invalid_grant)") == 1);
  ++refusals;
  // A foreign code: one the issuer gave another sign-in (another browser's),
  // brought here with this browser's own state and cookie. PKCE stops it:
  // this sign-in's verifier is not the one that code was asked with.
  auto mine = f.Start();
  auto theirs = f.Start();
  f.Advance(61'000);
  Refused(f.Callback({{"code", Get(theirs.back, "code")}, {"state", Get(mine.back, "state")}},
                     mine.oauth_cookie),
          "The identity provider refused the code (invalid_grant)");
  CHECK(log.Count("Keycloak: the code was refused (400 invalid_grant)") == 2);
  ++refusals;
  CHECK(f.LoginFailedRows() == refusals);
}

TEST_CASE("oidc: a rotated key is fetched again on its unknown kid, at most once a minute",
          "[oidc]") {
  OidcDoor f;
  testing::LogCapture log;
  f.SignIn();
  CHECK(f.idp.Count("/jwks") == 1);
  f.idp.Post("/_fake/rotate", json::object());
  // Within the minute: the keys are not read again, the token is refused.
  f.clock.Advance(30'000);
  Refused(f.Trip1(), "no key of the issuer has the ID token's kid");
  CHECK(f.idp.Count("/jwks") == 1);
  // After it: the new key is fetched and the token accepted.
  f.clock.Advance(31'000);
  std::string cookie = f.SignIn();
  CHECK(f.idp.Count("/jwks") == 2);
  CHECK(f.Session(cookie)["who"] == "ada@example.com (oidc)");
}

TEST_CASE("oidc: VerifyIdToken refuses a token that is not a JWS", "[oidc]") {
  IdTokenExpect e{"https://id.example.com", "trainq", "n", kNowS};
  json jwks = {{"keys", json::array()}};
  CHECK(!VerifyIdToken("", jwks, e));
  CHECK(!VerifyIdToken("a.b", jwks, e));
  CHECK(!VerifyIdToken("a.b.c.d", jwks, e));
  CHECK(VerifyIdToken("@@.e30.", jwks, e).error().message == "the ID token is not base64url");
  CHECK(Base64UrlDecode("aGVsbG8") == "hello");
  CHECK(!Base64UrlDecode("aGVsbG8="));
  CHECK(!Base64UrlDecode("a"));
}

TEST_CASE("oidc: auth.oidc config errors name the file, line and key", "[oidc]") {
  auto e = ParseServerConfig("auth:\n  oidc: {client_id: x, client_secret: {env: HOME}}\n",
                             "server.yaml");
  REQUIRE(!e);
  CHECK(e.error().message.find("server.yaml:2") != std::string::npos);
  CHECK(e.error().message.find("auth.oidc") != std::string::npos);
  CHECK(e.error().message.find("issuer") != std::string::npos);
  auto h = ParseServerConfig(
      "auth:\n  oidc: {issuer: http://id.example.com, client_id: x, client_secret: {env: HOME}}\n",
      "server.yaml");
  REQUIRE(!h);
  CHECK(h.error().message.find("auth.oidc.issuer") != std::string::npos);
  CHECK(h.error().message.find("https") != std::string::npos);
  auto s = ParseServerConfig(
      "auth:\n  oidc: {issuer: https://id.example.com, client_id: x, client_secret: {env: HOME},\n"
      "         scopes: [email]}\n",
      "server.yaml");
  REQUIRE(!s);
  CHECK(s.error().message.find("auth.oidc.scopes") != std::string::npos);
  auto ok = ParseServerConfig(
      "auth:\n  oidc: {issuer: 'https://id.example.com/', client_id: x, client_secret: {env: HOME}}\n",
      "server.yaml");
  REQUIRE(ok);
  CHECK(ok->auth.oidc.issuer == "https://id.example.com");
  CHECK(!ok->auth.oidc.roles_given);
}

}  // namespace
}  // namespace trainq
