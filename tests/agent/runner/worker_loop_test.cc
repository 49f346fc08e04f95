// The Worker's loop as a unit: a scripted queue behind the LeaseClient seam
// (FakeQueue below answers the worker protocol's routes with
// agent/runner/protocol.h's messages), the fake process runner
// (tests/support/fake_process.h) and a FakeClock. Nothing runs and nothing
// waits: a test leases a run, ends or signals its "process" and moves the
// clock, then asserts what the worker asked for (signals, in order) and what
// it told the queue. A real git repository gives the checkout. The same loop
// against a real Server and real processes is tests/agent/e2e/worker_e2e_test.cc.
#include <signal.h>

#include <catch2/catch.hpp>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "agent/runner/lease_client.h"
#include "agent/runner/protocol.h"
#include "agent/runner/worker.h"
#include "core/clock.h"
#include "core/strings.h"
#include "tests/support/fake_process.h"
#include "tests/support/git_fixture.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {
namespace {

// The queue's side of the worker protocol, scripted by the test: runs put
// in `offer` are leased out (at most max_runs per lease), `stale` runs have
// lost their lease (409 on every run call), and every call is recorded.
class FakeQueue final : public LeaseClient {
 public:
  std::deque<LeasedRun> offer;
  std::set<std::int64_t> stale;
  bool draining = false;
  bool down = false;  // no answer at all (a connection refused)
  TimeMs heartbeat_ms = 1'000;

  std::vector<std::string> paths;                     // every call, in order
  std::map<std::int64_t, std::vector<bool>> beats;    // run -> each heartbeat's `started`
  std::map<std::int64_t, std::vector<MetricPoint>> points;
  std::map<std::int64_t, std::string> logs;  // by lease token: each attempt's bytes from 0
  std::vector<std::pair<std::int64_t, CompleteRequest>> completes;

  Result<WireAnswer> Send(const WireCall& call) override {
    if (down) return Fail(ErrorKind::kUnavailable, "connection refused");
    paths.push_back(call.path);
    const json body = call.content_type == "application/json" ? json::parse(call.body) : json{};
    if (call.path == "/api/v1/workers/register") {
      RegisterAnswer a;
      a.worker_id = 7;
      a.pool = "local";
      a.lease_ms = 30'000;
      a.heartbeat_ms = heartbeat_ms;
      return Answer(200, ToJson(a));
    }
    if (call.path == "/api/v1/workers/7/lease") {
      LeaseRequest req = ParseLeaseRequest(body);
      LeaseAnswer a;
      a.state = draining ? "draining" : "ready";
      while (!draining && !offer.empty() && std::ssize(a.runs) < req.max_runs) {
        a.runs.push_back(offer.front());
        offer.pop_front();
      }
      return Answer(200, ToJson(a));
    }
    if (call.path == "/api/v1/workers/7/leave") return Answer(200, json::object());
    // /api/v1/runs/{id}/{what}
    const std::string rest = call.path.substr(std::string("/api/v1/runs/").size());
    const std::int64_t id = std::stoll(rest.substr(0, rest.find('/')));
    const std::string what = rest.substr(rest.find('/') + 1);
    if (stale.contains(id)) return Answer(409, {{"error", "the lease of run " + std::to_string(id) + " is stale"}});
    if (what == "heartbeat") {
      beats[id].push_back(ParseHeartbeatRequest(body).started);
      return Answer(200, ToJson(HeartbeatAnswer{1'800'000'000'000}));
    }
    if (what == "metrics") {
      auto m = ParseMetricsRequest(body);
      REQUIRE(m.has_value());
      for (auto& p : m->points) points[id].push_back(p);
      return Answer(200, json::object());
    }
    if (what == "log") {
      const auto offset = std::stoll(FindHeader(call.headers, "X-Trainq-Offset").value_or("-1"));
      const auto token = std::stoll(FindHeader(call.headers, "X-Trainq-Token").value_or("0"));
      std::string& log = logs[token];
      REQUIRE(offset == std::ssize(log));  // the worker sends from where the queue is
      log += call.body;
      return Answer(200, {{"size", log.size()}});
    }
    if (what == "complete") {
      auto c = ParseCompleteRequest(body);
      REQUIRE(c.has_value());
      completes.emplace_back(id, *c);
      return Answer(200, ToJson(CompleteAnswer{c->outcome}));
    }
    return Answer(404, {{"error", "no route " + call.path}});
  }
  std::string Where() const override { return "the fake queue"; }

  int Count(const std::string& path) const {
    return static_cast<int>(std::count(paths.begin(), paths.end(), path));
  }

 private:
  static WireAnswer Answer(int status, json body) {
    WireAnswer a;
    a.status = status;
    a.raw = body.dump();
    a.body = std::move(body);
    return a;
  }
};

struct Rig {
  testing::TempDir tmp;
  testing::GitFixture git{tmp / "repo"};
  std::string sha = git.Commit({{"train.py", "print('hi')\n"}}, "initial");
  FakeQueue queue;
  testing::FakeProcessRunner runner;
  FakeClock clock;
  std::unique_ptr<Worker> worker;

  LeasedRun Run(std::int64_t id, std::int64_t timeout_s = 60, int attempt = 1) {
    LeasedRun r;
    r.run_id = id;
    r.batch_id = 1;
    r.token = 100 + id;
    r.seed = id;
    r.repeat = static_cast<int>(id);
    r.attempt = attempt;
    r.experiment = "exp";
    r.command = "python3 train.py --seed {seed}";
    r.metric_name = "accuracy";
    r.repo_url = git.dir();
    r.sha = sha;
    r.timeout_s = timeout_s;
    return r;
  }
  Worker& Start(int slots = 1) {
    WorkerConfig c;
    c.server = "http://fake";
    c.machine = "test-machine";
    c.slots = slots;
    c.data_dir = tmp / "data";
    c.kill_grace_ms = 2'000;
    c.lease_wait_ms = 0;
    worker = std::make_unique<Worker>(queue, runner, clock, c);
    return *worker;
  }
  void Step() {
    auto phase = worker->Step();
    if (!phase) FAIL("Step: " << phase.error().message);
  }
  // The one process spawned so far.
  int Pid() {
    auto pids = runner.pids();
    REQUIRE(pids.size() == 1);
    return pids[0];
  }
  std::vector<int> Signals(int pid) { return runner.process(pid).signals; }
  std::vector<int> Signals() { return Signals(Pid()); }
  ProcessSpec Spec(int pid) { return runner.process(pid).spec; }
  void WriteMetric(int pid, const std::string& line) {
    std::ofstream(Spec(pid).env.at("TRAINQ_METRICS_FILE"), std::ios::app) << line << "\n";
  }
  void Print(int pid, const std::string& text) {
    std::ofstream(Spec(pid).output_path, std::ios::app) << text;
  }
  const CompleteRequest& OnlyComplete() {
    REQUIRE(queue.completes.size() == 1);
    return queue.completes[0].second;
  }
};

TEST_CASE("worker loop: a run that exits 0 with its metric written is reported succeeded, "
          "and what it left in its group is killed",
          "[worker][loop]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.Start();
  rig.Step();  // registers, leases, starts
  REQUIRE(rig.worker->registered());
  const int pid = rig.Pid();
  const auto spec = rig.Spec(pid);
  CHECK(spec.argv == std::vector<std::string>{"/bin/sh", "-c", "python3 train.py --seed 1"});
  CHECK(fs::exists(fs::path(spec.cwd) / "train.py"));  // the commit's checkout, its own
  CHECK(spec.env.at("TRAINQ_SEED") == "1");
  CHECK_FALSE(spec.inherit_env);
  // The first heartbeat says the run started.
  CHECK(rig.queue.beats[1] == std::vector<bool>{true});
  CHECK(rig.worker->active_runs() == 1);

  rig.WriteMetric(pid, R"({"name": "accuracy", "value": 0.75, "step": 3})");
  rig.Print(pid, "epoch 3\n");
  rig.clock.Advance(42'000);
  rig.runner.Exit(pid, 0);
  rig.Step();
  const auto& c = rig.OnlyComplete();
  CHECK(c.outcome == "succeeded");
  CHECK(c.metric_value == 0.75);
  CHECK(c.exit_code == 0);
  CHECK(c.token == 101);
  CHECK(c.worker_id == 7);
  REQUIRE(rig.queue.points[1].size() == 1);
  CHECK(rig.queue.points[1][0].step == 3);
  CHECK_THAT(rig.queue.logs[101], Catch::Contains("epoch 3"));  // run 1's lease
  CHECK(rig.Signals() == std::vector<int>{SIGKILL});
  CHECK(rig.worker->active_runs() == 0);
}

TEST_CASE("worker loop: heartbeats go every heartbeat_ms and carry the new points", "[worker][loop]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.Start();
  rig.Step();
  const int pid = rig.Pid();
  rig.clock.Advance(999);
  rig.Step();
  CHECK(rig.queue.beats[1].size() == 1);  // not due yet
  rig.WriteMetric(pid, R"({"name": "loss", "value": 2.5, "step": 1})");
  rig.clock.Advance(1);
  rig.Step();
  CHECK(rig.queue.beats[1] == std::vector<bool>{true, false});
  REQUIRE(rig.queue.points[1].size() == 1);
  CHECK(rig.queue.points[1][0].name == "loss");
  // A half-written line waits for its newline.
  {
    std::ofstream(rig.Spec(pid).env.at("TRAINQ_METRICS_FILE"), std::ios::app)
        << R"({"name": "loss", "val)";
  }
  rig.clock.Advance(1'000);
  rig.Step();
  CHECK(rig.queue.points[1].size() == 1);
  CHECK(rig.Signals(pid).empty());
}

TEST_CASE("worker loop: the timeout sends SIGTERM to the group once, and the run fails naming it",
          "[worker][loop][timeout]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1, 5));
  rig.Start();
  rig.Step();
  rig.clock.Advance(5'000);  // at the timeout, not past it
  rig.Step();
  CHECK(rig.Signals().empty());
  rig.clock.Advance(1);
  rig.Step();  // SIGTERM; the fake process ends on it
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  rig.Step();  // reaped
  const auto& c = rig.OnlyComplete();
  CHECK(c.outcome == "failed");
  CHECK_THAT(c.error, Catch::StartsWith("timed out after 5s"));
  CHECK(rig.worker->active_runs() == 0);
}

TEST_CASE("worker loop: a run that ignores SIGTERM gets SIGKILL only once the kill grace has passed",
          "[worker][loop][timeout]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1, 5));
  rig.Start();
  rig.Step();
  rig.runner.IgnoreTerm(rig.Pid());
  rig.clock.Advance(5'001);
  rig.Step();
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  rig.clock.Advance(1'999);  // within the 2 s grace: left alone
  rig.Step();
  rig.Step();
  CHECK(rig.Signals() == std::vector<int>{SIGTERM});
  CHECK(rig.runner.running() == 1);
  rig.clock.Advance(1);
  rig.Step();
  CHECK(rig.Signals() == std::vector<int>{SIGTERM, SIGKILL});
  rig.Step();
  CHECK(rig.OnlyComplete().outcome == "failed");
  CHECK_THAT(rig.OnlyComplete().error, Catch::Contains("timed out"));
}

TEST_CASE("worker loop: a heartbeat the queue refuses (409) kills the run's process and forgets it, "
          "reporting no outcome but keeping its output",
          "[worker][loop][heartbeat]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1, 3600));
  rig.Start();
  rig.Step();
  const int pid = rig.Pid();
  for (int i = 0; i < 5; ++i) {
    rig.clock.Advance(1'000);
    rig.Step();
  }
  CHECK(rig.queue.beats[1].size() == 6);
  CHECK(rig.Signals().empty());
  rig.Print(pid, "still training\n");
  // Cancelled, or leased again after the lease expired: the queue says stale.
  rig.queue.stale.insert(1);
  rig.clock.Advance(1'000);
  rig.Step();
  CHECK(rig.Signals() == std::vector<int>{SIGKILL});
  CHECK(rig.queue.completes.empty());
  CHECK(rig.worker->active_runs() == 0);
  // The slot is free again: the next run is leased and started.
  rig.queue.stale.clear();
  rig.queue.offer.push_back(rig.Run(2));
  rig.clock.Advance(1'000);
  rig.Step();
  CHECK(rig.runner.pids().size() == 2);
}

TEST_CASE("worker loop: Interrupt gives a running run back (interrupted, no attempt used) and keeps "
          "the result of one that already ended",
          "[worker][loop][shutdown]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.queue.offer.push_back(rig.Run(2));
  rig.Start(2);
  rig.Step();
  auto pids = rig.runner.pids();
  REQUIRE(pids.size() == 2);
  // Run 1 finished just before the stop; run 2 is still training.
  rig.WriteMetric(pids[0], R"({"name": "accuracy", "value": 0.5})");
  rig.runner.Exit(pids[0], 0);
  rig.worker->Interrupt("preempted");
  REQUIRE(rig.queue.completes.size() == 2);
  std::map<std::int64_t, CompleteRequest> by_run(rig.queue.completes.begin(), rig.queue.completes.end());
  CHECK(by_run[1].outcome == "succeeded");
  CHECK(by_run[1].metric_value == 0.5);
  CHECK(by_run[2].outcome == "interrupted");
  CHECK(by_run[2].error == "preempted");
  CHECK(rig.Signals(pids[1]).front() == SIGTERM);
  CHECK(rig.runner.running() == 0);
  CHECK(rig.worker->active_runs() == 0);
}

TEST_CASE("worker loop: the regex reads the metric from this attempt's output only",
          "[worker][loop][metric]") {
  Rig rig;
  auto run = rig.Run(1);
  run.metric_name = "acc";
  run.metric_regex = "acc=([0-9.]+)";
  rig.queue.offer.push_back(run);
  rig.Start();
  rig.Step();
  int pid = rig.Pid();
  rig.Print(pid, "acc=0.1\nacc=0.25\n");
  rig.runner.Exit(pid, 0);
  rig.Step();
  CHECK(rig.OnlyComplete().outcome == "succeeded");
  CHECK(rig.OnlyComplete().metric_value == 0.25);  // the last match wins

  // Its second attempt (the same run leased again) prints no match: the first
  // attempt's lines do not count.
  rig.queue.completes.clear();
  run.attempt = 2;
  run.token = 999;
  rig.queue.offer.push_back(run);
  rig.clock.Advance(1'000);
  rig.Step();
  REQUIRE(rig.runner.pids().size() == 2);
  pid = rig.runner.pids()[1];
  rig.Print(pid, "no metric this time\n");
  rig.runner.Exit(pid, 0);
  rig.Step();
  CHECK(rig.OnlyComplete().outcome == "failed");
  CHECK_THAT(rig.OnlyComplete().error, Catch::Contains("acc"));
}

TEST_CASE("worker loop: how a process ended decides the outcome", "[worker][loop][metric]") {
  struct Case {
    const char* what;
    std::string metrics;  // written before the end
    int exit_code;        // -1: killed by SIGSEGV
    const char* outcome;
    const char* error_has;
  };
  const std::vector<Case> cases = {
      {"exit 0 with the metric", R"({"name": "accuracy", "value": 0.9})", 0, "succeeded", ""},
      {"exit 0 without the metric names it", "", 0, "failed", "accuracy"},
      {"a NaN metric makes the run invalid", R"({"name": "accuracy", "value": null})", 0, "failed",
       "the run is invalid"},
      {"a non-zero exit fails with its code", R"({"name": "accuracy", "value": 0.9})", 3, "failed",
       "exit code 3"},
  };
  for (const auto& c : cases) {
    DYNAMIC_SECTION(c.what) {
      Rig rig;
      rig.queue.offer.push_back(rig.Run(1));
      rig.Start();
      rig.Step();
      if (!c.metrics.empty()) rig.WriteMetric(rig.Pid(), c.metrics);
      rig.runner.Exit(rig.Pid(), c.exit_code);
      rig.Step();
      CHECK(rig.OnlyComplete().outcome == c.outcome);
      CHECK_THAT(rig.OnlyComplete().error, Catch::Contains(c.error_has));
    }
  }
}

TEST_CASE("worker loop: a process killed by a signal fails naming the signal", "[worker][loop]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.Start();
  rig.Step();
  rig.runner.KillGroup(rig.Pid(), SIGKILL);  // the OOM killer, say
  rig.Step();
  CHECK(rig.OnlyComplete().outcome == "failed");
  CHECK_THAT(rig.OnlyComplete().error, Catch::Contains("signal 9"));
  CHECK_FALSE(rig.OnlyComplete().exit_code.has_value());
}

TEST_CASE("worker loop: slots run at the same time and a free slot leases again", "[worker][loop]") {
  Rig rig;
  for (int id = 1; id <= 3; ++id) rig.queue.offer.push_back(rig.Run(id));
  rig.Start(2);
  rig.Step();
  auto pids = rig.runner.pids();
  REQUIRE(pids.size() == 2);
  CHECK(rig.runner.running() == 2);
  CHECK(rig.queue.offer.size() == 1);
  rig.WriteMetric(pids[0], R"({"name": "accuracy", "value": 0.5})");
  rig.runner.Exit(pids[0], 0);
  rig.Step();
  CHECK(rig.runner.pids().size() == 3);
  CHECK(rig.runner.running() == 2);
}

TEST_CASE("worker loop: a run whose repository vanished fails with the reason, without a process",
          "[worker][loop]") {
  Rig rig;
  auto run = rig.Run(1);
  run.repo_url = rig.tmp / "gone";
  run.sha = std::string(40, 'a');
  rig.queue.offer.push_back(run);
  rig.Start();
  rig.Step();
  CHECK(rig.runner.pids().empty());
  CHECK(rig.OnlyComplete().outcome == "failed");
  CHECK_THAT(rig.OnlyComplete().error, Catch::StartsWith("cannot start:"));
}

TEST_CASE("worker loop: a draining answer finishes what runs, then the worker is done",
          "[worker][loop][drain]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.Start();
  rig.Step();
  rig.queue.draining = true;
  rig.queue.offer.push_back(rig.Run(2));
  rig.clock.Advance(1'000);
  rig.Step();  // heartbeat, then a lease answered draining
  CHECK(rig.runner.pids().size() == 1);
  rig.WriteMetric(rig.Pid(), R"({"name": "accuracy", "value": 0.5})");
  rig.runner.Exit(rig.Pid(), 0);
  auto phase = rig.worker->Step();
  REQUIRE(phase.has_value());
  CHECK(*phase == Worker::Phase::kDone);
  CHECK(rig.worker->exit_code() == 0);
  CHECK(rig.OnlyComplete().outcome == "succeeded");
}

TEST_CASE("worker loop: a result the queue cannot take is kept and delivered when it answers again",
          "[worker][loop][outbox]") {
  Rig rig;
  rig.queue.offer.push_back(rig.Run(1));
  rig.Start();
  rig.Step();
  rig.WriteMetric(rig.Pid(), R"({"name": "accuracy", "value": 0.625})");
  rig.runner.Exit(rig.Pid(), 0);
  rig.queue.down = true;
  rig.Step();  // three tries, then kept on disk
  CHECK(rig.queue.completes.empty());
  CHECK(fs::exists(rig.tmp.path() / "data" / "outbox"));
  rig.queue.down = false;
  rig.clock.Advance(60'000);
  rig.Step();
  CHECK(rig.OnlyComplete().outcome == "succeeded");
  CHECK(rig.OnlyComplete().metric_value == 0.625);
  // Delivered once: later steps send nothing again.
  rig.clock.Advance(60'000);
  rig.Step();
  CHECK(rig.queue.Count("/api/v1/runs/1/complete") == 1);
}

}  // namespace
}  // namespace trainq
