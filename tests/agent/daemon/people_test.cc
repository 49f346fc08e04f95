// People (issue 41) through Server::Handle, without sockets: personal API
// tokens given out on the account page, signed in with, used as bearer
// tokens, revoked and expired; roles (a read person cannot cancel); and the
// audit trail of who did what, from where.
#include <catch2/catch.hpp>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "agent/daemon/access.h"
#include "agent/daemon/server.h"
#include "agent/results/retention.h"
#include "core/clock.h"
#include "core/crypto.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/access.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/log_capture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

constexpr const char* kRead = "people-read-token";
constexpr const char* kAdmin = "people-admin-token";
constexpr TimeMs kDay = 24 * 3600'000LL;

HttpServerRequest Req(std::string method, std::string path, HttpHeaders headers = {},
                      std::string body = "", std::vector<std::pair<std::string, std::string>> query = {}) {
  HttpServerRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.headers = std::move(headers);
  r.body = std::move(body);
  r.query = std::move(query);
  r.peer = "10.1.2.3";
  return r;
}

std::string Header(const HttpServerReply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

struct People {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::int64_t batch = 0;
  std::vector<std::int64_t> runs;

  explicit People(const std::string& extra = "") {
    clock.Set(1'800'000'000'000);
    REQUIRE(WriteFile(tmp / "read", std::string(kRead) + "\n"));
    REQUIRE(WriteFile(tmp / "admin", std::string(kAdmin) + "\n"));
    config = ParseServerConfig("read_token: {file: " + (tmp / "read") + "}\nadmin_token: {file: " +
                                   (tmp / "admin") + "}\n" + extra,
                               "server.yaml")
                 .value();
    auto store = Store::Open(db).value();
    CommitInfo c;
    c.sha = std::string(40, 'a');
    c.message = "a commit";
    BatchSpec spec;
    spec.experiment = "digits";
    spec.command = "true";
    spec.repeats = 3;
    REQUIRE(store.runs().Submit("/repos/model", c, {spec}, clock.Now()));
    batch = store.runs().Batches(false, 0).value().front().id;
    auto rows = store.runs().Runs(batch, std::nullopt, 0).value();
    for (const auto& r : rows) runs.push_back(r.id);
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  std::string SignIn(const std::string& token) {
    auto r = server->Handle(Req("POST", "/signin",
                                {{"Content-Type", "application/x-www-form-urlencoded"},
                                 {"Host", "127.0.0.1:8080"}},
                                "next=%2F&token=" + UrlEncode(token)));
    REQUIRE(r.status == 303);
    std::string cookie = Header(r, "Set-Cookie");
    return cookie.substr(0, cookie.find(';'));
  }
  json Session(const std::string& cookie) {
    auto r = server->Handle(Req("GET", "/dash/api/session", {{"Cookie", cookie}}));
    if (r.status != 200) return json();
    return json::parse(r.body);
  }
  HttpServerReply Post(const std::string& cookie, const std::string& path, const json& body) {
    std::string csrf = Session(cookie).value("csrf", "");
    return server->Handle(Req("POST", path,
                              {{"Cookie", cookie},
                               {"Content-Type", "application/json"},
                               {"X-CSRF-Token", csrf}},
                              body.dump()));
  }
  // An admin makes `owner` a token of `role` on the account page: its secret.
  std::string GiveToken(const std::string& owner, const std::string& role, int days = 90) {
    std::string admin = SignIn(kAdmin);
    auto r = Post(admin, "/dash/api/tokens",
                  {{"name", "laptop"}, {"owner", owner}, {"role", role}, {"days", days}});
    REQUIRE(r.status == 200);
    auto j = json::parse(r.body);
    CHECK(j["owner"] == owner);
    CHECK(j["role"] == role);
    return j["token"];
  }
  HttpServerReply Bearer(const std::string& method, const std::string& path, const std::string& token,
                         const std::string& body = "") {
    return server->Handle(Req(method, path, {{"Authorization", "Bearer " + token}}, body));
  }
  RunState State(std::int64_t run) {
    auto store = Store::Open(db).value();
    return store.runs().Run(run).value().value().state;
  }
  std::vector<Access::AuditRow> Audit() {
    auto store = Store::Open(db).value();
    return store.access().AuditSince(0, 1000).value();
  }
};

bool HasRow(const std::vector<Access::AuditRow>& rows, const std::string& who,
            const std::string& action, const std::string& target = "") {
  for (const auto& r : rows) {
    if (r.who == who && r.action == action && (target.empty() || r.target == target)) return true;
  }
  return false;
}

TEST_CASE("people: a write person signs in with their token, cancels, and the audit says who",
          "[people]") {
  People f;
  testing::LogCapture log;
  std::string secret = f.GiveToken("ada@example.com", "write");
  CHECK(secret.starts_with("tqp_"));
  // Kept hashed: the database holds the secret's SHA-256, never the secret.
  {
    auto store = Store::Open(f.db).value();
    auto row = store.access().FindToken(Sha256Hex(secret)).value();
    REQUIRE(row);
    CHECK(row->owner == "ada@example.com");
    CHECK(row->created_by.starts_with("admin token (session "));
  }
  for (const auto& file : {f.db, f.db + "-wal"}) {
    if (!std::filesystem::exists(file)) continue;
    CHECK(ReadFile(file).value().find(secret.substr(4)) == std::string::npos);
  }
  CHECK(log.text().find(secret.substr(4)) == std::string::npos);

  std::string ada = f.SignIn(secret);
  json session = f.Session(ada);
  CHECK(session["who"] == "ada@example.com");
  CHECK(session["role"] == "write");
  auto r = f.Post(ada, "/dash/api/action", {{"action", "cancel_run"}, {"run", f.runs[0]}});
  CHECK(r.status == 200);
  CHECK(f.State(f.runs[0]) == RunState::kCancelled);
  CHECK(log.Count("dashboard: ada@example.com cancelled run " + std::to_string(f.runs[0])) == 1);
  auto rows = f.Audit();
  CHECK(HasRow(rows, "ada@example.com", "cancel_run", "run " + std::to_string(f.runs[0])));
  CHECK(HasRow(rows, "ada@example.com", "login"));
  CHECK(rows.front().address == "10.1.2.3");

  // The run's page says who cancelled it.
  auto doc = json::parse(
      f.server->Handle(Req("GET", "/dash/api/run/" + std::to_string(f.runs[0]), {{"Cookie", ada}}))
          .body);
  REQUIRE(doc["audit"].size() >= 1);
  CHECK(doc["audit"][0]["who"] == "ada@example.com");
  CHECK(doc["audit"][0]["action"] == "cancel_run");

  // A write person adds seeds; the audit page is an admin's, not hers.
  CHECK(f.Post(ada, "/dash/api/action", {{"action", "add_seeds"}, {"batch", f.batch}, {"seeds", 1}})
            .status == 200);
  CHECK(f.server->Handle(Req("GET", "/dash/api/audit", {{"Cookie", ada}})).status == 403);
  std::string admin = f.SignIn(kAdmin);
  auto audit = f.server->Handle(Req("GET", "/dash/api/audit", {{"Cookie", admin}}));
  REQUIRE(audit.status == 200);
  auto aj = json::parse(audit.body)["audit"];
  CHECK(aj[0]["action"] == "login");  // the admin's own sign-in, newest first
  CHECK(aj[1]["who"] == "ada@example.com");
  CHECK(aj[1]["action"] == "add_seeds");
  CHECK(aj[1]["target"] == "batch " + std::to_string(f.batch));

  // Her own tokens: she makes one of her role or below, never above it.
  CHECK(f.Post(ada, "/dash/api/tokens", {{"name", "ci"}, {"role", "admin"}}).status == 403);
  CHECK(f.Post(ada, "/dash/api/tokens", {{"name", "ci"}, {"owner", "bob@example.com"}}).status ==
        403);
  auto ci = f.Post(ada, "/dash/api/tokens", {{"name", "ci"}, {"role", "read"}});
  REQUIRE(ci.status == 200);
  CHECK(json::parse(ci.body)["owner"] == "ada@example.com");
  auto mine = json::parse(
      f.server->Handle(Req("GET", "/dash/api/tokens", {{"Cookie", ada}})).body)["tokens"];
  CHECK(mine.size() == 2);
  for (const auto& t : mine) CHECK_FALSE(t.contains("token"));  // shown once, at creation
}

TEST_CASE("people: a read person pressing cancel is refused and nothing changes", "[people]") {
  People f;
  testing::LogCapture log;
  std::string bob = f.SignIn(f.GiveToken("bob@example.com", "read"));
  CHECK(f.Session(bob)["role"] == "read");
  for (const json& action :
       {json{{"action", "cancel_run"}, {"run", f.runs[0]}},
        json{{"action", "cancel_batch"}, {"batch", f.batch}},
        json{{"action", "retry_run"}, {"run", f.runs[0]}},
        json{{"action", "add_seeds"}, {"batch", f.batch}, {"seeds", 2}}}) {
    CHECK(f.Post(bob, "/dash/api/action", action).status == 403);
  }
  CHECK(f.State(f.runs[0]) == RunState::kQueued);
  CHECK(log.Count("dashboard: bob@example.com (read) was refused an action") == 4);
  // Nor through the API with the same token.
  std::string secret = f.GiveToken("bob@example.com", "read");
  CHECK(f.Bearer("POST", "/api/v1/retry", secret, json{{"run", f.runs[0]}}.dump()).status == 403);
  // The shared read token's session owns no tokens.
  std::string shared = f.SignIn(kRead);
  CHECK(f.Post(shared, "/dash/api/tokens", {{"name", "x"}}).status == 403);
}

TEST_CASE("people: a revoked personal token stops working at once, sessions included",
          "[people]") {
  People f;
  std::string secret = f.GiveToken("ada@example.com", "write");
  std::string ada = f.SignIn(secret);
  std::string ada2 = f.SignIn(secret);  // a second browser
  auto who = f.Bearer("GET", "/api/v1/whoami", secret);
  REQUIRE(who.status == 200);
  CHECK(json::parse(who.body)["who"] == "ada@example.com");
  CHECK(json::parse(who.body)["role"] == "write");
  CHECK(f.Bearer("GET", "/api/v1/status", secret).status == 200);
  CHECK(f.Bearer("GET", "/api/v1/report", secret).status == 200);
  // Its last use is recorded, with where from.
  {
    auto store = Store::Open(f.db).value();
    auto t = store.access().FindToken(Sha256Hex(secret)).value().value();
    CHECK(t.last_used_ms == f.clock.Now());
    CHECK(t.last_used_from == "10.1.2.3");
  }
  auto id = json::parse(who.body)["token"].get<std::int64_t>();
  // A one-time link asked with the token (`trainq dashboard-link`), not used yet.
  auto link = f.Bearer("POST", "/dash/api/login-link", secret);
  REQUIRE(link.status == 200);
  std::string url = json::parse(link.body)["url"];
  std::string code = url.substr(url.find("login=") + 6);
  // Another person cannot revoke it (it is not there for them).
  std::string bob = f.SignIn(f.GiveToken("bob@example.com", "write"));
  CHECK(f.Post(bob, "/dash/api/tokens/revoke", {{"id", id}}).status == 404);
  CHECK(f.Session(ada)["who"] == "ada@example.com");

  auto r = f.Post(ada, "/dash/api/tokens/revoke", {{"id", id}});
  REQUIRE(r.status == 200);
  CHECK(json::parse(r.body)["sessions_ended"] == 2);
  CHECK(f.Session(ada).is_null());
  CHECK(f.Session(ada2).is_null());
  CHECK(f.Bearer("GET", "/api/v1/status", secret).status == 401);
  CHECK(f.Bearer("GET", "/api/v1/gate", secret).status == 401);
  CHECK(f.Bearer("POST", "/api/v1/retry", secret, json{{"run", f.runs[0]}}.dump()).status == 401);
  auto whoami = f.Bearer("GET", "/api/v1/whoami", secret);
  CHECK(whoami.status == 401);
  CHECK(json::parse(whoami.body)["reason"].get<std::string>().find("revoked") != std::string::npos);
  auto page = f.server->Handle(Req("POST", "/signin",
                                   {{"Content-Type", "application/x-www-form-urlencoded"}},
                                   "next=%2F&token=" + secret));
  CHECK(page.status == 401);
  CHECK(page.body.find("That personal token was revoked.") != std::string::npos);
  auto rows = f.Audit();
  CHECK(HasRow(rows, "ada@example.com", "token_revoked"));
  CHECK(HasRow(rows, "?", "login_failed"));
  CHECK(rows.front().detail.find("revoked") != std::string::npos);
  // Its unused one-time link went with it.
  CHECK(f.server->Handle(Req("GET", "/", {}, "", {{"login", code}})).status == 401);
}

TEST_CASE("people: an expired token and its sessions end at the expiry", "[people]") {
  People f;
  std::string secret = f.GiveToken("ada@example.com", "write", /*days=*/1);
  std::string ada = f.SignIn(secret);
  CHECK(f.Bearer("GET", "/api/v1/status", secret).status == 200);
  f.clock.Advance(kDay);
  CHECK(f.Session(ada).is_null());
  CHECK(f.Bearer("GET", "/api/v1/status", secret).status == 401);
}

TEST_CASE("people: retry through the API needs a write role and is audited with who",
          "[people]") {
  People f;
  testing::LogCapture log;
  {
    auto store = Store::Open(f.db).value();
    auto leased = store.runs().Lease("w", f.clock.Now(), 60'000, 1).value();
    REQUIRE(store.runs().FailRun(leased[0].run_id, leased[0].token, f.clock.Now(), "boom", 1,
                                 /*retry=*/false));
  }
  std::int64_t dead = 0;
  for (auto id : f.runs) {
    if (f.State(id) == RunState::kDead) dead = id;
  }
  REQUIRE(dead);
  std::string secret = f.GiveToken("ada@example.com", "write");
  CHECK(f.Bearer("POST", "/api/v1/retry", kRead, json{{"run", dead}}.dump()).status == 403);
  auto r = f.Bearer("POST", "/api/v1/retry", secret, json{{"run", dead}}.dump());
  CHECK(r.status == 200);
  CHECK(f.State(dead) == RunState::kQueued);
  CHECK(log.Count("api: ada@example.com retried run " + std::to_string(dead)) == 1);
  CHECK(HasRow(f.Audit(), "ada@example.com", "retry_run", "run " + std::to_string(dead)));
  // The admin token still retries, as machines and CI did before.
  CHECK(f.Bearer("POST", "/api/v1/retry", kAdmin, json{{"run", dead}}.dump()).status == 409);
  // The audit route is an admin's: the shared admin token or an admin person.
  CHECK(f.Bearer("GET", "/api/v1/audit", secret).status == 403);
  auto audit = f.server->Handle(
      Req("GET", "/api/v1/audit", {{"Authorization", std::string("Bearer ") + kAdmin}}, "",
          {{"since", "1h"}}));
  REQUIRE(audit.status == 200);
  CHECK(json::parse(audit.body)["audit"][0]["action"] == "retry_run");
  CHECK(f.server->Handle(Req("GET", "/api/v1/audit",
                             {{"Authorization", std::string("Bearer ") + kAdmin}}, "",
                             {{"sinse", "1h"}}))
            .status == 400);
}

TEST_CASE("people: a made-up or malformed personal token is refused without a lookup hit",
          "[people]") {
  People f;
  for (std::string bad : {std::string("tqp_") + std::string(64, '0'), std::string("tqp_short"),
                          std::string("tqp_") + std::string(64, 'Z'), std::string("")}) {
    INFO(bad);
    CHECK(f.Bearer("GET", "/api/v1/status", bad).status == 401);
    CHECK(f.Bearer("GET", "/api/v1/whoami", bad).status == 401);
  }
  Principal p = Identify(f.config, nullptr, kAdmin, 0);
  CHECK(p.role == AccessRole::kAdmin);
  CHECK(p.who == "admin token");
}

TEST_CASE("people: a trusted header is honoured from the listed proxy only, roles from the lists",
          "[people][header]") {
  People f(
      "auth:\n"
      "  trusted_header: {user: X-Auth-Request-Email, groups: X-Auth-Request-Groups,\n"
      "                   from: [127.0.0.1/32, 'fd00::/8']}\n"
      "  admins: [ml-platform]\n"
      "  writers: [ada@example.com]\n"
      "  viewers: [ml-readers]\n");
  testing::LogCapture log;
  auto as = [&](const std::string& peer, HttpHeaders h, const std::string& method,
                const std::string& path, const std::string& body = "") {
    h.emplace_back("Content-Type", "application/json");
    auto r = Req(method, path, std::move(h), body);
    r.peer = peer;
    return f.server->Handle(r);
  };
  HttpHeaders ada = {{"X-Auth-Request-Email", "ada@example.com"}};
  // From the proxy: ada is a writer, without any cookie.
  auto s = as("127.0.0.1", ada, "GET", "/dash/api/session");
  REQUIRE(s.status == 200);
  auto sj = json::parse(s.body);
  CHECK(sj["who"] == "ada@example.com");
  CHECK(sj["role"] == "write");
  HttpHeaders with_csrf = ada;
  with_csrf.emplace_back("X-CSRF-Token", sj["csrf"].get<std::string>());
  CHECK(as("127.0.0.1", with_csrf, "POST", "/dash/api/action",
           json{{"action", "cancel_run"}, {"run", f.runs[0]}}.dump())
            .status == 200);
  CHECK(f.State(f.runs[0]) == RunState::kCancelled);
  CHECK(log.Count("dashboard: ada@example.com cancelled run " + std::to_string(f.runs[0])) == 1);
  // Without the CSRF token, refused.
  CHECK(as("127.0.0.1", ada, "POST", "/dash/api/action",
           json{{"action", "cancel_run"}, {"run", f.runs[1]}}.dump())
            .status == 403);
  // She makes herself a personal token for the CLI.
  auto t = as("127.0.0.1", with_csrf, "POST", "/dash/api/tokens", json{{"name", "cli"}}.dump());
  REQUIRE(t.status == 200);
  CHECK(json::parse(t.body)["owner"] == "ada@example.com");
  CHECK(json::parse(t.body)["role"] == "write");

  // The same header from an address that is not the proxy: refused, nothing granted.
  auto forged = as("10.9.9.9", ada, "GET", "/dash/api/session");
  CHECK(forged.status == 403);
  CHECK(forged.body.find("not one of auth.trusted_header.from") != std::string::npos);
  CHECK(as("10.9.9.9", with_csrf, "POST", "/dash/api/action",
           json{{"action", "cancel_run"}, {"run", f.runs[1]}}.dump())
            .status == 403);
  CHECK(f.State(f.runs[1]) == RunState::kQueued);
  CHECK(log.Count("dashboard: a sign-in from 10.9.9.9 was refused: a trusted header") == 1);
  // ... even with a valid cookie of its own.
  std::string cookie = f.SignIn(kRead);
  HttpHeaders both = ada;
  both.emplace_back("Cookie", cookie);
  CHECK(as("10.9.9.9", both, "GET", "/dash/api/session").status == 403);
  // IPv6 ranges work too.
  CHECK(as("fd00::5", ada, "GET", "/dash/api/session").status == 200);

  // Roles from groups; someone in no list reads nothing.
  HttpHeaders platform = {{"X-Auth-Request-Email", "bo@example.com"},
                          {"X-Auth-Request-Groups", "staff, ml-platform"}};
  CHECK(json::parse(as("127.0.0.1", platform, "GET", "/dash/api/session").body)["role"] == "admin");
  HttpHeaders reader = {{"X-Auth-Request-Email", "cy@example.com"},
                        {"X-Auth-Request-Groups", "ml-readers"}};
  CHECK(json::parse(as("127.0.0.1", reader, "GET", "/dash/api/session").body)["role"] == "read");
  HttpHeaders stranger = {{"X-Auth-Request-Email", "eve@example.com"}};
  auto none = as("127.0.0.1", stranger, "GET", "/dash/api/status");
  CHECK(none.status == 403);
  CHECK(none.body.find("in none of auth's admins, writers or viewers") != std::string::npos);
  // Without the header, as before: the sign-in page.
  CHECK(as("127.0.0.1", {}, "GET", "/dash/api/status").status == 401);
  CHECK(HasRow(f.Audit(), "?", "login_failed"));
}

TEST_CASE("people: only an admin resets a failing pool from the dashboard, audited, CSRF-checked",
          "[people][pools]") {
  People f;
  testing::LogCapture log;
  {
    auto store = Store::Open(f.db).value();
    Machines::PoolStateRow p;
    p.pool = "gpu";
    p.failed_boots = 3;
    p.failing = true;
    p.boot_error = "the machine's worker never registered";
    REQUIRE(store.machines().SetPoolBoots(p, f.clock.Now()));
  }
  auto failed_boots = [&] {
    auto store = Store::Open(f.db).value();
    auto states = store.machines().PoolStates().value();
    for (const auto& p : states) {
      if (p.pool == "gpu") return p.failed_boots + (p.failing ? 100 : 0);
    }
    return -1;
  };
  const json reset = {{"action", "reset_pool"}, {"pool", "gpu"}};
  // The Machines page's data says the pool is failing (the button's cue).
  std::string admin = f.SignIn(kAdmin);
  auto st = json::parse(f.server->Handle(Req("GET", "/dash/api/status", {{"Cookie", admin}})).body);
  bool seen = false;
  for (const auto& p : st["pools"]) {
    if (p["pool"] == "gpu") seen = p["boots"]["failed"] == 3 && p["boots"]["failing"] == true;
  }
  CHECK(seen);
  // A read person, a write person, the shared read token: refused, nothing changes.
  std::string bob = f.SignIn(f.GiveToken("bob@example.com", "read"));
  std::string ada = f.SignIn(f.GiveToken("ada@example.com", "write"));
  std::string shared = f.SignIn(kRead);
  CHECK(f.Post(bob, "/dash/api/action", reset).status == 403);
  CHECK(f.Post(shared, "/dash/api/action", reset).status == 403);
  auto w = f.Post(ada, "/dash/api/action", reset);
  CHECK(w.status == 403);
  CHECK_THAT(w.body,
             Catch::Contains("resetting a pool needs an admin role (ada@example.com is write)"));
  CHECK(log.Count("dashboard: ada@example.com (write) was refused reset_pool") == 1);
  CHECK(failed_boots() == 103);
  // An admin without the CSRF token: refused.
  auto no_csrf = f.server->Handle(Req("POST", "/dash/api/action",
                                      {{"Cookie", admin}, {"Content-Type", "application/json"}},
                                      reset.dump()));
  CHECK(no_csrf.status == 403);
  CHECK(failed_boots() == 103);
  // An admin person (a personal admin token) resets it; the audit says who.
  std::string eve = f.SignIn(f.GiveToken("eve@example.com", "admin"));
  auto ok = f.Post(eve, "/dash/api/action", reset);
  REQUIRE(ok.status == 200);
  CHECK(json::parse(ok.body)["failed_boots"] == 3);
  CHECK(failed_boots() == 0);
  CHECK(HasRow(f.Audit(), "eve@example.com", "pool_reset", "pool gpu"));
  CHECK(log.Count("dashboard: eve@example.com reset pool gpu (3 failed boot(s) forgotten)") == 1);
  // Nothing left to reset; a pool that does not exist; no pool named.
  CHECK(f.Post(admin, "/dash/api/action", reset).status == 409);
  CHECK(f.Post(admin, "/dash/api/action", {{"action", "reset_pool"}, {"pool", "tpu"}}).status ==
        409);
  CHECK(f.Post(admin, "/dash/api/action", {{"action", "reset_pool"}}).status == 400);
  CHECK(f.Post(admin, "/dash/api/action", {{"action", "reset_pool"}, {"pool", 7}}).status == 400);
}

TEST_CASE(
    "people: retention.audit deletes audit rows older than its limit, a bounded number a step",
    "[people][retention]") {
  People f("retention: {audit: 30d}\n");
  CHECK(f.config.retention.audit_ms == 30 * kDay);
  CHECK(f.config.retention.any());
  const TimeMs now = f.clock.Now();
  {
    auto store = Store::Open(f.db).value();
    // 1,200 rows 40 to 31 days old, 3 rows within the 30 days.
    for (int i = 0; i < 1200; ++i) {
      REQUIRE(store.access().AddAudit({0, now - 40 * kDay + i * 60'000, "ada@example.com",
                                       "cancel_run", "run " + std::to_string(i), "", "10.0.0.1"}));
    }
    for (TimeMs age : {29 * kDay, kDay, TimeMs{0}}) {
      REQUIRE(store.access().AddAudit(
          {0, now - age, "bob@example.com", "retry_run", "run 1", "", "10.0.0.2"}));
    }
  }
  auto store = Store::Open(f.db).value();
  testing::LogCapture log;
  RetentionStepper step(f.config.retention, 60'000, 250);
  // A step takes at most 5 x runs_per_tick (1,000) rows, oldest first.
  step.StepLogged(store, now);
  auto left = store.access().AuditSince(0, 10'000).value();
  CHECK(left.size() == 203);
  CHECK(left.back().target == "run 1000");  // the oldest left
  CHECK(log.Count("retention: 1000 audit row(s) older than the retention.audit limit deleted") ==
        1);
  // A full step: the next comes soon, and takes the rest.
  step.StepLogged(store, now + 250);
  left = store.access().AuditSince(0, 10'000).value();
  REQUIRE(left.size() == 3);
  for (const auto& r : left) CHECK(r.who == "bob@example.com");
  // Within the limit nothing goes; the next step waits its interval.
  auto d = step.Step(store, now + 500);
  REQUIRE(d);
  CHECK_FALSE(d->ran);
  d = step.Step(store, now + 60'000 + 250);
  REQUIRE(d);
  CHECK(d->ran);
  CHECK(d->audit_pruned == 0);
  // Without retention.audit the trail is kept, as all history is by default.
  auto kept = ParseServerConfig("retention: {logs: 30d}\n", "server.yaml").value();
  CHECK(kept.retention.audit_ms == 0);
  auto bad = ParseServerConfig("retention:\n  audit: soon\n", "server.yaml");
  REQUIRE_FALSE(bad);
  CHECK_THAT(bad.error().message, Catch::Contains("server.yaml:2"));
  CHECK_THAT(bad.error().message, Catch::Contains("retention.audit"));
}

TEST_CASE("people: auth in server.yaml is checked, naming the key", "[people][header]") {
  auto bad = [](const std::string& yaml) {
    auto c = ParseServerConfig(yaml, "server.yaml");
    REQUIRE_FALSE(c);
    return c.error().message;
  };
  CHECK_THAT(bad("auth:\n  trusted_header: {user: X-Email}\n"),
             Catch::Contains("auth.trusted_header: from: the proxy's addresses are required"));
  CHECK_THAT(bad("auth:\n  trusted_header: {user: X-Email, from: [10.0.0.300/8]}\n"),
             Catch::Contains("server.yaml:2"));
  CHECK_THAT(bad("auth:\n  trusted_header: {user: X-Email, from: [10.0.0.300/8]}\n"),
             Catch::Contains("10.0.0.300/8"));
  CHECK_THAT(bad("auth:\n  admin: [x]\n"), Catch::Contains("admin"));
  auto c = ParseServerConfig("auth:\n  trusted_header: {user: X-Email, from: [10.0.0.0/8, '::1']}\n",
                             "server.yaml");
  REQUIRE(c);
  CHECK(CidrContains(c->auth.from[0], "10.200.3.4"));
  CHECK_FALSE(CidrContains(c->auth.from[0], "11.0.0.1"));
  CHECK(CidrContains(c->auth.from[1], "::1"));
  CHECK_FALSE(CidrContains(c->auth.from[1], "127.0.0.1"));
  CHECK_FALSE(c->auth.viewers_given);
}

}  // namespace
}  // namespace trainq
