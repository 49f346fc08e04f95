#include "agent/results/retention.h"

#include <spdlog/spdlog.h>

#include "agent/results/run_logs.h"
#include "queue/access.h"

namespace trainq {

Result<RetentionStepper::Done> RetentionStepper::Step(Store& store, TimeMs now) {
  Done d;
  if (!policy_.any() || now < next_ms_) return d;
  d.ran = true;
  next_ms_ = now + interval_ms_;
  bool full = false;
  if (policy_.metric_points_ms > 0) {
    ASSIGN_OR_RETURN(auto c, store.retention().CompactPoints(now - policy_.metric_points_ms,
                                                             policy_.points_kept,
                                                             policy_.runs_per_tick));
    d.compacted_runs = c.runs;
    d.points_deleted = c.points_deleted;
    full = full || c.runs >= policy_.runs_per_tick;
  }
  if (policy_.logs_ms > 0) {
    ASSIGN_OR_RETURN(auto due,
                     store.retention().LogsDue(now - policy_.logs_ms, policy_.runs_per_tick));
    // Archived before they are marked (all of the step's at once, one
    // commit): a serve stopped between the two archives nothing twice (the
    // files are .gz already) and marks them next time.
    std::vector<std::int64_t> archived;
    Status failed;
    for (const auto& r : due) {
      auto files = ArchiveRunLogs(r.log_path);
      if (!files) {
        failed = std::unexpected(files.error());
        break;
      }
      archived.push_back(r.run_id);
      d.archived_files += *files;
      ++d.archived_runs;
    }
    TRY(store.retention().MarkLogsArchived(archived));
    TRY(failed);
    full = full || static_cast<int>(due.size()) >= policy_.runs_per_tick;
  }
  if (policy_.audit_ms > 0) {
    // Rows are small: five times a tick's runs a step.
    const int most = policy_.runs_per_tick * 5;
    ASSIGN_OR_RETURN(d.audit_pruned, store.access().PruneAudit(now - policy_.audit_ms, most));
    full = full || d.audit_pruned >= most;
  }
  if (full) next_ms_ = now + catch_up_ms_;
  return d;
}

void RetentionStepper::StepLogged(Store& store, TimeMs now) {
  auto d = Step(store, now);
  if (!d) {
    spdlog::warn("retention: {} (will retry)", d.error().message);
    next_ms_ = now + interval_ms_;
    return;
  }
  if (d->compacted_runs > 0 || d->archived_runs > 0) {
    spdlog::info("retention: {} run(s)' metric points compacted ({} points removed), {} run(s)' "
                 "logs archived ({} file(s))",
                 d->compacted_runs, d->points_deleted, d->archived_runs, d->archived_files);
  }
  if (d->audit_pruned > 0) {
    spdlog::info("retention: {} audit row(s) older than the retention.audit limit deleted",
                 d->audit_pruned);
  }
}

}  // namespace trainq
