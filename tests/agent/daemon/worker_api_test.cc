// The worker protocol on the server: real HTTP on loopback through the
// HTTP listener and libcurl, a real SQLite file.
#include "agent/daemon/worker_api.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/repo/git_repo.h"
#include "agent/results/status.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/git_fixture.h"
#include "tests/support/http_server.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;
const std::string kGpuToken = "gpu-token-0123456789abcdef";
const std::string kCpuToken = "cpu-token-0123456789abcdef";

PoolSpec Pool(const std::string& name, const std::string& token) {
  PoolSpec p;
  p.scaling.name = name;
  p.token = {token, "test"};
  p.orphan_timeout_ms = 123'000;
  p.self_stop = name == "gpu" ? "sudo shutdown -h now" : "";
  return p;
}

struct World {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "trainq.db");
  std::string data = tmp / "data";
  // Long polls wait on this clock: they end when the test advances it.
  FakeClock clock{kT0, FakeClock::Sleeps::kBlock};
  ServerConfig config;
  std::unique_ptr<Server> server;
  std::unique_ptr<HttpListener> listener;
  std::string base;
  CurlHttpClient http;
  Store store = Store::Open(db).value();  // the test's own connection ("another process")

  World() {
    config.pools = {Pool("gpu", kGpuToken), Pool("cpu", kCpuToken)};
    REQUIRE(EnsurePoolTokens(store, config, data, clock.Now()));
    ServerOptions o;
    o.data_dir = data;
    o.lease_ms = 60'000;
    server = std::make_unique<Server>(config, db, clock, o);
    REQUIRE(server->Open());
    int port = testing::FreeLoopbackPort();
    auto l = HttpListener::Start({"127.0.0.1", port}, 1 << 20,
                                 [this](const HttpServerRequest& r) { return server->Handle(r); },
                                 [this](const HttpServerRequest& h) { return server->Admit(h); });
    REQUIRE(l);
    listener = std::move(*l);
    base = "http://127.0.0.1:" + std::to_string(port);
  }
  ~World() {
    server->StopWaiting();
    listener->Stop();
  }

  bool name_machine = true;  // see Post
  HttpResponse Post(const std::string& path, const std::string& body,
                    const std::optional<std::string>& token, HttpHeaders extra = {},
                    std::int64_t timeout_ms = 30'000) {
    HttpRequest r;
    r.method = "POST";
    r.url = base + path;
    r.body = body;
    r.timeout_ms = timeout_ms;
    r.headers = std::move(extra);
    r.headers.emplace_back("Content-Type", "application/json");
    // Run routes require the calling machine (worker_id or X-Trainq-Worker):
    // unless a test names one, or asks for none, the run's own machine calls.
    static const std::string kRuns = "/api/v1/runs/";
    if (name_machine && path.starts_with(kRuns) && !FindHeader(r.headers, "X-Trainq-Worker") &&
        body.find("\"worker_id\"") == std::string::npos) {
      std::int64_t run = std::atoll(path.c_str() + kRuns.size());
      if (auto m = store.machines().RunMachine(run); m && *m) {
        r.headers.emplace_back("X-Trainq-Worker", std::to_string(**m));
      }
    }
    if (token) r.headers.emplace_back("Authorization", "Bearer " + *token);
    auto resp = http.Send(r);
    REQUIRE(resp);
    return *resp;
  }
  json PostJson(const std::string& path, const json& body, const std::string& token,
                int want = 200) {
    auto r = Post(path, body.dump(), token);
    INFO(path << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == want);
    return json::parse(r.body);
  }
  std::int64_t Register(const std::string& token, const std::string& name = "", int slots = 2) {
    json req = {{"name", name},     {"hostname", "node1"}, {"pid", 1234},
                {"slots", slots},   {"cpus", 16},          {"memory_mb", 128000},
                {"gpus", json::array({{{"index", 0}, {"name", "H100"}, {"memory_mb", 81559}}})},
                {"version", "0.x"}};
    return PostJson("/api/v1/workers/register", req, token)["worker_id"].get<std::int64_t>();
  }
  json Lease(std::int64_t worker, const std::string& token, int wait_ms = 0, int max_runs = 2) {
    return PostJson("/api/v1/workers/" + std::to_string(worker) + "/lease",
                    {{"max_runs", max_runs}, {"free_gpus", 1.0}, {"runs_per_gpu", 1},
                     {"fuse_max", 1}, {"wait_ms", wait_ms}},
                    token);
  }
  std::int64_t Submit(int repeats, const std::string& pool = "", int gpus = 0,
                      const std::string& sha = std::string(40, 'c')) {
    BatchSpec spec;
    spec.experiment = "mlp";
    spec.command = "python train.py --seed {seed}";
    spec.repeats = repeats;
    spec.pool = pool;
    spec.gpus = gpus;
    auto r = store.runs().Submit("/srv/model", {sha, "", "subject", "me", 0}, {spec}, clock.Now());
    REQUIRE(r);
    return r->front().batch_id;
  }
  std::string RunPath(std::int64_t run, const std::string& what) {
    return "/api/v1/runs/" + std::to_string(run) + "/" + what;
  }
};

}  // namespace

TEST_CASE("worker API: pool tokens are generated once, stored hashed, mode 0600",
          "[worker_api]") {
  testing::TempDir tmp;
  auto store = Store::Open(testing::StoreLocation(tmp, "t.db")).value();
  ServerConfig config;  // no pools: the default local pool
  REQUIRE(EnsurePoolTokens(store, config, tmp / "data", kT0));
  std::string path = TokenFilePath(tmp / "data", "local");
  CHECK(path == tmp / "data/tokens/local.token");
  auto token = ReadFile(path);
  REQUIRE(token);
  std::string t = *token;
  while (!t.empty() && t.back() == '\n') t.pop_back();
  CHECK(t.size() == 64);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(store.machines().PoolForTokenHash(Sha256Hex(t)).value() == "local");
  CHECK(store.machines().PoolForTokenHash(t).value() == std::nullopt);  // never the token itself
  // A restart keeps the token.
  REQUIRE(EnsurePoolTokens(store, config, tmp / "data", kT0 + 1));
  CHECK(ReadFile(path).value() == *token);
  CHECK(Sha256Hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST_CASE("worker API: 401 without a token or with a wrong one", "[worker_api]") {
  World w;
  json req = {{"name", ""}, {"hostname", "node1"}, {"pid", 1}};
  auto none = w.Post("/api/v1/workers/register", req.dump(), std::nullopt);
  CHECK(none.status == 401);
  CHECK(json::parse(none.body).contains("error"));
  auto wrong = w.Post("/api/v1/workers/register", req.dump(), std::string("not-a-pool-token"));
  CHECK(wrong.status == 401);
  auto lease = w.Post("/api/v1/workers/1/lease", "{}", std::string("nope"));
  CHECK(lease.status == 401);
  auto hb = w.Post("/api/v1/runs/1/heartbeat", R"({"token": 1})", std::nullopt);
  CHECK(hb.status == 401);
  CHECK(w.store.machines().List(true).value().empty());
}

TEST_CASE("worker API: register keeps the trainq-train the worker found (or none)",
          "[worker_api][trainer]") {
  World w;
  auto with = w.PostJson("/api/v1/workers/register",
                         {{"name", ""}, {"hostname", "node1"}, {"pid", 1},
                          {"trainer", "/usr/bin/trainq-train"}},
                         kGpuToken);
  auto without = w.PostJson("/api/v1/workers/register",
                            {{"name", ""}, {"hostname", "node2"}, {"pid", 2}, {"trainer", ""}},
                            kCpuToken);
  auto m1 = w.store.machines().Machine(with["worker_id"].get<std::int64_t>()).value().value();
  auto m2 = w.store.machines().Machine(without["worker_id"].get<std::int64_t>()).value().value();
  CHECK(json::parse(m1.resources_json)["trainer"] == "/usr/bin/trainq-train");
  CHECK(json::parse(m2.resources_json)["trainer"] == "");
}

TEST_CASE("worker API: register keeps the sandbox form the worker's probe found, and "
          "MachineJson shows it (trainq machines, status --json, the dashboard)",
          "[worker_api][sandbox]") {
  World w;
  auto probed = w.PostJson("/api/v1/workers/register",
                           {{"name", ""},
                            {"hostname", "pod1"},
                            {"pid", 1},
                            {"sandbox", "bwrap-hostproc"},
                            {"sandbox_note", "bwrap cannot mount a fresh /proc here" +
                                                 std::string(1000, '.')}},
                           kGpuToken);
  auto older = w.PostJson("/api/v1/workers/register",
                          {{"name", ""}, {"hostname", "node2"}, {"pid", 2}}, kCpuToken);
  auto m1 = w.store.machines().Machine(probed["worker_id"].get<std::int64_t>()).value().value();
  auto m2 = w.store.machines().Machine(older["worker_id"].get<std::int64_t>()).value().value();
  json j1 = MachineJson(m1, 0), j2 = MachineJson(m2, 0);
  CHECK(j1["sandbox"] == "bwrap-hostproc");
  CHECK(j1["sandbox_note"].get<std::string>().starts_with("bwrap cannot mount a fresh /proc"));
  CHECK(j1["sandbox_note"].get<std::string>().size() == 500);  // bounded
  // A worker older than the probe says nothing: null, not a guess.
  CHECK(j2["sandbox"].is_null());
  CHECK(j2["sandbox_note"].is_null());
}

TEST_CASE("worker API: register, lease, heartbeat, metrics, log, complete", "[worker_api]") {
  World w;
  w.Submit(1, "gpu", 1);
  // A machine the provider booted registers under its name.
  MachineRow boot;
  boot.pool = "gpu";
  boot.provider = "slurm";
  boot.name = "tq-gpu-1";
  auto row = w.store.machines().AddMachine(boot, w.clock.Now()).value();
  w.clock.Advance(5000);
  auto reg = w.PostJson("/api/v1/workers/register",
                        {{"name", "tq-gpu-1"}, {"hostname", "node7"}, {"pid", 99}, {"slots", 2},
                         {"gpus", json::array({{{"index", 0}}})}},
                        kGpuToken);
  CHECK(reg["worker_id"] == row);
  CHECK(reg["pool"] == "gpu");
  CHECK(reg["lease_ms"] == 60'000);
  CHECK(reg["heartbeat_ms"] == 10'000);
  CHECK(reg["orphan_timeout_ms"] == 123'000);
  CHECK(reg["self_stop"] == "sudo shutdown -h now");
  auto m = w.store.machines().Machine(row).value().value();
  CHECK(m.state == "ready");
  CHECK(m.ready_ms == kT0 + 5000);
  CHECK(m.gpus == 1);
  CHECK(m.hostname == "node7");

  auto lease = w.Lease(row, kGpuToken);
  CHECK(lease["state"] == "ready");
  REQUIRE(lease["runs"].size() == 1);
  auto run = lease["runs"][0];
  std::int64_t id = run["run_id"];
  std::int64_t token = run["token"];
  CHECK(run["command"] == "python train.py --seed {seed}");
  CHECK(run["gpus"] == 1);
  CHECK(run["trainer"] == "");
  CHECK(run["group"] == 0);
  CHECK(run["attempt"] == 1);
  CHECK(run["sha"] == std::string(40, 'c'));
  CHECK(run["expires_ms"] == w.clock.Now() + 60'000);

  SECTION("another pool's worker gets 403, the right pool but another machine too") {
    std::int64_t cpu = w.Register(kCpuToken, "cpu-box");
    auto other = w.Post(w.RunPath(id, "heartbeat"), json{{"token", token}}.dump(), kCpuToken);
    CHECK(other.status == 403);
    auto lease_other = w.Post("/api/v1/workers/" + std::to_string(row) + "/lease", "{}",
                              kCpuToken);
    CHECK(lease_other.status == 403);
    std::int64_t gpu2 = w.Register(kGpuToken, "gpu-box-2");
    auto wrong_machine = w.Post(w.RunPath(id, "heartbeat"),
                                json{{"token", token}, {"worker_id", gpu2}}.dump(), kGpuToken);
    CHECK(wrong_machine.status == 403);
    // A machine of the pool that does not say which it is: refused too.
    w.name_machine = false;
    auto unnamed = w.Post(w.RunPath(id, "complete"),
                          json{{"token", token}, {"outcome", "succeeded"}, {"metric_value", 1}}
                              .dump(),
                          kGpuToken);
    CHECK(unnamed.status == 400);
    CHECK_THAT(unnamed.body, Catch::Contains("worker_id"));
    auto unnamed_log = w.Post(w.RunPath(id, "log"), "forged", kGpuToken,
                              {{"X-Trainq-Token", std::to_string(token)},
                               {"X-Trainq-Offset", "0"}});
    CHECK(unnamed_log.status == 400);
    auto other_log = w.Post(w.RunPath(id, "log"), "forged", kGpuToken,
                            {{"X-Trainq-Token", std::to_string(token)},
                             {"X-Trainq-Offset", "0"},
                             {"X-Trainq-Worker", std::to_string(gpu2)}});
    CHECK(other_log.status == 403);
    w.name_machine = true;
    CHECK(w.store.runs().Run(id).value().value().state == RunState::kLeased);
    (void)cpu;
    auto missing = w.Post(w.RunPath(9999, "heartbeat"), json{{"token", 1}}.dump(), kGpuToken);
    CHECK(missing.status == 404);
  }

  w.clock.Advance(1000);
  auto hb = w.PostJson(w.RunPath(id, "heartbeat"),
                       {{"token", token}, {"started", true}, {"worker_id", row}}, kGpuToken);
  CHECK(hb["expires_ms"] == w.clock.Now() + 60'000);
  auto r = w.store.runs().Run(id).value().value();
  CHECK(r.state == RunState::kRunning);
  CHECK(r.started_ms == w.clock.Now());
  CHECK(r.log_path == RunLogPath(w.data, id));

  w.PostJson(w.RunPath(id, "metrics"),
             {{"token", token},
              {"points", json::array({{{"name", "accuracy"}, {"value", 0.5}, {"step", 1}},
                                      {{"name", "loss"}, {"value", 1.5}, {"final", false}}})}},
             kGpuToken);
  auto points = w.store.runs().Metrics(id).value();
  REQUIRE(points.size() == 2);
  CHECK(points[0].name == "accuracy");
  CHECK(points[0].step == 1);
  CHECK(points[1].value == 1.5);

  // The log: appends from an offset; a retry of bytes already stored is idempotent.
  auto log_headers = [&](std::int64_t offset) {
    return HttpHeaders{{"X-Trainq-Token", std::to_string(token)},
                       {"X-Trainq-Offset", std::to_string(offset)}};
  };
  auto l1 = w.Post(w.RunPath(id, "log"), "hello ", kGpuToken, log_headers(0));
  REQUIRE(l1.status == 200);
  CHECK(json::parse(l1.body)["size"] == 6);
  auto l2 = w.Post(w.RunPath(id, "log"), "hello world\n", kGpuToken, log_headers(0));
  REQUIRE(l2.status == 200);
  CHECK(json::parse(l2.body)["size"] == 12);
  auto l3 = w.Post(w.RunPath(id, "log"), "world\n", kGpuToken, log_headers(6));  // a retry
  REQUIRE(l3.status == 200);
  CHECK(json::parse(l3.body)["size"] == 12);
  auto gap = w.Post(w.RunPath(id, "log"), "x", kGpuToken, log_headers(50));
  CHECK(gap.status == 400);
  CHECK(json::parse(gap.body)["size"] == 12);
  auto no_token = w.Post(w.RunPath(id, "log"), "x", kGpuToken, {});
  CHECK(no_token.status == 400);
  CHECK(ReadFile(RunLogPath(w.data, id)).value() == "hello world\n");

  w.clock.Advance(60'000);
  auto done = w.PostJson(w.RunPath(id, "complete"),
                         {{"token", token}, {"outcome", "succeeded"}, {"metric_value", 0.93},
                          {"exit_code", 0}},
                         kGpuToken);
  CHECK(done["state"] == "succeeded");
  r = w.store.runs().Run(id).value().value();
  CHECK(r.state == RunState::kSucceeded);
  CHECK(r.metric_value == 0.93);
  auto after = w.store.machines().Machine(row).value().value();
  CHECK(after.last_busy_ms == w.clock.Now());
  CHECK(after.runs_done == 1);
  CHECK(after.busy_ms == 60'000);
  // A second completion is refused: the lease is gone.
  auto twice = w.Post(w.RunPath(id, "complete"),
                      json{{"token", token}, {"outcome", "succeeded"}, {"metric_value", 1}}.dump(),
                      kGpuToken);
  CHECK(twice.status == 409);

  auto metrics = w.server->MetricsText();
  CHECK(metrics.find("trainq_worker_requests_total{route=\"register\",status=\"200\"} ") !=
        std::string::npos);
  CHECK(metrics.find("trainq_worker_requests_total{route=\"complete\",status=\"409\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("trainq_worker_requests_total{route=\"log\",status=\"200\"} 3") !=
        std::string::npos);
}

TEST_CASE("worker API: failed and interrupted outcomes", "[worker_api]") {
  World w;
  w.Submit(2);
  auto worker = w.Register(kCpuToken, "box");
  auto runs = w.Lease(worker, kCpuToken)["runs"];
  REQUIRE(runs.size() == 2);
  auto failed = w.PostJson(w.RunPath(runs[0]["run_id"], "complete"),
                           {{"token", runs[0]["token"]}, {"outcome", "failed"}, {"exit_code", 3},
                            {"error", "exit status 3"}},
                           kCpuToken);
  CHECK(failed["state"] == "failed");
  auto r0 = w.store.runs().Run(runs[0]["run_id"]).value().value();
  CHECK(r0.exit_code == 3);
  CHECK(r0.attempts == 1);
  auto interrupted = w.PostJson(w.RunPath(runs[1]["run_id"], "complete"),
                                {{"token", runs[1]["token"]}, {"outcome", "interrupted"},
                                 {"error", "SIGTERM"}},
                                kCpuToken);
  CHECK(interrupted["state"] == "queued");
  auto r1 = w.store.runs().Run(runs[1]["run_id"]).value().value();
  CHECK(r1.state == RunState::kQueued);
  CHECK(r1.attempts == 0);
  auto bad = w.Post(w.RunPath(runs[1]["run_id"], "complete"),
                    json{{"token", runs[1]["token"]}, {"outcome", "meh"}}.dump(), kCpuToken);
  CHECK(bad.status == 409);  // the lease is gone before the outcome is even read
}

TEST_CASE("worker API: a stale token gets 409 after the lease expired and was re-leased",
          "[worker_api]") {
  World w;
  w.Submit(1);
  auto a = w.Register(kCpuToken, "a");
  auto first = w.Lease(a, kCpuToken)["runs"];
  REQUIRE(first.size() == 1);
  std::int64_t id = first[0]["run_id"];
  std::int64_t old_token = first[0]["token"];
  // Worker a goes silent; the lease expires and, after the backoff, b takes the run.
  w.clock.Advance(61'000);
  REQUIRE(w.store.runs().ExpireLeases(w.clock.Now()).value() == 1);
  w.clock.Advance(60'000);
  auto b = w.Register(kCpuToken, "b");
  auto second = w.Lease(b, kCpuToken)["runs"];
  REQUIRE(second.size() == 1);
  CHECK(second[0]["run_id"] == id);
  CHECK(second[0]["token"].get<std::int64_t>() > old_token);

  auto stale = w.Post(w.RunPath(id, "complete"),
                      json{{"token", old_token}, {"outcome", "succeeded"}, {"metric_value", 0.1}}
                          .dump(),
                      kCpuToken);
  CHECK(stale.status == 409);
  CHECK(json::parse(stale.body)["error"].get<std::string>().find("stale") != std::string::npos);
  CHECK(w.Post(w.RunPath(id, "heartbeat"), json{{"token", old_token}}.dump(), kCpuToken).status ==
        409);
  CHECK(w.Post(w.RunPath(id, "log"), "late", kCpuToken,
               {{"X-Trainq-Token", std::to_string(old_token)}, {"X-Trainq-Offset", "0"}})
            .status == 409);
  // The new holder completes; the run is stored once.
  w.PostJson(w.RunPath(id, "complete"),
             {{"token", second[0]["token"]}, {"outcome", "succeeded"}, {"metric_value", 0.7}},
             kCpuToken);
  auto r = w.store.runs().Run(id).value().value();
  CHECK(r.state == RunState::kSucceeded);
  CHECK(r.metric_value == 0.7);
  CHECK(w.store.machines().RunMachine(id).value() == b);
}

TEST_CASE("worker API: a cancelled run's last lease may still send the output it wrote, and no "
          "other token may (issue 38.8)",
          "[worker_api][cancel]") {
  World w;
  w.Submit(1);
  auto a = w.Register(kCpuToken, "a");
  auto leased = w.Lease(a, kCpuToken)["runs"];
  REQUIRE(leased.size() == 1);
  std::int64_t id = leased[0]["run_id"];
  std::int64_t token = leased[0]["token"];
  w.PostJson(w.RunPath(id, "heartbeat"), {{"token", token}, {"started", true}}, kCpuToken);
  REQUIRE(w.store.runs().CancelRun(id, w.clock.Now()).value() == 1);
  // Its heartbeat is refused (the worker stops the run) ...
  CHECK(w.Post(w.RunPath(id, "heartbeat"), json{{"token", token}}.dump(), kCpuToken).status ==
        409);
  // ... but what it printed until then is taken, from that lease only.
  auto log = [&](std::int64_t t, const std::string& text) {
    return w.Post(w.RunPath(id, "log"), text, kCpuToken,
                  {{"X-Trainq-Token", std::to_string(t)}, {"X-Trainq-Offset", "0"}});
  };
  CHECK(log(token + 1, "forged").status == 409);
  auto ok = log(token, "epoch 0\nepoch 1\n");
  INFO(ok.body);
  CHECK(ok.status == 200);
  auto stored = ReadFile(RunLogPath(w.data, id)).value_or("");
  CHECK(stored.find("epoch 1") != std::string::npos);
  CHECK(stored.find("forged") == std::string::npos);
  CHECK(w.store.runs().Run(id).value()->state == RunState::kCancelled);
}

TEST_CASE("worker API: a long poll answers with a run submitted while it waits",
          "[worker_api][long_poll]") {
  World w;
  auto worker = w.Register(kCpuToken, "waiter");
  bool notify = GENERATE(true, false);  // false: a submit from another process, no wake-up
  INFO("NotifyWork: " << notify);
  constexpr int kWaitMs = 15'000;
  const TimeMs start = w.clock.Now();
  auto poll = std::async(std::launch::async, [&] { return w.Lease(worker, kCpuToken, kWaitMs); });
  REQUIRE(testing::WaitFor([&] { return w.server->WaitingPolls() == 1 && w.clock.sleepers() == 1; },
                           std::chrono::seconds(10)));
  w.Submit(1);
  if (notify) {
    w.server->NotifyWork();
  } else {
    // Nobody wakes it: it finds the run at its next re-check, a recheck_ms on.
    CHECK(poll.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
    w.clock.Advance(w.server->options().recheck_ms);
  }
  auto answer = poll.get();
  CHECK(answer["state"] == "ready");
  REQUIRE(answer["runs"].size() == 1);
  CHECK(w.clock.Now() - start < kWaitMs);
  CHECK(w.server->WaitingPolls() == 0);
}

TEST_CASE("worker API: a long poll with nothing to do answers empty after wait_ms",
          "[worker_api][long_poll]") {
  World w;
  w.Submit(1, "gpu");  // another pool's work does not wake it with a run
  auto worker = w.Register(kCpuToken, "idle");
  auto poll = std::async(std::launch::async, [&] { return w.Lease(worker, kCpuToken, 600); });
  REQUIRE(testing::WaitFor([&] { return w.clock.sleepers() == 1; }, std::chrono::seconds(10)));
  w.clock.Advance(599);  // not yet
  REQUIRE(testing::WaitFor([&] { return w.clock.sleepers() == 1; }, std::chrono::seconds(10)));
  CHECK(poll.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  w.clock.Advance(1);
  auto answer = poll.get();
  CHECK(answer["state"] == "ready");
  CHECK(answer["runs"].empty());
  CHECK(w.server->WaitingPolls() == 0);
}

TEST_CASE("worker API: a draining machine is told so, and cannot register again",
          "[worker_api]") {
  World w;
  auto worker = w.Register(kCpuToken, "drainee");
  REQUIRE(w.store.machines().SetMachineState(worker, "draining", w.clock.Now()));
  w.Submit(1);
  auto answer = w.Lease(worker, kCpuToken, 5'000);
  CHECK(answer["state"] == "draining");
  CHECK(answer["runs"].empty());
  CHECK(w.store.runs().Runs(std::nullopt, RunState::kQueued, 0).value().size() == 1);
  auto again = w.Post("/api/v1/workers/register",
                      json{{"name", "drainee"}, {"hostname", "node1"}, {"pid", 1}}.dump(),
                      kCpuToken);
  CHECK(again.status == 409);
  // The same name under another pool's token is not that pool's machine.
  auto other = w.Post("/api/v1/workers/register",
                      json{{"name", "drainee"}, {"hostname", "node1"}, {"pid", 1}}.dump(),
                      kGpuToken);
  CHECK(other.status == 403);
}

TEST_CASE("worker API: a hand-started worker gets its own machine row", "[worker_api]") {
  World w;
  auto id = w.Register(kCpuToken, "");
  auto m = w.store.machines().Machine(id).value().value();
  CHECK(m.name == "node1-1234");
  CHECK(m.provider == "manual");
  CHECK(m.pool == "cpu");
  CHECK(m.slots == 2);
  auto res = json::parse(m.resources_json);
  CHECK(res["cpus"] == 16);
  CHECK(res["gpus"].size() == 1);
  auto bad = w.Post("/api/v1/workers/register", "not json", kCpuToken);
  CHECK(bad.status == 400);
  CHECK(w.Post("/api/v1/workers/nope/lease", "{}", kCpuToken).status == 404);
  CHECK(w.Post("/api/v1/workers/" + std::to_string(id) + "/lease", "{}", std::nullopt).status ==
        401);
}

}  // namespace trainq

namespace trainq {

TEST_CASE("worker API: waiting polls are capped so the listener keeps threads for other routes",
          "[worker_api][long_poll]") {
  World w;
  auto worker = w.Register(kCpuToken, "many");
  const int cap = w.server->options().max_long_polls;
  const int extra = 8;
  std::vector<std::future<json>> polls;
  for (int i = 0; i < cap + extra; ++i) {
    polls.push_back(std::async(std::launch::async, [&] {
      HttpRequest r;
      r.method = "POST";
      r.url = w.base + "/api/v1/workers/" + std::to_string(worker) + "/lease";
      r.body = json{{"max_runs", 1}, {"wait_ms", 20'000}}.dump();
      r.timeout_ms = 60'000;
      r.headers = {{"Authorization", "Bearer " + kCpuToken}};
      auto resp = w.http.Send(r);
      if (!resp || resp->status != 200) return json();
      return json::parse(resp->body);
    }));
  }
  // `cap` polls wait; the others were answered (empty) at once.
  REQUIRE(testing::WaitFor([&] { return w.server->WaitingPolls() == cap; },
                           std::chrono::seconds(20)));
  REQUIRE(testing::WaitFor(
      [&] {
        int ready = 0;
        for (auto& p : polls) {
          if (p.wait_for(std::chrono::seconds(0)) == std::future_status::ready) ++ready;
        }
        return ready == extra;
      },
      std::chrono::seconds(20)));
  // While they wait, other routes are still served.
  HttpRequest health;
  health.url = w.base + "/healthz";
  auto h = w.http.Send(health);
  REQUIRE(h);
  CHECK(h->status == 200);
  CHECK(w.server->WaitingPolls() == cap);
  w.server->StopWaiting();
  for (auto& p : polls) {
    auto answer = p.get();
    CHECK(answer["state"] == "ready");
    CHECK(answer["runs"].empty());
  }
  CHECK(w.server->WaitingPolls() == 0);
}

TEST_CASE("worker API: source answers the leased run's commit as a packfile, to its holder only",
          "[worker_api]") {
  World w;
  testing::GitFixture repo(w.tmp / "model");
  repo.Commit({{"train.py", "print('v1')\n"}}, "v1");
  std::string sha = repo.Commit({{"train.py", "print('v2')\n"}, {"cfg/a.yaml", "lr: 1\n"}}, "v2");
  BatchSpec spec;
  spec.experiment = "mlp";
  spec.command = "python train.py";
  spec.repeats = 1;
  REQUIRE(w.store.runs().Submit(repo.dir(), {sha, "", "v2", "me", 0}, {spec}, w.clock.Now()));
  auto a = w.Register(kCpuToken, "a");
  auto runs = w.Lease(a, kCpuToken)["runs"];
  REQUIRE(runs.size() == 1);
  std::int64_t id = runs[0]["run_id"];
  std::int64_t token = runs[0]["token"];

  auto r = w.Post(w.RunPath(id, "source"), json{{"token", token}}.dump(), kCpuToken);
  REQUIRE(r.status == 200);
  REQUIRE(r.body.starts_with("PACK"));
  testing::TempDir far;  // a machine that never saw the repository
  auto bare = GitRepo::OpenOrInitBare(far / "source.git");
  REQUIRE(bare);
  REQUIRE(bare->AddPack(r.body));
  REQUIRE(bare->CheckoutTo(sha, far / "wt"));
  CHECK(*ReadFile(far / "wt/train.py") == "print('v2')\n");
  CHECK(*ReadFile(far / "wt/cfg/a.yaml") == "lr: 1\n");

  CHECK(w.Post(w.RunPath(id, "source"), json{{"token", token}}.dump(), std::nullopt).status == 401);
  CHECK(w.Post(w.RunPath(id, "source"), json{{"token", token}}.dump(), kGpuToken).status == 403);
  CHECK(w.Post(w.RunPath(id, "source"), json{{"token", token + 7}}.dump(), kCpuToken).status ==
        409);
  CHECK(w.Post(w.RunPath(id, "source"), "{}", kCpuToken).status == 400);
  // Finished: the lease is gone, so is the source.
  w.PostJson(w.RunPath(id, "complete"),
             {{"token", token}, {"outcome", "succeeded"}, {"metric_value", 0.5}}, kCpuToken);
  CHECK(w.Post(w.RunPath(id, "source"), json{{"token", token}}.dump(), kCpuToken).status == 409);
}

TEST_CASE("worker API: source of a run whose repository the server lacks is a 404 naming it",
          "[worker_api]") {
  World w;
  w.Submit(1);  // repository /srv/model: not on this machine
  auto a = w.Register(kCpuToken, "a");
  auto runs = w.Lease(a, kCpuToken)["runs"];
  REQUIRE(runs.size() == 1);
  auto r = w.Post(w.RunPath(runs[0]["run_id"], "source"),
                  json{{"token", runs[0]["token"]}}.dump(), kCpuToken);
  CHECK(r.status == 404);
  CHECK(r.body.find("/srv/model") != std::string::npos);
}

TEST_CASE("worker API: leave stops a hand-started machine and queues what it held, only its pool "
          "may say so",
          "[worker_api]") {
  World w;
  w.Submit(1);
  auto a = w.Register(kCpuToken);  // no name: started by hand
  auto runs = w.Lease(a, kCpuToken)["runs"];
  REQUIRE(runs.size() == 1);
  std::string leave = "/api/v1/workers/" + std::to_string(a) + "/leave";
  CHECK(w.Post(leave, "{}", kGpuToken).status == 403);
  CHECK(w.Post(leave, "{}", std::nullopt).status == 401);
  CHECK(w.Post("/api/v1/workers/999/leave", "{}", kCpuToken).status == 404);
  CHECK(w.PostJson(leave, json::object(), kCpuToken)["state"] == "stopped");
  auto m = w.store.machines().Machine(a).value().value();
  CHECK(m.state == "stopped");
  auto run = w.store.runs().Run(runs[0]["run_id"].get<std::int64_t>()).value().value();
  CHECK(run.state == RunState::kQueued);
  CHECK(run.attempts == 0);  // not the run's fault
  // Twice is harmless.
  CHECK(w.PostJson(leave, json::object(), kCpuToken)["state"] == "stopped");
}

}  // namespace trainq

namespace trainq {

// Issue 16: a worker's max_runs was trusted, and one metrics call stored
// 200,000 rows.
TEST_CASE("worker API: max_runs is capped by the machine's registered slots, a run's metric "
          "points are bounded",
          "[worker_api]") {
  World w;
  w.Submit(5);
  auto m = w.Register(kCpuToken, "one-slot", 1);
  auto runs = w.Lease(m, kCpuToken, 0, 1000)["runs"];
  REQUIRE(runs.size() == 1);
  std::int64_t id = runs[0]["run_id"];
  std::int64_t token = runs[0]["token"];
  json points = json::array();
  for (std::int64_t i = 0; i < Server::kMaxMetricPointsPerRun / 5; ++i) {
    points.push_back({{"name", "loss"}, {"value", 1.0}});
  }
  for (int i = 0; i < 5; ++i) {
    w.PostJson(w.RunPath(id, "metrics"), {{"token", token}, {"points", points}}, kCpuToken);
  }
  auto over = w.Post(w.RunPath(id, "metrics"),
                     json{{"token", token}, {"points", json::array({{{"name", "loss"},
                                                                    {"value", 1.0}}})}}
                         .dump(),
                     kCpuToken);
  CHECK(over.status == 413);
  CHECK(w.store.runs().MetricCount(id).value() == Server::kMaxMetricPointsPerRun);
}

}  // namespace trainq
