// `trainq gate`: three outcomes, and never a pass for what it could not decide.
#include "agent/results/gate.h"
#include "queue/store.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <future>
#include <sstream>

#include "agent/cli/cli.h"
#include "tests/support/temp_dir.h"

using namespace trainq;
using namespace std::chrono_literals;

namespace {

constexpr TimeMs kT0 = 1'700'000'000'000;
const std::string kBase = "1111111111111111111111111111111111111111";
const std::string kHead = "2222222222222222222222222222222222222222";

std::int64_t Queue(Store& store, const std::string& sha, const std::string& parent, int n,
                   int max_attempts = 3, const std::string& experiment = "e") {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  BatchSpec s;
  s.experiment = experiment;
  s.command = "true";
  s.repeats = n;
  s.max_attempts = max_attempts;
  auto r = store.Submit("/repo", c, {s}, kT0);
  REQUIRE(r);
  return r->front().batch_id;
}

// Leases every queued run and completes it with values[repeat] (NaN: fails it).
void Finish(Store& store, const std::vector<double>& values) {
  auto leased = store.Lease("w", kT0, 60'000, 100).value();
  for (const auto& l : leased) {
    double v = values[l.repeat % values.size()];
    if (std::isnan(v)) {
      REQUIRE(store.FailRun(l.run_id, l.token, kT0, "boom", 1));
    } else {
      REQUIRE(store.Complete(l.run_id, l.token, kT0, v));
    }
  }
}

GateDecision Decide(Store& store, const std::string& rev = kHead) {
  GateRequest req;
  req.rev = rev;
  req.baseline = kBase;
  auto d = DecideGate(store, req);
  REQUIRE(d);
  return *d;
}

const std::vector<double> kBaseValues = {0.70, 0.60, 0.80, 0.65, 0.75};
const std::vector<double> kWorse = {0.68, 0.58, 0.79, 0.62, 0.73};
const std::vector<double> kSame = {0.701, 0.599, 0.801, 0.651, 0.749};

}  // namespace

TEST_CASE("gate: no batch at REV is undecided, and waiting may change it", "[gate]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  Queue(store, kBase, "", 5);
  Finish(store, kBaseValues);
  auto d = Decide(store);
  CHECK(d.exit_code == kGateUndecided);
  CHECK_FALSE(d.finished);
  CHECK(d.json["decision"] == "undecided");
  CHECK(d.text.find("no batch at " + kHead) != std::string::npos);
}

TEST_CASE("gate: undecided cases exit 3", "[gate]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  SECTION("no baseline batch") {
    Queue(store, kHead, kBase, 5);
    Finish(store, kWorse);
    auto d = Decide(store);
    CHECK(d.exit_code == kGateUndecided);
    CHECK(d.finished);  // waiting will not bring one
    CHECK(d.json["experiments"][0]["reason"].get<std::string>().starts_with(
        "no baseline batch of e"));
  }
  SECTION("runs unfinished") {
    Queue(store, kBase, "", 5);
    Finish(store, kBaseValues);
    Queue(store, kHead, kBase, 5);
    auto d = Decide(store);
    CHECK(d.exit_code == kGateUndecided);
    CHECK_FALSE(d.finished);
    CHECK(d.text.find("runs unfinished") != std::string::npos);
  }
  SECTION("every run dead") {
    Queue(store, kBase, "", 5);
    Finish(store, kBaseValues);
    Queue(store, kHead, kBase, 5, /*max_attempts=*/1);
    Finish(store, {std::nan("")});
    auto d = Decide(store);
    CHECK(d.exit_code == kGateUndecided);
    CHECK(d.finished);
    CHECK(d.text.find("too few finished runs (0 at") != std::string::npos);
    CHECK(d.text.find("✓") == std::string::npos);
  }
  SECTION("most runs dead") {
    Queue(store, kBase, "", 5);
    Finish(store, kBaseValues);
    Queue(store, kHead, kBase, 5, /*max_attempts=*/1);
    Finish(store, {0.7, std::nan(""), 0.8, std::nan(""), std::nan("")});
    auto d = Decide(store);
    CHECK(d.exit_code == kGateUndecided);
    CHECK(d.text.find("too many runs failed (3 of 5)") != std::string::npos);
  }
}

TEST_CASE("gate: a regression exits 1, no change exits 0", "[gate]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  Queue(store, kBase, "", 5);
  Finish(store, kBaseValues);
  SECTION("worse") {
    Queue(store, kHead, kBase, 5);
    Finish(store, kWorse);
    auto d = Decide(store);
    CHECK(d.exit_code == kGateRegression);
    CHECK(d.json["decision"] == "regression");
    CHECK(d.json["experiments"][0]["comparison"]["paired"] == true);
    CHECK(d.text.find("✗  e: ") != std::string::npos);
  }
  SECTION("same") {
    Queue(store, kHead, kBase, 5);
    Finish(store, kSame);
    auto d = Decide(store);
    CHECK(d.exit_code == kGatePass);
    CHECK(d.text.find("✓  e: ") != std::string::npos);
    CHECK(d.text.find("no significant regression") != std::string::npos);
  }
}

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

TEST_CASE("gate: full commit ids and a --repo that is not a repository: decided from the store, "
          "nothing created there",
          "[gate]") {
  testing::TempDir dir;
  auto store = Store::Open(dir / "t.db").value();
  Queue(store, kBase, "", 5);
  Finish(store, kBaseValues);
  Queue(store, kHead, kBase, 5);
  Finish(store, kWorse);
  std::filesystem::create_directories(dir / "plain");
  GateRequest req;
  req.rev = kHead;
  req.baseline = kBase;
  req.repo_dir = dir / "plain";
  auto d = DecideGate(store, req);
  REQUIRE(d);
  CHECK(d->exit_code == kGateRegression);
  CHECK(std::filesystem::is_empty(dir / "plain"));
}
