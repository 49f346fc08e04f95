// `trainq retry --server` through the real binary against a real `trainq
// serve` on loopback: POST /api/v1/retry with the config's admin_token puts
// a dead run back in the queue as the local `trainq retry` does, and refuses
// what the local command refuses (409 for a run that succeeded), a read
// token, a wrong token, a GET and a body that names nothing.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <nlohmann/json.hpp>

#include "agent/daemon/server.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "agent/daemon/access.h"
#include "queue/access.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

constexpr const char* kAdmin = "retry-admin-token";
constexpr const char* kReadToken = "retry-read-token";

struct RetryServed {
  testing::TempDir tmp;
  std::string db = tmp / "trainq.db";
  std::string admin_file = tmp / "admin.token";
  std::string read_file = tmp / "read.token";
  testing::Daemon daemon;
  std::string base;

  // Batch 1: run 1 succeeded, run 2 dead ("boom", exit 3), run 3 cancelled.
  RetryServed() {
    const Clock& clock = SystemClock::Get();
    {
      auto store = Store::Open(db).value();
      CommitInfo c;
      c.sha = std::string(40, 'a');
      c.message = "a";
      BatchSpec s;
      s.experiment = "digits";
      s.command = "true";
      s.repeats = 3;
      REQUIRE(store.runs().Submit("/repos/model", c, {s}, clock.Now()));
      auto leased = store.runs().Lease("w", clock.Now(), 60'000, 2).value();
      REQUIRE(leased.size() == 2);
      REQUIRE(store.runs().Complete(leased[0].run_id, leased[0].token, clock.Now(), 0.9));
      REQUIRE(store.runs()
                  .FailRun(leased[1].run_id, leased[1].token, clock.Now(), "boom", 3, false)
                  .value() == RunState::kDead);
      REQUIRE(store.runs().CancelRun(3, clock.Now()).value() == 1);
    }
    REQUIRE(WriteFile(admin_file, std::string(kAdmin) + "\n"));
    REQUIRE(WriteFile(read_file, std::string(kReadToken) + "\n"));
    REQUIRE(WriteFile(tmp / "server.yaml", "read_token: {file: " + read_file +
                                               "}\nadmin_token: {file: " + admin_file + "}\n"));
    int port = testing::FreeLoopbackPort();
    base = "http://127.0.0.1:" + std::to_string(port);
    auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--machines", "0",
                                     "--config", tmp / "server.yaml", "--listen",
                                     "127.0.0.1:" + std::to_string(port)},
                                    {},
                                    tmp.path().string(),
                                    tmp / "serve.log"});
    REQUIRE(pid);
    daemon.pid = *pid;
    CurlHttpClient http;
    bool up = testing::WaitFor(
        [&] {
          auto r = http.Send({"GET", base + "/healthz", {}, "", 1000});
          return r && r->status == 200;
        },
        20s);
    INFO(ReadFile(tmp / "serve.log").value_or(""));
    REQUIRE(up);
  }
  ~RetryServed() {
    if (daemon.pid > 0) {
      daemon.runner.KillGroup(daemon.pid, SIGTERM);
      daemon.runner.Wait(daemon.pid);
    }
  }
  struct Out {
    int code;
    std::string out, all;
  };
  Out Trainq(const std::string& args, const std::string& env = "") const {
    Out o;
    std::string cmd = "cd " + ShellQuote(tmp.path().string()) +
                      " && env -u TRAINQ_ADMIN_TOKEN -u TRAINQ_READ_TOKEN " + env + " " +
                      ShellQuote(TRAINQ_BINARY) + " --db /nonexistent/trainq.db " + args;
    o.code = testing::RunShell("{ " + cmd + " 2>" + ShellQuote(tmp / "stderr") + "; }", &o.out);
    o.all = o.out + ReadFile(tmp / "stderr").value_or("");
    return o;
  }
  RunRow Run(std::int64_t id) const {
    auto store = Store::Open(db).value();
    return store.runs().Run(id).value().value();
  }
};

TEST_CASE("cli: retry --server puts a dead run back in the queue with the admin token",
          "[retry][cli]") {
  RetryServed s;
  std::string server = " --server " + s.base + " --token-file " + ShellQuote(s.admin_file);
  auto o = s.Trainq("retry 2" + server);
  INFO(o.all);
  REQUIRE(o.code == 0);
  CHECK(o.all == "run 2 queued again (was dead after 1 attempt(s): boom); 3 attempt(s) from now\n");
  RunRow r = s.Run(2);
  CHECK(r.state == RunState::kQueued);
  CHECK(r.retries == 1);
  CHECK_THAT(r.last_error, Catch::Contains("retried by admin token; was dead"));
  CHECK_THAT(ReadFile(s.tmp / "serve.log").value_or(""),
             Catch::Contains("api: admin token retried run 2 (1 run(s))"));

  // The same refusals as the local command, through the server's answer.
  auto done = s.Trainq("retry 1" + server);
  CHECK(done.code == 1);
  CHECK(done.out.empty());
  CHECK_THAT(done.all, Catch::StartsWith("trainq: error: --server " + s.base +
                                         ": POST /api/v1/retry: HTTP 409: run 1 succeeded; "
                                         "its result stands"));
  CHECK(s.Run(1).state == RunState::kSucceeded);
  auto none = s.Trainq("retry 99" + server);
  CHECK(none.code == 1);
  CHECK_THAT(none.all, Catch::Contains("HTTP 404: run 99 does not exist"));
  auto again = s.Trainq("retry 2" + server);  // queued now: refused
  CHECK(again.code == 1);
  CHECK_THAT(again.all, Catch::Contains("HTTP 409: run 2 is queued"));

  // A batch: its dead runs only (none left now: run 3 is cancelled, not dead).
  auto batch = s.Trainq("retry 1 --batch --json" + server);
  INFO(batch.all);
  REQUIRE(batch.code == 0);
  CHECK(json::parse(batch.out) == json{{"retried", json::array()}});
  auto batch_text = s.Trainq("retry --batch 1" + server, "TRAINQ_ADMIN_TOKEN=" + std::string(kAdmin));
  CHECK(batch_text.code == 0);
  CHECK(batch_text.all == "batch 1 has no dead runs; nothing to retry\n");
  auto three = s.Trainq("retry 3 --json" + server);
  REQUIRE(three.code == 0);
  auto j = json::parse(three.out);
  REQUIRE(j["retried"].size() == 1);
  CHECK(j["retried"][0]["run"] == 3);
  CHECK(j["retried"][0]["was"] == "cancelled");
  CHECK(s.Run(3).state == RunState::kQueued);
}

TEST_CASE("cli: retry --server refuses a read token, a wrong one and none, changing nothing",
          "[retry][cli]") {
  RetryServed s;
  auto read = s.Trainq("retry 2 --server " + s.base + " --token-file " + ShellQuote(s.read_file));
  CHECK(read.code == 1);
  CHECK(read.all == "trainq: error: --server " + s.base +
                        ": POST /api/v1/retry: HTTP 403: /api/v1/retry needs a write role; "
                        "read token is read\n");
  auto missing = s.Trainq("retry 2 --server " + s.base);
  CHECK(missing.code == 1);
  CHECK(missing.all == "trainq: error: --server needs the server's admin token (server.yaml "
                       "admin_token): --token-file FILE, $TRAINQ_ADMIN_TOKEN, or a personal "
                       "token kept by `trainq login --server URL`\n");
  CHECK(s.Run(2).state == RunState::kDead);

  // On the wire.
  CurlHttpClient http;
  auto post = [&](const HttpHeaders& h, const std::string& body) {
    HttpRequest req;
    req.method = "POST";
    req.url = s.base + "/api/v1/retry";
    req.headers = h;
    req.body = body;
    auto r = http.Send(req);
    REQUIRE(r);
    return *r;
  };
  const HttpHeaders admin = {{"Authorization", std::string("Bearer ") + kAdmin}};
  auto anon = post({}, R"({"run": 2})");
  CHECK(anon.status == 401);
  CHECK(anon.body.find("digits") == std::string::npos);
  CHECK(post({{"Authorization", "Bearer guess"}}, R"({"run": 2})").status == 401);
  CHECK(post(admin, R"({"run": "2"})").status == 400);
  CHECK(post(admin, R"({"run": 2, "batch": 1})").status == 400);
  CHECK(post(admin, "not json").status == 400);
  auto get = http.Send({"GET", s.base + "/api/v1/retry", admin, "", 5000});
  REQUIRE(get);
  CHECK(get->status == 405);
  CHECK(s.Run(2).state == RunState::kDead);
  auto ok = post(admin, R"({"batch": 1})");
  CHECK(ok.status == 200);
  auto j = json::parse(ok.body);
  REQUIRE(j["retried"].size() == 1);
  CHECK(j["retried"][0]["run"] == 2);
  CHECK(j["retried"][0]["error"] == "boom");
}

TEST_CASE("api: /api/v1/retry is off (403) without an admin_token in the config", "[retry]") {
  testing::TempDir tmp;
  ServerConfig config;
  config.read_token.value = "x";  // a read token, no admin token
  REQUIRE(Store::Open(tmp / "t.db"));
  Server server(config, tmp / "t.db", SystemClock::Get());
  REQUIRE(server.Open());
  HttpServerRequest req;
  req.method = "POST";
  req.path = "/api/v1/retry";
  req.headers = {{"Authorization", "Bearer x"}};
  req.body = R"({"run": 1})";
  auto r = server.Handle(req);
  CHECK(r.status == 403);
  CHECK_THAT(r.body, Catch::Contains("no admin_token"));
}

TEST_CASE("cli: dashboard-link prints a one-time sign-in link for the read or admin token "
          "(issue 36 F9)",
          "[dashboard][cli]") {
  RetryServed s;
  CurlHttpClient http;
  auto open = [&](const std::string& url) {
    auto r = http.Send({"GET", url, {}, "", 5000});
    REQUIRE(r);
    return *r;
  };
  auto cookie_of = [](const HttpResponse& r) {
    std::string v = r.Header("Set-Cookie").value_or("");
    return v.substr(0, v.find(';'));
  };
  auto role = [&](const std::string& cookie) {
    auto r = http.Send({"GET", s.base + "/dash/api/session", {{"Cookie", cookie}}, "", 5000});
    REQUIRE(r);
    return r->status == 200 ? json::parse(r->body)["role"].get<std::string>() : std::string();
  };
  // serve's own start line: a one-time link, no configured token in it.
  std::string log = ReadFile(s.tmp / "serve.log").value_or("");
  auto at = log.find("dashboard: http://");
  REQUIRE(at != std::string::npos);
  std::string line = log.substr(at, log.find('\n', at) - at);
  INFO(line);
  CHECK(line.find("/?login=") != std::string::npos);
  CHECK(line.find(kReadToken) == std::string::npos);
  CHECK(line.find(kAdmin) == std::string::npos);

  auto read = s.Trainq("dashboard-link --server " + s.base + " --token-file " +
                       ShellQuote(s.read_file));
  INFO(read.all);
  REQUIRE(read.code == 0);
  std::string url(Trim(read.out));
  CHECK(url.starts_with(s.base + "/?login="));
  CHECK(read.all.find("one-time read sign-in link, good for 10m00s") != std::string::npos);
  auto first = open(url);
  CHECK(first.status == 303);
  CHECK(role(cookie_of(first)) == "read");
  auto again = open(url);
  CHECK(again.status == 401);  // used
  CHECK(cookie_of(again).empty());

  auto admin = s.Trainq("dashboard-link --admin --json --server " + s.base,
                        "TRAINQ_ADMIN_TOKEN=" + std::string(kAdmin));
  REQUIRE(admin.code == 0);
  auto j = json::parse(admin.out);
  CHECK(j["role"] == "admin");
  CHECK(role(cookie_of(open(j["url"].get<std::string>()))) == "admin");

  auto wrong = s.Trainq("dashboard-link --server " + s.base, "TRAINQ_READ_TOKEN=guess");
  CHECK(wrong.code == 1);
  CHECK_THAT(wrong.all, Catch::Contains("POST /dash/api/login-link: HTTP 401: the token was "
                                        "refused"));
  auto none = s.Trainq("dashboard-link --server " + s.base);
  CHECK(none.code == 1);
  CHECK_THAT(none.all, Catch::Contains("--server needs the server's read token"));
}

TEST_CASE("cli: login keeps a personal token 0600 and every --server command uses it until it "
          "is revoked",
          "[login][cli]") {
  RetryServed s;
  std::string secret = NewPersonalToken().value();
  std::int64_t token_id = 0;
  {
    auto store = Store::Open(s.db).value();
    Access::TokenRow t;
    t.hash = PersonalTokenHash(secret);
    t.name = "laptop";
    t.owner = "ada@example.com";
    t.role = "write";
    t.created_by = "test";
    t.created_ms = SystemClock::Get().Now();
    token_id = store.access().AddToken(t).value();
  }
  REQUIRE(WriteFile(s.tmp / "ada.token", secret + "\n"));
  std::string cfg = "XDG_CONFIG_HOME=" + ShellQuote(s.tmp / "cfg");
  // A token that is not one is refused and nothing is kept.
  REQUIRE(WriteFile(s.tmp / "typo.token", "tqp_" + std::string(64, 'f') + "\n"));
  auto typo = s.Trainq("login --server " + s.base + " --token-file " + ShellQuote(s.tmp / "typo.token"), cfg);
  CHECK(typo.code == 1);
  CHECK_THAT(typo.all, Catch::Contains("nothing was kept"));
  CHECK_FALSE(std::filesystem::exists(s.tmp / "cfg/trainq/credentials.json"));

  // The paste comes on stdin.
  auto login = s.Trainq("login --server " + s.base + "/ < " + ShellQuote(s.tmp / "ada.token"), cfg);
  INFO(login.all);
  REQUIRE(login.code == 0);
  CHECK_THAT(login.out, Catch::StartsWith("signed in to " + s.base + " as ada@example.com (write)"));
  std::string file = s.tmp / "cfg/trainq/credentials.json";
  REQUIRE(std::filesystem::exists(file));
  CHECK((std::filesystem::status(file).permissions() & std::filesystem::perms::all) ==
        (std::filesystem::perms::owner_read | std::filesystem::perms::owner_write));

  // No --token-file and no environment: the kept token, with its owner's name.
  auto retry = s.Trainq("retry 2 --server " + s.base, cfg);
  INFO(retry.all);
  CHECK(retry.code == 0);
  CHECK_THAT(s.Run(2).last_error, Catch::Contains("retried by ada@example.com"));
  CHECK_THAT(ReadFile(s.tmp / "serve.log").value_or(""),
             Catch::Contains("api: ada@example.com retried run 2 (1 run(s))"));
  CHECK(s.Trainq("status --server " + s.base, cfg).code == 0);
  std::string audit_out;
  REQUIRE(testing::RunShell(ShellQuote(TRAINQ_BINARY) + " --db " + ShellQuote(s.db) +
                                " audit --since 1h --json",
                            &audit_out) == 0);
  auto rows = json::parse(audit_out);
  REQUIRE(rows.size() >= 1);
  CHECK(rows[0]["who"] == "ada@example.com");
  CHECK(rows[0]["action"] == "retry_run");
  CHECK(rows[0]["address"] == "127.0.0.1");
  // The audit route is an admin's; the admin token reads it.
  CHECK(s.Trainq("audit --server " + s.base, cfg).code == 1);
  auto admin_audit = s.Trainq("audit --server " + s.base + " --token-file " +
                              ShellQuote(s.admin_file), cfg);
  CHECK(admin_audit.code == 0);
  CHECK_THAT(admin_audit.out, Catch::Contains("ada@example.com"));

  // Revoked: refused at once.
  {
    auto store = Store::Open(s.db).value();
    REQUIRE(store.access().RevokeToken(token_id, SystemClock::Get().Now()).value());
  }
  auto after = s.Trainq("status --server " + s.base, cfg);
  CHECK(after.code == 1);
  CHECK_THAT(after.all, Catch::Contains("HTTP 401"));
  auto logout = s.Trainq("logout --server " + s.base, cfg);
  CHECK(logout.code == 0);
  CHECK_THAT(logout.out, Catch::StartsWith("forgot the token kept for " + s.base));
}

}  // namespace
}  // namespace trainq
