// agent/runner/protocol.h: what one end writes, the other reads back the same.
#include "agent/runner/protocol.h"

#include <catch2/catch.hpp>
#include <limits>

namespace trainq {
namespace {

using nlohmann::json;

TEST_CASE("protocol: a leased run read back from its JSON is the same run", "[protocol]") {
  LeasedRun r;
  r.run_id = 7;
  r.batch_id = 3;
  r.token = 99;
  r.seed = 12;
  r.repeat = 2;
  r.attempt = 2;
  r.expires_ms = 123456;
  r.experiment = "mlp";
  r.command = "python3 train.py --seed {seed}";
  r.metric_name = "loss";
  r.metric_regex = "loss=([0-9.]+)";
  r.repo_url = "/srv/repo";
  r.sha = std::string(40, 'a');
  r.timeout_s = 60;
  r.gpus = 1;
  r.trainer = "spec.yaml";
  r.group = 7;
  r.nodes = 2;
  r.procs_per_node = 4;
  r.node_rank = 1;
  r.env_passthrough = std::vector<std::string>{"HF_*"};
  std::vector<WorkerRun> runs;
  std::vector<std::string> bad;
  auto answer = ParseLeaseAnswer(ToJson(LeaseAnswer{"ready", {r}}), runs, bad);
  CHECK(bad.empty());
  CHECK(answer.state == "ready");
  REQUIRE(runs.size() == 1);
  const auto& w = runs[0];
  CHECK(w.trainer == "spec.yaml");
  CHECK(w.group == 7);
  CHECK(ToJson(w.lease) == ToJson(r));
}

TEST_CASE("protocol: a lease answer names a run it cannot read and keeps the others",
          "[protocol]") {
  LeasedRun good;
  good.run_id = 2;
  good.token = 5;
  good.command = "true";
  good.repo_url = "/r";
  good.sha = "abc";
  json j = {{"state", "draining"}, {"runs", json::array({json{{"run_id", 1}}, ToJson(good)})}};
  std::vector<WorkerRun> runs;
  std::vector<std::string> bad;
  auto answer = ParseLeaseAnswer(j, runs, bad);
  CHECK(answer.state == "draining");
  REQUIRE(runs.size() == 1);
  CHECK(runs[0].lease.run_id == 2);
  REQUIRE(bad.size() == 1);
  CHECK_THAT(bad[0], Catch::StartsWith("lease answer: a run lacks a field: "));
}

TEST_CASE("protocol: a result read back is the same, and a bad one is refused by name",
          "[protocol]") {
  CompleteRequest c;
  c.token = 4;
  c.outcome = "failed";
  c.worker_id = 9;
  c.exit_code = 2;
  c.error = "exit code 2 (configuration error, not retried)";
  c.retry = false;
  auto back = ParseCompleteRequest(ToJson(c));
  REQUIRE(back);
  CHECK(ToJson(*back) == ToJson(c));
  CHECK_FALSE(back->metric_value);

  auto no_metric = ParseCompleteRequest(json{{"token", 1}, {"outcome", "succeeded"}});
  REQUIRE_FALSE(no_metric);
  CHECK(no_metric.error().message ==
        "complete: a succeeded run needs a numeric \"metric_value\"");
  auto odd = ParseCompleteRequest(json{{"token", 1}, {"outcome", "done"}});
  REQUIRE_FALSE(odd);
  CHECK(odd.error().message ==
        "complete: outcome must be succeeded, failed or interrupted, got \"done\"");
}

TEST_CASE("protocol: metric points keep step and final, non-finite ones are not sent",
          "[protocol]") {
  MetricsRequest m;
  m.token = 3;
  m.points = {{"loss", 0.5, 10, false},
              {"accuracy", 0.9, std::nullopt, true},
              {"loss", std::numeric_limits<double>::quiet_NaN(), 11, false}};
  auto back = ParseMetricsRequest(ToJson(m));
  REQUIRE(back);
  REQUIRE(back->points.size() == 2);
  CHECK(back->points[0].step == 10);
  CHECK_FALSE(back->points[0].final);
  CHECK_FALSE(back->points[1].step);
  CHECK(back->points[1].final);
  auto bad = ParseMetricsRequest(json{{"token", 3}, {"points", json::array({json{{"name", "x"}}})}});
  REQUIRE_FALSE(bad);
  CHECK(bad.error().message == "metrics: each point needs a \"name\" and a numeric \"value\"");
}

TEST_CASE("protocol: the register answer's optional fields stay unset when absent",
          "[protocol]") {
  auto a = ParseRegisterAnswer(json{{"worker_id", 5}, {"heartbeat_ms", 500}});
  CHECK(a.worker_id == 5);
  CHECK(a.heartbeat_ms == 500);
  CHECK_FALSE(a.self_stop);
  CHECK_FALSE(a.runs_per_gpu);
  RegisterAnswer full{5, "m", "gpu", 60'000, 10'000, 600'000, 2, "sudo shutdown -h now"};
  CHECK(ToJson(ParseRegisterAnswer(ToJson(full))) == ToJson(full));
}


TEST_CASE("protocol: a registration read back is the same, and one naming no machine is refused",
          "[protocol]") {
  RegisterRequest r;
  r.name = "gpu-3";
  r.hostname = "node7";
  r.pid = 4242;
  r.slots = 2;
  r.gpus = {{0, "H100", 81559}, {1, "H100", 81559}};
  r.cpus = 16;
  r.memory_mb = 128'000;
  r.version = "0.4.0";
  r.trainer = "/usr/bin/trainq-train";
  r.sandbox = "bwrap";
  r.runs_per_gpu = 2;
  auto back = ParseRegisterRequest(ToJson(r));
  REQUIRE(back);
  CHECK(ToJson(*back) == ToJson(r));
  CHECK(back->gpus.size() == 2);
  CHECK(back->gpus[1].memory_mb == 81559);
  // What the store keeps: no name, host or slots (columns of their own), no empty note.
  json res = ResourcesJson(r);
  CHECK_FALSE(res.contains("name"));
  CHECK_FALSE(res.contains("sandbox_note"));
  CHECK(res["sandbox"] == "bwrap");
  CHECK(res["gpus"].size() == 2);

  auto nobody = ParseRegisterRequest(json{{"slots", 1}});
  REQUIRE_FALSE(nobody);
  CHECK(nobody.error().message ==
        "register: a worker without a machine name must send its hostname");
  auto bad_gpus = ParseRegisterRequest(json{{"hostname", "h"}, {"gpus", "two"}});
  REQUIRE_FALSE(bad_gpus);
  CHECK(bad_gpus.error().message == "register: gpus must be a list of GPUs");
  auto bad_slots = ParseRegisterRequest(json{{"hostname", "h"}, {"slots", "two"}});
  REQUIRE_FALSE(bad_slots);
  CHECK_THAT(bad_slots.error().message, Catch::StartsWith("register: "));
  // A GPU count (an older worker) is that many GPUs.
  auto counted = ParseRegisterRequest(json{{"hostname", "h"}, {"gpus", 2}});
  REQUIRE(counted);
  CHECK(counted->gpus.size() == 2);
}

TEST_CASE("protocol: a run call's envelope needs an integer token and reads the machine",
          "[protocol]") {
  auto e = ParseRunEnvelope(ToJson(RunEnvelope{7, 3}), "heartbeat");
  REQUIRE(e);
  CHECK(e->token == 7);
  CHECK(e->worker_id == 3);
  auto none = ParseRunEnvelope(json{{"token", 7}}, "source");
  REQUIRE(none);
  CHECK_FALSE(none->worker_id);
  for (const json& bad : {json{{"token", "7"}}, json{{"token", 7.5}}, json::object()}) {
    auto r = ParseRunEnvelope(bad, "metrics");
    REQUIRE_FALSE(r);
    CHECK(r.error().message == "metrics: \"token\" (the lease's fencing token) is required");
  }
  CHECK(ParseRunEnvelope(json::array(), "complete").error().message ==
        "complete: the body is not a JSON object");
  // A metrics call names its machine when the outbox sends it for an earlier worker.
  MetricsRequest m;
  m.token = 7;
  m.worker_id = 3;
  m.points = {{"loss", 0.5, 1, false}};
  auto back = ParseMetricsRequest(ToJson(m));
  REQUIRE(back);
  CHECK(back->worker_id == 3);
}

TEST_CASE("protocol: gang beats, logs and results read back the same, and bad ones are refused "
          "by name",
          "[protocol]") {
  const GangMemberId id{11, 1, 5};
  GangBeat beat{id, true, "10.0.0.1", 29500};
  auto b = ParseGangRequest(ToJson(beat));
  REQUIRE(b);
  REQUIRE(std::holds_alternative<GangBeat>(*b));
  CHECK(ToJson(std::get<GangBeat>(*b)) == ToJson(beat));
  CHECK(std::get<GangBeat>(*b).member.node_rank == 1);

  GangLog log{id, 3, "rank 3 says hello\n"};
  auto l = ParseGangRequest(ToJson(log));
  REQUIRE(l);
  REQUIRE(std::holds_alternative<GangLog>(*l));
  CHECK(std::get<GangLog>(*l).text == log.text);

  GangComplete done;
  done.member = id;
  done.outcome = "failed";
  done.exit_code = 1;
  done.error = std::string(3000, 'x');
  done.retry = false;
  json wire = ToJson(done);
  CHECK(wire["error"].get<std::string>().size() == GangComplete::kMaxError + 3);  // cut, "..."
  auto c = ParseGangRequest(wire);
  REQUIRE(c);
  REQUIRE(std::holds_alternative<GangComplete>(*c));
  CHECK_FALSE(std::get<GangComplete>(*c).retry);
  CHECK(std::get<GangComplete>(*c).exit_code == 1);

  auto message = [](const json& j) { return ParseGangRequest(j).error().message; };
  CHECK(message(json{{"action", "beat"}, {"token", 1}, {"worker_id", 2}}) ==
        "gang: \"token\", \"node_rank\" and \"worker_id\" are required");
  CHECK(message(json{{"action", "beat"}, {"token", 1}, {"node_rank", -1}, {"worker_id", 2}}) ==
        "gang: \"token\", \"node_rank\" and \"worker_id\" are required");
  json member = {{"token", 1}, {"node_rank", 0}, {"worker_id", 2}};
  json odd = member;
  odd["action"] = "dance";
  CHECK(message(odd) == "gang: action must be beat, log or complete, got \"dance\"");
  json far = member;
  far["action"] = "log";
  far["rank"] = 100000;
  far["text"] = "x";
  CHECK(message(far) == "gang: a log needs \"rank\" (0..99999) and \"text\"");
  json no_metric = member;
  no_metric["action"] = "complete";
  no_metric["outcome"] = "succeeded";
  CHECK(message(no_metric) == "gang: node 0's success needs a numeric \"metric_value\"");
  no_metric["node_rank"] = 1;  // another node's success carries no metric
  CHECK(ParseGangRequest(no_metric));
  json strange = member;
  strange["action"] = "complete";
  strange["outcome"] = "done";
  CHECK(message(strange) == "gang: outcome must be succeeded, failed or interrupted, got \"done\"");

  GangBeatAnswer answer{"10.0.0.1", 29500, 123};
  CHECK(ToJson(ParseGangBeatAnswer(ToJson(answer))) == ToJson(answer));
  CHECK(ParseGangBeatAnswer(json{{"master_port", "x"}}).master_port == 0);
}

}  // namespace
}  // namespace trainq
