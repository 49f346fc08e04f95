// Retention (issue 30): what serve keeps of old finished runs, a part of
// Store (queue/store.h; `store.retention()`) over its one connection.
//
// A finished run's metric points are compacted once it ended before a cutoff:
// per metric, the final points and at most `kept` of the others, spread
// evenly over the steps (the first and the last always among them), so a
// curve keeps its shape. What a verdict reads never changes: the run's
// metric_value is on the run, not in its points. A finished run's logs are
// archived (agent/results/run_logs.h) once it ended before another cutoff;
// this part only says which runs are due and records what was done.
//
// Both walk a partial index that holds only the finished runs not yet done
// (runs_points_due, runs_logs_due; schema 16), oldest first, and take at
// most `max_runs` a call: a tick's work is bounded whatever the history.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "queue/sqlite.h"

namespace trainq {

struct StoreParts;

// server.yaml's `retention:` (agent/triggers/server_config.h): how long a
// finished run keeps all its metric points and its plain logs, and how long
// the audit trail keeps a row. 0: forever.
struct RetentionPolicy {
  TimeMs metric_points_ms = 0;
  TimeMs logs_ms = 0;
  TimeMs audit_ms = 0;       // the audit trail's rows (queue/access.h), deleted after this
  int points_kept = 200;     // per run and metric after compaction, besides the final value
  int runs_per_tick = 200;   // each of compaction and archiving, per serve tick
  bool any() const { return metric_points_ms > 0 || logs_ms > 0 || audit_ms > 0; }
};

class Retention {
 public:
  struct Compacted {
    int runs = 0;                   // runs compacted by this call
    std::int64_t points_read = 0;   // their points before
    std::int64_t points_deleted = 0;
  };
  // Compacts the points of up to `max_runs` finished runs that ended before
  // `finished_before`, oldest first, 50 runs per write transaction.
  Result<Compacted> CompactPoints(TimeMs finished_before, int kept, int max_runs);

  struct LogDue {
    std::int64_t run_id = 0;
    std::string log_path;  // the run's output.log ("" when it never had one)
  };
  // Up to `max_runs` finished runs that ended before `finished_before` whose
  // logs are not archived yet, oldest first.
  Result<std::vector<LogDue>> LogsDue(TimeMs finished_before, int max_runs);
  // Records that the runs' logs are archived (or that they have none), in
  // one write transaction.
  Status MarkLogsArchived(const std::vector<std::int64_t>& run_ids);

  // Which of `points` (one metric's points of one run, in the order they
  // were recorded: step, final) are kept: every final one, and at most
  // `kept` of the others evenly spread, the first and the last among them.
  struct Point {
    std::int64_t rowid = 0;
    bool final = false;
  };
  static std::vector<std::int64_t> KeptPoints(const std::vector<Point>& points, int kept);

 private:
  friend struct StoreParts;
  explicit Retention(StoreParts& parts);
  Retention(const Retention&) = delete;
  Retention& operator=(const Retention&) = delete;

  sql::Db& db_;
};

}  // namespace trainq
