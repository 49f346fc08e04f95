// The read routes for hosted CI: GET /api/v1/report and /api/v1/gate behind
// the config's read_token, first without sockets, then `trainq report
// --server` and `trainq gate --server` through the real binary against a real
// `trainq serve` on loopback, compared byte for byte with the local commands
// on the same store.
#include "agent/cli/read_client.h"
#include "agent/daemon/read_api.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/results/gate.h"
#include "agent/repo/mirror.h"
#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "core/strings.h"
#include "tests/agent/agent_test_util.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

constexpr const char* kToken = "read-token-for-tests";
constexpr const char* kUnauthorized = R"({"reason":"missing or wrong read token","result":"error"})"
                                      "\n";

// A batch of `experiment` at `sha` whose runs end with `values` (seed i gets
// values[i]); with finish = false its runs stay queued.
void AddBatch(Store& store, const std::string& sha, const std::string& parent,
              const std::string& experiment, const std::vector<double>& values, TimeMs at,
              bool finish = true) {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  c.message = "commit " + sha.substr(0, 7);
  BatchSpec s;
  s.experiment = experiment;
  s.command = "true";
  s.repeats = static_cast<int>(values.size());
  REQUIRE(store.runs().Submit("/repos/model", c, {s}, at));
  if (!finish) return;
  auto leased = store.runs().Lease("w", at, 60'000, static_cast<int>(values.size())).value();
  REQUIRE(leased.size() == values.size());
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
  }
}

// Finishes every queued run of the store with `values` by repeat.
void FinishQueued(const std::string& db, const std::vector<double>& values, TimeMs at) {
  auto store = Store::Open(db).value();
  auto leased = store.runs().Lease("w", at, 60'000, 100).value();
  REQUIRE_FALSE(leased.empty());
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
  }
}

// A: the baseline; B: clearly better on the same seeds; C: clearly worse;
// D: queued, not run. Two experiments, so filters matter.
struct History {
  std::string a = std::string(40, 'a'), b = std::string(40, 'b'), c = std::string(40, 'c'),
              d = std::string(40, 'd');
  void Write(const std::string& db, TimeMs now) {
    auto store = Store::Open(db).value();
    AddBatch(store, a, "", "digits", {0.90, 0.91, 0.92, 0.905, 0.915, 0.91}, now - 3'600'000);
    AddBatch(store, a, "", "other", {0.5, 0.6, 0.55}, now - 3'600'000);
    AddBatch(store, b, a, "digits", {0.93, 0.94, 0.95, 0.935, 0.945, 0.94}, now - 2'400'000);
    AddBatch(store, c, b, "digits", {0.80, 0.81, 0.82, 0.805, 0.815, 0.81}, now - 1'200'000);
    AddBatch(store, c, b, "other", {0.51, 0.62, 0.54}, now - 1'200'000);
    AddBatch(store, d, c, "digits", {0, 0, 0, 0, 0, 0}, now - 600'000, false);
  }
};

HttpServerRequest Get(const std::string& path, std::vector<std::pair<std::string, std::string>> q,
                      const std::optional<std::string>& token = kToken) {
  HttpServerRequest r;
  r.method = "GET";
  r.path = path;
  r.query = std::move(q);
  if (token) r.headers.emplace_back("Authorization", "Bearer " + *token);
  return r;
}

struct InProcess {
  testing::TempDir tmp;
  std::string db = tmp / "t.db";
  const Clock& clock = SystemClock::Get();
  ServerConfig config;
  History h;
  std::unique_ptr<Server> server;

  explicit InProcess(bool with_token = true) {
    REQUIRE(WriteFile(tmp / "read.token", std::string(kToken) + "\n"));
    auto c = ParseServerConfig(
        with_token ? "read_token: {file: " + (tmp / "read.token") + "}\n" : "", "server.yaml");
    REQUIRE(c);
    config = *c;
    h.Write(db, clock.Now());
    server = std::make_unique<Server>(config, db, clock);
    REQUIRE(server->Open());
  }
};

TEST_CASE("read routes: a wrong or missing token gets 401 and the same body whatever exists",
          "[read_api]") {
  InProcess w;
  for (const char* path : {"/api/v1/report", "/api/v1/gate"}) {
    for (const auto& q : std::vector<std::vector<std::pair<std::string, std::string>>>{
             {},
             {{"format", "json"}},
             {{"rev", w.h.c}, {"baseline", w.h.a}},
             {{"rev", "nothing-here"}, {"experiment", "missing"}}}) {
      for (const auto& token : std::vector<std::optional<std::string>>{
               std::nullopt, "", "read-token-for-test", std::string(kToken) + "x", "Bearer"}) {
        INFO(path << " token " << token.value_or("(none)"));
        auto r = w.server->Handle(Get(path, q, token));
        CHECK(r.status == 401);
        CHECK(r.body == kUnauthorized);
      }
      // Another scheme with the right token is refused too.
      auto basic = Get(path, q, std::nullopt);
      basic.headers.emplace_back("Authorization", std::string("Basic ") + kToken);
      CHECK(w.server->Handle(basic).status == 401);
    }
  }
  // The status document and the counters take the same token; /healthz
  // shows no runs and stays open.
  CHECK(w.server->Handle({"GET", "/api/v1/status", {}, "", false}).status == 401);
  CHECK(w.server->Handle(Get("/api/v1/status", {}, kToken)).status == 200);
  CHECK(w.server->Handle(Get("/metrics", {}, kToken)).status == 200);
  CHECK(w.server->Handle({"GET", "/healthz", {}, "", false}).status == 200);
}

TEST_CASE("read routes: without read_token in the config they answer 403 with the reason",
          "[read_api]") {
  InProcess w(false);
  for (const char* path : {"/api/v1/report", "/api/v1/gate"}) {
    auto r = w.server->Handle(Get(path, {{"format", "md"}}));
    CHECK(r.status == 403);
    CHECK(json::parse(r.body)["reason"] ==
          "read routes are off: the server config has no read_token");
  }
  for (const char* path : {"/api/v1/status", "/metrics"}) {
    auto r = w.server->Handle(Get(path, {}));
    CHECK(r.status == 403);
    CHECK(json::parse(r.body)["reason"] ==
          std::string(path) + " is off: the server config has no read_token");
  }
}

TEST_CASE("read routes: the report in every format is the bytes the local command writes",
          "[read_api]") {
  InProcess w;
  // What `trainq report --out` writes and `trainq report [--json]` prints.
  ReportOptions o;
  o.db = w.db;
  o.out_dir = w.tmp / "out";
  o.since = "7d";
  std::ostringstream printed;
  REQUIRE(CmdReport(o, w.clock, printed));
  for (const char* format : {"md", "html", "json", "csv"}) {
    INFO(format);
    auto r = w.server->Handle(Get("/api/v1/report", {{"format", format}, {"since", "7d"}}));
    REQUIRE(r.status == 200);
    CHECK(r.body == ReadFile(fs::path(o.out_dir) / ReportFileName(format)).value());
  }
  CHECK(json::parse(w.server->Handle(Get("/api/v1/report", {{"format", "json"}})).body)
            .dump()
            .size() > 100);
  CHECK(w.server->Handle(Get("/api/v1/report", {{"format", "html"}})).content_type ==
        "text/html; charset=utf-8");
  auto summary = w.server->Handle(Get("/api/v1/report", {{"format", "summary"}, {"since", "7d"}}));
  CHECK(printed.str().ends_with(summary.body));
  CHECK(summary.body == "6 batches, 30 runs, 2 experiment(s)\n");

  for (bool as_json : {false, true}) {
    ReportOptions t;
    t.db = w.db;
    t.json = as_json;
    t.experiments = {"other"};
    std::ostringstream local;
    REQUIRE(CmdReport(t, w.clock, local));
    auto r = w.server->Handle(Get(
        "/api/v1/report", {{"format", as_json ? "batches" : "table"}, {"experiment", "other"}}));
    REQUIRE(r.status == 200);
    CHECK(r.body == local.str());
    CHECK(r.body.find("digits") == std::string::npos);
  }
  // Repeated experiment parameters are all kept.
  auto both = w.server->Handle(
      Get("/api/v1/report", {{"format", "csv"}, {"experiment", "other"}, {"experiment", "digits"}}));
  CHECK(both.body == w.server->Handle(Get("/api/v1/report", {{"format", "csv"}})).body);
}

TEST_CASE("read routes: bad parameters are 400 and name the parameter", "[read_api]") {
  InProcess w;
  struct Case {
    const char* path;
    std::vector<std::pair<std::string, std::string>> q;
    int status;
    const char* reason;
  };
  for (const auto& c : std::vector<Case>{
           {"/api/v1/report", {{"fromat", "md"}}, 400,
            "/api/v1/report: unknown parameter 'fromat' (expected experiment, format, limit, "
            "since)"},
           {"/api/v1/report", {{"format", "table"}, {"limit", "-3"}}, 400,
            "/api/v1/report: limit: expected a whole number of batches >= 0 (0: all), got \"-3\""},
           {"/api/v1/report", {{"format", "pdf"}}, 400,
            "/api/v1/report: format: unknown format 'pdf' (md, html, json, csv, summary, table, "
            "batches)"},
           {"/api/v1/report", {{"since", "a week"}}, 400, "/api/v1/report: since: "},
           {"/api/v1/report", {{"format", "md"}, {"experiment", "nope"}}, 404,
            "/api/v1/report: experiment: no batch of experiment 'nope' in the server's store "
            "(known: digits, other)"},
           {"/api/v1/gate", {{"baseline", "main"}}, 400,
            "/api/v1/gate: rev is required (a commit, branch or tag)"},
           {"/api/v1/gate", {{"rev", "x"}, {"repo", "model"}}, 404,
            "/api/v1/gate: repo: 'model' is not a repository this server watches"},
       }) {
    INFO(c.path << " " << c.reason);
    auto r = w.server->Handle(Get(c.path, c.q));
    CHECK(r.status == c.status);
    CHECK(json::parse(r.body)["reason"].get<std::string>().starts_with(c.reason));
  }
}

TEST_CASE("read routes: the gate answers DecideGate's decision on the same store", "[read_api]") {
  InProcess w;
  auto store = Store::Open(w.db).value();
  for (const auto& rev : {w.h.b, w.h.c, w.h.d}) {
    GateRequest g;
    g.rev = rev;
    g.baseline = w.h.a;
    auto local = DecideGate(store, g);
    REQUIRE(local);
    auto r = w.server->Handle(Get("/api/v1/gate", {{"rev", rev}, {"baseline", w.h.a}}));
    REQUIRE(r.status == 200);
    auto j = json::parse(r.body);
    INFO(r.body);
    CHECK(j["exit_code"] == local->exit_code);
    CHECK(j["text"] == local->text);
    CHECK(j["json"] == local->json);
    CHECK(j["finished"] == local->finished);
  }
  auto worse = json::parse(
      w.server->Handle(Get("/api/v1/gate", {{"rev", w.h.c}, {"baseline", w.h.a}})).body);
  CHECK(worse["exit_code"] == 1);
  auto unfinished = json::parse(
      w.server->Handle(Get("/api/v1/gate", {{"rev", w.h.d}, {"baseline", w.h.a}})).body);
  CHECK(unfinished["exit_code"] == 3);
  CHECK(unfinished["finished"] == false);
}

TEST_CASE("ResolveServerRepo: url, project, short name, the only one, or an error",
          "[read_api]") {
  auto one = ParseServerConfig("repositories:\n  - url: https://github.com/acme/model.git\n",
                               "s.yaml")
                 .value();
  auto two = ParseServerConfig("repositories:\n  - url: https://github.com/acme/model.git\n"
                               "  - url: https://gitlab.com/other/model\n"
                               "  - url: file:///srv/git/vision.git\n",
                               "s.yaml")
                 .value();
  ServerConfig none;
  CHECK(ResolveServerRepo(none, "").value() == nullptr);
  CHECK(ResolveServerRepo(one, "").value() == &one.repositories[0]);
  CHECK(ResolveServerRepo(one, "model").value() == &one.repositories[0]);
  CHECK(ResolveServerRepo(one, "acme/model").value() == &one.repositories[0]);
  CHECK(ResolveServerRepo(one, "https://github.com/acme/model").value() == &one.repositories[0]);
  CHECK(ResolveServerRepo(two, "vision").value() == &two.repositories[2]);
  CHECK(ResolveServerRepo(two, "other/model").value() == &two.repositories[1]);
  CHECK(ResolveServerRepo(two, "").error().message ==
        "repo: the server watches 3 repositories; name one (https://github.com/acme/model.git, "
        "https://gitlab.com/other/model, file:///srv/git/vision.git)");
  CHECK(ResolveServerRepo(two, "model").error().message.starts_with(
      "repo: 'model' matches several repositories"));
  CHECK(ResolveServerRepo(two, "nope").error().kind == ErrorKind::kNotFound);
}

TEST_CASE("ReadToken: the file first, else $TRAINQ_READ_TOKEN, else how to give one",
          "[read_api]") {
  testing::TempDir tmp;
  unsetenv("TRAINQ_READ_TOKEN");
  CHECK(ReadToken("").error().message ==
        "--server needs the server's read token: --token-file FILE or $TRAINQ_READ_TOKEN");
  setenv("TRAINQ_READ_TOKEN", "from-env\n", 1);
  CHECK(ReadToken("").value() == "from-env");
  REQUIRE(WriteFile(tmp / "t", "from-file\n"));
  CHECK(ReadToken(tmp / "t").value() == "from-file");
  unsetenv("TRAINQ_READ_TOKEN");
  CHECK(ReadToken(tmp / "missing").error().message.starts_with("--token-file: "));
  REQUIRE(WriteFile(tmp / "empty", "\n"));
  CHECK(ReadToken(tmp / "empty").error().message == "--token-file " + (tmp / "empty") +
                                                        " is empty");
}

// In-process server on loopback for the client: requests counted.
struct Loopback : InProcess {
  std::atomic<int> gate_requests{0};
  std::unique_ptr<HttpListener> listener;
  std::string base;
  Loopback() {
    int port = testing::FreeLoopbackPort();
    auto l = HttpListener::Start({"127.0.0.1", port}, 1 << 20, [this](const HttpServerRequest& r) {
      if (r.path == "/api/v1/gate") ++gate_requests;
      return server->Handle(r);
    });
    REQUIRE(l);
    listener = std::move(*l);
    base = "http://127.0.0.1:" + std::to_string(port);
  }
  ~Loopback() { listener->Stop(); }
};

TEST_CASE("GateFromServer with a wait asks again until the runs have ended", "[read_api]") {
  Loopback w;
  GateOptions o;
  o.rev = w.h.d;
  o.baseline = w.h.a;
  o.repo.clear();  // a repository of the server, not a directory: none here
  o.server = w.base;
  o.token_file = w.tmp / "read.token";
  // Without waiting: undecided at once.
  std::ostringstream now;
  auto first = GateFromServer(o, 0, false, now);
  INFO((first ? now.str() : first.error().message));
  REQUIRE(first);
  CHECK(*first == 3);
  CHECK(w.gate_requests == 1);

  std::atomic<bool> done{false};
  Result<int> code = 0;
  std::ostringstream out;
  std::thread gate([&] {
    code = GateFromServer(o, 120'000, false, out);
    done = true;
  });
  // It asked, got "unfinished", and is still waiting.
  REQUIRE(testing::WaitFor([&] { return w.gate_requests >= 2; }, 30s));
  CHECK_FALSE(done);
  FinishQueued(w.db, {0.80, 0.81, 0.82, 0.805, 0.815, 0.81}, w.clock.Now());
  bool ended = testing::WaitFor([&] { return done.load(); }, 60s);
  gate.join();
  REQUIRE(ended);
  REQUIRE(code);
  CHECK(*code == 1);  // D ran as badly as C
  auto store = Store::Open(w.db).value();
  auto local = DecideGate(store, {o.rev, o.baseline, "", {}, std::nullopt}).value();
  CHECK(local.finished);
  CHECK(out.str() == local.text);
}

TEST_CASE("GateFromServer: a server that does not answer is an error naming it", "[read_api]") {
  GateOptions o;
  o.rev = "abcd";
  o.repo.clear();
  o.server = "http://127.0.0.1:" + std::to_string(testing::FreeLoopbackPort());
  setenv("TRAINQ_READ_TOKEN", "x", 1);
  std::ostringstream out;
  auto r = GateFromServer(o, 0, false, out);
  unsetenv("TRAINQ_READ_TOKEN");
  REQUIRE_FALSE(r);
  CHECK(r.error().message.starts_with("--server " + o.server + ": GET /api/v1/gate: "));
  CHECK(out.str().empty());
}

// ---- through the real binary and a real `trainq serve` ----

struct Served {
  testing::TempDir tmp;
  std::string db = tmp / "trainq.db";
  std::string data = tmp / "data";
  std::string origin = tmp / "origin.git";
  std::string origin_url = "file://" + origin;
  std::string token_file = tmp / "read.token";
  std::string a, b, c, d;  // commits: main = a; feature: b, c, d
  testing::Daemon daemon;
  std::string base;

  Served() {
    // A real repository, so the gate can name branches through the server's mirror.
    testing::GitCli::InitBare(origin);
    testing::GitCli work(tmp / "work");
    a = work.Commit({{"train.py", "a\n"}}, "a");
    work.Run("remote add origin " + ShellQuote(origin));
    work.Run("push -q origin main");
    work.Run("checkout -q -b feature");
    b = work.Commit({{"train.py", "b\n"}}, "b");
    c = work.Commit({{"train.py", "c\n"}}, "c");
    d = work.Commit({{"train.py", "d\n"}}, "d");
    work.Run("push -q origin feature");
    {
      auto mirror = Mirror::Open(Mirror::PathFor(data, origin_url), origin_url);
      REQUIRE(mirror);
      REQUIRE(mirror->Fetch({}));
    }
    History h{a, b, c, d};
    h.Write(db, SystemClock::Get().Now());

    REQUIRE(WriteFile(token_file, std::string(kToken) + "\n"));
    REQUIRE(WriteFile(tmp / "server.yaml", "read_token: {file: " + token_file +
                                               "}\nrepositories:\n  - url: " + origin_url + "\n"));
    int port = testing::FreeLoopbackPort();
    base = "http://127.0.0.1:" + std::to_string(port);
    auto pid = daemon.runner.Spawn({{TRAINQ_BINARY, "--db", db, "serve", "--machines", "0",
                                     "--data-dir", data, "--config", tmp / "server.yaml",
                                     "--listen", "127.0.0.1:" + std::to_string(port)},
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
  ~Served() {
    if (daemon.pid > 0) {
      daemon.runner.KillGroup(daemon.pid, SIGTERM);
      daemon.runner.Wait(daemon.pid);
      daemon.pid = 0;
    }
  }

  struct Out {
    int code;
    std::string out;  // stdout
    std::string all;  // stdout + stderr
  };
  // `trainq ARGS` with the environment `env` (VAR=value ...), from the test's directory.
  Out Trainq(const std::string& args, const std::string& env = "") const {
    Out o;
    std::string cmd = "cd " + ShellQuote(tmp.path().string()) + " && env -u TRAINQ_READ_TOKEN -u "
                      "TRAINQ_SERVER " + env + " " + ShellQuote(TRAINQ_BINARY) + " " + args;
    o.code = testing::RunShell("{ " + cmd + " 2>" + ShellQuote(tmp / "stderr") + "; }", &o.out);
    o.all = o.out + ReadFile(tmp / "stderr").value_or("");
    return o;
  }
  std::string Local() const { return "--db " + ShellQuote(db) + " "; }
  std::string Remote() const {
    return "--db /nonexistent/trainq.db ";  // the server's store only
  }
};

TEST_CASE("cli: report --server prints and writes the bytes of the local report", "[read_api][cli]") {
  Served s;
  std::string server = " --server " + s.base + " --token-file " + ShellQuote(s.token_file);
  for (const char* args : {"report", "report --json", "report --since 7d -e digits",
                           "report -e other -e digits --json", "report --since 1s"}) {
    INFO(args);
    auto local = s.Trainq(s.Local() + args);
    auto remote = s.Trainq(s.Remote() + args + server);
    INFO(local.all << "\n---\n" << remote.all);
    REQUIRE(local.code == 0);
    CHECK(remote.code == 0);
    CHECK(remote.out == local.out);
    CHECK(remote.all == local.all);
  }
  auto local = s.Trainq(s.Local() + "report --since 7d --out local");
  // The token from the environment this time.
  auto remote = s.Trainq(s.Remote() + "report --since 7d --out remote --server " + s.base,
                         std::string("TRAINQ_READ_TOKEN=") + kToken);
  INFO(local.all << "\n---\n" << remote.all);
  REQUIRE(local.code == 0);
  REQUIRE(remote.code == 0);
  std::string renamed = local.out;
  for (size_t p; (p = renamed.find("wrote local/")) != std::string::npos;) {
    renamed.replace(p, 12, "wrote remote/");
  }
  CHECK(remote.out == renamed);
  for (const char* f : {"report.md", "report.html", "report.json", "runs.csv"}) {
    INFO(f);
    auto want = ReadFile(s.tmp / ("local/" + std::string(f)));
    REQUIRE(want);
    CHECK(ReadFile(s.tmp / ("remote/" + std::string(f))).value_or("(missing)") == *want);
  }
  auto some = s.Trainq(s.Remote() + "report --out some --format csv,md" + server);
  CHECK(some.code == 0);
  CHECK(some.out == "wrote some/report.md\nwrote some/runs.csv\n6 batches, 30 runs, 2 experiment(s)\n");
}

TEST_CASE("cli: gate --server prints the local gate's text and exits with its code",
          "[read_api][cli]") {
  Served s;
  std::string mirror = Mirror::PathFor(s.data, s.origin_url);
  std::string env = std::string("TRAINQ_READ_TOKEN=") + kToken;
  struct Case {
    std::string rev, baseline;
    int code;
  };
  for (const auto& c : std::vector<Case>{{s.b, s.a, 0}, {s.c, s.a, 1}, {s.d, s.a, 3},
                                         {"feature~1", "main", 1}, {"feature~2", "main", 0}}) {
    INFO(c.rev << " against " << c.baseline);
    auto local = s.Trainq(s.Local() + "gate " + c.rev + " --baseline " + c.baseline + " --repo " +
                          ShellQuote(mirror));
    auto remote = s.Trainq(s.Remote() + "gate " + c.rev + " --baseline " + c.baseline +
                               " --server " + s.base,
                           env);
    INFO(local.all << "\n---\n" << remote.all);
    CHECK(local.code == c.code);
    CHECK(remote.code == local.code);
    CHECK(remote.out == local.out);
    // The repository named explicitly, by short name and by url.
    for (const std::string& repo : {std::string("origin"), s.origin_url}) {
      auto named = s.Trainq(s.Remote() + "gate " + c.rev + " --baseline " + c.baseline +
                                " --repo " + ShellQuote(repo) + " --server " + s.base,
                            env);
      CHECK(named.code == local.code);
      CHECK(named.out == local.out);
    }
  }
  auto other = s.Trainq(s.Remote() + "gate " + s.c + " --baseline " + s.a +
                            " -e other --server " + s.base, env);
  auto other_local = s.Trainq(s.Local() + "gate " + s.c + " --baseline " + s.a + " -e other");
  CHECK(other.code == other_local.code);
  CHECK(other.out == other_local.out);
  CHECK(other.out.find("digits") == std::string::npos);
}

TEST_CASE("cli: --server with a wrong or missing token gets 401 and a clear error",
          "[read_api][cli]") {
  Served s;
  REQUIRE(WriteFile(s.tmp / "wrong.token", "guess\n"));
  std::string wrong = " --server " + s.base + " --token-file " + ShellQuote(s.tmp / "wrong.token");
  auto report = s.Trainq(s.Remote() + "report" + wrong);
  CHECK(report.code == 1);
  CHECK(report.out.empty());
  CHECK(report.all == "trainq: error: --server " + s.base +
                          ": GET /api/v1/report: HTTP 401: the read token was refused "
                          "(--token-file or $TRAINQ_READ_TOKEN must hold the server's "
                          "read_token)\n");
  auto gate = s.Trainq(s.Remote() + "gate " + s.c + " --baseline " + s.a + wrong);
  CHECK(gate.code == 2);
  CHECK(gate.out.empty());
  CHECK(gate.all.find("GET /api/v1/gate: HTTP 401") != std::string::npos);
  auto missing = s.Trainq(s.Remote() + "gate " + s.c + " --server " + s.base);
  CHECK(missing.code == 2);
  CHECK(missing.all == "trainq: error: --server needs the server's read token: --token-file FILE "
                       "or $TRAINQ_READ_TOKEN\n");

  // On the wire: 401 and the fixed body, with or without a token, for what
  // exists and what does not.
  CurlHttpClient http;
  for (const std::string& q : std::vector<std::string>{
           "/api/v1/report?format=json", "/api/v1/report?experiment=nope",
           "/api/v1/gate?rev=" + s.c + "&baseline=" + s.a, "/api/v1/gate?rev=feature&repo=nope"}) {
    for (const HttpHeaders& h : {HttpHeaders{}, HttpHeaders{{"Authorization", "Bearer guess"}}}) {
      auto r = http.Send({"GET", s.base + q, h, "", 5000});
      REQUIRE(r);
      CHECK(r->status == 401);
      CHECK(r->body == kUnauthorized);
    }
  }
  auto ok = http.Send({"GET", s.base + "/api/v1/report?format=csv&experiment=other",
                       {{"Authorization", std::string("Bearer ") + kToken}}, "", 5000});
  REQUIRE(ok);
  CHECK(ok->status == 200);
  CHECK(ok->Header("Content-Type").value_or("") == "text/csv; charset=utf-8");
  // The token never reaches the server's log.
  CHECK(ReadFile(s.tmp / "serve.log").value_or("").find(kToken) == std::string::npos);
}

}  // namespace
}  // namespace trainq
