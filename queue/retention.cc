// Retention: compacting old runs' metric points, and which runs' logs are
// due for archiving (queue/retention.h).
#include "queue/retention.h"

#include <algorithm>
#include <map>

#include "queue/store_parts.h"

namespace trainq {

namespace {

// The finished states: a `failed` run waits for its next attempt.
constexpr const char* kFinished = "state IN ('succeeded', 'dead', 'cancelled')";

}  // namespace

Retention::Retention(StoreParts& parts) : db_(parts.db) {}

std::vector<std::int64_t> Retention::KeptPoints(const std::vector<Point>& points, int kept) {
  std::vector<std::int64_t> out;
  std::vector<std::int64_t> steps;
  for (const auto& p : points) {
    if (p.final) {
      out.push_back(p.rowid);
    } else {
      steps.push_back(p.rowid);
    }
  }
  const size_t n = steps.size(), k = static_cast<size_t>(std::max(kept, 0));
  if (n <= k) {
    out.insert(out.end(), steps.begin(), steps.end());
  } else if (k == 1) {
    out.push_back(steps.back());
  } else if (k > 1) {
    // Index i * (n - 1) / (k - 1) for i in [0, k): the first, the last and
    // evenly between, each once (n > k so the indexes are distinct).
    for (size_t i = 0; i < k; ++i) out.push_back(steps[i * (n - 1) / (k - 1)]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Result<Retention::Compacted> Retention::CompactPoints(TimeMs finished_before, int kept,
                                                      int max_runs) {
  Compacted done;
  std::vector<std::int64_t> due;
  {
    ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT id FROM runs INDEXED BY runs_points_due "
                                                     "WHERE points_compacted = 0 AND finished_ms "
                                                     "IS NOT NULL AND finished_ms < ?1 AND ") +
                                         kFinished + " ORDER BY finished_ms, id LIMIT ?2"));
    s.Bind(1, finished_before).Bind(2, static_cast<std::int64_t>(max_runs));
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      due.push_back(s.Int(0));
    }
  }
  // One run: its points read, the ones not kept deleted, the run marked.
  auto compact = [&](std::int64_t run_id) -> Status {
    ASSIGN_OR_RETURN(auto pts, db_.Prepare("SELECT rowid, name, final FROM metrics "
                                           "WHERE run_id = ? ORDER BY rowid"));
    pts.Bind(1, run_id);
    std::map<std::string, std::vector<Point>> by_name;
    std::int64_t total = 0;
    while (true) {
      ASSIGN_OR_RETURN(bool row, pts.Step());
      if (!row) break;
      by_name[pts.Text(1)].push_back({pts.Int(0), pts.Int(2) != 0});
      ++total;
    }
    ASSIGN_OR_RETURN(auto del, db_.Prepare("DELETE FROM metrics WHERE rowid = ?"));
    for (const auto& [name, points] : by_name) {
      auto keep = KeptPoints(points, kept);
      for (const auto& p : points) {
        if (std::binary_search(keep.begin(), keep.end(), p.rowid)) continue;
        del.Bind(1, p.rowid);
        TRY(del.Run());
        ++done.points_deleted;
      }
    }
    done.points_read += total;
    ASSIGN_OR_RETURN(auto mark, db_.Prepare("UPDATE runs SET points_compacted = 1 WHERE id = ?"));
    TRY(mark.Bind(1, run_id).Run());
    ++done.runs;
    return Status{};
  };
  // kRunsPerTransaction runs per write transaction: a commit (an fsync) per
  // run made a 200-run step take about 120 ms on a 1M-run store, and one
  // transaction of all 200 would hold the write lock longer against
  // heartbeats and leases.
  constexpr size_t kRunsPerTransaction = 50;
  for (size_t first = 0; first < due.size(); first += kRunsPerTransaction) {
    const size_t end = std::min(due.size(), first + kRunsPerTransaction);
    TRY(sql::WithWriteTransaction(db_, [&]() -> Status {
      for (size_t i = first; i < end; ++i) TRY(compact(due[i]));
      return Status{};
    }));
  }
  return done;
}

Result<std::vector<Retention::LogDue>> Retention::LogsDue(TimeMs finished_before, int max_runs) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT id, log_path FROM runs INDEXED BY "
                                                   "runs_logs_due WHERE log_archived = 0 AND "
                                                   "finished_ms IS NOT NULL AND finished_ms < ?1 "
                                                   "AND ") +
                                       kFinished + " ORDER BY finished_ms, id LIMIT ?2"));
  s.Bind(1, finished_before).Bind(2, static_cast<std::int64_t>(max_runs));
  std::vector<LogDue> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Int(0), s.Text(1)});
  }
  return out;
}

Status Retention::MarkLogsArchived(const std::vector<std::int64_t>& run_ids) {
  if (run_ids.empty()) return Status{};
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("UPDATE runs SET log_archived = 1 WHERE id = ?"));
    for (auto id : run_ids) {
      TRY(s.Bind(1, id).Run());
      s.Reset();
    }
    return Status{};
  });
}

}  // namespace trainq
