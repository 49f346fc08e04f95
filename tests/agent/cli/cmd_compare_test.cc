// `trainq gate` the command (CmdGate in agent/cli/cmd_compare.cc): --wait
// polls the store until the runs it waits for end.
#include <catch2/catch.hpp>
#include <future>
#include <sstream>

#include "agent/cli/cli.h"
#include "agent/results/gate.h"
#include "queue/store.h"
#include "tests/agent/results/gate_fixture.h"
#include "tests/support/temp_dir.h"

using namespace trainq;
using namespace std::chrono_literals;

using namespace trainq::testing::gate;

TEST_CASE("gate --wait returns once the runs end", "[gate]") {
  testing::TempDir dir;
  std::string db = dir / "t.db";
  auto store = Store::Open(db).value();
  Queue(store, kBase, "", 5);
  Finish(store, kBaseValues);
  Queue(store, kHead, kBase, 5);
  GateOptions o;
  o.db = db;
  o.rev = kHead;
  o.baseline = kBase;
  o.repo = "";
  o.wait_s = 120;
  std::ostringstream out;
  auto gate = std::async(std::launch::async, [&] { return CmdGate(o, out); });
  // Still waiting: the head's runs are queued.
  CHECK(gate.wait_for(100ms) == std::future_status::timeout);
  Finish(store, kWorse);
  REQUIRE(testing::WaitFor([&] { return gate.wait_for(0ms) == std::future_status::ready; }, 30s));
  auto code = gate.get();
  REQUIRE(code);
  CHECK(*code == kGateRegression);
}
