// Commit statuses against a fake forge on loopback that speaks GitHub's API:
// pending when queued, the spread when done; a down forge is retried, then
// given up.
#include "agent/triggers/forge_status.h"
#include "queue/machines.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/agent/triggers/forge_status_fixture.h"
#include "cloud/provider.h"
#include "core/strings.h"
#include "tests/support/http_server.h"
#include "tests/support/temp_dir.h"

using nlohmann::json;

namespace trainq {
namespace {

using namespace testing::forge_status;

TEST_CASE("forge status: descriptions and final states", "[forge_status]") {
  BatchProgress b;
  b.metric_name = "accuracy";
  b.values = {0.649, 0.664, 0.679};
  b.counts[static_cast<int>(RunState::kSucceeded)] = 3;
  CHECK(BatchStatusDescription(b) == "accuracy 0.664 ± 0.015 (n=3)");
  CHECK(BatchFinalState(b) == CommitState::kSuccess);
  b.counts[static_cast<int>(RunState::kDead)] = 1;
  CHECK(BatchStatusDescription(b) == "accuracy 0.664 ± 0.015 (n=3), 1 failed");
  CHECK(BatchFinalState(b) == CommitState::kFailure);

  BatchProgress tiny;
  tiny.metric_name = "loss";
  tiny.values = {0.01231, 0.01234};
  tiny.counts[static_cast<int>(RunState::kSucceeded)] = 2;
  CHECK(BatchStatusDescription(tiny) == "loss 0.012325 ± 0.000021 (n=2)");

  BatchProgress none;
  none.metric_name = "accuracy";
  none.counts[static_cast<int>(RunState::kDead)] = 2;
  CHECK(BatchStatusDescription(none) == "accuracy - (no run succeeded), 2 failed");
  CHECK(BatchFinalState(none) == CommitState::kFailure);

  BatchProgress cancelled;
  cancelled.counts[static_cast<int>(RunState::kCancelled)] = 3;
  CHECK(BatchFinalState(cancelled) == CommitState::kError);
}

TEST_CASE("forge status: pending when queued, then the spread", "[forge_status]") {
  testing::TestHttpServer forge([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, R"({"id": 1})", {}};
  });
  World w(forge.url());
  CurlHttpClient http;
  StatusReporter reporter(w.store, w.config, http, w.clock);
  CHECK(reporter.Step().value() == 1);
  CHECK(reporter.Step().value() == 0);  // posted once
  auto seen = forge.requests();
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].method == "POST");
  CHECK(seen[0].target == "/repos/acme/model/statuses/" + kSha);
  CHECK(seen[0].Header("Authorization") == "Bearer forge-token");
  auto pending = json::parse(seen[0].body);
  CHECK(pending["state"] == "pending");
  CHECK(pending["context"] == "trainq/lstm");
  CHECK(pending["description"] == "queued: 3 runs");
  CHECK_FALSE(pending.contains("target_url"));  // no public_url

  w.FinishRuns({0.649, 0.664, 0.679});
  CHECK(reporter.Step().value() == 1);
  seen = forge.requests();
  REQUIRE(seen.size() == 2);
  auto done = json::parse(seen[1].body);
  CHECK(done["state"] == "success");
  CHECK(done["description"] == "accuracy 0.664 ± 0.015 (n=3)");
  auto row = w.store.pushes().GetCommitStatus(w.batch).value();
  REQUIRE(row);
  CHECK(row->posted_state == "success");
  CHECK(reporter.Step().value() == 0);
}

TEST_CASE("forge status: with a public_url, statuses link to the dashboard's commit page",
          "[forge_status]") {
  testing::TestHttpServer forge([](const testing::TestHttpRequest&) {
    return testing::TestHttpResponse{201, R"({"id": 1})", {}};
  });
  World w(forge.url(), "public_url: https://trainq.example/ci/\n");
  CHECK(w.config.public_url == "https://trainq.example/ci");
  CurlHttpClient http;
  StatusReporter reporter(w.store, w.config, http, w.clock);
  CHECK(reporter.Step().value() == 1);
  w.FinishRuns({0.649, 0.664, 0.679});
  CHECK(reporter.Step().value() == 1);
  auto seen = forge.requests();
  REQUIRE(seen.size() == 2);
  for (const auto& r : seen) {
    CHECK(json::parse(r.body)["target_url"] == "https://trainq.example/ci/commit/" + kSha);
  }
}

TEST_CASE("forge status: a bad public_url is refused naming the file, line and key",
          "[forge_status]") {
  for (const char* bad : {"trainq.example", "ftp://trainq.example", "https://",
                          "https://trainq.example/?x=1", "https://trainq.example/#top"}) {
    INFO(bad);
    auto c = ParseServerConfig("listen: 127.0.0.1:8080\npublic_url: \"" + std::string(bad) + "\"\n",
                               "server.yaml");
    REQUIRE_FALSE(c);
    CHECK(c.error().message.find("server.yaml:2") != std::string::npos);
    CHECK(c.error().message.find("public_url") != std::string::npos);
  }
}

TEST_CASE("forge status: a down forge is retried with backoff, then given up", "[forge_status]") {
  int port = testing::FreeLoopbackPort();  // nothing listens: connection refused
  World w("http://127.0.0.1:" + std::to_string(port));
  CurlHttpClient http;
  StatusReporter reporter(w.store, w.config, http, w.clock, {1000, 3});
  CHECK(reporter.Step().value() == 1);
  auto row = w.store.pushes().GetCommitStatus(w.batch).value();
  CHECK(row->attempts == 1);
  CHECK(row->not_before_ms == w.clock.Now() + 1000);
  CHECK_FALSE(row->gave_up);
  CHECK(row->last_error.find("127.0.0.1") != std::string::npos);
  CHECK(row->last_error.find("forge-token") == std::string::npos);
  CHECK(reporter.Step().value() == 0);  // waiting for the backoff
  w.clock.Advance(1000);
  CHECK(reporter.Step().value() == 1);
  CHECK(w.store.pushes().GetCommitStatus(w.batch).value()->not_before_ms == w.clock.Now() + 2000);
  w.clock.Advance(2000);
  CHECK(reporter.Step().value() == 1);
  row = w.store.pushes().GetCommitStatus(w.batch).value();
  CHECK(row->gave_up);
  CHECK(row->attempts == 3);
  w.clock.Advance(60'000);
  CHECK(reporter.Step().value() == 0);

  // The batch's final status gets its own tries even after pending was given up.
  w.FinishRuns({0.5, 0.6, 0.7});
  CHECK(reporter.Step().value() == 1);
  row = w.store.pushes().GetCommitStatus(w.batch).value();
  CHECK(row->state == "success");
  CHECK(row->attempts == 1);
  CHECK_FALSE(row->gave_up);
}

TEST_CASE("forge status: an HTTP error from the forge is retried too", "[forge_status]") {
  std::atomic<int> calls{0};
  testing::TestHttpServer forge([&](const testing::TestHttpRequest&) {
    return ++calls == 1 ? testing::TestHttpResponse{502, "bad gateway", {}}
                        : testing::TestHttpResponse{201, "{}", {}};
  });
  World w(forge.url());
  CurlHttpClient http;
  StatusReporter reporter(w.store, w.config, http, w.clock, {1000, 3});
  reporter.Step().value();
  auto row = w.store.pushes().GetCommitStatus(w.batch).value();
  CHECK(row->last_error == "HTTP 502 from " + forge.url() + ": bad gateway");
  w.clock.Advance(1000);
  reporter.Step().value();
  CHECK(w.store.pushes().GetCommitStatus(w.batch).value()->posted_state == "pending");
}

}  // namespace
}  // namespace trainq

namespace trainq {
namespace {

TEST_CASE("forge status: a waiting description is cut at 140 characters", "[forge_status]") {
  CHECK(WaitingStatusDescription("pool gpu at its cap") == "waiting: pool gpu at its cap");
  auto long_one = WaitingStatusDescription(std::string(300, 'x'));
  CHECK(long_one.size() == 140);
  CHECK(long_one.ends_with("..."));
}


// Twenty experiments changed at once, fixed per-seed values (the table of
// tests/agent/results/analysis_test.cc): e0 at p = 0.0068, e1 at p < 1e-7, the rest
// at p > 0.35, paired on seeds 1..10.
BatchProgress FamilyBatch(std::int64_t id, const std::string& experiment, const std::string& sha,
                          double mean, const std::string& spec = "{}") {
  constexpr double kZ[10] = {1, -1, 2, -2, 0.5, -0.5, 1.5, -1.5, 0.25, -0.25};
  BatchProgress b;
  b.id = id;
  b.experiment = experiment;
  b.sha = sha;
  b.metric_name = "accuracy";
  b.metric_goal = "max";
  b.spec_json = spec;
  for (int s = 1; s <= 10; ++s) {
    double v = 0.90 + 0.002 * s;
    if (!std::isnan(mean)) v += mean + 0.003 * kZ[s - 1];
    b.values.push_back(v);
    b.seeds.push_back(s);
  }
  b.counts[static_cast<int>(RunState::kSucceeded)] = 10;
  b.repeats = 10;
  return b;
}

double FamilyMean(int k) { return k == 0 ? -0.0043 : k == 1 ? -0.03 : 0.0001 * ((k % 11) - 5); }

TEST_CASE("commit status over a family: waits for the others, then says Holm over 20 and both p",
          "[forge_status][family]") {
  std::vector<FamilyMember> family;
  for (int k = 0; k < 20; ++k) {
    std::string name = "e" + std::to_string(k);
    family.push_back({FamilyBatch(100 + k, name, std::string(40, '2'), FamilyMean(k)),
                      FamilyBatch(200 + k, name, std::string(40, '1'), std::nan("")), {}, {}});
  }
  auto comparisons = CompareFamily(family, false);
  StatusFamily waiting;
  waiting.size = 20;
  waiting.unfinished = 3;
  waiting.comparison = comparisons[0];
  auto w = FinalStatus(family[0].head, family[0].base, "worse", waiting);
  CHECK(w.state == CommitState::kPending);
  CHECK(w.description ==
        "accuracy 0.907 ± 0.007 (n=10); waiting for 3 other experiments of this commit (Holm "
        "over 20)");
  StatusFamily done;
  done.size = 20;
  done.comparison = comparisons[0];
  w = FinalStatus(family[0].head, family[0].base, "worse", done);
  INFO(w.description);
  CHECK(w.description.size() <= 140);
  CHECK(w.state == CommitState::kSuccess);  // noise after the correction
  CHECK(w.description.find(": no detectable change (Holm over 20: p=0.007, adj 0.128)") !=
        std::string::npos);
  done.comparison = comparisons[1];
  w = FinalStatus(family[1].head, family[1].base, "worse", done);
  CHECK(w.state == CommitState::kFailure);
  CHECK(w.description.find(": worse (Holm over 20: p<0.001, adj <0.001)") != std::string::npos);
}

}  // namespace
}  // namespace trainq
