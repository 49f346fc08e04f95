// MLflow export (issue 43) against a fake MLflow tracking server on loopback
// (tests/support/fake_mlflow.py) that checks every request against MLflow's
// documented REST API and its log-batch limits: a day of batches becomes one
// parent run per batch with one child per seed; a restart in the middle and a
// 500-then-200 server each end with exactly one of each run.
#include "agent/triggers/mlflow.h"

#include <catch2/catch.hpp>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "agent/triggers/server_config.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/fake_mlflow.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

std::string ParseError(const std::string& yaml) {
  auto c = ParseServerConfig(yaml, "server.yaml");
  REQUIRE_FALSE(c);
  return c.error().message;
}

std::string TagOf(const json& run, const std::string& key) {
  for (const auto& t : run["data"]["tags"]) {
    if (t["key"] == key) return t["value"];
  }
  return "";
}
std::string ParamOf(const json& run, const std::string& key) {
  for (const auto& t : run["data"]["params"]) {
    if (t["key"] == key) return t["value"];
  }
  return "";
}

struct World {
  testing::TempDir tmp;
  FakeClock clock;
  Store store = Store::Open(tmp / "q.db").value();
  CurlHttpClient http;
  ServerConfig config;
  std::unique_ptr<testing::FakeMlflow> mlflow;

  World() {
    auto m = testing::FakeMlflow::Start(tmp / "mlflow", "mlflow-token-xyz");
    INFO((m ? "" : m.error().message));
    REQUIRE(m);
    mlflow = std::move(*m);
    REQUIRE(WriteFile(tmp / "token", "mlflow-token-xyz\n"));
    auto c = ParseServerConfig("public_url: https://trainq.example\nmlflow:\n  tracking_uri: " +
                                   mlflow->url() + "/\n  token: {file: " + (tmp / "token") +
                                   "}\n  experiment_prefix: trainq/\n",
                               "server.yaml");
    INFO((c ? "" : c.error().message));
    REQUIRE(c);
    config = *c;
  }

  // A batch of `exp` at `sha` whose seeds end with `values` (each with a
  // curve of `points` steps of the metric and of "loss") and `dead` dead runs.
  std::int64_t Batch(const std::string& sha, const std::string& parent, const std::string& exp,
                     const std::vector<double>& values, int dead = 0, int points = 5,
                     const std::string& spec = R"({"lr": 0.001, "epochs": 3, "model": "lstm"})",
                     const std::string& repo = "/srv/model") {
    BatchSpec b;
    b.experiment = exp;
    b.command = "true";
    b.repeats = static_cast<int>(values.size()) + dead;
    b.max_attempts = 1;
    b.spec_json = spec;
    auto r = store.runs().Submit(repo, {sha, parent, "a change", "me", 0}, {b}, clock.Now());
    REQUIRE(r);
    const std::int64_t id = r->front().batch_id;
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 100).value();
    REQUIRE(leased.size() == values.size() + dead);
    for (size_t i = 0; i < leased.size(); ++i) {
      std::vector<MetricPoint> curve;
      for (int s = 0; s < points; ++s) {
        curve.push_back({"accuracy", 0.5 + 0.01 * s, s, false});
        curve.push_back({"loss", 1.0 / (s + 1), s, false});
      }
      REQUIRE(store.runs().AddMetrics(leased[i].run_id, leased[i].token, curve, clock.Now()));
      clock.Advance(1'000);
      if (i < values.size()) {
        REQUIRE(store.runs().Complete(leased[i].run_id, leased[i].token, clock.Now(), values[i]));
      } else {
        REQUIRE(store.runs().FailRun(leased[i].run_id, leased[i].token, clock.Now(),
                                     "exit code 1: CUDA out of memory", 1, false));
      }
    }
    return id;
  }

  // Scan and send until nothing is pending (the clock past each backoff).
  void Drain(MlflowExporter& ex) {
    REQUIRE(ex.Scan());
    for (int i = 0; i < 20; ++i) {
      auto n = ex.Send();
      REQUIRE(n);
      auto due = store.outbox().Due("mlflow:", clock.Now() + 3'600'000, 100).value();
      if (due.empty()) return;
      clock.Advance(3'600'000);
    }
    FAIL("the outbox did not drain");
  }

  json State() {
    auto s = mlflow->State();
    REQUIRE(s);
    return *s;
  }
};

// The fake's refusals but the expected "no experiment of that name yet".
json Refusals(const json& state) {
  json out = json::array();
  for (const auto& e : state["errors"]) {
    if (e["endpoint"] == "experiments/get-by-name" && e.value("error_code", "") == "RESOURCE_DOES_NOT_EXIST") continue;
    out.push_back(e);
  }
  return out;
}

// Parents (no mlflow.parentRunId) and children by parent id.
struct Tree {
  std::vector<json> parents;
  std::map<std::string, std::vector<json>> children;
};
Tree TreeOf(const json& state) {
  Tree t;
  for (const auto& r : state["runs"]) {
    const std::string p = TagOf(r, "mlflow.parentRunId");
    if (p.empty()) {
      t.parents.push_back(r);
    } else {
      t.children[p].push_back(r);
    }
  }
  return t;
}

TEST_CASE("mlflow: server.yaml's mlflow section is read and checked", "[mlflow]") {
  testing::TempDir tmp;
  REQUIRE(WriteFile(tmp / "token", "s3cret-token\n"));
  auto c = ParseServerConfig("mlflow:\n  tracking_uri: https://mlflow.example.com/\n  token: {file: " +
                                 (tmp / "token") + "}\n  experiment_prefix: team/\n",
                             "server.yaml");
  REQUIRE(c);
  CHECK(c->mlflow.enabled());
  CHECK(c->mlflow.tracking_uri == "https://mlflow.example.com");
  CHECK(c->mlflow.token.value == "s3cret-token");
  CHECK(c->mlflow.experiment_prefix == "team/");
  CHECK_FALSE(ParseServerConfig("listen: 127.0.0.1:0\n", "server.yaml")->mlflow.enabled());

  CHECK(ParseError("mlflow:\n  tracking_uri: mlflow.example.com\n") ==
        "server.yaml:2: mlflow.tracking_uri: expected an http:// or https:// URL, got "
        "\"mlflow.example.com\"");
  CHECK(ParseError("mlflow:\n  token: {file: " + (tmp / "token") + "}\n")
            .starts_with("server.yaml:2: mlflow.tracking_uri: missing"));
  CHECK(ParseError("mlflow:\n  tracking_uri: https://m.example\n  experiment: x\n")
            .starts_with("server.yaml:3: mlflow.experiment: unknown key"));
  // The token itself never belongs in the file, nor in an error.
  auto inline_token = ParseError("mlflow:\n  tracking_uri: https://m.example\n  token: s3cret-token\n");
  CHECK(inline_token.starts_with("server.yaml:3: mlflow.token:"));
  CHECK(inline_token.find("s3cret-token") == std::string::npos);
}

TEST_CASE("mlflow: a repository's own mlflow: sends its batches to its server, off keeps them here",
          "[mlflow]") {
  World w;
  auto other = testing::FakeMlflow::Start(w.tmp / "mlflow-b", "");
  REQUIRE(other);
  auto c = ParseServerConfig(
      "mlflow:\n  tracking_uri: " + w.mlflow->url() + "\n  token: {file: " + (w.tmp / "token") +
          "}\nrepositories:\n  - url: /srv/team-b\n    mlflow: {tracking_uri: " + (*other)->url() +
          ", experiment_prefix: b/}\n  - url: /srv/private\n    mlflow: off\n",
      "server.yaml");
  INFO((c ? "" : c.error().message));
  REQUIRE(c);
  REQUIRE(c->repositories.size() == 2);
  CHECK(c->repositories[0].mlflow->experiment_prefix == "b/");
  CHECK_FALSE(c->repositories[1].mlflow->enabled());
  CHECK(c->MlflowAny());
  w.config = *c;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  const std::string spec = R"({"lr": 0.001})";
  w.Batch(std::string(40, 'a'), "", "lstm", {0.90, 0.91}, 0, 3, spec, "/srv/model");
  w.Batch(std::string(40, 'b'), "", "lstm", {0.80, 0.81}, 0, 3, spec, "/srv/team-b");
  w.Batch(std::string(40, 'c'), "", "lstm", {0.70, 0.71}, 0, 3, spec, "/srv/private");
  // The private repository's batch is not even queued.
  REQUIRE(ex.Scan().value() == 2);
  // Team b's server is down for one call: the global server's batch goes all the same.
  REQUIRE((*other)->Fail("experiments/get-by-name", 503, 1));
  w.Drain(ex);
  json a = w.State();
  json b = (*other)->State().value();
  REQUIRE(TreeOf(a).parents.size() == 1);
  REQUIRE(TreeOf(b).parents.size() == 1);
  CHECK(TagOf(TreeOf(a).parents[0], "mlflow.source.git.repoURL") == "/srv/model");
  CHECK(TagOf(TreeOf(b).parents[0], "mlflow.source.git.repoURL") == "/srv/team-b");
  CHECK(a["experiments"][0]["name"] == "trainq/lstm");
  CHECK(b["experiments"][0]["name"] == "b/lstm");
  CHECK(TreeOf(b).children.begin()->second.size() == 2);

  CHECK(ParseError("repositories:\n  - url: /srv/x\n    mlflow: {token: {env: T}}\n")
            .starts_with("server.yaml:3: repositories[0].mlflow.tracking_uri: missing"));
}

TEST_CASE("mlflow: a sweep is one parent with a child per point and seed", "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  // Three points of sweep 7 of lstm, two seeds each (as the sweep driver
  // submits them: experiment lstm@sweep7.p<i>, the point in the spec).
  const std::string sha(40, 'a');
  for (int i = 0; i < 3; ++i) {
    json spec = {{"lr", 0.001},
                 {"sweep", {{"id", 7}, {"point", i}, {"params", {{"lr", 0.1 * (i + 1)}, {"layers", i + 2}}}}}};
    w.Batch(sha, "", "lstm@sweep7.p" + std::to_string(i), {0.80 + 0.01 * i, 0.81 + 0.01 * i}, 0, 3,
            spec.dump());
  }
  w.Drain(ex);
  json s = w.State();
  Tree t = TreeOf(s);
  REQUIRE(t.parents.size() == 1);
  const json& parent = t.parents[0];
  CHECK(parent["info"]["run_name"] == "sweep 7 lstm");
  CHECK(TagOf(parent, "trainq.sweep_id") == "7");
  CHECK(ParamOf(parent, "sweep_id") == "7");
  REQUIRE(s["experiments"].size() == 1);
  CHECK(s["experiments"][0]["name"] == "trainq/lstm");
  const auto& kids = t.children[parent["info"]["run_id"].get<std::string>()];
  REQUIRE(kids.size() == 6);
  std::set<std::string> names;
  for (const auto& k : kids) names.insert(k["info"]["run_name"].get<std::string>());
  CHECK(names == std::set<std::string>{"point 0 seed 1", "point 0 seed 2", "point 1 seed 1",
                                       "point 1 seed 2", "point 2 seed 1", "point 2 seed 2"});
  for (const auto& k : kids) {
    if (k["info"]["run_name"] != "point 2 seed 1") continue;
    CHECK(ParamOf(k, "point") == "2");
    CHECK(ParamOf(k, "param.layers") == "4");
    CHECK(ParamOf(k, "seed") == "1");
  }
  // Exported again from the start (a restart with the outbox lost): nothing twice.
  REQUIRE(w.store.outbox().ClearMark("mlflow:cursor"));
  for (int i = 1; i <= 3; ++i) {
    MlflowExporter again(w.store, w.config, w.http, w.clock);
    REQUIRE(again.ExportBatch(i));
  }
  json after = w.State();
  CHECK(after["runs"].size() == 7);
  CHECK(Refusals(after).empty());
}

TEST_CASE("mlflow: a day of batches is one parent per batch with one child per seed",
          "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);  // the cursor starts now
  w.clock.Advance(1'000);
  const std::string a = std::string(40, 'a'), b = std::string(40, 'b'), c = std::string(40, 'c');
  const auto a_lstm = w.Batch(a, "", "lstm", {0.90, 0.91, 0.92});
  const auto a_cnn = w.Batch(a, "", "cnn", {0.80, 0.81, 0.79});
  const auto b_lstm = w.Batch(b, a, "lstm", {0.85, 0.86, 0.84}, /*dead=*/1);
  const auto c_cnn = w.Batch(c, b, "cnn", {0.82, 0.83, 0.81});
  w.Drain(ex);

  json s = w.State();
  INFO(s["errors"].dump(1));
  CHECK(Refusals(s).empty());
  std::set<std::string> names;
  for (const auto& e : s["experiments"]) names.insert(e["name"]);
  CHECK(names == std::set<std::string>{"trainq/lstm", "trainq/cnn"});
  Tree t = TreeOf(s);
  REQUIRE(t.parents.size() == 4);
  std::map<std::string, json> by_uid;
  for (const auto& p : t.parents) by_uid[TagOf(p, "trainq.uid")] = p;
  REQUIRE(by_uid.count("trainq:batch:" + std::to_string(b_lstm)));
  const json& worse = by_uid["trainq:batch:" + std::to_string(b_lstm)];
  CHECK(TagOf(worse, "mlflow.source.git.commit") == b);
  CHECK(TagOf(worse, "trainq.baseline.sha") == a);
  CHECK_FALSE(TagOf(worse, "trainq.verdict").empty());
  CHECK(TagOf(worse, "mlflow.note.content").find("https://trainq.example/commit/" + b) !=
        std::string::npos);
  CHECK(TagOf(worse, "trainq.exported") == "1");
  CHECK(worse["info"]["status"] == "FINISHED");
  std::set<std::string> metric_keys;
  for (const auto& m : worse["data"]["metrics"]) metric_keys.insert(m["key"]);
  CHECK(metric_keys.count("trainq.effect"));
  CHECK(metric_keys.count("trainq.p_raw"));
  CHECK(metric_keys.count("trainq.interval.lo"));
  CHECK(metric_keys.count("accuracy.mean"));
  CHECK(ParamOf(worse, "spec.lr") == "0.001");
  // The first batch of each experiment has no baseline: no verdict.
  CHECK(TagOf(by_uid["trainq:batch:" + std::to_string(a_lstm)], "trainq.verdict") == "none");
  (void)a_cnn;
  (void)c_cnn;

  for (const auto& p : t.parents) {
    const auto& kids = t.children[p["info"]["run_id"].get<std::string>()];
    const bool with_dead = TagOf(p, "trainq.uid") == "trainq:batch:" + std::to_string(b_lstm);
    REQUIRE(kids.size() == (with_dead ? 4u : 3u));
    std::set<std::string> seeds;
    int failed = 0;
    for (const auto& k : kids) {
      seeds.insert(ParamOf(k, "seed"));
      CHECK(k["info"]["experiment_id"] == p["info"]["experiment_id"]);
      CHECK(TagOf(k, "mlflow.source.git.commit") == TagOf(p, "mlflow.source.git.commit"));
      CHECK(TagOf(k, "trainq.exported") == "1");
      if (k["info"]["status"] == "FAILED") {
        ++failed;
        CHECK(TagOf(k, "trainq.error").find("CUDA out of memory") != std::string::npos);
        continue;
      }
      CHECK(k["info"]["status"] == "FINISHED");
      // The curve: 5 steps of accuracy and loss, and the final value.
      int acc = 0, loss = 0;
      for (const auto& m : k["metric_points"]) {
        acc += m["key"] == "accuracy";
        loss += m["key"] == "loss";
      }
      CHECK(acc == 6);
      CHECK(loss == 5);
    }
    CHECK(seeds.size() == kids.size());
    CHECK(failed == (with_dead ? 1 : 0));
  }
  CHECK(w.store.outbox().Summaries("mlflow:").value().front().delivered == 4);
}

TEST_CASE("mlflow: a restart in the middle of an export duplicates nothing", "[mlflow]") {
  World w;
  {
    MlflowExporter first(w.store, w.config, w.http, w.clock);
    REQUIRE(first.Scan().value() == 0);
    w.clock.Advance(1'000);
    w.Batch(std::string(40, 'a'), "", "lstm", {0.90, 0.91, 0.92, 0.93});
    w.Batch(std::string(40, 'b'), std::string(40, 'a'), "lstm", {0.80, 0.81, 0.82, 0.83});
    REQUIRE(first.Scan().value() == 2);
    // The server fails in the middle of the first batch's children: after
    // the parent, two children and some of their writes.
    REQUIRE(w.mlflow->Fail("runs/log-batch", 503, 1, /*after=*/5));
    REQUIRE(first.Send().value() == 1);
    auto row = w.store.outbox().Find("mlflow:export", "batch:1").value();
    REQUIRE(row);
    CHECK(row->state == "pending");
    CHECK(row->last_error.find("HTTP 503 from MLflow runs/log-batch") != std::string::npos);
    CHECK(row->last_error.find("mlflow-token-xyz") == std::string::npos);
  }
  // serve comes back (a new exporter, the cursor lost too) and the server works again.
  json before = w.State();
  REQUIRE(w.store.outbox().ClearMark("mlflow:cursor"));
  w.clock.Advance(3'600'000);
  {
    MlflowExporter second(w.store, w.config, w.http, w.clock);
    for (int i = 0; i < 200 && !w.store.outbox().Due("mlflow:", w.clock.Now() + 86'400'000, 10)
                                     .value()
                                     .empty();
         ++i) {
      REQUIRE(second.Send());
      w.clock.Advance(3'600'000);
    }
  }
  json s = w.State();
  Tree t = TreeOf(s);
  REQUIRE(t.parents.size() == 2);
  for (const auto& p : t.parents) {
    const auto& kids = t.children[p["info"]["run_id"].get<std::string>()];
    CHECK(kids.size() == 4);
    std::set<std::string> uids;
    for (const auto& k : kids) {
      uids.insert(TagOf(k, "trainq.uid"));
      CHECK(TagOf(k, "trainq.exported") == "1");
      CHECK(k["metric_points"].size() == 11);  // 5 + 5 + the final value, none twice
    }
    CHECK(uids.size() == 4);
  }
  CHECK(s["calls"]["runs/create"] == 10);  // 2 parents + 8 children, each once
  CHECK(before["runs"].size() < 10);
}

TEST_CASE("mlflow: a server that answers 500 then 200 ends with exactly one of each run",
          "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  w.Batch(std::string(40, 'a'), "", "lstm", {0.90, 0.91});
  REQUIRE(w.mlflow->Fail("runs/create", 500, 1, /*after=*/1));  // the first child
  REQUIRE(w.mlflow->Fail("runs/update", 429, 1));
  REQUIRE(w.mlflow->Fail("experiments/get-by-name", 502, 1));
  w.Drain(ex);
  json s = w.State();
  Tree t = TreeOf(s);
  REQUIRE(t.parents.size() == 1);
  CHECK(t.children[t.parents[0]["info"]["run_id"].get<std::string>()].size() == 2);
  CHECK(s["runs"].size() == 3);
  CHECK(s["experiments"].size() == 1);
  auto row = w.store.outbox().Find("mlflow:export", "batch:1").value();
  REQUIRE(row);
  CHECK(row->state == "delivered");
  CHECK(row->attempts == 3);
}

TEST_CASE("mlflow: a 429 with Retry-After holds the batch back that long, a 503 backs off",
          "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  w.Batch(std::string(40, 'a'), "", "lstm", {0.90, 0.91});
  REQUIRE(ex.Scan().value() == 1);
  // 120 s asked for: far beyond the first backoff of 5 s.
  REQUIRE(w.mlflow->Fail("experiments/get-by-name", 429, 1, 0, /*retry_after_s=*/120));
  REQUIRE(ex.Send().value() == 1);
  auto row = w.store.outbox().Find("mlflow:export", "batch:1").value();
  REQUIRE(row);
  CHECK(row->state == "pending");
  CHECK(row->attempts == 1);
  CHECK(row->not_before_ms == w.clock.Now() + 120'000);
  CHECK(row->last_error.find("REQUEST_LIMIT_EXCEEDED") != std::string::npos);
  CHECK(row->last_error.find("Retry-After: 120 s") != std::string::npos);
  // Not due before then: a pass sends nothing.
  w.clock.Advance(119'000);
  REQUIRE(ex.Send().value() == 0);
  // A 503 without Retry-After: the plain backoff (second try: 10 s).
  w.clock.Advance(1'000);
  REQUIRE(w.mlflow->Fail("experiments/get-by-name", 503, 1));
  REQUIRE(ex.Send().value() == 1);
  row = w.store.outbox().Find("mlflow:export", "batch:1").value();
  CHECK(row->attempts == 2);
  CHECK(row->not_before_ms == w.clock.Now() + 10'000);
  w.clock.Advance(10'000);
  REQUIRE(ex.Send().value() == 1);
  row = w.store.outbox().Find("mlflow:export", "batch:1").value();
  CHECK(row->state == "delivered");
  CHECK(TreeOf(w.State()).parents.size() == 1);
}

TEST_CASE("mlflow: long curves and many params are split within MLflow's per-call limits",
          "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  json spec = json::object();
  for (int i = 0; i < 150; ++i) spec["p" + std::to_string(i)] = i;
  w.Batch(std::string(40, 'a'), "", "long", {0.9}, 0, /*points=*/1'200, spec.dump());
  w.Drain(ex);
  json s = w.State();
  INFO(s["errors"].dump(1));
  CHECK(Refusals(s).empty());
  Tree t = TreeOf(s);
  REQUIRE(t.parents.size() == 1);
  const auto& kid = t.children[t.parents[0]["info"]["run_id"].get<std::string>()].at(0);
  CHECK(kid["metric_points"].size() == 2'401);
  CHECK(kid["data"]["params"].size() == 153);
}

TEST_CASE("mlflow: an experiment made meanwhile by someone else (RESOURCE_ALREADY_EXISTS) is used, not made twice",
          "[mlflow]") {
  World w;
  MlflowExporter ex(w.store, w.config, w.http, w.clock);
  REQUIRE(ex.Scan().value() == 0);
  w.clock.Advance(1'000);
  w.Batch(std::string(40, 'a'), "", "lstm", {0.90});
  // Someone made the experiment already: the exporter finds it by name.
  {
    CurlHttpClient http;
    HttpRequest req;
    req.method = "POST";
    req.url = w.mlflow->url() + "/api/2.0/mlflow/experiments/create";
    req.headers = {{"Content-Type", "application/json"}, {"Authorization", "Bearer mlflow-token-xyz"}};
    req.body = R"({"name": "trainq/lstm"})";
    REQUIRE(http.Send(req).value().status == 200);
    req.body = R"({"name": "trainq/lstm", "lifecycle": "x"})";
    auto bad = http.Send(req).value();
    CHECK(bad.status == 400);
    CHECK(bad.body.find("INVALID_PARAMETER_VALUE") != std::string::npos);
    req.body = R"({"name": "trainq/lstm"})";
    auto again = http.Send(req).value();
    CHECK(again.status == 400);
    CHECK(again.body.find("RESOURCE_ALREADY_EXISTS") != std::string::npos);
  }
  // The exporter's get-by-name does not see it (it was being made): its
  // create gets RESOURCE_ALREADY_EXISTS, and it looks the name up again.
  REQUIRE(w.mlflow->Fail("experiments/get-by-name", 404, 1));
  w.Drain(ex);
  json s = w.State();
  CHECK(s["experiments"].size() == 1);
  CHECK(s["runs"].size() == 2);
  CHECK(s["calls"]["experiments/create"] == 3);
  CHECK(w.store.outbox().Find("mlflow:export", "batch:1").value()->attempts == 0);
}

}  // namespace
}  // namespace trainq
