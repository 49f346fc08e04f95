// agent/runner/gang.h: torchrun's variables, the GPU split, the process specs
// of one node, and GangProcesses stopping a node's processes together.
#include "agent/runner/gang.h"

#include <catch2/catch.hpp>
#include <chrono>

#include "tests/agent/agent_test_util.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;

namespace trainq {
namespace {

TEST_CASE("TorchrunEnv gives each process torchrun's variables", "[gang]") {
  GangLayout g{"10.0.0.5", 29500, 3, 4, 2};
  auto env = TorchrunEnv(g, 1);
  CHECK(env == std::map<std::string, std::string>{{"MASTER_ADDR", "10.0.0.5"},
                                                  {"MASTER_PORT", "29500"},
                                                  {"WORLD_SIZE", "12"},
                                                  {"RANK", "9"},
                                                  {"LOCAL_RANK", "1"},
                                                  {"NODE_RANK", "2"},
                                                  {"LOCAL_WORLD_SIZE", "4"}});
}

TEST_CASE("SplitDevices shares a machine's GPUs among its processes", "[gang]") {
  using V = std::vector<std::vector<int>>;
  CHECK(SplitDevices({0, 1, 2, 3}, 2) == V{{0, 1}, {2, 3}});
  CHECK(SplitDevices({0, 1, 2}, 2) == V{{0, 1}, {2}});
  CHECK(SplitDevices({4, 5}, 4) == V{{4}, {5}, {4}, {5}});
  CHECK(SplitDevices({}, 2) == V{{}, {}});
}

TEST_CASE("GangSpecs: only global rank 0 writes the run's metrics file and log", "[gang]") {
  ProcessSpec base;
  base.argv = {"/bin/sh", "-c", "true"};
  base.env["TRAINQ_METRICS_FILE"] = "/runs/7/metrics.jsonl";
  base.output_path = "/runs/7/output.log";
  auto node0 = GangSpecs(base, {"127.0.0.1", 1234, 2, 2, 0}, {0, 1}, "/runs/7");
  REQUIRE(node0.size() == 2);
  CHECK(node0[0].env["TRAINQ_METRICS_FILE"] == "/runs/7/metrics.jsonl");
  CHECK(node0[0].output_path == "/runs/7/output.log");
  CHECK(node0[0].env["CUDA_VISIBLE_DEVICES"] == "0");
  CHECK(node0[1].env["TRAINQ_METRICS_FILE"] == "/runs/7/rank-1.metrics.jsonl");
  CHECK(node0[1].output_path == "/runs/7/rank-1.log");
  CHECK(node0[1].env["CUDA_VISIBLE_DEVICES"] == "1");
  CHECK(node0[1].env["RANK"] == "1");
  auto node1 = GangSpecs(base, {"127.0.0.1", 1234, 2, 2, 1}, {}, "/runs/7");
  // Node 1's first process writes its machine's run log, but not the metric.
  CHECK(node1[0].output_path == "/runs/7/output.log");
  CHECK(node1[0].env["TRAINQ_METRICS_FILE"] == "/runs/7/rank-2.metrics.jsonl");
  CHECK_FALSE(node1[0].env.contains("CUDA_VISIBLE_DEVICES"));  // the caller's, unchanged
}

TEST_CASE("GangProcesses: one process failing stops the others at once", "[gang]") {
  testing::TempDir tmp;
  PosixProcessRunner runner;
  GangProcesses procs(runner);
  ProcessSpec sleeper;
  sleeper.argv = {"/bin/sh", "-c", "sleep 60"};
  ProcessSpec failing;
  failing.argv = {"/bin/sh", "-c", "exit 7"};
  REQUIRE(procs.Start({sleeper, sleeper, failing}));
  std::optional<ExitStatus> status;
  REQUIRE(testing::WaitFor([&] { return (status = procs.Poll()).has_value(); }, 10s));
  CHECK(status->code == 7);
  for (int pid : procs.pids()) CHECK(testing::ProcessGone(pid));

  GangProcesses ok(runner);
  ProcessSpec quick;
  quick.argv = {"/bin/sh", "-c", "exit 0"};
  REQUIRE(ok.Start({quick, quick}));
  REQUIRE(testing::WaitFor([&] { return (status = ok.Poll()).has_value(); }, 10s));
  CHECK(status->ok());
}

TEST_CASE("FreeTcpPort and AddressTowards find a port and the route to the server", "[gang]") {
  auto port = FreeTcpPort();
  REQUIRE(port);
  CHECK(*port > 0);
  auto addr = AddressTowards("http://127.0.0.1:8080");
  REQUIRE(addr);
  CHECK(*addr == "127.0.0.1");
  CHECK_FALSE(AddressTowards("not a url"));
}

}  // namespace
}  // namespace trainq
