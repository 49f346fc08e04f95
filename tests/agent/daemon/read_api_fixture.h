// The read-route tests' fixture: a store with a known history (A the
// baseline, B better, C worse, D queued) and an in-process Server with the
// config's read_token (daemon/read_api_test.cc, cli/read_client_test.cc).
#pragma once

#include <catch2/catch.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agent/daemon/server.h"
#include "agent/daemon/server_http.h"
#include "agent/triggers/server_config.h"
#include "core/clock.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace trainq::testing::read_api {

inline constexpr const char* kToken = "read-token-for-tests";
inline constexpr const char* kUnauthorized =
    R"({"reason":"missing or wrong read token","result":"error"})"
    "\n";

// A batch of `experiment` at `sha` whose runs end with `values` (seed i gets
// values[i]); with finish = false its runs stay queued.
inline void AddBatch(Store& store, const std::string& sha, const std::string& parent,
                     const std::string& experiment, const std::vector<double>& values, TimeMs at,
                     bool finish = true) {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  c.message = "commit " + sha.substr(0, 7);
  BatchSpec s;
  s.experiment = experiment;
  s.command = "true";
  s.repeats = static_cast<int>(values.size());
  REQUIRE(store.runs().Submit("/repos/model", c, {s}, at));
  if (!finish) return;
  auto leased = store.runs().Lease("w", at, 60'000, static_cast<int>(values.size())).value();
  REQUIRE(leased.size() == values.size());
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
  }
}

// Finishes every queued run of the store with `values` by repeat.
inline void FinishQueued(const std::string& db, const std::vector<double>& values, TimeMs at) {
  auto store = Store::Open(db).value();
  auto leased = store.runs().Lease("w", at, 60'000, 100).value();
  REQUIRE_FALSE(leased.empty());
  for (const auto& l : leased) {
    REQUIRE(store.runs().Complete(l.run_id, l.token, at, values[static_cast<size_t>(l.repeat)]));
  }
}

// A: the baseline; B: clearly better on the same seeds; C: clearly worse;
// D: queued, not run. Two experiments, so filters matter.
struct History {
  std::string a = std::string(40, 'a'), b = std::string(40, 'b'), c = std::string(40, 'c'),
              d = std::string(40, 'd');
  void Write(const std::string& db, TimeMs now) {
    auto store = Store::Open(db).value();
    AddBatch(store, a, "", "digits", {0.90, 0.91, 0.92, 0.905, 0.915, 0.91}, now - 3'600'000);
    AddBatch(store, a, "", "other", {0.5, 0.6, 0.55}, now - 3'600'000);
    AddBatch(store, b, a, "digits", {0.93, 0.94, 0.95, 0.935, 0.945, 0.94}, now - 2'400'000);
    AddBatch(store, c, b, "digits", {0.80, 0.81, 0.82, 0.805, 0.815, 0.81}, now - 1'200'000);
    AddBatch(store, c, b, "other", {0.51, 0.62, 0.54}, now - 1'200'000);
    AddBatch(store, d, c, "digits", {0, 0, 0, 0, 0, 0}, now - 600'000, false);
  }
};

inline HttpServerRequest Get(const std::string& path,
                             std::vector<std::pair<std::string, std::string>> q,
                             const std::optional<std::string>& token = kToken) {
  HttpServerRequest r;
  r.method = "GET";
  r.path = path;
  r.query = std::move(q);
  if (token) r.headers.emplace_back("Authorization", "Bearer " + *token);
  return r;
}

struct InProcess {
  testing::TempDir tmp;
  std::string db = testing::StoreLocation(tmp, "t.db");
  const Clock& clock = SystemClock::Get();
  ServerConfig config;
  History h;
  std::unique_ptr<Server> server;

  explicit InProcess(bool with_token = true) {
    REQUIRE(WriteFile(tmp / "read.token", std::string(kToken) + "\n"));
    auto c = ParseServerConfig(
        with_token ? "read_token: {file: " + (tmp / "read.token") + "}\n" : "", "server.yaml");
    REQUIRE(c);
    config = *c;
    h.Write(db, clock.Now());
    server =
        std::make_unique<Server>(config, db, clock, ServerOptions{.data_dir = tmp.path().string()});
    REQUIRE(server->Open());
  }
};

}  // namespace trainq::testing::read_api
