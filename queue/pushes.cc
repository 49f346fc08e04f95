// Pushes (queue/pushes.h): pushes, deliveries, ref heads, commit statuses,
// quiet commits and pull request comments.
#include <time.h>

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "queue/store_parts.h"

namespace trainq {

namespace {

const char* kPushColumns =
    "id, source, delivery_id, repo_url, ref, before_sha, after_sha, default_branch, state, "
    "attempts, not_before_ms, result, error, received_ms, updated_ms, pr_number, target_branch";

Pushes::Push ReadPush(const sql::Stmt& s) {
  Pushes::Push p;
  p.id = s.Int(0);
  p.source = s.Text(1);
  p.delivery_id = s.Text(2);
  p.repo_url = s.Text(3);
  p.ref = s.Text(4);
  p.before_sha = s.Text(5);
  p.after_sha = s.Text(6);
  p.default_branch = s.Text(7);
  p.state = s.Text(8);
  p.attempts = static_cast<int>(s.Int(9));
  p.not_before_ms = s.Int(10);
  p.result = s.Text(11);
  p.error = s.Text(12);
  p.received_ms = s.Int(13);
  p.updated_ms = s.Int(14);
  p.pr_number = s.Int(15);
  p.target_branch = s.Text(16);
  return p;
}

// One table holds both kinds of status (schema 14): a batch's (batch_id set)
// and a push's (push_id set, one per context); the absent id reads as 0.
const char* kStatusColumns =
    "coalesce(batch_id, 0), repo_url, sha, context, state, description, posted_state, "
    "attempts, not_before_ms, gave_up, last_error, posted_description, coalesce(push_id, 0)";

Pushes::CommitStatus ReadStatus(const sql::Stmt& s) {
  Pushes::CommitStatus c;
  c.batch_id = s.Int(0);
  c.repo_url = s.Text(1);
  c.sha = s.Text(2);
  c.context = s.Text(3);
  c.state = s.Text(4);
  c.description = s.Text(5);
  c.posted_state = s.Text(6);
  c.attempts = static_cast<int>(s.Int(7));
  c.not_before_ms = s.Int(8);
  c.gave_up = s.Int(9) != 0;
  c.last_error = s.Text(10);
  c.posted_description = s.Text(11);
  c.push_id = s.Int(12);
  return c;
}

bool AllZero(const std::string& sha) {
  return !sha.empty() && std::all_of(sha.begin(), sha.end(), [](char c) { return c == '0'; });
}

template <typename T, typename Read>
Result<std::vector<T>> Collect(sql::Stmt& s, Read read) {
  std::vector<T> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(read(s));
  }
  return out;
}

// One row of the status table, named by its batch or by its push (`key` is
// "batch_id" or "push_id"); a row that exists already is kept.
Status InsertStatus(sql::Db& db, const char* key, std::int64_t id, const char* conflict,
                    const Pushes::CommitStatus& c, TimeMs now) {
  return sql::WithWriteTransaction(db, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db.Prepare(std::string("INSERT INTO statuses (") + key +
                                        ", repo_url, sha, context, state, description, "
                                        "updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT " +
                                        conflict + " DO NOTHING"));
    return u.Bind(1, id)
        .Bind(2, c.repo_url)
        .Bind(3, c.sha)
        .Bind(4, c.context)
        .Bind(5, c.state)
        .Bind(6, c.description)
        .Bind(7, now)
        .Run();
  });
}

}  // namespace

Pushes::Pushes(StoreParts& parts) : parts_(parts), db_(parts.db) {}

Result<std::optional<std::int64_t>> Pushes::RecordPush(const Push& push, TimeMs now) {
  return RecordPushWhere(push, now, false);
}

Result<std::optional<std::int64_t>> Pushes::RecordPushIfHead(const Push& push, TimeMs now) {
  return RecordPushWhere(push, now, true);
}

Result<bool> Pushes::HasDelivery(const std::string& source, const std::string& delivery_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT 1 FROM deliveries WHERE forge = ? AND "
                                       "delivery_id = ?"));
  s.Bind(1, source).Bind(2, delivery_id);
  return s.Step();
}

Result<std::optional<std::int64_t>> Pushes::RecordedMove(const std::string& repo_url,
                                                         const std::string& ref,
                                                         const std::string& after_sha) {
  ASSIGN_OR_RETURN(auto s,
                   db_.Prepare("SELECT p.id FROM pushes p JOIN ref_heads h ON h.repo_url = "
                               "p.repo_url AND h.ref = p.ref AND h.sha = p.after_sha "
                               "WHERE p.after_sha = ?3 AND p.repo_url = ?1 AND p.ref = ?2 AND "
                               "p.source IN ('catch-up', 'poll') ORDER BY p.id DESC LIMIT 1"));
  s.Bind(1, repo_url).Bind(2, ref).Bind(3, after_sha);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<std::int64_t>();
  return std::optional<std::int64_t>(s.Int(0));
}

Result<std::optional<std::int64_t>> Pushes::RecordPushWhere(const Push& push, TimeMs now,
                                                            bool if_head) {
  using Out = std::optional<std::int64_t>;
  return sql::WithWriteTransaction(db_, [&]() -> Result<Out> {
    if (if_head) {
      ASSIGN_OR_RETURN(auto h, db_.Prepare("SELECT sha FROM ref_heads WHERE repo_url = ? AND "
                                           "ref = ?"));
      h.Bind(1, push.repo_url).Bind(2, push.ref);
      ASSIGN_OR_RETURN(bool has, h.Step());
      std::string head = has ? h.Text(0) : std::string();
      bool same = AllZero(push.before_sha) ? !has : head == push.before_sha;
      if (!same) return Out();
    }
    ASSIGN_OR_RETURN(auto d,
                     db_.Prepare("INSERT INTO deliveries (forge, delivery_id, event, repo_url, ref, "
                                 "before_sha, after_sha, received_ms) VALUES (?, ?, 'push', ?, ?, "
                                 "?, ?, ?) ON CONFLICT (forge, delivery_id) DO NOTHING"));
    TRY(d.Bind(1, push.source)
            .Bind(2, push.delivery_id)
            .Bind(3, push.repo_url)
            .Bind(4, push.ref)
            .Bind(5, push.before_sha)
            .Bind(6, push.after_sha)
            .Bind(7, now)
            .Run());
    if (db_.Changes() == 0) return Out();  // seen before
    ASSIGN_OR_RETURN(
        auto p, db_.Prepare("INSERT INTO pushes (source, delivery_id, repo_url, ref, before_sha, "
                            "after_sha, default_branch, state, result, error, received_ms, "
                            "updated_ms, pr_number, target_branch) VALUES (?, ?, ?, ?, ?, ?, ?, "
                            "?, ?, ?, ?, ?, ?, ?) "
                            "ON CONFLICT (source, delivery_id) DO NOTHING"));
    TRY(p.Bind(1, push.source)
            .Bind(2, push.delivery_id)
            .Bind(3, push.repo_url)
            .Bind(4, push.ref)
            .Bind(5, push.before_sha)
            .Bind(6, push.after_sha)
            .Bind(7, push.default_branch)
            .Bind(8, push.state)
            .Bind(9, push.result)
            .Bind(10, push.error)
            .Bind(11, now)
            .Bind(12, now)
            .Bind(13, push.pr_number)
            .Bind(14, push.target_branch)
            .Run());
    if (db_.Changes() == 0) return Out();
    std::int64_t id = db_.LastInsertId();
    // A pull request's head ref is the forge's, not a branch the poller
    // lists: it stays out of ref_heads.
    if (push.pr_number > 0) return Out(id);
    if (AllZero(push.after_sha)) {
      ASSIGN_OR_RETURN(auto del, db_.Prepare("DELETE FROM ref_heads WHERE repo_url = ? AND ref = ?"));
      TRY(del.Bind(1, push.repo_url).Bind(2, push.ref).Run());
    } else {
      ASSIGN_OR_RETURN(auto head,
                       db_.Prepare("INSERT INTO ref_heads (repo_url, ref, sha, updated_ms) "
                                   "VALUES (?, ?, ?, ?) ON CONFLICT (repo_url, ref) DO UPDATE "
                                   "SET sha = excluded.sha, updated_ms = excluded.updated_ms"));
      TRY(head.Bind(1, push.repo_url).Bind(2, push.ref).Bind(3, push.after_sha).Bind(4, now).Run());
    }
    return Out(id);
  });
}

Result<std::vector<Pushes::Push>> Pushes::DuePushes(TimeMs now, int limit) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPushColumns +
                                       " FROM pushes WHERE state = 'pending' AND "
                                       "not_before_ms <= ? ORDER BY id LIMIT ?"));
  s.Bind(1, now).Bind(2, limit);
  return Collect<Push>(s, ReadPush);
}

Result<std::optional<TimeMs>> Pushes::NextPushDue() {
  ASSIGN_OR_RETURN(auto s,
                   db_.Prepare("SELECT min(not_before_ms) FROM pushes WHERE state = 'pending'"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row || s.IsNull(0)) return std::optional<TimeMs>();
  return std::optional<TimeMs>(s.Int(0));
}

Status Pushes::FinishPush(std::int64_t id, const std::string& state, const std::string& result,
                         const std::string& error, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pushes SET state = ?, result = ?, error = ?, "
                                         "updated_ms = ? WHERE id = ?"));
    TRY(u.Bind(1, state).Bind(2, result).Bind(3, error).Bind(4, now).Bind(5, id).Run());
    if (db_.Changes() == 0) {
      return Fail(ErrorKind::kNotFound, "push " + std::to_string(id) + " does not exist");
    }
    return {};
  });
}

Status Pushes::RetryPush(std::int64_t id, const std::string& error, TimeMs not_before, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pushes SET attempts = attempts + 1, error = ?, "
                                         "not_before_ms = ?, updated_ms = ? WHERE id = ? AND "
                                         "state = 'pending'"));
    return u.Bind(1, error).Bind(2, not_before).Bind(3, now).Bind(4, id).Run();
  });
}

Result<std::optional<Pushes::Push>> Pushes::GetPush(std::int64_t id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPushColumns +
                                       " FROM pushes WHERE id = ?"));
  s.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<Push>();
  return std::optional<Push>(ReadPush(s));
}

Result<std::vector<Pushes::Push>> Pushes::RecentPushes(int limit) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPushColumns +
                                       " FROM pushes ORDER BY id DESC LIMIT ?"));
  s.Bind(1, limit);
  return Collect<Push>(s, ReadPush);
}

Result<std::vector<std::pair<std::string, std::int64_t>>> Pushes::CountPushesByState() {
  ASSIGN_OR_RETURN(auto s,
                   db_.Prepare("SELECT state, n FROM push_counts WHERE n > 0 ORDER BY state"));
  return Collect<std::pair<std::string, std::int64_t>>(
      s, [](const sql::Stmt& st) { return std::make_pair(st.Text(0), st.Int(1)); });
}

Result<std::vector<Pushes::Push>> Pushes::PushesForCommit(const std::string& sha_prefix) {
  if (sha_prefix.empty() || !std::all_of(sha_prefix.begin(), sha_prefix.end(), [](char c) {
        return std::isxdigit(static_cast<unsigned char>(c));
      })) {
    return Fail(ErrorKind::kInvalidArgument, "'" + sha_prefix + "' is not a commit id");
  }
  std::string lower = sha_prefix;
  for (auto& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPushColumns +
                                       " FROM pushes WHERE after_sha >= ?1 AND after_sha < ?2 "
                                       "ORDER BY id DESC"));
  s.Bind(1, lower).Bind(2, lower + "g");  // a range on pushes_by_after
  return Collect<Push>(s, ReadPush);
}

Result<std::vector<std::pair<std::string, std::string>>> Pushes::RefHeads(
    const std::string& repo_url) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT ref, sha FROM ref_heads WHERE repo_url = ? "
                                       "ORDER BY ref"));
  s.Bind(1, repo_url);
  return Collect<std::pair<std::string, std::string>>(
      s, [](const sql::Stmt& st) { return std::make_pair(st.Text(0), st.Text(1)); });
}

Status Pushes::SetRefHead(const std::string& repo_url, const std::string& ref,
                         const std::string& sha, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("INSERT INTO ref_heads (repo_url, ref, sha, updated_ms) "
                                         "VALUES (?, ?, ?, ?) ON CONFLICT (repo_url, ref) DO "
                                         "NOTHING"));
    return u.Bind(1, repo_url).Bind(2, ref).Bind(3, sha).Bind(4, now).Run();
  });
}

Status Pushes::AddCommitStatus(const CommitStatus& c, TimeMs now) {
  return InsertStatus(db_, "batch_id", c.batch_id, "(batch_id) WHERE batch_id IS NOT NULL", c,
                      now);
}

Result<std::vector<std::int64_t>> Pushes::FinishedPendingStatuses(int limit) {
  ASSIGN_OR_RETURN(auto s,
                   db_.Prepare("SELECT cs.batch_id FROM statuses cs WHERE cs.batch_id IS NOT NULL "
                               "AND cs.state = 'pending' AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.batch_id "
                               "= coalesce((SELECT reuses_batch_id FROM batches WHERE id = "
                               "cs.batch_id), cs.batch_id) AND r.state IN ('queued', 'leased', 'running', "
                               "'failed')) ORDER BY cs.batch_id LIMIT ?"));
  s.Bind(1, limit);
  return Collect<std::int64_t>(s, [](const sql::Stmt& st) { return st.Int(0); });
}

Result<std::vector<Pushes::CommitStatus>> Pushes::PendingCommitStatuses(const std::string& prefix) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kStatusColumns +
                                       " FROM statuses WHERE batch_id IS NOT NULL AND state = "
                                       "'pending' AND substr(description, 1, ?) = ? ORDER BY "
                                       "batch_id"));
  s.Bind(1, static_cast<std::int64_t>(prefix.size())).Bind(2, prefix);
  return Collect<CommitStatus>(s, ReadStatus);
}

Status Pushes::SetCommitStatusWanted(std::int64_t batch_id, const std::string& state,
                                    const std::string& description, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE statuses SET state = ?, description = ?, "
                                         "attempts = 0, not_before_ms = 0, gave_up = 0, "
                                         "updated_ms = ? WHERE batch_id = ? AND batch_id IS NOT NULL"));
    return u.Bind(1, state).Bind(2, description).Bind(3, now).Bind(4, batch_id).Run();
  });
}

Status Pushes::AddPushStatus(const CommitStatus& c, TimeMs now) {
  return InsertStatus(db_, "push_id", c.push_id,
                      "(push_id, context) WHERE push_id IS NOT NULL", c, now);
}

Result<std::vector<Pushes::CommitStatus>> Pushes::DueCommitStatuses(TimeMs now, int limit) {
  const std::string due =
      " WHERE gave_up = 0 AND not_before_ms <= ? AND (state != posted_state OR "
      "description != posted_description)";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kStatusColumns +
                                       " FROM statuses" + due +
                                       " ORDER BY not_before_ms, coalesce(batch_id, 0), "
                                       "coalesce(push_id, 0) LIMIT ?"));
  s.Bind(1, now).Bind(2, limit);
  return Collect<CommitStatus>(s, ReadStatus);
}

namespace {

// The row of a status: a batch's, or a failed push's.
// A push's statuses are keyed by context too.
struct StatusRow {
  std::string table;
  std::string where;  // binds ?9 (the id) and, for a push's, ?10 (the context)
  std::int64_t id;
  std::string context;
};
StatusRow RowOf(const Pushes::CommitStatus& s) {
  if (s.push_id) return {"statuses", "push_id = ?9 AND context = ?10", s.push_id, s.context};
  return {"statuses", "batch_id = ?9", s.batch_id, ""};
}

}  // namespace

Status Pushes::CommitStatusPosted(const CommitStatus& c, const std::string& state,
                                 const std::string& description, TimeMs now) {
  auto row = RowOf(c);
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE " + row.table +
                                         " SET posted_state = ?1, posted_description = ?2, "
                                         "attempts = 0, last_error = '', updated_ms = ?3 WHERE " +
                                         row.where));
    u.Bind(1, state).Bind(2, description).Bind(3, now).Bind(9, row.id);
    if (c.push_id) u.Bind(10, row.context);
    return u.Run();
  });
}

Status Pushes::CommitStatusFailed(const CommitStatus& c, const std::string& error,
                                 TimeMs not_before, bool give_up, TimeMs now) {
  auto row = RowOf(c);
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE " + row.table +
                                         " SET attempts = attempts + 1, last_error = ?1, "
                                         "not_before_ms = ?2, gave_up = ?3, updated_ms = ?4 WHERE " +
                                         row.where));
    u.Bind(1, error).Bind(2, not_before).Bind(3, give_up ? 1 : 0).Bind(4, now).Bind(9, row.id);
    if (c.push_id) u.Bind(10, row.context);
    return u.Run();
  });
}

Result<std::vector<Pushes::CommitStatus>> Pushes::GetPushStatuses(std::int64_t push_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kStatusColumns +
                                       " FROM statuses WHERE push_id = ? ORDER BY context"));
  s.Bind(1, push_id);
  return Collect<CommitStatus>(s, ReadStatus);
}

Status Pushes::AddQuietCommit(const QuietCommit& q, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("INSERT INTO quiet_commits (repo_url, sha, push_id, note, "
                                         "created_ms) VALUES (?, ?, ?, ?, ?) "
                                         "ON CONFLICT (repo_url, sha) DO NOTHING"));
    return u.Bind(1, q.repo_url).Bind(2, q.sha).Bind(3, q.push_id).Bind(4, q.note).Bind(5, now).Run();
  });
}

Result<std::vector<Pushes::QuietCommit>> Pushes::QuietCommits(const std::string& sha_prefix) {
  for (char ch : sha_prefix) {
    if (!std::isxdigit(static_cast<unsigned char>(ch))) {
      return Fail(ErrorKind::kInvalidArgument, "'" + sha_prefix + "' is not a commit id");
    }
  }
  if (sha_prefix.size() < 4) {
    return Fail(ErrorKind::kInvalidArgument,
                "commit id '" + sha_prefix + "' is too short (give at least 4 hex digits)");
  }
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT repo_url, sha, push_id, note FROM quiet_commits "
                                       "WHERE sha LIKE ? ORDER BY created_ms"));
  s.Bind(1, sha_prefix + "%");
  return Collect<QuietCommit>(s, [](const sql::Stmt& st) {
    return QuietCommit{st.Text(0), st.Text(1), st.Int(2), st.Text(3)};
  });
}

Result<std::optional<Pushes::CommitStatus>> Pushes::GetPushStatus(std::int64_t push_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kStatusColumns +
                                       " FROM statuses WHERE push_id = ? ORDER BY context LIMIT 1"));
  s.Bind(1, push_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<CommitStatus>();
  return std::optional<CommitStatus>(ReadStatus(s));
}

Result<std::optional<Pushes::CommitStatus>> Pushes::GetCommitStatus(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kStatusColumns +
                                       " FROM statuses WHERE batch_id = ?"));
  s.Bind(1, batch_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<CommitStatus>();
  return std::optional<CommitStatus>(ReadStatus(s));
}

namespace {

const char* kPrCommentColumns =
    "repo_url, pr_number, head_sha, comment_id, body, body_sha256, posted_sha256, settled, "
    "attempts, not_before_ms, gave_up, last_error, posted_ms";

Pushes::PrComment ReadPrComment(const sql::Stmt& s) {
  Pushes::PrComment c;
  c.repo_url = s.Text(0);
  c.pr_number = s.Int(1);
  c.head_sha = s.Text(2);
  c.comment_id = s.Text(3);
  c.body = s.Text(4);
  c.body_sha256 = s.Text(5);
  c.posted_sha256 = s.Text(6);
  c.settled = s.Int(7) != 0;
  c.attempts = static_cast<int>(s.Int(8));
  c.not_before_ms = s.Int(9);
  c.gave_up = s.Int(10) != 0;
  c.last_error = s.Text(11);
  c.posted_ms = s.Int(12);
  return c;
}

}  // namespace

Result<std::vector<Pushes::Push>> Pushes::PullRequestsToRender(int limit) {
  std::string cols;
  for (std::string_view c : {"id", "source", "delivery_id", "repo_url", "ref", "before_sha",
                             "after_sha", "default_branch", "state", "attempts", "not_before_ms",
                             "result", "error", "received_ms", "updated_ms", "pr_number",
                             "target_branch"}) {
    cols += std::string(cols.empty() ? "" : ", ") + "p." + std::string(c);
  }
  ASSIGN_OR_RETURN(
      auto s, db_.Prepare("SELECT " + cols +
                          " FROM pushes p WHERE p.pr_number > 0 AND p.id = (SELECT max(q.id) "
                          "FROM pushes q WHERE q.repo_url = p.repo_url AND q.pr_number = "
                          "p.pr_number AND q.state = 'done') AND NOT EXISTS (SELECT 1 FROM "
                          "pr_comments c WHERE c.repo_url = p.repo_url AND c.pr_number = "
                          "p.pr_number AND c.head_sha = p.after_sha AND c.settled = 1) "
                          "ORDER BY p.id LIMIT ?"));
  s.Bind(1, limit);
  return Collect<Push>(s, ReadPush);
}

Result<std::optional<Pushes::PrComment>> Pushes::GetPrComment(const std::string& repo_url,
                                                            std::int64_t pr_number) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPrCommentColumns +
                                       " FROM pr_comments WHERE repo_url = ? AND pr_number = ?"));
  s.Bind(1, repo_url).Bind(2, pr_number);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::optional<PrComment>();
  return std::optional<PrComment>(ReadPrComment(s));
}

Status Pushes::SetPrCommentWanted(const std::string& repo_url, std::int64_t pr_number,
                                 const std::string& head_sha, const std::string& body,
                                 const std::string& body_sha256, bool settled, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(
        auto u,
        db_.Prepare("INSERT INTO pr_comments (repo_url, pr_number, head_sha, body, body_sha256, "
                    "settled, updated_ms) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (repo_url, "
                    "pr_number) DO UPDATE SET head_sha = excluded.head_sha, body = excluded.body, "
                    "settled = excluded.settled, updated_ms = excluded.updated_ms, "
                    "attempts = CASE WHEN pr_comments.body_sha256 = excluded.body_sha256 THEN "
                    "pr_comments.attempts "
                    "ELSE 0 END, "
                    "not_before_ms = CASE WHEN pr_comments.body_sha256 = excluded.body_sha256 "
                    "THEN pr_comments.not_before_ms ELSE 0 END, "
                    "gave_up = CASE WHEN pr_comments.body_sha256 = excluded.body_sha256 THEN "
                    "pr_comments.gave_up "
                    "ELSE 0 END, "
                    "body_sha256 = excluded.body_sha256"));
    return u.Bind(1, repo_url)
        .Bind(2, pr_number)
        .Bind(3, head_sha)
        .Bind(4, body)
        .Bind(5, body_sha256)
        .Bind(6, settled ? 1 : 0)
        .Bind(7, now)
        .Run();
  });
}

Result<std::vector<Pushes::PrComment>> Pushes::DuePrComments(TimeMs now, int limit) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kPrCommentColumns +
                                       " FROM pr_comments WHERE gave_up = 0 AND body != '' AND "
                                       "body_sha256 != posted_sha256 AND not_before_ms <= ? "
                                       "ORDER BY not_before_ms, updated_ms LIMIT ?"));
  s.Bind(1, now).Bind(2, limit);
  return Collect<PrComment>(s, ReadPrComment);
}

Status Pushes::PrCommentPosted(const std::string& repo_url, std::int64_t pr_number,
                              const std::string& comment_id, const std::string& body_sha256,
                              TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pr_comments SET comment_id = ?, posted_sha256 = ?, "
                                         "attempts = 0, last_error = '', posted_ms = ?, "
                                         "updated_ms = ? WHERE repo_url = ? AND pr_number = ?"));
    return u.Bind(1, comment_id)
        .Bind(2, body_sha256)
        .Bind(3, now)
        .Bind(4, now)
        .Bind(5, repo_url)
        .Bind(6, pr_number)
        .Run();
  });
}

Status Pushes::PrCommentFailed(const std::string& repo_url, std::int64_t pr_number,
                              const std::string& error, TimeMs not_before, bool give_up,
                              TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pr_comments SET attempts = attempts + 1, "
                                         "last_error = ?, not_before_ms = ?, gave_up = ?, "
                                         "updated_ms = ? WHERE repo_url = ? AND pr_number = ?"));
    return u.Bind(1, error)
        .Bind(2, not_before)
        .Bind(3, give_up ? 1 : 0)
        .Bind(4, now)
        .Bind(5, repo_url)
        .Bind(6, pr_number)
        .Run();
  });
}

Status Pushes::ForgetPrCommentId(const std::string& repo_url, std::int64_t pr_number, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pr_comments SET comment_id = '', "
                                         "posted_sha256 = '', updated_ms = ? WHERE repo_url = ? "
                                         "AND pr_number = ?"));
    return u.Bind(1, now).Bind(2, repo_url).Bind(3, pr_number).Run();
  });
}

Result<bool> Pushes::RecordDelivery(const DeliveryRow& d, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO deliveries (forge, delivery_id, event, repo_url, ref, "
                                 "before_sha, after_sha, received_ms) VALUES (?, ?, ?, ?, ?, ?, ?, "
                                 "?) ON CONFLICT (forge, delivery_id) DO NOTHING"));
    TRY(u.Bind(1, d.forge)
            .Bind(2, d.delivery_id)
            .Bind(3, d.event)
            .Bind(4, d.repo_url)
            .Bind(5, d.ref)
            .Bind(6, d.before_sha)
            .Bind(7, d.after_sha)
            .Bind(8, now)
            .Run());
    return db_.Changes() > 0;
  });
}

}  // namespace trainq
