// The forge-status tests' world: a server config with one GitHub repository
// whose API is `api_url`, and a queued batch of 3 runs with its pending commit
// status (triggers/forge_status_test.cc, daemon/fleet_status_test.cc).
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/strings.h"
#include "queue/pushes.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing::forge_status {

inline const std::string kSha = "4c4e1bd81f7a4a2e9d7c2b6c1f0e9a114c4e1bd8";

struct World {
  testing::TempDir tmp;
  FakeClock clock;
  Store store = Store::Open(tmp / "t.db").value();
  ServerConfig config;
  std::int64_t batch = 0;

  // `top`: server.yaml's top-level keys before `repositories:`.
  explicit World(const std::string& api_url, const std::string& top = "") {
    REQUIRE(WriteFile(tmp / "token", "forge-token"));
    auto c = ParseServerConfig(
        top + "repositories:\n  - url: https://github.com/acme/model.git\n"
        "    forge: github\n    status: true\n    api_url: " +
            api_url + "\n    token: {file: " + (tmp / "token") + "}\n",
        "server.yaml");
    REQUIRE(c);
    config = *c;
    BatchSpec spec;
    spec.experiment = "lstm";
    spec.command = "true";
    spec.repeats = 3;
    auto r = store.runs().Submit("/srv/mirror.git", {kSha, "", "s", "me", 0}, {spec}, clock.Now());
    REQUIRE(r);
    batch = r->front().batch_id;
    Pushes::CommitStatus cs;
    cs.batch_id = batch;
    cs.repo_url = "https://github.com/acme/model.git";
    cs.sha = kSha;
    cs.context = "trainq/lstm";
    cs.state = "pending";
    cs.description = "queued: 3 runs";
    REQUIRE(store.pushes().AddCommitStatus(cs, clock.Now()));
  }

  void FinishRuns(const std::vector<double>& values) {
    auto leased = store.runs().Lease("w", clock.Now(), 60'000, 10).value();
    REQUIRE(leased.size() == values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      REQUIRE(store.runs().Complete(leased[i].run_id, leased[i].token, clock.Now(), values[i]));
    }
  }
};

}  // namespace trainq::testing::forge_status
