// "Sign in with GitLab" and "Sign in with Gitea" (issue 41) through
// Server::Handle, against tests/support/fake_forge_login.py speaking each
// forge's OAuth and REST wire format: the code flow with state, PKCE and
// grant_type; roles from GitLab's access levels and Gitea's repository
// permissions; a hidden repository 404; a read person refused cancel; a
// replayed code, a person without access and a revoked token refused. The
// GitHub door (the same code) is tested in github_login_test.cc.
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

using namespace testing::signin;

struct ForgeDoor {
  std::string forge;  // gitlab, gitea
  std::string host = forge == "gitlab" ? "gitlab.example" : "gitea.example";
  std::string model = "https://" + host + "/acme/model.git";
  std::string secret_repo = "https://" + host + "/acme/secret.git";
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  FakeService fake;
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::vector<std::int64_t> model_runs, secret_runs;

  explicit ForgeDoor(std::string which)
      : forge(std::move(which)),
        fake(tmp, "fake_forge_login.py",
             json{{"forge", forge},
                  {"client_id", "app-" + forge},
                  {"client_secret", "forge-secret-9"},
                  {"as", "ada"},
                  {"users",
                   {{"ada", {{"acme/model", "write"}}},
                    {"owner", {{"acme/model", "admin"}, {"acme/secret", "admin"}}},
                    {"reader", {{"acme/model", "read"}, {"acme/secret", "read"}}},
                    {"guest", {{"acme/model", "guest"}}},
                    {"stranger", json::object()}}}}) {
    clock.Set(1'800'000'000'000);
    REQUIRE(WriteFile(tmp / "secret", "forge-secret-9\n"));
    // GitLab: web_url and api_url given; Gitea: web_url only (the API is
    // under it, /api/v1).
    std::string urls = forge == "gitlab" ? "web_url: " + fake.url + ", api_url: " + fake.url + "/api/v4"
                                         : "web_url: " + fake.url + "/";
    config = ParseServerConfig("repositories:\n"
                               "  - {url: " + model + ", forge: " + forge + "}\n"
                               "  - {url: " + secret_repo + ", forge: " + forge + "}\n"
                               "auth:\n"
                               "  " + forge + ": {client_id: app-" + forge +
                                   ", client_secret: {file: " + (tmp / "secret") + "}, " + urls +
                                   "}\n",
                               "server.yaml")
                 .value();
    auto store = Store::Open(db).value();
    for (const std::string& repo : {model, secret_repo}) {
      CommitInfo c;
      c.sha = std::string(40, repo == model ? 'a' : 'b');
      c.message = "a commit";
      BatchSpec spec;
      spec.experiment = repo == model ? "digits" : "hidden";
      spec.command = "true";
      spec.repeats = 2;
      REQUIRE(store.runs().Submit(repo, c, {spec}, clock.Now()));
    }
    auto batches = store.runs().Batches(false, 0).value();
    for (const auto& b : batches) {
      auto runs = store.runs().Runs(b.id, std::nullopt, 0).value();
      for (const auto& r : runs) (b.repo == "model" ? model_runs : secret_runs).push_back(r.id);
    }
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  struct Trip {
    std::string oauth_cookie;
    Query back;
  };
  Trip Start(const std::string& login) {
    fake.Post("/_fake/config", {{"as", login}});
    auto r = server->Handle(Req("GET", "/signin/" + forge, {}, {{"next", "/"}}));
    REQUIRE(r.status == 302);
    Trip t;
    t.oauth_cookie = CookiePair(Header(r, "Set-Cookie"));
    HttpRequest a;
    a.url = Header(r, "Location");
    auto ar = fake.http.Send(a).value();
    REQUIRE(ar.status == 302);
    std::string back = ar.Header("Location").value_or("");
    REQUIRE(back.starts_with("http://127.0.0.1:8080/signin/" + forge + "/callback?"));
    t.back = QueryOf(back);
    return t;
  }
  HttpServerReply Callback(const Query& q, const std::string& cookie) {
    return server->Handle(Req("GET", "/signin/" + forge + "/callback", {{"Cookie", cookie}}, q));
  }
  std::string SignIn(const std::string& login) {
    Trip t = Start(login);
    auto r = Callback(t.back, t.oauth_cookie);
    REQUIRE(r.status == 200);
    REQUIRE(!SessionCookie(r).empty());
    return SessionCookie(r);
  }
  HttpServerReply Get(const std::string& cookie, const std::string& path) {
    return server->Handle(Req("GET", path, {{"Cookie", cookie}}));
  }
  json Session(const std::string& cookie) {
    auto r = Get(cookie, "/dash/api/session");
    return r.status == 200 ? json::parse(r.body) : json();
  }
  HttpServerReply Cancel(const std::string& cookie, std::int64_t run) {
    return server->Handle(Req("POST", "/dash/api/action",
                              {{"Cookie", cookie},
                               {"Content-Type", "application/json"},
                               {"X-CSRF-Token", Session(cookie).value("csrf", "")}},
                              {}, json{{"action", "cancel_run"}, {"run", run}}.dump()));
  }
};

TEST_CASE("forge: GitLab and Gitea sign people in with roles from their repository access",
          "[forge]") {
  for (const char* which : {"gitlab", "gitea"}) {
    DYNAMIC_SECTION(which) {
      ForgeDoor f(which);
      testing::LogCapture log;
      const std::string label = f.forge == "gitlab" ? "GitLab" : "Gitea";
      auto page = f.server->Handle(Req("GET", "/signin"));
      CHECK(page.body.find("Sign in with " + label) != std::string::npos);
      CHECK(page.body.find("action=\"/signin/" + f.forge + "\" class=\"door\">") !=
            std::string::npos);
      CHECK(page.body.find("action=\"/signin/github\" class=\"door\" hidden>") !=
            std::string::npos);

      std::string ada = f.SignIn("ada");
      json authorize, token;
      for (const auto& r : f.fake.Requests()) {
        if (r.contains("query_keys")) authorize = r;
        if (r.contains("keys")) token = r;
      }
      CHECK(authorize["query_keys"] == json({"client_id", "code_challenge", "code_challenge_method",
                                             "redirect_uri", "response_type", "scope", "state"}));
      CHECK(authorize["scope"] == (f.forge == "gitlab" ? "read_api" : "read:user read:repository"));
      CHECK(token["keys"] == json({"client_id", "client_secret", "code", "code_verifier",
                                   "grant_type", "redirect_uri"}));
      CHECK(f.Session(ada)["who"] == "ada (" + f.forge + ")");
      CHECK(f.Session(ada)["role"] == "write");
      CHECK(log.Count("dashboard: ada (" + f.forge + ") signed in (" + f.forge + ", write)") == 1);
      CHECK(log.text().find("forge-secret-9") == std::string::npos);
      // acme/secret is hidden from ada; acme/model is hers to cancel.
      auto ex = json::parse(f.Get(ada, "/dash/api/experiments").body);
      REQUIRE(ex["experiments"].size() == 1);
      CHECK(f.Get(ada, "/dash/api/run/" + std::to_string(f.secret_runs[0])).status == 404);
      CHECK(f.Cancel(ada, f.secret_runs[0]).status == 404);
      CHECK(f.Cancel(ada, f.model_runs[0]).status == 200);
      CHECK(log.Count("dashboard: ada (" + f.forge + ") cancelled run " +
                      std::to_string(f.model_runs[0])) == 1);

      // A reader sees both and cannot cancel; an owner/admin of both is admin.
      std::string reader = f.SignIn("reader");
      CHECK(f.Session(reader)["role"] == "read");
      CHECK(f.Cancel(reader, f.model_runs[1]).status == 403);
      CHECK(f.Session(f.SignIn("owner"))["role"] == "admin");

      // Refused: a GitLab guest (no code access) or a Gitea stranger; a
      // replayed code (the forge's invalid_grant).
      auto g = f.Start(f.forge == "gitlab" ? "guest" : "stranger");
      f.clock.Advance(61'000);
      Refused(f.Callback(g.back, g.oauth_cookie), "has no access to any repository");
      auto once = f.Start("ada");
      REQUIRE(f.Callback(once.back, once.oauth_cookie).status == 200);
      auto again = f.Start("ada");
      f.clock.Advance(61'000);
      Refused(f.Callback({{"code", Get(once.back, "code")}, {"state", Get(again.back, "state")}},
                         again.oauth_cookie),
              label + " refused the code (invalid_grant)");
      CHECK(log.Count(label + ": the code was refused (400 invalid_grant)") == 1);

      // Roles are read again after 5 minutes with the person's token: a
      // token the forge no longer takes ends the session.
      f.fake.Post("/_fake/config", {{"users", {{"ada", json::object()}}}});
      f.clock.Advance(5 * 60'000 + 1);
      CHECK(f.Get(ada, "/dash/api/experiments").status == 401);
      CHECK(log.Count("ada (" + f.forge + ") no longer has access to any watched repository") == 1);
    }
  }
}

TEST_CASE("forge: auth.gitlab and auth.gitea config: defaults and errors", "[forge]") {
  auto gl = ParseServerConfig(
      "auth:\n  gitlab: {client_id: x, client_secret: {env: HOME}}\n", "server.yaml");
  REQUIRE(gl);
  CHECK(gl->auth.gitlab.web_url == "https://gitlab.com");
  CHECK(gl->auth.gitlab.api_url == "https://gitlab.com/api/v4");
  auto own = ParseServerConfig(
      "auth:\n  gitlab: {client_id: x, client_secret: {env: HOME}, web_url: https://git.acme/}\n",
      "server.yaml");
  REQUIRE(own);
  CHECK(own->auth.gitlab.api_url == "https://git.acme/api/v4");
  auto te = ParseServerConfig("auth:\n  gitea: {client_id: x, client_secret: {env: HOME}}\n",
                              "server.yaml");
  REQUIRE(!te);
  CHECK(te.error().message.find("server.yaml:2") != std::string::npos);
  CHECK(te.error().message.find("auth.gitea") != std::string::npos);
  CHECK(te.error().message.find("web_url") != std::string::npos);
  auto ok = ParseServerConfig(
      "auth:\n  gitea: {client_id: x, client_secret: {env: HOME}, web_url: https://gitea.acme}\n",
      "server.yaml");
  REQUIRE(ok);
  CHECK(ok->auth.gitea.api_url == "https://gitea.acme/api/v1");
  CHECK(!ok->auth.github.enabled());
}

}  // namespace
}  // namespace trainq
