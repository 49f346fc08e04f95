// The read routes for hosted CI: GET /api/v1/report and /api/v1/gate (and
// the status and metrics it guards) behind the config's read_token, without
// sockets. The read client and the `--server` commands against them are
// tests/agent/cli/read_client_test.cc.
#include "agent/daemon/read_api.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "agent/daemon/server.h"
#include "agent/results/gate.h"
#include "queue/store.h"
#include "tests/agent/daemon/read_api_fixture.h"

using nlohmann::json;

namespace trainq {
namespace {

using namespace testing::read_api;

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

}  // namespace
}  // namespace trainq
