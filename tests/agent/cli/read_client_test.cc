// The read client of hosted CI (agent/cli/read_client.cc) against the read
// routes of agent/daemon/read_api.cc: first an in-process Server, then
// `trainq report --server` and `trainq gate --server` through the real binary
// against a real `trainq serve` on loopback, compared byte for byte with the
// local commands on the same store.
#include "agent/cli/read_client.h"

#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/cli/cli.h"
#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/repo/mirror.h"
#include "agent/results/gate.h"
#include "agent/results/report.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/agent/agent_test_util.h"
#include "tests/agent/daemon/read_api_fixture.h"
#include "tests/support/git_cli.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

namespace trainq {
namespace {

using namespace testing::read_api;

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

TEST_CASE("ReadToken: the file first, else $TRAINQ_READ_TOKEN, else how to give one",
          "[read_api]") {
  testing::TempDir tmp;
  unsetenv("TRAINQ_READ_TOKEN");
  CHECK(ReadToken("").error().message ==
        "--server needs the server's read token: --token-file FILE, $TRAINQ_READ_TOKEN, or a "
        "personal token kept by `trainq login --server URL`");
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
  auto local = DecideGate(store, {o.rev, o.baseline, "", {}, std::nullopt, ""}).value();
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
                          "read_token, or `trainq login` keep a live personal token)\n");
  auto gate = s.Trainq(s.Remote() + "gate " + s.c + " --baseline " + s.a + wrong);
  CHECK(gate.code == 2);
  CHECK(gate.out.empty());
  CHECK(gate.all.find("GET /api/v1/gate: HTTP 401") != std::string::npos);
  auto missing = s.Trainq(s.Remote() + "gate " + s.c + " --server " + s.base);
  CHECK(missing.code == 2);
  CHECK(missing.all == "trainq: error: --server needs the server's read token: --token-file FILE, "
                       "$TRAINQ_READ_TOKEN, or a personal token kept by `trainq login --server "
                       "URL`\n");

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
