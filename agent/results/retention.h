// Retention at serve's pace (issue 30): each serve tick, when due, compacts
// the metric points of a bounded number of old finished runs and archives
// the logs of a bounded number of others (queue/retention.h for what is kept,
// agent/results/run_logs.h for the archive), so the store and the data folder
// stop growing with the whole history; and deletes the audit trail's rows
// older than `retention.audit`, a bounded number a step. Never changes a verdict: verdicts read
// each run's metric_value, which stays on the run.
#pragma once

#include <cstdint>

#include "core/clock.h"
#include "core/result.h"
#include "queue/retention.h"
#include "queue/store.h"

namespace trainq {

class RetentionStepper {
 public:
  // `interval_ms`: the pause after a step that found less than a tick's
  // work; after a full one the next comes `catch_up_ms` later.
  explicit RetentionStepper(RetentionPolicy policy, TimeMs interval_ms = 60'000,
                            TimeMs catch_up_ms = 250)
      : policy_(policy), interval_ms_(interval_ms), catch_up_ms_(catch_up_ms) {}

  struct Done {
    int compacted_runs = 0;
    std::int64_t points_deleted = 0;
    int archived_runs = 0;   // runs whose logs were archived (or that had none)
    int archived_files = 0;  // log files compressed
    int audit_pruned = 0;    // audit rows deleted (retention.audit)
    bool ran = false;        // false: not due yet, or nothing to keep less of
  };
  // One bounded step if one is due at `now`.
  Result<Done> Step(Store& store, TimeMs now);
  // Step, logging what it did, and an error as a warning (it retries later).
  void StepLogged(Store& store, TimeMs now);

 private:
  RetentionPolicy policy_;
  TimeMs interval_ms_, catch_up_ms_;
  TimeMs next_ms_ = 0;
};

}  // namespace trainq
