// The Worker's parts one at a time (agent/runner/worker.h): WorkerLink (calls
// and backoff), Registration (register's answer, 409, a refused token and the
// self-stop command, leave, the dead-man switch) and KeptResults (results
// kept while the server was away, and their delivery). A scripted LeaseClient
// answers with agent/runner/protocol.h's messages, the fake process runner
// stands in for the self-stop command and a FakeClock for time. The loop that
// composes them is tests/agent/runner/worker_loop_test.cc.
#include <signal.h>

#include <catch2/catch.hpp>
#include <deque>
#include <filesystem>
#include <map>

#include "agent/runner/lease_client.h"
#include "agent/runner/protocol.h"
#include "agent/runner/result_outbox.h"
#include "agent/runner/worker.h"
#include "agent/runner/worker_link.h"
#include "agent/runner/worker_outbox.h"
#include "agent/runner/worker_registration.h"
#include "core/clock.h"
#include "tests/support/fake_process.h"
#include "tests/support/temp_dir.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {
namespace {

// Answers each path with what the test put in `answers` (the same answer
// again and again), 404 otherwise; `down`: no answer at all. Every call is
// recorded.
class ScriptedQueue final : public LeaseClient {
 public:
  bool down = false;
  std::map<std::string, std::pair<int, json>> answers;  // by path: status, body
  std::vector<WireCall> calls;

  Result<WireAnswer> Send(const WireCall& call) override {
    if (down) return Fail(ErrorKind::kUnavailable, "connection refused");
    calls.push_back(call);
    WireAnswer a;
    auto it = answers.find(call.path);
    a.status = it == answers.end() ? 404 : it->second.first;
    a.body = it == answers.end() ? json{{"error", "no route " + call.path}} : it->second.second;
    a.raw = a.body.dump();
    return a;
  }
  std::string Where() const override { return "the scripted queue"; }

  std::vector<std::string> paths() const {
    std::vector<std::string> out;
    for (const auto& c : calls) out.push_back(c.path);
    return out;
  }
};

struct LinkRig {
  ScriptedQueue queue;
  FakeClock clock;
  WorkerLink link{nullptr, &queue, clock, 1'000, 4'000};
};

TEST_CASE(
    "WorkerLink: no answer backs off from retry_base_ms, doubling up to retry_max_ms, an "
    "answer ends the backoff") {
  LinkRig r;
  const TimeMs start = r.clock.Now();
  r.queue.down = true;
  CHECK(r.link.Ready(start));
  CHECK_FALSE(r.link.Call("/api/v1/workers/register", json::object()));
  CHECK(r.link.backoff_ms() == 1'000);
  CHECK_FALSE(r.link.Ready(start + 999));
  CHECK(r.link.Ready(start + 1'000));
  CHECK_FALSE(r.link.Call("/api/v1/workers/register", json::object()));
  CHECK(r.link.backoff_ms() == 2'000);
  CHECK_FALSE(r.link.Call("/api/v1/workers/register", json::object()));
  CHECK(r.link.backoff_ms() == 4'000);
  CHECK_FALSE(r.link.Call("/api/v1/workers/register", json::object()));
  CHECK(r.link.backoff_ms() == 4'000);  // capped
  CHECK(r.link.last_contact_ms() == start);

  r.clock.Advance(5'000);
  r.queue.down = false;
  r.queue.answers["/api/v1/workers/register"] = {409, json{{"error", "draining"}}};
  auto a = r.link.Call("/api/v1/workers/register", json::object());
  REQUIRE(a);
  CHECK(a->status == 409);  // below 500: an answer, and contact
  CHECK_FALSE(r.link.BackingOff());
  CHECK(r.link.last_contact_ms() == start + 5'000);
}

TEST_CASE("WorkerLink: a 5xx is a failure that backs off and keeps no contact") {
  LinkRig r;
  r.clock.Advance(10);
  r.queue.answers["/api/v1/runs/3/heartbeat"] = {503, json{{"error", "store busy"}}};
  auto a = r.link.Call("/api/v1/runs/3/heartbeat", json{{"token", 1}});
  REQUIRE_FALSE(a);
  CHECK(a.error().kind == ErrorKind::kUnavailable);
  CHECK(a.error().message.find("HTTP 503") != std::string::npos);
  CHECK(a.error().message.find("store busy") != std::string::npos);
  CHECK(r.link.BackingOff());
  CHECK(r.link.last_contact_ms() == r.clock.Now() - 10);
}

TEST_CASE(
    "WorkerLink: names the machine in X-Trainq-Worker once it is set, unless the call "
    "names one") {
  LinkRig r;
  r.queue.answers["/api/v1/runs/3/log"] = {200, json{{"size", 0}}};
  WireCall call;
  call.path = "/api/v1/runs/3/log";
  REQUIRE(r.link.Send(call));
  CHECK_FALSE(FindHeader(r.queue.calls.back().headers, "X-Trainq-Worker"));
  r.link.set_machine(7);
  REQUIRE(r.link.Send(call));
  CHECK(FindHeader(r.queue.calls.back().headers, "X-Trainq-Worker") == "7");
  call.headers = {{"X-Trainq-Worker", "9"}};  // a kept result names its own machine
  REQUIRE(r.link.Send(call));
  CHECK(r.queue.calls.back().headers.size() == 1);
  CHECK(FindHeader(r.queue.calls.back().headers, "X-Trainq-Worker") == "9");
}

struct RegistrationRig {
  ScriptedQueue queue;
  FakeClock clock;
  testing::FakeProcessRunner runner;
  WorkerConfig config = [] {
    WorkerConfig c;
    c.machine = "gpu-1";
    c.slots = 2;
    c.orphan_timeout_ms = 60'000;
    c.self_stop = "echo stop";
    c.self_stop_timeout_ms = 1'000;
    return c;
  }();
  WorkerLink link{nullptr, &queue, clock, 1'000, 30'000};
  Registration registration{link, runner, clock, config};
};

TEST_CASE(
    "Registration: register's answer sets the machine, the heartbeat (100 ms at least), the "
    "dead-man switch, the self-stop command and the pool's GPU packing") {
  RegistrationRig r;
  CHECK(r.registration.heartbeat_ms() == 10'000);
  CHECK(r.registration.orphan_timeout_ms() == 60'000);
  CHECK(r.registration.self_stop() == "echo stop");
  RegisterAnswer answer;
  answer.worker_id = 7;
  answer.name = "gpu-1";
  answer.pool = "gpu";
  answer.heartbeat_ms = 20;
  answer.orphan_timeout_ms = 5'000;
  answer.runs_per_gpu = 4;
  answer.self_stop = "shutdown -h now";
  r.queue.answers["/api/v1/workers/register"] = {200, ToJson(answer)};

  CHECK_FALSE(r.registration.registered());
  auto outcome = r.registration.Register();
  REQUIRE(outcome);
  CHECK(*outcome == Registration::Outcome::kRegistered);
  CHECK(r.registration.registered());
  CHECK(r.registration.machine() == 7);
  CHECK(r.link.machine() == 7);  // named in every call from now on
  CHECK(r.registration.heartbeat_ms() == 100);
  CHECK(r.registration.orphan_timeout_ms() == 5'000);
  CHECK(r.registration.self_stop() == "shutdown -h now");
  CHECK(r.registration.pool_runs_per_gpu() == 4);
  // What was asked: the machine's name and slots, from the config.
  auto request = ParseRegisterRequest(json::parse(r.queue.calls.front().body));
  REQUIRE(request);
  CHECK(request->name == "gpu-1");
  CHECK(request->slots == 2);

  r.registration.Forget();  // a lease answered 404
  CHECK_FALSE(r.registration.machine());
  CHECK(r.registration.registered());  // it was, once
}

TEST_CASE("Registration: a 409 is kNotToRun, no answer is kNoAnswer and sets nothing") {
  RegistrationRig r;
  r.queue.down = true;
  auto none = r.registration.Register();
  REQUIRE(none);
  CHECK(*none == Registration::Outcome::kNoAnswer);
  CHECK_FALSE(r.registration.machine());
  CHECK(r.link.BackingOff());

  r.queue.down = false;
  r.queue.answers["/api/v1/workers/register"] = {409, json{{"error", "machine gpu-1 drains"}}};
  auto drained = r.registration.Register();
  REQUIRE(drained);
  CHECK(*drained == Registration::Outcome::kNotToRun);
  CHECK_FALSE(r.registration.machine());
  CHECK(r.runner.pids().empty());
}

TEST_CASE(
    "Registration: a refused token runs the self-stop command (killed after its timeout) "
    "and is an error naming the answer") {
  RegistrationRig r;
  r.queue.answers["/api/v1/workers/register"] = {401, json{{"error", "unknown worker token"}}};
  auto refused = r.registration.Register();
  REQUIRE_FALSE(refused);
  CHECK(refused.error().kind == ErrorKind::kInvalidArgument);
  CHECK(refused.error().message ==
        "register at the scripted queue refused: HTTP 401 unknown worker token");
  REQUIRE(r.runner.pids().size() == 1);
  auto p = r.runner.process(r.runner.pids().front());
  CHECK(p.spec.argv == std::vector<std::string>{"/bin/sh", "-c", "echo stop"});
  REQUIRE_FALSE(p.signals.empty());
  CHECK(p.signals.front() == SIGTERM);  // after self_stop_timeout_ms
  CHECK(p.signals.back() == SIGKILL);   // and its group, whatever is left
}

TEST_CASE(
    "Registration: the self-stop command ends at once on the stop flag, without a command "
    "nothing runs") {
  RegistrationRig r;
  std::atomic<bool> stop{true};
  r.registration.set_stop(&stop);
  const TimeMs before = r.clock.Now();
  r.registration.RunSelfStop();
  REQUIRE(r.runner.pids().size() == 1);
  CHECK(r.runner.process(r.runner.pids().front()).signals.front() == SIGTERM);
  CHECK(r.clock.Now() - before < 1'000);  // not the timeout

  r.config.self_stop.clear();
  Registration none{r.link, r.runner, r.clock, r.config};
  none.RunSelfStop();
  CHECK(r.runner.pids().size() == 1);
}

TEST_CASE(
    "Registration: orphaned after orphan_timeout_ms without an answer, leave only once "
    "registered") {
  RegistrationRig r;
  r.registration.Leave();
  CHECK(r.queue.calls.empty());
  CHECK_FALSE(r.registration.Orphaned(r.clock.Now() + 59'999));
  CHECK(r.registration.Orphaned(r.clock.Now() + 60'000));

  RegisterAnswer answer;
  answer.worker_id = 7;
  answer.heartbeat_ms = 1'000;
  r.queue.answers["/api/v1/workers/register"] = {200, ToJson(answer)};
  r.clock.Advance(30'000);
  REQUIRE(r.registration.Register());
  CHECK_FALSE(r.registration.Orphaned(r.clock.Now() + 59'999));  // counted from the answer
  r.queue.answers["/api/v1/workers/7/leave"] = {200, json{{"state", "stopped"}}};
  r.registration.Leave();
  CHECK(r.queue.paths().back() == "/api/v1/workers/7/leave");
}

struct KeptRig {
  testing::TempDir tmp;
  ScriptedQueue queue;
  FakeClock clock;
  WorkerLink link{nullptr, &queue, clock, 1'000, 30'000};
  KeptResults kept{link, clock, tmp.path().string()};

  // Where run `id`'s result is kept on disk.
  fs::path File(std::int64_t id) const {
    return tmp.path() / "outbox" / (std::to_string(id) + ".json");
  }

  PendingResult Result(std::int64_t run_id, std::string outcome) {
    PendingResult p;
    p.run_id = run_id;
    CompleteRequest c;
    c.token = 100 + run_id;
    c.worker_id = 7;
    c.outcome = std::move(outcome);
    if (c.outcome == "succeeded") c.metric_value = 0.5;
    p.complete = ToJson(c);
    return p;
  }
};

TEST_CASE(
    "KeptResults: a kept result is on disk and delivered with its points and output first, "
    "oldest first, then removed") {
  KeptRig r;
  CHECK(r.kept.maybe_holding());  // at the start: the outbox may hold an earlier worker's
  r.kept.Deliver();               // an empty one: nothing sent, nothing held
  CHECK(r.queue.calls.empty());
  CHECK_FALSE(r.kept.maybe_holding());

  PendingResult first = r.Result(1, "succeeded");
  first.points = json::array({{{"name", "accuracy"}, {"step", 1}, {"value", 0.5}}});
  first.log = "hello\n";
  first.log_offset = 10;
  r.kept.Keep(first, "run 1", "connection refused", 1'000);
  r.kept.Keep(r.Result(2, "failed"), "run 2", "connection refused", 1'000);
  CHECK(fs::exists(r.File(1)));
  CHECK(fs::exists(r.File(2)));

  for (const char* p : {"/api/v1/runs/1/metrics", "/api/v1/runs/1/log", "/api/v1/runs/1/complete",
                        "/api/v1/runs/2/complete"}) {
    r.queue.answers[p] = {200, json::object()};
  }
  r.kept.DeliverIfDue(1'000);
  CHECK(r.queue.calls.empty());  // not due yet
  r.clock.Advance(1'000);
  r.kept.DeliverIfDue(1'000);
  CHECK(r.queue.paths() == std::vector<std::string>{"/api/v1/runs/1/metrics", "/api/v1/runs/1/log",
                                                    "/api/v1/runs/1/complete",
                                                    "/api/v1/runs/2/complete"});
  const WireCall& log = r.queue.calls[1];
  CHECK(log.body == "hello\n");
  CHECK(FindHeader(log.headers, "X-Trainq-Offset") == "10");
  CHECK(FindHeader(log.headers, "X-Trainq-Token") == "101");
  CHECK(FindHeader(log.headers, "X-Trainq-Worker") == "7");  // the machine it was leased to
  CHECK(json::parse(r.queue.calls[2].body)["outcome"] == "succeeded");
  CHECK_FALSE(fs::exists(r.File(1)));
  CHECK_FALSE(fs::exists(r.File(2)));
  CHECK_FALSE(r.kept.maybe_holding());
}

TEST_CASE(
    "KeptResults: delivery stops at the first result without an answer and keeps it for the "
    "next try, a refused one is dropped") {
  KeptRig r;
  r.kept.Keep(r.Result(1, "failed"), "run 1", "connection refused", 500);
  r.kept.Keep(r.Result(2, "failed"), "run 2", "connection refused", 500);
  r.queue.answers["/api/v1/runs/1/complete"] = {503, json{{"error", "store busy"}}};
  r.clock.Advance(500);
  r.kept.DeliverIfDue(500);
  CHECK(r.queue.paths() == std::vector<std::string>{"/api/v1/runs/1/complete"});
  CHECK(fs::exists(r.File(1)));
  CHECK(fs::exists(r.File(2)));
  CHECK(r.kept.maybe_holding());

  // The next try: run 1's lease is gone (409: the server will never take
  // it), run 2 is taken.
  r.queue.answers["/api/v1/runs/1/complete"] = {409, json{{"error", "stale lease"}}};
  r.queue.answers["/api/v1/runs/2/complete"] = {200, json{{"state", "queued"}}};
  r.clock.Advance(499);
  r.kept.DeliverIfDue(500);
  CHECK(r.queue.calls.size() == 1);  // not yet
  r.clock.Advance(1);
  r.kept.DeliverIfDue(500);
  CHECK(r.queue.paths() == std::vector<std::string>{"/api/v1/runs/1/complete",
                                                    "/api/v1/runs/1/complete",
                                                    "/api/v1/runs/2/complete"});
  CHECK_FALSE(fs::exists(r.File(1)));
  CHECK_FALSE(fs::exists(r.File(2)));
  CHECK_FALSE(r.kept.maybe_holding());
}

}  // namespace
}  // namespace trainq
