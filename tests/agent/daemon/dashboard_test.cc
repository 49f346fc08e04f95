// The dashboard's routes through Server::Handle, without sockets: access by
// token and signed cookie, the documents it serves (the CLI's), actions only
// for an admin session with its CSRF token, and the event stream woken by a
// commit from another connection. tests/web/dashboard_browser_test.py drives
// the same routes from a real browser against a real `trainq serve`.
#include "agent/daemon/dashboard.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <future>
#include <map>
#include <nlohmann/json.hpp>

#include "agent/daemon/server.h"
#include "agent/results/commit_view.h"
#include "agent/results/palette.h"
#include "agent/results/run_logs.h"
#include "core/clock.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/git_cli.h"
#include "tests/support/log_capture.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;
namespace fs = std::filesystem;

namespace trainq {
namespace {

constexpr const char* kRead = "dashboard-read-token";
constexpr const char* kAdmin = "dashboard-admin-token";

HttpServerRequest Req(std::string method, std::string path, HttpHeaders headers = {},
                      std::vector<std::pair<std::string, std::string>> query = {},
                      std::string body = "") {
  HttpServerRequest r;
  r.method = std::move(method);
  r.path = std::move(path);
  r.headers = std::move(headers);
  r.query = std::move(query);
  r.body = std::move(body);
  return r;
}

std::string Header(const HttpServerReply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers) {
    if (k == name) return v;
  }
  return "";
}

// POST /signin as the sign-in page's form sends it.
HttpServerRequest SignInForm(const std::string& token, const std::string& next,
                             HttpHeaders more = {}) {
  HttpHeaders h = {{"Content-Type", "application/x-www-form-urlencoded"}, {"Host", "127.0.0.1:8080"}};
  for (auto& kv : more) h.push_back(std::move(kv));
  return Req("POST", "/signin", h, {}, "next=" + UrlEncode(next) + "&token=" + UrlEncode(token));
}

struct Fixture {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  const Clock& clock = SystemClock::Get();
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::string sha_a = std::string(40, 'a'), sha_b = std::string(40, 'b');

  explicit Fixture(bool admin = true) {
    REQUIRE(WriteFile(tmp / "read", std::string(kRead) + "\n"));
    REQUIRE(WriteFile(tmp / "admin", std::string(kAdmin) + "\n"));
    std::string yaml = "read_token: {file: " + (tmp / "read") + "}\n";
    if (admin) yaml += "admin_token: {file: " + (tmp / "admin") + "}\n";
    config = ParseServerConfig(yaml, "server.yaml").value();
    auto store = Store::Open(db).value();
    Add(store, sha_a, "", {0.90, 0.91, 0.92}, true);
    Add(store, sha_b, sha_a, {0.95, 0.96, 0.97}, false);  // queued
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  void Add(Store& store, const std::string& sha, const std::string& parent,
           const std::vector<double>& values, bool finish) {
    CommitInfo c;
    c.sha = sha;
    c.parent_sha = parent;
    c.message = "commit " + sha.substr(0, 7);
    BatchSpec s;
    s.experiment = "digits";
    s.command = "true";
    s.repeats = static_cast<int>(values.size());
    REQUIRE(store.runs().Submit("/repos/model", c, {s}, clock.Now()));
    if (!finish) return;
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 10).value();
    for (const auto& l : leased) {
      REQUIRE(store.runs().Complete(l.run_id, l.token, clock.Now(), values[static_cast<size_t>(l.repeat)]));
    }
  }
  // Signs in with `token` through the sign-in form: the cookie header value
  // to send back.
  std::string SignIn(const std::string& token) {
    auto r = server->Handle(SignInForm(token, "/commit/" + sha_b + "?x=1"));
    REQUIRE(r.status == 303);
    CHECK(Header(r, "Location") == "/commit/" + sha_b + "?x=1");
    std::string cookie = Header(r, "Set-Cookie");
    CHECK(cookie.find("HttpOnly") != std::string::npos);
    CHECK(cookie.find("SameSite=Strict") != std::string::npos);
    return cookie.substr(0, cookie.find(';'));
  }
  HttpServerReply Get(const std::string& path, const std::string& cookie,
                      std::vector<std::pair<std::string, std::string>> query = {}) {
    return server->Handle(Req("GET", path, {{"Cookie", cookie}}, std::move(query)));
  }
  HttpServerReply Act(const std::string& cookie, const std::string& csrf, const json& body) {
    HttpHeaders h = {{"Cookie", cookie}, {"Content-Type", "application/json"}};
    if (!csrf.empty()) h.emplace_back("X-CSRF-Token", csrf);
    return server->Handle(Req("POST", "/dash/api/action", h, {}, body.dump()));
  }
};

TEST_CASE("dashboard: without a session every page and data route answers 401 and no data",
          "[dashboard]") {
  Fixture f;
  for (const std::string& path : std::vector<std::string>{
           "/", "/experiment/digits", "/commit/" + f.sha_a, "/run/1", "/machines", "/sweeps",
           "/dash/app.mjs", "/dash/api/status", "/dash/api/commit/" + f.sha_a,
           "/dash/api/experiments", "/dash/api/run/1/log", "/dash/events"}) {
    for (const auto& cookie : {std::string(), std::string("trainq_dash=r.abc.def"),
                               std::string("trainq_dash=a.") + kAdmin}) {
      INFO(path << " cookie " << cookie);
      auto r = f.server->Handle(
          Req("GET", path, cookie.empty() ? HttpHeaders{} : HttpHeaders{{"Cookie", cookie}}));
      CHECK(r.status == 401);
      // A page answers the sign-in page, which names the page to go back to
      // and nothing else.
      std::string body = r.body;
      for (auto at = body.find(path); at != std::string::npos; at = body.find(path)) {
        body.erase(at, path.size());
      }
      CHECK(body.find("digits") == std::string::npos);
      CHECK(body.find(f.sha_a) == std::string::npos);
      CHECK(Header(r, "Set-Cookie").empty());
    }
  }
  CHECK(f.server->Handle(Req("GET", "/", {}, {{"token", "wrong"}})).status == 401);
  CHECK(f.server->Handle(Req("POST", "/dash/api/action", {}, {}, "{}")).status == 401);
}

TEST_CASE("dashboard: the read token signs in and the documents are the CLI's", "[dashboard]") {
  Fixture f;
  std::string cookie = f.SignIn(kRead);
  auto page = f.Get("/", cookie);
  CHECK(page.status == 200);
  CHECK(page.body.find("/dash/app.mjs") != std::string::npos);
  auto session = json::parse(f.Get("/dash/api/session", cookie).body);
  CHECK(session["role"] == "read");
  auto commit = f.Get("/dash/api/commit/" + f.sha_b.substr(0, 8), cookie);
  REQUIRE(commit.status == 200);
  auto store = Store::Open(f.db).value();
  CHECK(json::parse(commit.body) == LoadCommitView(store, f.sha_b.substr(0, 8)).value());
  auto exps = json::parse(f.Get("/dash/api/experiments", cookie).body);
  REQUIRE(exps["experiments"].size() == 1);
  CHECK(exps["experiments"][0]["batches"] == 2);
  CHECK(f.Get("/dash/api/experiment/nothing", cookie).status == 404);
  auto log = f.Get("/dash/api/run/1/log", cookie, {{"from", "0"}});
  CHECK(log.status == 200);
  CHECK(f.Get("/dash/api/run/999", cookie).status == 404);
}

TEST_CASE(
    "dashboard: the ES modules are served as JavaScript with a session, under a CSP "
    "that allows only its own scripts and Trusted Types, and the palette is the report's",
    "[dashboard]") {
  Fixture f;
  std::string cookie = f.SignIn(kRead);
  for (const char* name : {"app", "core", "html", "format", "plot", "parts", "overview",
                           "experiment", "commit", "run", "machines", "sweeps", "account"}) {
    std::string path = std::string("/dash/") + name + ".mjs";
    INFO(path);
    auto r = f.Get(path, cookie);
    CHECK(r.status == 200);
    CHECK(r.content_type == "text/javascript; charset=utf-8");
    CHECK((r.body.find("export ") != std::string::npos ||
           r.body.find("import ") != std::string::npos));
    CHECK(Header(r, "X-Content-Type-Options") == "nosniff");
    std::string csp = Header(r, "Content-Security-Policy");
    CHECK(csp.find("script-src 'self';") != std::string::npos);
    CHECK(csp.find("require-trusted-types-for 'script'; trusted-types trainq") !=
          std::string::npos);
  }
  // Only the embedded modules: no other name, no path below /dash/.
  CHECK(f.Get("/dash/nothing.mjs", cookie).status == 404);
  CHECK(f.Get("/dash/web/app.mjs", cookie).status == 404);
  CHECK(f.Get("/dash/app.js", cookie).status == 404);
  // The colours: the report's own (palette.h), before a session too (the
  // sign-in page uses them), and report.html embeds the same.
  auto palette = f.server->Handle(Req("GET", "/dash/palette.css"));
  CHECK(palette.status == 200);
  CHECK(palette.content_type == "text/css; charset=utf-8");
  CHECK(palette.body == PaletteCss());
  CHECK(palette.body.find(std::string("--better:") + std::string(palette::kBetter) + ";") !=
        std::string::npos);
  auto page = f.Get("/", cookie);
  CHECK(page.body.find("<script type=\"module\" src=\"/dash/app.mjs\">") != std::string::npos);
  CHECK(page.body.find("/dash/palette.css") != std::string::npos);
}

TEST_CASE("dashboard: the run log route serves a log retention archived as it served the plain one",
          "[dashboard][log]") {
  Fixture f;
  std::string cookie = f.SignIn(kRead);
  fs::create_directories(f.tmp / "runs/1");
  const std::string path = f.tmp / "runs/1/output.log";  // serve's data folder: the db's
  std::string text;
  for (int i = 0; text.size() < 200'000; ++i) text += "epoch " + std::to_string(i) + " acc 0.9\n";
  REQUIRE(WriteFile(path, text));
  const auto size = static_cast<std::int64_t>(text.size());
  auto log = [&](std::int64_t from) {
    auto r = f.Get("/dash/api/run/1/log", cookie, {{"from", std::to_string(from)}});
    REQUIRE(r.status == 200);
    return json::parse(r.body);
  };
  std::vector<json> plain;
  for (std::int64_t from : {std::int64_t{0}, size - 70'000, size - 50, size, size + 9}) {
    plain.push_back(log(from));
  }
  CHECK(plain[0]["archived"] == false);
  REQUIRE(ArchiveRunLogs(path).value() == 1);
  REQUIRE_FALSE(fs::exists(path));

  auto all = log(0);  // 64 KiB at most: the newest
  CHECK(all["archived"] == true);
  CHECK(all["state"] == "succeeded");
  CHECK(all["skipped"] == true);
  CHECK(all["size"] == size);
  CHECK(all["from"] == size - (64 << 10));
  CHECK(all["text"] == text.substr(text.size() - (64 << 10)));
  auto next = log(size - 50);  // the page's next poll, from the size it has
  CHECK(next["skipped"] == false);
  CHECK(next["from"] == size - 50);
  CHECK(next["text"] == text.substr(text.size() - 50));
  CHECK(log(size)["text"] == "");
  size_t i = 0;
  for (std::int64_t from : {std::int64_t{0}, size - 70'000, size - 50, size, size + 9}) {
    INFO("from " << from);
    json archived = log(from);
    CHECK(archived["archived"] == true);
    archived["archived"] = false;
    CHECK(archived == plain[i++]);
  }

  // A run with no log, plain or archived, answers empty as before.
  auto none = f.Get("/dash/api/run/2/log", cookie, {{"from", "0"}});
  REQUIRE(none.status == 200);
  auto j = json::parse(none.body);
  CHECK(j["size"] == 0);
  CHECK(j["text"] == "");
  CHECK(j["archived"] == false);

  // A cut archive is a server error naming it, not an empty log.
  fs::create_directories(f.tmp / "runs/3");
  fs::copy_file(path + ".gz", f.tmp / "runs/3/output.log.gz");
  fs::resize_file(f.tmp / "runs/3/output.log.gz", fs::file_size(path + ".gz") / 2);
  auto cut = f.Get("/dash/api/run/3/log", cookie, {{"from", "0"}});
  CHECK(cut.status == 500);
  CHECK_THAT(cut.body, Catch::Contains("runs/3/output.log.gz"));
}

TEST_CASE("dashboard: actions are refused to a read session and need the admin's CSRF token",
          "[dashboard]") {
  Fixture f;
  std::string read = f.SignIn(kRead);
  std::string read_csrf = json::parse(f.Get("/dash/api/session", read).body)["csrf"];
  auto store = Store::Open(f.db).value();
  auto batch = store.runs().Batches(false, 0).value().front();  // newest: the queued one
  json cancel = {{"action", "cancel_batch"}, {"batch", batch.id}};
  CHECK(f.Act(read, read_csrf, cancel).status == 403);

  std::string admin = f.SignIn(kAdmin);
  std::string csrf = json::parse(f.Get("/dash/api/session", admin).body)["csrf"];
  CHECK(json::parse(f.Get("/dash/api/session", admin).body)["role"] == "admin");
  CHECK(f.Act(admin, "", cancel).status == 403);
  CHECK(f.Act(admin, read_csrf, cancel).status == 403);  // another session's token
  CHECK(store.runs().Batch(batch.id).value()->count(RunState::kCancelled) == 0);
  CHECK(f.Act(admin, csrf, {{"action", "add_seeds"}, {"batch", batch.id}, {"seeds", 2}}).status ==
        200);
  CHECK(store.runs().Runs(batch.id, std::nullopt, 0).value().size() == 5);
  auto r = f.Act(admin, csrf, cancel);
  CHECK(r.status == 200);
  CHECK(json::parse(r.body)["cancelled"] == 5);
  CHECK(store.runs().Batch(batch.id).value()->count(RunState::kCancelled) == 5);
  CHECK(f.Act(admin, csrf, {{"action", "reboot"}}).status == 400);
}

TEST_CASE("dashboard: an admin retries a dead run, a read session is refused", "[dashboard][retry]") {
  Fixture f;
  std::int64_t dead = 0, ok = 0;
  {
    auto store = Store::Open(f.db).value();
    auto leased = store.runs().Lease("w", f.clock.Now(), 60'000, 2).value();  // the queued batch
    REQUIRE(leased.size() == 2);
    dead = leased[0].run_id;
    REQUIRE(store.runs().FailRun(dead, leased[0].token, f.clock.Now(), "exit code 1: diverged", 1,
                                 /*retry=*/false));
    ok = leased[1].run_id;
    REQUIRE(store.runs().Complete(ok, leased[1].token, f.clock.Now(), 0.5));
  }
  auto state = [&](std::int64_t id) {
    auto store = Store::Open(f.db).value();
    return store.runs().Run(id).value().value().state;
  };
  json retry = {{"action", "retry_run"}, {"run", dead}};
  std::string read = f.SignIn(kRead);
  std::string read_csrf = json::parse(f.Get("/dash/api/session", read).body)["csrf"];
  CHECK(f.Act(read, read_csrf, retry).status == 403);
  CHECK(state(dead) == RunState::kDead);

  std::string admin = f.SignIn(kAdmin);
  std::string csrf = json::parse(f.Get("/dash/api/session", admin).body)["csrf"];
  CHECK(f.Act(admin, "", retry).status == 403);
  CHECK(state(dead) == RunState::kDead);
  auto r = f.Act(admin, csrf, retry);
  CHECK(r.status == 200);
  CHECK(json::parse(r.body)["retried"] == dead);
  CHECK(state(dead) == RunState::kQueued);
  // Its earlier round is on the run's document.
  auto doc = json::parse(f.Get("/dash/api/run/" + std::to_string(dead), read).body);
  CHECK(doc["run"]["retries"] == 1);
  REQUIRE(doc["retries"].size() == 1);
  CHECK(doc["retries"][0]["state"] == "dead");
  CHECK(doc["retries"][0]["error"] == "exit code 1: diverged");
  CHECK(doc["retries"][0]["who"].get<std::string>().starts_with("admin token (session "));
  // Queued now, and a succeeded run keeps its result: both refused with 409.
  CHECK(f.Act(admin, csrf, retry).status == 409);
  auto refused = f.Act(admin, csrf, {{"action", "retry_run"}, {"run", ok}});
  CHECK(refused.status == 409);
  CHECK(json::parse(refused.body)["reason"].get<std::string>().find("succeeded") !=
        std::string::npos);
  CHECK(state(ok) == RunState::kSucceeded);
  CHECK(f.Act(admin, csrf, {{"action", "retry_run"}, {"run", 999}}).status == 404);
  CHECK(f.Act(admin, csrf, {{"action", "retry_run"}}).status == 400);
}

TEST_CASE("dashboard: an experiment's history follows a branch's first parents, one point per commit",
          "[dashboard][branch]") {
  Fixture f;
  // A real repository: main c1 - c2 - c3, and feature from c2 with f1; a
  // bare mirror of it is where the batches came from.
  testing::GitCli git{f.tmp / "work"};
  std::string c1 = git.Commit({{"a.txt", "1"}}, "one");
  std::string c2 = git.Commit({{"a.txt", "2"}}, "two");
  git.Run("checkout -q -b feature");
  std::string f1 = git.Commit({{"a.txt", "f"}}, "feature one");
  git.Run("checkout -q main");
  std::string c3 = git.Commit({{"a.txt", "3"}}, "three");
  std::string mirror = f.tmp / "mirror.git";
  git.Run("clone -q --mirror . " + mirror);
  // Made out of commit order; c2 twice (one batch per commit and experiment:
  // the same one).
  auto store = Store::Open(f.db).value();
  std::map<std::string, std::int64_t> newest;
  auto submit = [&](const std::string& sha, const std::string& parent) {
    CommitInfo c;
    c.sha = sha;
    c.parent_sha = parent;
    c.message = "commit " + sha.substr(0, 7);
    BatchSpec s;
    s.experiment = "branchy";
    s.command = "true";
    s.repeats = 1;
    auto r = store.runs().Submit(mirror, c, {s}, f.clock.Now());
    REQUIRE(r);
    newest[sha] = r->front().batch_id;
  };
  submit(c3, c2);
  submit(f1, c2);
  submit(c1, "");
  submit(c2, c1);
  submit(c2, c1);
  std::string cookie = f.SignIn(kRead);
  auto commits = [](const json& doc) {
    std::vector<std::string> out;
    for (const auto& b : doc["experiments"][0]["batches"]) out.push_back(b["commit"]);
    return out;
  };
  auto main_doc = json::parse(f.Get("/dash/api/experiment/branchy", cookie).body);
  REQUIRE(main_doc["experiments"].size() == 1);
  CHECK(commits(main_doc) == std::vector<std::string>{c1, c2, c3});
  CHECK(main_doc["experiments"][0]["batches"][1]["id"] == newest[c2]);
  const json& h = main_doc["experiments"][0]["history"];
  CHECK(h["order"] == "branch");
  CHECK(h["branch"] == "main");  // the mirror's default branch
  CHECK(h["branches"] == json::array({"feature", "main"}));
  CHECK(h["on_branch"] == 3);
  CHECK(h["off_branch"] == 1);  // f1's
  auto feature = f.Get("/dash/api/experiment/branchy", cookie, {{"branch", "feature"}});
  REQUIRE(feature.status == 200);
  CHECK(commits(json::parse(feature.body)) == std::vector<std::string>{c1, c2, f1});
  auto none = f.Get("/dash/api/experiment/branchy", cookie, {{"branch", "nope"}});
  CHECK(none.status == 404);
  CHECK(json::parse(none.body)["reason"].get<std::string>().find("no branch 'nope'") !=
        std::string::npos);
  // Pages of 2, newest first: the older page holds c1 alone.
  auto paged = [&](const std::string& page) {
    return json::parse(f.Get("/dash/api/experiment/branchy", cookie,
                             {{"per_page", "2"}, {"page", page}})
                           .body);
  };
  CHECK(commits(paged("0")) == std::vector<std::string>{c2, c3});
  CHECK(paged("0")["experiments"][0]["history"]["pages"] == 2);
  CHECK(commits(paged("1")) == std::vector<std::string>{c1});
  CHECK(paged("1")["experiments"][0]["history"]["page"] == 1);
  CHECK(commits(paged("9")) == std::vector<std::string>{c1});  // past the end: the oldest
  for (const auto& [name, bad] : std::vector<std::pair<std::string, std::string>>{
           {"per_page", "0"}, {"per_page", "501"}, {"page", "x"}}) {
    auto r = f.Get("/dash/api/experiment/branchy", cookie, {{name, bad}});
    CHECK(r.status == 400);
    CHECK(r.body.find(name + ": expected a whole number") != std::string::npos);
  }
  // A repository that cannot be read here: creation order, said so.
  auto elsewhere = json::parse(f.Get("/dash/api/experiment/digits", cookie).body);
  CHECK(elsewhere["experiments"][0]["history"]["order"] == "created");
  CHECK(elsewhere["experiments"][0]["batches"].size() == 2);
}

TEST_CASE("dashboard: a batch reused by a later commit is one point, at the commit that ran it, "
          "marked where reused (issue 38.6)",
          "[dashboard][branch]") {
  Fixture f;
  testing::GitCli git{f.tmp / "work"};
  std::string c1 = git.Commit({{"a.txt", "1"}}, "one");
  std::string c2 = git.Commit({{"README.md", "docs"}}, "docs only");
  std::string mirror = f.tmp / "mirror.git";
  git.Run("clone -q --mirror . " + mirror);
  auto store = Store::Open(f.db).value();
  BatchSpec s;
  s.experiment = "reused";
  s.command = "true";
  s.repeats = 1;
  auto ran = store.runs().Submit(mirror, {c1, "", "one", "me", 0}, {s}, f.clock.Now());
  REQUIRE(ran);
  REQUIRE(store.runs().ReuseBatch(mirror, {c2, c1, "docs only", "me", 0}, "reused",
                                  ran->front().batch_id, "same inputs", f.clock.Now()));
  std::string cookie = f.SignIn(kRead);
  auto doc = json::parse(f.Get("/dash/api/experiment/reused", cookie).body);
  const json& batches = doc["experiments"][0]["batches"];
  REQUIRE(batches.size() == 1);
  CHECK(batches[0]["commit"] == c1);
  CHECK(batches[0]["reused_at"] == json::array({c2}));
  CHECK(doc["experiments"][0]["history"]["on_branch"] == 1);
}

// Issue 28 and 30: the experiment page's data reads the page it shows. The
// same page (40 commits) with ten times the history costs about the same
// SQLite VM steps: only the history's batch keys grow with it. A read of
// every batch's runs or comparisons again (the whole report) fails this.
TEST_CASE("dashboard: an experiment page's data reads its page, not the history",
          "[dashboard][scale][sqlite]") {
  Fixture f;
  auto store = Store::Open(f.db).value();
  auto raw = sql::Db::Open(f.db, false, 5000).value();
  int next = 0;
  auto add = [&](int batches) {
    for (int i = 0; i < batches; ++i, ++next) {
      char sha[41];
      std::snprintf(sha, sizeof sha, "%040x", 0x5000 + next);
      char parent[41];
      std::snprintf(parent, sizeof parent, "%040x", 0x5000 + next - 1);
      BatchSpec s;
      s.experiment = "long";
      s.command = "true";
      s.repeats = 10;
      auto sub = store.runs().Submit("/srv/unreadable", {sha, next ? parent : "", "s", "me", 0},
                                     {s}, f.clock.Now() + next);
      REQUIRE(sub);
      auto u = raw.Prepare("UPDATE runs SET state = 'succeeded', attempts = 1, metric_value = "
                           "0.9 + repeat / 1000.0 + ?2 / 1e6, finished_ms = 1 WHERE batch_id = ?1");
      REQUIRE(u);
      REQUIRE(u->Bind(1, sub->front().batch_id).Bind(2, next % 7).Run());
    }
  };
  std::string cookie = f.SignIn(kRead);
  auto steps = [&] {
    std::int64_t s0 = sql::VmSteps();
    auto r = f.Get("/dash/api/experiment/long", cookie);
    std::int64_t used = sql::VmSteps() - s0;
    REQUIRE(r.status == 200);
    auto j = json::parse(r.body);
    CHECK(j["experiments"][0]["batches"].size() == 40);
    CHECK(j["experiments"][0]["batches"][1]["vs_parent"].is_object());
    return std::pair(used, j["experiments"][0]["history"]["points"].get<int>());
  };
  add(50);
  auto [small, small_points] = steps();
  add(450);
  auto [large, large_points] = steps();
  CHECK(small_points == 50);
  CHECK(large_points == 500);
  INFO("VM steps at 50 commits " << small << ", at 500 " << large);
  CHECK(large < small * 3 / 2);
}

TEST_CASE("dashboard: an admin cookie is refused when the config has no admin token",
          "[dashboard]") {
  Fixture f(/*admin=*/false);
  CHECK(f.server->Handle(SignInForm(kAdmin, "/")).status == 401);
}

TEST_CASE("dashboard: events answer at once to a stale id and otherwise wait for a commit",
          "[dashboard]") {
  Fixture f;
  std::string cookie = f.SignIn(kRead);
  auto first = f.Get("/dash/events", cookie, {{"last", "other-boot-7"}});
  REQUIRE(first.status == 200);
  CHECK(first.content_type.starts_with("text/event-stream"));
  auto pos = first.body.find("id: ");
  REQUIRE(pos != std::string::npos);
  std::string id = first.body.substr(pos + 4, first.body.find('\n', pos) - pos - 4);
  // The watcher is running now; a commit from another connection wakes a
  // request that waits with the current id.
  auto waiting = std::async(std::launch::async, [&] {
    return f.Get("/dash/events", cookie, {{"last", id}});
  });
  // On PostgreSQL the data version is the server's WAL position, which any
  // write on the server moves (docs/design/postgres.md): a wake may come
  // early there, so only SQLite is held to waiting until the commit.
  if (!testing::TestingPostgres()) {
    CHECK(waiting.wait_for(std::chrono::milliseconds(300)) == std::future_status::timeout);
  }
  auto t0 = std::chrono::steady_clock::now();
  {
    auto store = Store::Open(f.db).value();
    f.Add(store, std::string(40, 'c'), f.sha_b, {0.5}, false);
  }
  REQUIRE(waiting.wait_for(std::chrono::seconds(10)) == std::future_status::ready);
  auto r = waiting.get();
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  CHECK(r.body.find("event: change") != std::string::npos);
  CHECK(r.body.find("id: " + id) == std::string::npos);  // a newer id
}

// A Server over an empty store whose dashboard runs on `clock`, for the
// session lifetimes; `extra` goes into server.yaml.
struct ClockedFixture {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  FakeClock clock;
  ServerConfig config;
  std::unique_ptr<Server> server;
  explicit ClockedFixture(const std::string& extra = "") {
    REQUIRE(WriteFile(tmp / "read", std::string(kRead) + "\n"));
    REQUIRE(WriteFile(tmp / "admin", std::string(kAdmin) + "\n"));
    config = ParseServerConfig("read_token: {file: " + (tmp / "read") + "}\nadmin_token: {file: " +
                                   (tmp / "admin") + "}\n" + extra,
                               "server.yaml")
                 .value();
    REQUIRE(Store::Open(db));
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
  std::string SignIn(const std::string& token) {
    auto r = server->Handle(SignInForm(token, "/"));
    REQUIRE(r.status == 303);
    std::string cookie = Header(r, "Set-Cookie");
    return cookie.substr(0, cookie.find(';'));
  }
  int Session(const std::string& cookie) {
    return server->Handle(Req("GET", "/dash/api/session", {{"Cookie", cookie}})).status;
  }
};

TEST_CASE("dashboard: the sign-in form takes the token in its body, and a token in the address "
          "no longer signs in (issue 36 F9)",
          "[dashboard][signin]") {
  Fixture f;
  // The page itself: a form that POSTs the token, nothing of the store.
  auto page = f.server->Handle(Req("GET", "/signin", {}, {{"next", "/experiment/digits"}}));
  CHECK(page.status == 200);
  CHECK(page.content_type.starts_with("text/html"));
  CHECK(page.body.find("<form method=\"post\" action=\"/signin\"") != std::string::npos);
  CHECK(page.body.find("name=\"token\"") != std::string::npos);
  CHECK(page.body.find("value=\"/experiment/digits\"") != std::string::npos);
  CHECK(f.server->Handle(Req("GET", "/dash/app.css")).status == 200);  // its style: no data

  // POSTed, the token signs in and the browser goes on to `next`, an address
  // without the token.
  auto in = f.server->Handle(SignInForm(kRead, "/experiment/digits?page=1"));
  REQUIRE(in.status == 303);
  CHECK(Header(in, "Location") == "/experiment/digits?page=1");
  CHECK(Header(in, "Location").find(kRead) == std::string::npos);
  std::string cookie = Header(in, "Set-Cookie");
  CHECK(cookie.find(kRead) == std::string::npos);
  CHECK(cookie.find("Secure") == std::string::npos);  // no public_url: plain HTTP
  CHECK(f.Get("/dash/api/session", cookie.substr(0, cookie.find(';'))).status == 200);

  // A decoded path goes back encoded (a Location holds no space or quote).
  CHECK(Header(f.server->Handle(SignInForm(kRead, "/experiment/a b\"%")), "Location") ==
        "/experiment/a%20b%22%25");
  // `next` leads only to a page of this server.
  for (const char* next : {"//evil.example/", "https://evil.example/", "/dash/api/status",
                                  "/\\evil.example", "/run/1\r\nSet-Cookie: x=1", ""}) {
    INFO(next);
    auto r = f.server->Handle(SignInForm(kRead, next));
    REQUIRE(r.status == 303);
    CHECK(Header(r, "Location") == "/");
  }

  // A wrong token: the sign-in page again, no cookie.
  auto wrong = f.server->Handle(SignInForm("wrong", "/"));
  CHECK(wrong.status == 401);
  CHECK(Header(wrong, "Set-Cookie").empty());
  CHECK(wrong.body.find("not the read or admin token") != std::string::npos);

  // A form posted from another site is refused (login CSRF); the same site's is taken.
  CHECK(f.server->Handle(SignInForm(kRead, "/", {{"Origin", "http://evil.example"}})).status ==
        403);
  CHECK(f.server->Handle(SignInForm(kRead, "/", {{"Origin", "http://127.0.0.1:8080"}})).status ==
        303);

  // `/?token=` (the old login, which left the token in the browser's history)
  // signs in no more: the sign-in page says to use the form.
  for (const char* token : {kRead, kAdmin}) {
    auto r = f.server->Handle(Req("GET", "/commit/" + f.sha_b, {}, {{"token", token}}));
    CHECK(r.status == 401);
    CHECK(Header(r, "Set-Cookie").empty());
    CHECK(Header(r, "Location").empty());
    CHECK(r.body.find("no longer accepted") != std::string::npos);
    CHECK(r.body.find(token) == std::string::npos);
  }
}

TEST_CASE("dashboard: serve's start line is a one-time link that expires, and login-link makes "
          "more for a token's bearer",
          "[dashboard][signin]") {
  ClockedFixture f;
  std::string line = f.server->DashboardUrl("127.0.0.1:8080");
  INFO(line);
  REQUIRE(line.starts_with("http://127.0.0.1:8080/?login="));
  CHECK(line.find(kRead) == std::string::npos);
  CHECK(line.find("one-time") != std::string::npos);
  std::string code = line.substr(line.find('=') + 1, 32);
  auto open = [&](const std::string& c) {
    return f.server->Handle(Req("GET", "/machines", {}, {{"login", c}, {"x", "1"}}));
  };
  auto first = open(code);
  REQUIRE(first.status == 303);
  CHECK(Header(first, "Location") == "/machines?x=1");
  std::string cookie = Header(first, "Set-Cookie");
  cookie = cookie.substr(0, cookie.find(';'));
  CHECK(json::parse(f.server->Handle(Req("GET", "/dash/api/session", {{"Cookie", cookie}})).body)
            ["role"] == "read");
  // Once only.
  auto again = open(code);
  CHECK(again.status == 401);
  CHECK(Header(again, "Set-Cookie").empty());
  CHECK(again.body.find("used already or has expired") != std::string::npos);

  // A new link for the admin token's bearer; good for 10 minutes.
  auto mint = [&](const std::string& token) {
    return f.server->Handle(Req("POST", "/dash/api/login-link",
                                {{"Authorization", "Bearer " + token}, {"Host", "h:1"}}));
  };
  CHECK(mint("wrong").status == 401);
  auto made = mint(kAdmin);
  REQUIRE(made.status == 200);
  auto j = json::parse(made.body);
  CHECK(j["role"] == "admin");
  CHECK(j["expires_in_s"] == 600);
  std::string url = j["url"];
  REQUIRE(url.starts_with("http://h:1/?login="));
  std::string admin_code = url.substr(url.find('=') + 1);
  f.clock.Advance(10 * 60'000 + 1);
  CHECK(open(admin_code).status == 401);  // expired
  auto fresh = json::parse(mint(kRead).body);
  CHECK(fresh["role"] == "read");
  std::string read_url = fresh["url"];
  CHECK(open(read_url.substr(read_url.find('=') + 1)).status == 303);
}

TEST_CASE("dashboard: the session cookie is Secure when public_url is https", "[dashboard][signin]") {
  {
    ClockedFixture f("public_url: https://trainq.example\n");
    auto r = f.server->Handle(SignInForm(kRead, "/"));
    REQUIRE(r.status == 303);
    std::string cookie = Header(r, "Set-Cookie");
    CHECK(cookie.find("; Secure") != std::string::npos);
    CHECK(cookie.find("HttpOnly") != std::string::npos);
    CHECK(cookie.find("SameSite=Strict") != std::string::npos);
    // Behind a proxy the form's Origin is public_url's.
    CHECK(f.server->Handle(SignInForm(kRead, "/", {{"Origin", "https://trainq.example"}})).status ==
          303);
  }
  {
    ClockedFixture f("public_url: http://trainq.internal:8080\n");
    auto r = f.server->Handle(SignInForm(kRead, "/"));
    CHECK(Header(r, "Set-Cookie").find("Secure") == std::string::npos);
  }
}

TEST_CASE("dashboard: a session ends server-side after 12 h idle and 30 days in all",
          "[dashboard][signin]") {
  ClockedFixture f;
  const TimeMs hour = 3600'000;
  std::string idle = f.SignIn(kRead);
  std::string busy = f.SignIn(kAdmin);
  f.clock.Advance(11 * hour);
  CHECK(f.Session(idle) == 200);  // used: its idle time starts again
  CHECK(f.Session(busy) == 200);
  f.clock.Advance(12 * hour);
  CHECK(f.Session(idle) == 401);  // 12 h without a request
  CHECK(f.Session(busy) == 401);
  // Used every 11 hours it lives until 30 days after sign-in, and not after.
  std::string s = f.SignIn(kRead);
  TimeMs lived = 0;
  while (lived + 11 * hour < 30 * 24 * hour) {
    f.clock.Advance(11 * hour);
    lived += 11 * hour;
    REQUIRE(f.Session(s) == 200);
  }
  f.clock.Advance(30 * 24 * hour - lived);
  CHECK(f.Session(s) == 401);
  // The cookie of an ended session never comes back, even when used at once.
  CHECK(f.Session(s) == 401);
}

TEST_CASE("dashboard: log-out ends the session server-side and needs its CSRF token",
          "[dashboard][signin]") {
  ClockedFixture f;
  std::string cookie = f.SignIn(kAdmin);
  std::string other = f.SignIn(kAdmin);
  std::string csrf = json::parse(f.server->Handle(Req("GET", "/dash/api/session",
                                                      {{"Cookie", cookie}})).body)["csrf"];
  auto logout = [&](const std::string& c, const std::string& token) {
    HttpHeaders h = {{"Cookie", c}};
    if (!token.empty()) h.emplace_back("X-CSRF-Token", token);
    return f.server->Handle(Req("POST", "/dash/api/logout", h));
  };
  CHECK(logout(cookie, "").status == 403);
  CHECK(logout(other, csrf).status == 403);  // another session's token
  CHECK(f.server->Handle(Req("GET", "/dash/api/logout", {{"Cookie", cookie}})).status == 405);
  CHECK(f.Session(cookie) == 200);
  auto out = logout(cookie, csrf);
  CHECK(out.status == 200);
  std::string cleared = Header(out, "Set-Cookie");
  CHECK(cleared.starts_with("trainq_dash=;"));
  CHECK(cleared.find("Max-Age=0") != std::string::npos);
  // The same cookie, kept by the client, is refused: the session is gone.
  CHECK(f.Session(cookie) == 401);
  CHECK(f.server->Handle(Req("GET", "/", {{"Cookie", cookie}})).status == 401);
  CHECK(f.Session(other) == 200);  // another session stays
}

TEST_CASE("dashboard: a wrong token's warning is one line a minute with a count (issue 36 F8)",
          "[dashboard][signin]") {
  ClockedFixture f;
  testing::LogCapture log;
  for (int i = 0; i < 50; ++i) {
    CHECK(f.server->Handle(SignInForm("wrong-" + std::to_string(i), "/")).status == 401);
    CHECK(f.server->Handle(Req("GET", "/", {}, {{"login", "nope"}})).status == 401);
  }
  CHECK(log.Count("dashboard: a sign-in from") == 1);
  f.clock.Advance(60'001);
  CHECK(f.server->Handle(SignInForm("wrong", "/")).status == 401);
  CHECK(log.Count("(99 more since the last such line)") == 1);
  CHECK(log.text().find("wrong-") == std::string::npos);  // nothing the client sent
}

}  // namespace
}  // namespace trainq
