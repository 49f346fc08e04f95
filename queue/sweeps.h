// Sweeps: hyperparameter searches, agent/results/sweep.h (a part of Store,
// queue/store.h, over its one SQLite connection; `store.sweeps()`). Tables
// from schema version 7. A point is written before its batch is submitted
// (Submit is idempotent per commit and experiment), so a driver killed between
// the two re-submits the same batch and never a second one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"
#include "queue/types.h"

namespace trainq {

struct StoreParts;

class Sweeps {
 public:
  struct SweepRow {
    std::int64_t id = 0;
    std::string repo_url;
    std::string commit_json;  // the CommitInfo, as JSON
    std::string experiment;
    std::string spec_json;    // SweepSpec::ToJson()
    std::string batch_json;   // the experiment's BatchSpec, as JSON
    std::string state = "running";  // running | stopped | done
    TimeMs created_ms = 0;
    TimeMs updated_ms = 0;
  };
  struct SweepPointRow {
    std::int64_t sweep_id = 0;
    int idx = 0;                        // 0, 1, ... in the order suggested
    std::string params_json = "{}";
    std::optional<std::int64_t> batch_id;  // empty until its batch is submitted
    TimeMs created_ms = 0;
    // Its part in the confirmation after the search (schema 22): "" (none),
    // "confirm" (the search's pick, given fresh seeds) or "confirm_baseline"
    // (the runner-up, given the same fresh seeds so the two pair on them).
    std::string role;
  };
  Result<std::int64_t> AddSweep(const SweepRow& s, TimeMs now);
  Result<std::optional<SweepRow>> GetSweep(std::int64_t id);
  Result<std::vector<SweepRow>> List(const std::string& state = "");  // "" = all; newest first
  Status SetSweepState(std::int64_t id, const std::string& state, TimeMs now);
  // Writes point (sweep_id, idx) unless it exists; returns the stored point.
  Result<SweepPointRow> AddSweepPoint(const SweepPointRow& p, TimeMs now);
  Status SetSweepPointBatch(std::int64_t sweep_id, int idx, std::int64_t batch_id);
  // Marks the confirmation in one transaction: point `pick` gets role
  // "confirm", point `baseline` (when given) "confirm_baseline".
  Status SetConfirmRoles(std::int64_t sweep_id, int pick, std::optional<int> baseline);
  Result<std::vector<SweepPointRow>> SweepPoints(std::int64_t sweep_id);  // by idx
  // A short text that changes whenever a running sweep may have something to
  // do: a sweep starts, resumes or stops, a point lacks its batch, or a run
  // of a running sweep's point ends. One indexed query (the serve loop's poll).
  Result<std::string> SweepActivity();

 private:
  friend struct StoreParts;
  explicit Sweeps(StoreParts& parts);
  Sweeps(const Sweeps&) = delete;
  Sweeps& operator=(const Sweeps&) = delete;


  StoreParts& parts_;  // the Store's connection, options and the other concerns
  sql::Db& db_;        // parts_.db
};

}  // namespace trainq
