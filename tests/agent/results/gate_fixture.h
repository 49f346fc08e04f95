// The gate tests' store fixture: batches at a base and a head commit, and
// their runs finished with given values (results/gate_test.cc,
// cli/cmd_compare_test.cc).
#pragma once

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "queue/run_queue.h"
#include "queue/store.h"

namespace trainq::testing::gate {

inline constexpr TimeMs kT0 = 1'700'000'000'000;
inline const std::string kBase = "1111111111111111111111111111111111111111";
inline const std::string kHead = "2222222222222222222222222222222222222222";

inline std::int64_t Queue(Store& store, const std::string& sha, const std::string& parent, int n,
                          int max_attempts = 3, const std::string& experiment = "e") {
  CommitInfo c;
  c.sha = sha;
  c.parent_sha = parent;
  BatchSpec s;
  s.experiment = experiment;
  s.command = "true";
  s.repeats = n;
  s.max_attempts = max_attempts;
  auto r = store.runs().Submit("/repo", c, {s}, kT0);
  REQUIRE(r);
  return r->front().batch_id;
}

// Leases every queued run and completes it with values[repeat] (NaN: fails it).
inline void Finish(Store& store, const std::vector<double>& values) {
  auto leased = store.runs().Lease("w", kT0, 60'000, 100).value();
  for (const auto& l : leased) {
    double v = values[l.repeat % values.size()];
    if (std::isnan(v)) {
      REQUIRE(store.runs().FailRun(l.run_id, l.token, kT0, "boom", 1));
    } else {
      REQUIRE(store.runs().Complete(l.run_id, l.token, kT0, v));
    }
  }
}

inline const std::vector<double> kBaseValues = {0.70, 0.60, 0.80, 0.65, 0.75};
inline const std::vector<double> kWorse = {0.68, 0.58, 0.79, 0.62, 0.73};

}  // namespace trainq::testing::gate
