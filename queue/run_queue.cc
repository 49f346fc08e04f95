// RunQueue (queue/run_queue.h): submission, batches, runs, metrics and the
// lease protocol.
#include "queue/run_queue.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <nlohmann/json.hpp>

#include "queue/store_parts.h"

namespace trainq {

std::string RepoName(const std::string& url) {
  std::string u = url;
  while (!u.empty() && u.back() == '/') u.pop_back();
  auto slash = u.find_last_of("/:");
  std::string name = slash == std::string::npos ? u : u.substr(slash + 1);
  if (name.size() > 4 && name.ends_with(".git")) name.resize(name.size() - 4);
  return name.empty() ? url : name;
}

namespace {

constexpr std::array<std::string_view, kRunStateCount> kStateNames = {
    "queued", "leased", "running", "succeeded", "failed", "dead", "cancelled"};

RunState StateOf(const std::string& s) { return ParseRunState(s).value_or(RunState::kQueued); }

const char* kRunColumns =
    "r.id, r.batch_id, b.experiment, c.sha, r.seed, r.repeat, r.state, r.attempts, "
    "b.max_attempts, r.worker, r.started_ms, r.finished_ms, r.not_before_ms, r.exit_code, "
    "r.metric_value, r.last_error, r.log_path, "
    "(SELECT count(*) FROM run_retries rr WHERE rr.run_id = r.id)";

RunRow ReadRunRow(const sql::Stmt& s) {
  RunRow r;
  r.id = s.Int(0);
  r.batch_id = s.Int(1);
  r.experiment = s.Text(2);
  r.sha = s.Text(3);
  r.seed = s.Int(4);
  r.repeat = static_cast<int>(s.Int(5));
  r.state = StateOf(s.Text(6));
  r.attempts = static_cast<int>(s.Int(7));
  r.max_attempts = static_cast<int>(s.Int(8));
  r.worker = s.Text(9);
  r.started_ms = s.OptInt(10);
  r.finished_ms = s.OptInt(11);
  if (auto nb = s.OptInt(12); nb && *nb > 0) r.not_before_ms = nb;
  if (auto ec = s.OptInt(13)) r.exit_code = static_cast<int>(*ec);
  r.metric_value = s.OptDouble(14);
  r.last_error = s.Text(15);
  r.log_path = s.Text(16);
  r.retries = static_cast<int>(s.Int(17));
  return r;
}

}  // namespace

std::string_view RunStateName(RunState s) { return kStateNames[static_cast<int>(s)]; }

std::optional<RunState> ParseRunState(std::string_view name) {
  for (int i = 0; i < kRunStateCount; ++i) {
    if (kStateNames[i] == name) return static_cast<RunState>(i);
  }
  return std::nullopt;
}

bool IsTerminal(RunState s) {
  return s == RunState::kSucceeded || s == RunState::kDead || s == RunState::kCancelled;
}

bool BatchProgress::active() const {
  return count(RunState::kQueued) + count(RunState::kLeased) + count(RunState::kRunning) +
             count(RunState::kFailed) >
         0;
}

namespace {

// Seeds are seed_start .. seed_start + repeats - 1: that must not pass
// INT64_MAX (signed overflow wrapped to negative seeds).
Status CheckSeedRange(const std::string& what, std::int64_t seed_start, int repeats) {
  if (repeats > 0 && seed_start > std::numeric_limits<std::int64_t>::max() - (repeats - 1)) {
    return Fail(ErrorKind::kInvalidArgument,
                what + ": seeds " + std::to_string(seed_start) + " + " +
                    std::to_string(repeats) + " repeats pass the largest 64-bit integer; " +
                    "choose a smaller seed");
  }
  return {};
}

}  // namespace

RunQueue::RunQueue(StoreParts& parts) : parts_(parts), db_(parts.db) {}

Result<std::int64_t> RunQueue::UpsertCommit(const std::string& repo_url, const CommitInfo& commit,
                                         TimeMs now) {
  ASSIGN_OR_RETURN(auto repo_ins,
                   db_.Prepare("INSERT INTO repos (url, name, created_ms) VALUES (?, ?, ?) "
                               "ON CONFLICT (url) DO NOTHING"));
  TRY(repo_ins.Bind(1, repo_url).Bind(2, RepoName(repo_url)).Bind(3, now).Run());
  ASSIGN_OR_RETURN(auto repo_sel, db_.Prepare("SELECT id FROM repos WHERE url = ?"));
  repo_sel.Bind(1, repo_url);
  ASSIGN_OR_RETURN(bool has_repo, repo_sel.Step());
  if (!has_repo) return Fail(ErrorKind::kInternal, "repository row vanished");
  std::int64_t repo_id = repo_sel.Int(0);

  ASSIGN_OR_RETURN(auto commit_ins,
                   db_.Prepare("INSERT INTO commits (repo_id, sha, parent_sha, subject, author, "
                               "committed_ms, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
                               "ON CONFLICT (repo_id, sha) DO NOTHING"));
  TRY(commit_ins.Bind(1, repo_id)
          .Bind(2, commit.sha)
          .Bind(3, commit.parent_sha)
          .Bind(4, commit.message)
          .Bind(5, commit.author)
          .Bind(6, commit.committed_ms)
          .Bind(7, now)
          .Run());
  ASSIGN_OR_RETURN(auto commit_sel,
                   db_.Prepare("SELECT id FROM commits WHERE repo_id = ? AND sha = ?"));
  commit_sel.Bind(1, repo_id).Bind(2, commit.sha);
  ASSIGN_OR_RETURN(bool has_commit, commit_sel.Step());
  if (!has_commit) return Fail(ErrorKind::kInternal, "commit row vanished");
  return commit_sel.Int(0);
}

Result<std::vector<SubmitResult>> RunQueue::Submit(const std::string& repo_url,
                                                const CommitInfo& commit,
                                                const std::vector<BatchSpec>& batches,
                                                TimeMs now, std::string_view ref) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::vector<SubmitResult>> {
    ASSIGN_OR_RETURN(std::int64_t commit_id, UpsertCommit(repo_url, commit, now));

    ASSIGN_OR_RETURN(
        auto batch_ins,
        db_.Prepare("INSERT INTO batches (commit_id, experiment, command, metric_name, "
                    "metric_goal, metric_regex, repeats, seed_start, gpus, timeout_s, "
                    "max_attempts, spec_json, reason, created_ms, pool, ref) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULLIF(?, '')) "
                    "ON CONFLICT (commit_id, experiment) DO NOTHING"));
    ASSIGN_OR_RETURN(auto batch_sel,
                     db_.Prepare("SELECT id, seed_start, repeats, reuses_batch_id FROM batches "
                                 "WHERE commit_id = ? AND experiment = ?"));
    ASSIGN_OR_RETURN(auto batch_grow,
                     db_.Prepare("UPDATE batches SET repeats = ? WHERE id = ? AND repeats < ?"));
    ASSIGN_OR_RETURN(auto run_ins,
                     db_.Prepare("INSERT INTO runs (batch_id, seed, repeat, state, created_ms, "
                                 "updated_ms) VALUES (?, ?, ?, 'queued', ?, ?) "
                                 "ON CONFLICT (batch_id, seed) DO NOTHING"));

    std::vector<SubmitResult> out;
    for (const auto& spec : batches) {
      if (spec.repeats <= 0) {
        return Fail(ErrorKind::kInvalidArgument,
                    spec.experiment + ": repeats must be positive, got " +
                        std::to_string(spec.repeats));
      }
      SubmitResult res;
      res.experiment = spec.experiment;
      TRY(batch_ins.Bind(1, commit_id)
              .Bind(2, spec.experiment)
              .Bind(3, spec.command)
              .Bind(4, spec.metric_name)
              .Bind(5, spec.metric_goal)
              .Bind(6, spec.metric_regex)
              .Bind(7, spec.repeats)
              .Bind(8, spec.seed_start)
              .Bind(9, spec.gpus)
              .Bind(10, spec.timeout_s)
              .Bind(11, spec.max_attempts)
              .Bind(12, spec.spec_json)
              .Bind(13, spec.reason)
              .Bind(14, now)
              .Bind(15, spec.pool)
              .Bind(16, ref)
              .Run());
      res.created = db_.Changes() > 0;
      batch_sel.Bind(1, commit_id).Bind(2, spec.experiment);
      ASSIGN_OR_RETURN(bool found, batch_sel.Step());
      if (!found) return Fail(ErrorKind::kInternal, "batch row vanished");
      res.batch_id = batch_sel.Int(0);
      // Seeds follow the batch's recorded start, so a top-up never shifts them.
      std::int64_t seed_start = batch_sel.Int(1);
      if (!batch_sel.IsNull(3)) res.reuses_batch_id = batch_sel.Int(3);
      batch_sel.Reset();
      if (res.reuses_batch_id) {
        // Its runs are another batch's: nothing is queued here
        // (StopReusing first to run it again).
        out.push_back(res);
        continue;
      }
      TRY(CheckSeedRange(spec.experiment, seed_start, spec.repeats));
      TRY(batch_grow.Bind(1, spec.repeats).Bind(2, res.batch_id).Bind(3, spec.repeats).Run());
      for (int i = 0; i < spec.repeats; ++i) {
        TRY(run_ins.Bind(1, res.batch_id)
                .Bind(2, seed_start + i)
                .Bind(3, i)
                .Bind(4, now)
                .Bind(5, now)
                .Run());
        res.runs_added += db_.Changes();
      }
      out.push_back(res);
    }
    return out;
  });
}

Result<SubmitResult> RunQueue::ReuseBatch(const std::string& repo_url, const CommitInfo& commit,
                                      const std::string& experiment, std::int64_t source,
                                      const std::string& reason, TimeMs now,
                                      std::string_view ref,
                                      const std::optional<std::string>& spec_json) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<SubmitResult> {
    // The batch that has the runs: a reusing source's own source.
    ASSIGN_OR_RETURN(auto src, db_.Prepare("SELECT coalesce(reuses_batch_id, id) FROM batches "
                                           "WHERE id = ?"));
    src.Bind(1, source);
    ASSIGN_OR_RETURN(bool found, src.Step());
    if (!found) {
      return Fail(ErrorKind::kNotFound, "batch " + std::to_string(source) + " does not exist");
    }
    std::int64_t root = src.Int(0);
    ASSIGN_OR_RETURN(std::int64_t commit_id, UpsertCommit(repo_url, commit, now));
    ASSIGN_OR_RETURN(auto ins, db_.Prepare(
        "INSERT INTO batches (commit_id, experiment, command, metric_name, metric_goal, "
        "metric_regex, repeats, seed_start, gpus, timeout_s, max_attempts, spec_json, reason, "
        "created_ms, pool, reuses_batch_id, ref) "
        "SELECT ?1, ?2, command, metric_name, metric_goal, metric_regex, repeats, seed_start, "
        "gpus, timeout_s, max_attempts, COALESCE(?7, spec_json), ?3, ?4, pool, id, "
        "NULLIF(?6, '') FROM batches "
        "WHERE id = ?5 ON CONFLICT (commit_id, experiment) DO NOTHING"));
    TRY(ins.Bind(1, commit_id)
            .Bind(2, experiment)
            .Bind(3, reason)
            .Bind(4, now)
            .Bind(5, root)
            .Bind(6, ref)
            .Bind(7, spec_json)
            .Run());
    SubmitResult res;
    res.experiment = experiment;
    res.created = db_.Changes() > 0;
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT id, reuses_batch_id FROM batches "
                                           "WHERE commit_id = ? AND experiment = ?"));
    sel.Bind(1, commit_id).Bind(2, experiment);
    ASSIGN_OR_RETURN(bool has, sel.Step());
    if (!has) return Fail(ErrorKind::kInternal, "batch row vanished");
    res.batch_id = sel.Int(0);
    if (!sel.IsNull(1)) res.reuses_batch_id = sel.Int(1);
    return res;
  });
}

Result<bool> RunQueue::StopReusing(std::int64_t batch_id) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE batches SET reuses_batch_id = NULL WHERE id = ? "
                                         "AND reuses_batch_id IS NOT NULL"));
    TRY(u.Bind(1, batch_id).Run());
    return db_.Changes() > 0;
  });
}

Result<int> RunQueue::ExtendBatch(std::int64_t requested_id, int repeats, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    // A batch that reuses another grows that one: the runs are its.
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT b.seed_start, b.id FROM batches b WHERE b.id = "
                                           "coalesce((SELECT reuses_batch_id FROM batches WHERE "
                                           "id = ?1), ?1)"));
    sel.Bind(1, requested_id);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) {
      return Fail(ErrorKind::kNotFound,
                  "batch " + std::to_string(requested_id) + " does not exist");
    }
    std::int64_t seed_start = sel.Int(0);
    const std::int64_t batch_id = sel.Int(1);
    TRY(CheckSeedRange("batch " + std::to_string(batch_id), seed_start, repeats));
    ASSIGN_OR_RETURN(auto grow,
                     db_.Prepare("UPDATE batches SET repeats = ? WHERE id = ? AND repeats < ?"));
    TRY(grow.Bind(1, repeats).Bind(2, batch_id).Bind(3, repeats).Run());
    ASSIGN_OR_RETURN(auto ins,
                     db_.Prepare("INSERT INTO runs (batch_id, seed, repeat, state, created_ms, "
                                 "updated_ms) VALUES (?, ?, ?, 'queued', ?, ?) "
                                 "ON CONFLICT (batch_id, seed) DO NOTHING"));
    int added = 0;
    for (int i = 0; i < repeats; ++i) {
      TRY(ins.Bind(1, batch_id).Bind(2, seed_start + i).Bind(3, i).Bind(4, now).Bind(5, now).Run());
      added += db_.Changes();
    }
    return added;
  });
}

// Runs Lease can take: not a gang over several machines (those need the
// fleet's machines).
constexpr const char* kOneMachine =
    "COALESCE((SELECT CAST(json_extract(b.spec_json, '$.resources.nodes') AS INTEGER) "
    "FROM batches b "
    "WHERE b.id = runs.batch_id), 1) <= 1";

Result<std::vector<LeasedRun>> RunQueue::Lease(const std::string& worker, TimeMs now,
                                            TimeMs lease_ms, int max_runs) {
  if (max_runs <= 0) return std::vector<LeasedRun>{};
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::vector<LeasedRun>> {
    // Oldest first: queued runs, then failed ones whose backoff has passed.
    ASSIGN_OR_RETURN(auto pick,
                     db_.Prepare("SELECT id FROM ("
                                 " SELECT id FROM runs WHERE state = 'queued' AND " +
                                 std::string(kOneMachine) +
                                 " ORDER BY id LIMIT ?1)"
                                 " UNION ALL SELECT id FROM ("
                                 " SELECT id FROM runs WHERE state = 'failed' AND not_before_ms <= ?2"
                                 " AND " + std::string(kOneMachine) +
                                 " ORDER BY id LIMIT ?1) ORDER BY id LIMIT ?1"));
    pick.Bind(1, max_runs).Bind(2, now);
    std::vector<std::int64_t> ids;
    while (true) {
      ASSIGN_OR_RETURN(bool row, pick.Step());
      if (!row) break;
      ids.push_back(pick.Int(0));
    }
    ASSIGN_OR_RETURN(auto upd,
                     db_.Prepare("UPDATE runs SET state = 'leased', lease_token = " + std::string(kNextLeaseToken) + ", "
                                 "lease_expires_ms = ?, worker = ?, attempts = attempts + 1, "
                                 "started_ms = NULL, finished_ms = NULL, updated_ms = ? "
                                 "WHERE id = ?"));
    ASSIGN_OR_RETURN(auto info, db_.Prepare(kLeasedRunSelect));
    std::vector<LeasedRun> out;
    for (auto id : ids) {
      TRY(upd.Bind(1, now + lease_ms).Bind(2, worker).Bind(3, now).Bind(4, id).Run());
      ASSIGN_OR_RETURN(auto l, ReadLeasedRun(info, id, now + lease_ms));
      out.push_back(std::move(l));
    }
    return out;
  });
}

const char* const RunQueue::kLeasedRunSelect =
    "SELECT r.batch_id, r.lease_token, r.seed, r.repeat, r.attempts, b.experiment, b.command, "
    "b.metric_name, b.metric_regex, repos.url, c.sha, b.timeout_s, b.gpus, "
    "COALESCE(json_extract(b.spec_json, '$.trainer'), ''), "
    "COALESCE(CAST(json_extract(b.spec_json, '$.resources.nodes') AS INTEGER), 0), "
    "COALESCE(CAST(json_extract(b.spec_json, '$.resources.processes_per_node') AS INTEGER), 0), "
    "json_extract(b.spec_json, '$.env_passthrough') "
    "FROM runs r JOIN batches b ON b.id = r.batch_id "
    "JOIN commits c ON c.id = b.commit_id JOIN repos ON repos.id = c.repo_id WHERE r.id = ?";

Result<LeasedRun> RunQueue::ReadLeasedRun(sql::Stmt& info, std::int64_t id, TimeMs expires_ms) {
  info.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, info.Step());
  if (!row) return Fail(ErrorKind::kInternal, "leased run vanished");
  LeasedRun l;
  l.run_id = id;
  l.batch_id = info.Int(0);
  l.token = info.Int(1);
  l.seed = info.Int(2);
  l.repeat = static_cast<int>(info.Int(3));
  l.attempt = static_cast<int>(info.Int(4));
  l.expires_ms = expires_ms;
  l.experiment = info.Text(5);
  l.command = info.Text(6);
  l.metric_name = info.Text(7);
  l.metric_regex = info.Text(8);
  l.repo_url = info.Text(9);
  l.sha = info.Text(10);
  l.timeout_s = info.Int(11);
  l.gpus = static_cast<int>(info.Int(12));
  l.trainer = info.Text(13);
  l.nodes = static_cast<int>(info.Int(14));
  l.procs_per_node = static_cast<int>(info.Int(15));
  if (!info.IsNull(16)) {
    // Written by agent/repo (Experiment::ToBatchSpec) as a list of strings.
    auto list = nlohmann::json::parse(info.Text(16), nullptr, false);
    std::vector<std::string> names;
    if (list.is_array()) {
      for (const auto& n : list) {
        if (n.is_string()) names.push_back(n.get<std::string>());
      }
    }
    l.env_passthrough = std::move(names);
  }
  info.Reset();
  return l;
}

Status RunQueue::CheckLease(std::int64_t run_id, std::int64_t token, std::string_view action) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state, lease_token FROM runs WHERE id = ?"));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) {
    return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
  }
  auto state = StateOf(s.Text(0));
  std::int64_t current = s.Int(1);
  if (current != token) {
    // The current token is never shown: it is what proves a lease.
    return Fail(ErrorKind::kConflict,
                std::string(action) + " run " + std::to_string(run_id) + ": lease token " +
                    std::to_string(token) +
                    " is not the run's current lease (stale: the run was leased again; or never "
                    "issued)");
  }
  if (state != RunState::kLeased && state != RunState::kRunning) {
    return Fail(ErrorKind::kConflict, std::string(action) + " run " + std::to_string(run_id) +
                                          ": the run is " + std::string(RunStateName(state)) +
                                          ", not leased");
  }
  return {};
}

Status RunQueue::MarkRunning(std::int64_t run_id, std::int64_t token, TimeMs now,
                          const std::string& log_path) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "start"));
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'running', started_ms = ?, "
                                         "log_path = ?, updated_ms = ? WHERE id = ?"));
    return u.Bind(1, now).Bind(2, log_path).Bind(3, now).Bind(4, run_id).Run();
  });
}

Result<TimeMs> RunQueue::Heartbeat(std::int64_t run_id, std::int64_t token, TimeMs now,
                                TimeMs lease_ms) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<TimeMs> {
    TRY(CheckLease(run_id, token, "heartbeat"));
    // A worker heard from again: a later expiry is its own (no refund).
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET lease_expires_ms = ?, updated_ms = ?, "
                                         "last_error = CASE WHEN last_error LIKE "
                                         "'lease renewed: %' THEN '' ELSE last_error END "
                                         "WHERE id = ?"));
    TRY(u.Bind(1, now + lease_ms).Bind(2, now).Bind(3, run_id).Run());
    return now + lease_ms;
  });
}

Status RunQueue::AddMetrics(std::int64_t run_id, std::int64_t token,
                         const std::vector<MetricPoint>& points, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "metrics for"));
    ASSIGN_OR_RETURN(auto ins, db_.Prepare("INSERT INTO metrics (run_id, name, step, value, final, "
                                           "recorded_ms, lease) VALUES (?, ?, ?, ?, ?, ?, ?)"));
    for (const auto& p : points) {
      TRY(ins.Bind(1, run_id)
              .Bind(2, p.name)
              .Bind(3, p.step)
              .Bind(4, p.value)
              .Bind(5, p.final ? 1 : 0)
              .Bind(6, now)
              .Bind(7, token)
              .Run());
    }
    return {};
  });
}

namespace {
// last_error of a run whose lease GraceLeases renewed: its expiry is refunded.
constexpr std::string_view kGraceMarker = "lease renewed: ";
constexpr std::string_view kExpiredMarker = "lease expired: ";
}  // namespace

Status RunQueue::Complete(std::int64_t run_id, std::int64_t token, TimeMs now, double metric_value,
                       int exit_code) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    // A run put back in the queue with its attempt given back (interrupted,
    // its machine lost or gone from the provider's list) that succeeds after
    // all: the attempt did run, so it counts again.
    int attempt_back = 0;
    if (auto st = CheckLease(run_id, token, "complete"); !st) {
      if (st.error().kind != ErrorKind::kConflict) return st;
      ASSIGN_OR_RETURN(auto q, db_.Prepare("SELECT state, lease_token, last_error FROM runs "
                                           "WHERE id = ?"));
      q.Bind(1, run_id);
      ASSIGN_OR_RETURN(bool row, q.Step());
      if (!row) return st;
      auto state = StateOf(q.Text(0));
      bool same_lease = q.Int(1) == token;
      std::string last_error = q.Text(2);
      // Also a run returned from a lost machine (its worker came back).
      bool expired = last_error.starts_with(kExpiredMarker) ||
                     last_error.starts_with("interrupted: " + std::string(kExpiredMarker)) ||
                     last_error.starts_with("interrupted: machine lost: ");
      // The lease expired (the worker stalled, the server was away), nobody
      // else holds the run: the command's success stands.
      if (!(same_lease && expired &&
            (state == RunState::kFailed || state == RunState::kDead ||
             state == RunState::kQueued))) {
        Error e = st.error();
        if (state == RunState::kSucceeded) {
          e.message += "; another holder already completed it: this result is not counted";
        }
        return std::unexpected(e);
      }
      if (state == RunState::kQueued && last_error.starts_with("interrupted: ")) attempt_back = 1;
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'succeeded', finished_ms = ?, "
                                         "metric_value = ?, exit_code = ?, last_error = '', "
                                         "attempts = attempts + ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ?"));
    return u.Bind(1, now)
        .Bind(2, metric_value)
        .Bind(3, exit_code)
        .Bind(4, attempt_back)
        .Bind(5, now)
        .Bind(6, run_id)
        .Run();
  });
}

Result<RunState> RunQueue::FailRun(std::int64_t run_id, std::int64_t token, TimeMs now,
                                const std::string& error, std::optional<int> exit_code,
                                bool retry) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<RunState> {
    TRY(CheckLease(run_id, token, "fail"));
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT r.attempts, b.max_attempts FROM runs r "
                                         "JOIN batches b ON b.id = r.batch_id WHERE r.id = ?"));
    s.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) return Fail(ErrorKind::kNotFound, "run vanished");
    int attempts = static_cast<int>(s.Int(0));
    int max_attempts = static_cast<int>(s.Int(1));
    RunState next = !retry || attempts >= max_attempts ? RunState::kDead : RunState::kFailed;
    TimeMs not_before = next == RunState::kFailed ? now + parts_.BackoffMs(attempts) : 0;
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = ?, finished_ms = ?, "
                                         "not_before_ms = ?, last_error = ?, exit_code = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ?"));
    TRY(u.Bind(1, RunStateName(next))
            .Bind(2, now)
            .Bind(3, not_before)
            .Bind(4, error)
            .Bind(5, exit_code)
            .Bind(6, now)
            .Bind(7, run_id)
            .Run());
    return next;
  });
}

Status RunQueue::Interrupt(std::int64_t run_id, std::int64_t token, TimeMs now,
                        const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(CheckLease(run_id, token, "interrupt"));
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = attempts - 1, "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE id = ?"));
    return u.Bind(1, "interrupted: " + reason).Bind(2, now).Bind(3, run_id).Run();
  });
}

Result<int> RunQueue::ExpireLeases(TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT r.id, r.attempts, b.max_attempts, r.worker, "
                                         "r.last_error "
                                         "FROM runs r JOIN batches b ON b.id = r.batch_id "
                                         "WHERE r.state IN ('leased', 'running') "
                                         "AND r.lease_expires_ms < ?"));
    s.Bind(1, now);
    struct Expired {
      std::int64_t id;
      int attempts, max_attempts;
      std::string worker;
      bool graced;  // the coordinator caused it: no attempt used
    };
    std::vector<Expired> expired;
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      expired.push_back({s.Int(0), static_cast<int>(s.Int(1)), static_cast<int>(s.Int(2)),
                         s.Text(3), s.Text(4).starts_with(kGraceMarker)});
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = ?, not_before_ms = ?, "
                                         "last_error = ?, lease_expires_ms = NULL, "
                                         "finished_ms = ?, updated_ms = ? WHERE id = ?"));
    ASSIGN_OR_RETURN(auto refund,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = attempts - 1, "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE id = ?"));
    for (const auto& e : expired) {
      if (e.graced) {
        TRY(refund
                .Bind(1, "interrupted: " + std::string(kExpiredMarker) + "worker '" + e.worker +
                             "' did not come back after trainq serve was away (no attempt used)")
                .Bind(2, now)
                .Bind(3, e.id)
                .Run());
        continue;
      }
      bool dead = e.attempts >= e.max_attempts;
      TRY(u.Bind(1, dead ? "dead" : "failed")
              .Bind(2, dead ? 0 : now + parts_.BackoffMs(e.attempts))
              .Bind(3, "lease expired: worker '" + e.worker + "' stopped sending heartbeats")
              .Bind(4, now)
              .Bind(5, now)
              .Bind(6, e.id)
              .Run());
    }
    return static_cast<int>(expired.size());
  });
}

Result<int> RunQueue::GraceLeases(TimeMs expired_before, TimeMs now, TimeMs lease_ms,
                               const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET lease_expires_ms = ?, last_error = ?, "
                                         "updated_ms = ? WHERE state IN ('leased', 'running') "
                                         "AND lease_expires_ms < ?"));
    TRY(u.Bind(1, now + lease_ms)
            .Bind(2, std::string(kGraceMarker) + reason)
            .Bind(3, now)
            .Bind(4, expired_before)
            .Run());
    return db_.Changes();
  });
}

Result<int> RunQueue::CancelBatch(std::int64_t batch_id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT 1 FROM batches WHERE id = ?"));
    s.Bind(1, batch_id);
    ASSIGN_OR_RETURN(bool exists, s.Step());
    if (!exists) {
      return Fail(ErrorKind::kNotFound, "batch " + std::to_string(batch_id) + " does not exist");
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'cancelled', finished_ms = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE "
                                         "batch_id = ? AND state IN ('queued', 'leased', "
                                         "'running', 'failed')"));
    TRY(u.Bind(1, now).Bind(2, now).Bind(3, batch_id).Run());
    return db_.Changes();
  });
}

Result<std::vector<RunQueue::RefBatch>> RunQueue::WaitingBatchesOfRef(const std::string& repo_url,
                                                                     const std::string& ref) {
  // From batch_counts (state, batch_id): only batches with waiting runs are
  // visited, however long the ref's history.
  ASSIGN_OR_RETURN(
      auto s,
      db_.Prepare("SELECT DISTINCT b.id, c.sha FROM batch_counts bc "
                  "JOIN batches b ON b.id = bc.batch_id JOIN commits c ON c.id = b.commit_id "
                  "JOIN repos ON repos.id = c.repo_id "
                  "WHERE bc.state IN ('queued', 'failed') AND bc.n > 0 AND b.ref = ?2 "
                  "AND repos.url = ?1 "
                  "AND NOT EXISTS (SELECT 1 FROM batches o WHERE o.reuses_batch_id = b.id "
                  "AND o.ref IS NOT ?2) "
                  "AND NOT EXISTS (SELECT 1 FROM batches o WHERE o.baseline_batch_id = b.id "
                  "AND o.ref IS NOT ?2) "
                  "ORDER BY b.id"));
  s.Bind(1, repo_url).Bind(2, ref);
  std::vector<RefBatch> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Int(0), s.Text(1)});
  }
  return out;
}

Result<int> RunQueue::CancelRun(std::int64_t run_id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state FROM runs WHERE id = ?"));
    s.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool exists, s.Step());
    if (!exists) {
      return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
    }
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'cancelled', finished_ms = ?, "
                                         "lease_expires_ms = NULL, updated_ms = ? WHERE id = ? "
                                         "AND state IN ('queued', 'leased', 'running', 'failed')"));
    TRY(u.Bind(1, now).Bind(2, now).Bind(3, run_id).Run());
    return db_.Changes();
  });
}

Status RunQueue::RetryRun(std::int64_t run_id, TimeMs now, const std::string& who) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state, attempts, exit_code, finished_ms, "
                                         "last_error FROM runs WHERE id = ?"));
    s.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool exists, s.Step());
    std::string name = "run " + std::to_string(run_id);
    if (!exists) return Fail(ErrorKind::kNotFound, name + " does not exist");
    RunState state = StateOf(s.Text(0));
    if (state == RunState::kSucceeded) {
      return Fail(ErrorKind::kConflict, name + " succeeded; its result stands (submit the "
                                                "commit again for more seeds)");
    }
    if (state != RunState::kDead && state != RunState::kCancelled) {
      return Fail(ErrorKind::kConflict, name + " is " + std::string(RunStateName(state)) +
                                            ", still in the queue; only a dead or cancelled "
                                            "run can be retried");
    }
    int attempts = static_cast<int>(s.Int(1));
    std::string error = s.Text(4);
    ASSIGN_OR_RETURN(auto h, db_.Prepare("INSERT INTO run_retries (run_id, retried_ms, who, "
                                         "state, attempts, exit_code, finished_ms, last_error) "
                                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    TRY(h.Bind(1, run_id)
            .Bind(2, now)
            .Bind(3, who)
            .Bind(4, RunStateName(state))
            .Bind(5, attempts)
            .Bind(6, s.OptInt(2))
            .Bind(7, s.OptInt(3))
            .Bind(8, error)
            .Run());
    std::string note = "retried by " + who + "; was " + std::string(RunStateName(state)) +
                       " after " + std::to_string(attempts) + " attempt(s)" +
                       (error.empty() ? "" : ": " + error);
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE runs SET state = 'queued', attempts = 0, "
                                         "not_before_ms = 0, lease_expires_ms = NULL, "
                                         "worker = '', last_error = ?, updated_ms = ? "
                                         "WHERE id = ?"));
    TRY(u.Bind(1, note).Bind(2, now).Bind(3, run_id).Run());
    // A commit status already final for its batch (or a batch reusing its
    // runs) is wanted pending again: the forge hears the new outcome when
    // the run ends (agent/triggers/forge_status.h).
    ASSIGN_OR_RETURN(auto st, db_.Prepare("UPDATE statuses SET state = 'pending', description = ?, "
                                          "attempts = 0, not_before_ms = 0, gave_up = 0, "
                                          "updated_ms = ? WHERE state != 'pending' AND batch_id IN "
                                          "(SELECT b.id FROM batches b, runs r WHERE r.id = ? AND "
                                          "(b.id = r.batch_id OR b.reuses_batch_id = r.batch_id))"));
    return st.Bind(1, "queued: run " + std::to_string(run_id) + " retried")
        .Bind(2, now)
        .Bind(3, run_id)
        .Run();
  });
}

Result<std::vector<RunRetry>> RunQueue::Retries(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT retried_ms, who, state, attempts, exit_code, "
                                       "finished_ms, last_error FROM run_retries WHERE "
                                       "run_id = ? ORDER BY id"));
  s.Bind(1, run_id);
  std::vector<RunRetry> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    RunRetry r;
    r.retried_ms = s.Int(0);
    r.who = s.Text(1);
    r.state = StateOf(s.Text(2));
    r.attempts = static_cast<int>(s.Int(3));
    if (auto ec = s.OptInt(4)) r.exit_code = static_cast<int>(*ec);
    r.finished_ms = s.OptInt(5);
    r.last_error = s.Text(6);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::array<std::int64_t, kRunStateCount>> RunQueue::CountByState() {
  std::array<std::int64_t, kRunStateCount> counts{};
  // Kept by triggers on runs (schema 12): a row per state, not a row per run.
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state, n FROM run_counts"));
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    if (auto st = ParseRunState(s.Text(0))) counts[static_cast<int>(*st)] = s.Int(1);
  }
  return counts;
}

namespace {

const char* kBatchSelect =
    "SELECT b.id, repos.name, c.sha, c.parent_sha, c.subject, b.experiment, b.metric_name, "
    "b.metric_goal, b.reason, b.repeats, b.created_ms, b.spec_json, repos.url, c.committed_ms, "
    "b.base_sha, b.baseline_batch_id, b.baseline_note, "
    "(SELECT min(seed) FROM runs WHERE runs.batch_id = coalesce(b.reuses_batch_id, b.id)), "
    "b.reuses_batch_id, (SELECT rc.sha FROM batches rb JOIN commits rc ON rc.id = rb.commit_id "
    "WHERE rb.id = b.reuses_batch_id) "
    "FROM batches b JOIN commits c ON c.id = b.commit_id JOIN repos ON repos.id = c.repo_id ";

}  // namespace

Result<std::vector<BatchProgress>> RunQueue::Batches(bool only_active, int limit) {
  std::string where;
  if (only_active) {
    // batch_counts has rows only for counts above 0: the active batches are
    // found through its state index, without visiting finished batches. A
    // batch that reuses another has no runs of its own: the one it reuses is
    // the active one.
    where = "WHERE b.id IN (SELECT batch_id FROM batch_counts WHERE state IN "
            "('queued', 'leased', 'running', 'failed')) ";
  }
  return SelectBatches(where, {}, limit);
}

Result<std::int64_t> RunQueue::CountActiveBatches() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT count(DISTINCT batch_id) FROM batch_counts WHERE "
                                       "state IN ('queued', 'leased', 'running', 'failed')"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

Result<std::optional<BatchProgress>> RunQueue::Batch(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto found, SelectBatches("WHERE b.id = ?1 ", {std::to_string(batch_id)}, 0));
  if (found.empty()) return std::optional<BatchProgress>();
  return std::optional<BatchProgress>(std::move(found.front()));
}

Result<std::vector<BatchProgress>> RunQueue::BatchesComparedWith(std::int64_t batch_id) {
  return SelectBatches(
      "WHERE b.baseline_batch_id = ?1 OR b.baseline_batch_id IN "
      "(SELECT id FROM batches WHERE reuses_batch_id = ?1) ",
      {std::to_string(batch_id)}, 0);
}

Result<std::vector<BatchProgress>> RunQueue::BatchesForCommit(const std::string& sha_prefix) {
  // A prefix of hex digits only: it goes into a LIKE pattern.
  for (char ch : sha_prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(ch))) {
      return Fail(ErrorKind::kInvalidArgument, "'" + sha_prefix + "' is not a commit id");
    }
  }
  if (sha_prefix.size() < 4) {
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + sha_prefix + "' is too short (give at least 4 hex digits)");
  }
  // A range on commits_by_sha (a LIKE would visit every commit).
  std::string lower;
  for (char ch : sha_prefix) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return SelectBatches("WHERE c.sha >= ?1 AND c.sha < ?2 ", {lower, lower + "g"}, 0);
}

Result<std::optional<BatchProgress>> RunQueue::BatchAt(const std::string& repo_url,
                                                      const std::string& sha,
                                                      const std::string& experiment) {
  ASSIGN_OR_RETURN(auto found,
                   SelectBatches("WHERE c.sha = ?1 AND b.experiment = ?2 AND repos.url = ?3 ",
                                 {sha, experiment, repo_url}, 1));
  if (found.empty()) return std::optional<BatchProgress>();
  return std::optional<BatchProgress>(std::move(found.front()));
}

Result<std::vector<BatchProgress>> RunQueue::BatchesSince(TimeMs since) {
  return SelectBatches("WHERE b.created_ms >= ?1 ", {std::to_string(since)}, 0);
}

Result<std::vector<BatchProgress>> RunQueue::BatchesOfExperiment(const std::string& experiment,
                                                               int limit) {
  return SelectBatches("WHERE b.experiment = ?1 ", {experiment}, limit);
}

Result<std::vector<BatchProgress>> RunQueue::NewestBatches(
    const std::vector<std::string>& experiments, int limit) {
  if (limit <= 0) return Fail(ErrorKind::kInvalidArgument, "NewestBatches: limit must be > 0");
  if (experiments.empty()) return SelectBatches("", {}, limit);
  std::vector<BatchProgress> out;
  std::set<std::string> seen;
  for (const auto& e : experiments) {
    if (!seen.insert(e).second) continue;
    ASSIGN_OR_RETURN(auto some, BatchesOfExperiment(e, limit));
    for (auto& b : some) out.push_back(std::move(b));
  }
  std::sort(out.begin(), out.end(),
            [](const BatchProgress& a, const BatchProgress& b) { return a.id > b.id; });
  if (out.size() > static_cast<size_t>(limit)) out.resize(static_cast<size_t>(limit));
  return out;
}

Result<std::vector<RunQueue::BatchKey>> RunQueue::ExperimentBatchKeys(
    const std::string& experiment) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT b.id, c.sha, repos.url, b.created_ms, "
                                       "b.reuses_batch_id "
                                       "FROM batches b JOIN commits c ON c.id = b.commit_id "
                                       "JOIN repos ON repos.id = c.repo_id "
                                       "WHERE b.experiment = ?1 ORDER BY b.id DESC"));
  s.Bind(1, experiment);
  std::vector<BatchKey> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Int(0), s.Text(1), s.Text(2), s.Int(3), s.OptInt(4)});
  }
  return out;
}

Result<bool> RunQueue::HasExperiment(const std::string& experiment) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT 1 FROM batches WHERE experiment = ? LIMIT 1"));
  s.Bind(1, experiment);
  return s.Step();
}

Result<std::vector<std::string>> RunQueue::ExperimentNames() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT DISTINCT experiment FROM batches ORDER BY experiment"));
  std::vector<std::string> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(s.Text(0));
  }
  return out;
}

Result<std::vector<RunQueue::ExperimentSummary>> RunQueue::ExperimentSummaries() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT repos.name, b.experiment, count(*), max(b.id) "
                                       "FROM batches b JOIN commits c ON c.id = b.commit_id "
                                       "JOIN repos ON repos.id = c.repo_id "
                                       "GROUP BY repos.name, b.experiment "
                                       "ORDER BY repos.name, b.experiment"));
  std::vector<ExperimentSummary> out;
  std::vector<std::int64_t> newest;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), s.Text(1), s.Int(2), {}});
    newest.push_back(s.Int(3));
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ASSIGN_OR_RETURN(auto b, Batch(newest[i]));
    if (b) out[i].latest = std::move(*b);
  }
  return out;
}

Result<std::vector<BatchProgress>> RunQueue::SelectBatches(const std::string& where,
                                                        const std::vector<std::string>& args,
                                                        int limit) {
  std::string q = kBatchSelect + where + "ORDER BY b.id DESC";
  if (limit > 0) q += " LIMIT " + std::to_string(limit);
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  for (size_t i = 0; i < args.size(); ++i) s.Bind(static_cast<int>(i + 1), args[i]);
  std::vector<BatchProgress> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    BatchProgress b;
    b.id = s.Int(0);
    b.repo = s.Text(1);
    b.sha = s.Text(2);
    b.parent_sha = s.Text(3);
    b.subject = s.Text(4);
    b.experiment = s.Text(5);
    b.metric_name = s.Text(6);
    b.metric_goal = s.Text(7);
    b.reason = s.Text(8);
    b.repeats = static_cast<int>(s.Int(9));
    b.created_ms = s.Int(10);
    b.spec_json = s.Text(11);
    b.repo_url = s.Text(12);
    b.committed_ms = s.Int(13);
    b.base_sha = s.Text(14);
    if (!s.IsNull(15)) b.baseline_batch_id = s.Int(15);
    b.baseline_note = s.Text(16);
    b.seed_start = s.IsNull(17) ? 1 : s.Int(17);
    if (!s.IsNull(18)) b.reuses_batch_id = s.Int(18);
    b.reused_from_sha = s.Text(19);
    out.push_back(std::move(b));
  }
  if (out.empty()) return out;
  ASSIGN_OR_RETURN(auto counts, db_.Prepare("SELECT state, n FROM batch_counts WHERE batch_id = ?"));
  ASSIGN_OR_RETURN(auto values, db_.Prepare("SELECT metric_value, seed FROM runs WHERE "
                                            "batch_id = ? AND state = 'succeeded' AND "
                                            "metric_value IS NOT NULL ORDER BY repeat"));
  ASSIGN_OR_RETURN(auto time, db_.Prepare("SELECT (SELECT gpus FROM batches WHERE id = ?1), "
                                          "COALESCE(SUM(finished_ms - started_ms), 0) FROM runs "
                                          "WHERE batch_id = ?1 AND started_ms IS NOT NULL AND "
                                          "finished_ms >= started_ms"));
  ASSIGN_OR_RETURN(auto examples, db_.Prepare("SELECT MIN(m.value), MAX(m.value) FROM runs r "
                                              "JOIN metrics m ON m.run_id = r.id WHERE "
                                              "r.batch_id = ?1 AND r.state = 'succeeded' AND "
                                              "m.name = 'eval_examples'"));
  for (auto& b : out) {
    // A batch that reuses another has that batch's runs as its own.
    std::int64_t runs_of = b.reuses_batch_id.value_or(b.id);
    counts.Bind(1, runs_of);
    while (true) {
      ASSIGN_OR_RETURN(bool row, counts.Step());
      if (!row) break;
      if (auto st = ParseRunState(counts.Text(0))) b.counts[static_cast<int>(*st)] = counts.Int(1);
    }
    counts.Reset();
    values.Bind(1, runs_of);
    while (true) {
      ASSIGN_OR_RETURN(bool row, values.Step());
      if (!row) break;
      b.values.push_back(values.Double(0));
      b.seeds.push_back(values.Int(1));
    }
    values.Reset();
    time.Bind(1, runs_of);
    ASSIGN_OR_RETURN(bool got, time.Step());
    if (got) {
      b.gpus = time.IsNull(0) ? 0 : static_cast<int>(time.Int(0));
      b.run_ms = time.Int(1);
    }
    time.Reset();
    examples.Bind(1, runs_of);
    ASSIGN_OR_RETURN(bool has_examples, examples.Step());
    if (has_examples && !examples.IsNull(0)) {
      b.eval_examples_min = examples.Double(0);
      b.eval_examples_max = examples.Double(1);
    }
    examples.Reset();
  }
  return out;
}

Status RunQueue::SetBaseline(std::int64_t batch_id, const std::string& base_sha,
                         std::optional<std::int64_t> baseline_batch_id, const std::string& note) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE batches SET base_sha = ?, baseline_batch_id = ?, "
                                         "baseline_note = ? WHERE id = ?"));
    u.Bind(1, base_sha);
    if (baseline_batch_id) {
      u.Bind(2, *baseline_batch_id);
    } else {
      u.BindNull(2);
    }
    return u.Bind(3, note).Bind(4, batch_id).Run();
  });
}

Result<std::vector<RunRow>> RunQueue::Runs(std::optional<std::int64_t> batch_id,
                                        std::optional<RunState> state, int limit) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id WHERE 1 = 1";
  // A batch that reuses another lists that batch's runs.
  if (batch_id) {
    q += " AND r.batch_id = coalesce((SELECT reuses_batch_id FROM batches WHERE id = ?1), ?1)";
  }
  if (state) q += " AND r.state = ?2";
  // A limit keeps the newest runs, listed oldest first.
  if (limit > 0) {
    q += " ORDER BY r.id DESC LIMIT " + std::to_string(limit);
    q = "SELECT * FROM (" + q + ") ORDER BY 1";
  } else {
    q += " ORDER BY r.id";
  }
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  if (batch_id) s.Bind(1, *batch_id);
  if (state) s.Bind(2, RunStateName(*state));
  std::vector<RunRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRunRow(s));
  }
  return out;
}

Result<std::vector<TimeMs>> RunQueue::RecentRunDurations(std::int64_t batch_id, int limit) {
  // recent_durations keeps the newest 50 per (repository, experiment),
  // written by a trigger when a run succeeds (schema 12).
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT d.duration_ms FROM batches me "
                                       "JOIN commits mc ON mc.id = me.commit_id "
                                       "JOIN recent_durations d ON d.repo_id = mc.repo_id "
                                       "AND d.experiment = me.experiment "
                                       "WHERE me.id = ?1 "
                                       "ORDER BY d.finished_ms DESC, d.run_id DESC LIMIT ?2"));
  s.Bind(1, batch_id).Bind(2, static_cast<std::int64_t>(limit));
  std::vector<TimeMs> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(std::max<TimeMs>(0, s.Int(0)));
  }
  return out;
}

Result<std::vector<RunRow>> RunQueue::RunsFinishedAfter(TimeMs finished_ms, std::int64_t run_id,
                                                     int limit) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id "
                  // A range on runs_by_finished; `+` keeps the planner off
                  // runs_by_state, which holds every finished run.
                  "WHERE +r.state IN ('succeeded', 'failed', 'dead', 'cancelled') AND "
                  "r.finished_ms IS NOT NULL AND r.finished_ms >= ?1 "
                  "AND (r.finished_ms > ?1 OR r.id > ?2) "
                  "ORDER BY r.finished_ms, r.id LIMIT ?3";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  s.Bind(1, finished_ms);
  s.Bind(2, run_id);
  s.Bind(3, static_cast<std::int64_t>(limit));
  std::vector<RunRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRunRow(s));
  }
  return out;
}

Result<std::optional<RunRow>> RunQueue::Run(std::int64_t run_id) {
  std::string q = std::string("SELECT ") + kRunColumns +
                  " FROM runs r JOIN batches b ON b.id = r.batch_id "
                  "JOIN commits c ON c.id = b.commit_id WHERE r.id = ?";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<RunRow>();
  return std::optional<RunRow>(ReadRunRow(s));
}

Result<std::int64_t> RunQueue::MetricCount(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT count(*) FROM metrics WHERE run_id = ?"));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

Result<bool> RunQueue::IsCancelledLease(std::int64_t run_id, std::int64_t token) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT 1 FROM runs WHERE id = ? AND lease_token = ? AND "
                                       "state = 'cancelled'"));
  s.Bind(1, run_id).Bind(2, token);
  return s.Step();
}

Result<std::vector<MetricPoint>> RunQueue::Metrics(
    std::int64_t run_id, std::vector<std::optional<std::int64_t>>* leases) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT name, value, step, final, lease FROM metrics "
                                       "WHERE run_id = ? ORDER BY rowid"));
  s.Bind(1, run_id);
  std::vector<MetricPoint> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(MetricPoint{s.Text(0), s.Double(1), s.OptInt(2), s.Int(3) != 0});
    if (leases) leases->push_back(s.OptInt(4));
  }
  return out;
}

}  // namespace trainq
