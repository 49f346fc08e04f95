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

}  // namespace
}  // namespace trainq
