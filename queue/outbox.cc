// Outbox: messages to outside services, sent once (queue/outbox.h).
#include "queue/outbox.h"

#include "queue/store_parts.h"

namespace trainq {

namespace {

constexpr const char* kColumns =
    "id, target, event_key, kind, delivery_id, payload, state, attempts, not_before_ms, "
    "last_error, created_ms, delivered_ms";

OutboxRow ReadRow(const sql::Stmt& s) {
  OutboxRow r;
  r.id = s.Int(0);
  r.target = s.Text(1);
  r.event_key = s.Text(2);
  r.kind = s.Text(3);
  r.delivery_id = s.Text(4);
  r.payload = s.Text(5);
  r.state = s.Text(6);
  r.attempts = static_cast<int>(s.Int(7));
  r.not_before_ms = s.Int(8);
  r.last_error = s.Text(9);
  r.created_ms = s.Int(10);
  r.delivered_ms = s.OptInt(11);
  return r;
}

Result<std::vector<OutboxRow>> CollectRows(sql::Stmt& s) {
  std::vector<OutboxRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadRow(s));
  }
  return out;
}

// `prefix` as a LIKE pattern that matches only names starting with it.
std::string LikePrefix(const std::string& prefix) {
  std::string p;
  for (char c : prefix) {
    if (c == '%' || c == '_' || c == '\\') p += '\\';
    p += c;
  }
  return p + "%";
}

}  // namespace

Outbox::Outbox(StoreParts& parts) : db_(parts.db) {}

Result<bool> Outbox::Enqueue(const std::string& target, const std::string& event_key,
                             const std::string& kind, const std::string& delivery_id,
                             const std::string& payload, TimeMs now) {
  bool written = false;
  TRY(sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("INSERT INTO outbox (target, event_key, kind, delivery_id, "
                                         "payload, created_ms, updated_ms) VALUES (?, ?, ?, ?, ?, "
                                         "?6, ?6) ON CONFLICT (target, event_key) DO NOTHING"));
    s.Bind(1, target).Bind(2, event_key).Bind(3, kind).Bind(4, delivery_id).Bind(5, payload);
    s.Bind(6, now);
    TRY(s.Run());
    written = db_.Changes() > 0;
    return {};
  }));
  return written;
}

Result<std::vector<OutboxRow>> Outbox::Due(const std::string& target_prefix, TimeMs now,
                                           int limit) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kColumns +
                                       " FROM outbox INDEXED BY outbox_due WHERE state = "
                                       "'pending' AND not_before_ms <= ? AND target LIKE ? "
                                       "ESCAPE '\\' ORDER BY not_before_ms, id LIMIT ?"));
  s.Bind(1, now).Bind(2, LikePrefix(target_prefix)).Bind(3, limit);
  return CollectRows(s);
}

Result<std::optional<OutboxRow>> Outbox::Find(const std::string& target,
                                              const std::string& event_key) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kColumns +
                                       " FROM outbox WHERE target = ? AND event_key = ?"));
  s.Bind(1, target).Bind(2, event_key);
  ASSIGN_OR_RETURN(auto rows, CollectRows(s));
  if (rows.empty()) return std::nullopt;
  return rows.front();
}

Status Outbox::MarkDelivered(std::int64_t id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("UPDATE outbox SET state = 'delivered', delivered_ms = "
                                         "?1, updated_ms = ?1 WHERE id = ?2"));
    s.Bind(1, now).Bind(2, id);
    return s.Run();
  });
}

Status Outbox::MarkFailed(std::int64_t id, const std::string& error, TimeMs not_before,
                          bool give_up, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("UPDATE outbox SET attempts = attempts + 1, last_error = "
                                         "?1, not_before_ms = ?2, state = CASE WHEN ?3 THEN "
                                         "'gave_up' ELSE state END, updated_ms = ?4, "
                                         "error_ms = ?4 WHERE id = ?5"));
    s.Bind(1, error).Bind(2, not_before).Bind(3, give_up ? 1 : 0).Bind(4, now).Bind(5, id);
    return s.Run();
  });
}

Status Outbox::Defer(std::int64_t id, TimeMs not_before) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("UPDATE outbox SET not_before_ms = ? WHERE id = ?"));
    s.Bind(1, not_before).Bind(2, id);
    return s.Run();
  });
}

Result<std::int64_t> Outbox::DeliveredSince(const std::string& target, TimeMs since) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT count(*) FROM outbox INDEXED BY "
                                       "outbox_by_delivery WHERE target = ? AND delivered_ms >= ?"));
  s.Bind(1, target).Bind(2, since);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Int(0) : 0;
}

Result<std::vector<OutboxTargetSummary>> Outbox::Summaries(const std::string& target_prefix) {
  std::vector<OutboxTargetSummary> out;
  {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT target, "
                                         "sum(state = 'pending'), sum(state = 'delivered'), "
                                         "sum(state = 'gave_up'), max(delivered_ms), "
                                         "max(error_ms) FROM outbox WHERE target LIKE ? "
                                         "ESCAPE '\\' GROUP BY target ORDER BY target"));
    s.Bind(1, LikePrefix(target_prefix));
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      OutboxTargetSummary t;
      t.target = s.Text(0);
      t.pending = s.Int(1);
      t.delivered = s.Int(2);
      t.gave_up = s.Int(3);
      t.last_delivered_ms = s.OptInt(4);
      t.last_error_ms = s.OptInt(5);
      out.push_back(std::move(t));
    }
  }
  for (auto& t : out) {
    if (t.last_delivered_ms) {
      ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT kind FROM outbox WHERE target = ? AND "
                                           "delivered_ms = ? ORDER BY id DESC LIMIT 1"));
      s.Bind(1, t.target).Bind(2, *t.last_delivered_ms);
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) t.last_delivered_kind = s.Text(0);
    }
    if (t.last_error_ms) {
      ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT last_error FROM outbox WHERE target = ? "
                                           "AND error_ms = ? ORDER BY id DESC LIMIT 1"));
      s.Bind(1, t.target).Bind(2, *t.last_error_ms);
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (row) t.last_error = s.Text(0);
    }
  }
  return out;
}

Result<std::vector<OutboxRow>> Outbox::Recent(const std::string& target, int limit) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kColumns +
                                       " FROM outbox WHERE target = ? ORDER BY id DESC LIMIT ?"));
  s.Bind(1, target).Bind(2, limit);
  return CollectRows(s);
}

Result<std::optional<std::string>> Outbox::Mark(const std::string& name) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT value FROM outbox_marks WHERE name = ?"));
  s.Bind(1, name);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return s.Text(0);
}

Status Outbox::SetMark(const std::string& name, const std::string& value, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("INSERT INTO outbox_marks (name, value, updated_ms) "
                                         "VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE SET "
                                         "value = ?2, updated_ms = ?3"));
    s.Bind(1, name).Bind(2, value).Bind(3, now);
    return s.Run();
  });
}

Status Outbox::ClearMark(const std::string& name) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto s, db_.Prepare("DELETE FROM outbox_marks WHERE name = ?"));
    s.Bind(1, name);
    return s.Run();
  });
}

Result<std::vector<std::pair<std::string, std::string>>> Outbox::Marks(const std::string& prefix) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT name, value FROM outbox_marks WHERE name LIKE ? "
                                       "ESCAPE '\\' ORDER BY name"));
  s.Bind(1, LikePrefix(prefix));
  std::vector<std::pair<std::string, std::string>> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.emplace_back(s.Text(0), s.Text(1));
  }
  return out;
}

Result<std::string> Outbox::BatchRef(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT coalesce(ref, '') FROM batches WHERE id = ?"));
  s.Bind(1, batch_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? s.Text(0) : std::string();
}

Result<std::optional<TimeMs>> Outbox::OldestQueuedMs() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT created_ms FROM runs INDEXED BY runs_by_state "
                                       "WHERE state = 'queued' ORDER BY id LIMIT 1"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return s.Int(0);
}

Result<std::optional<TimeMs>> Outbox::LastFinishedMs() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT finished_ms FROM runs INDEXED BY runs_by_finished "
                                       "WHERE finished_ms IS NOT NULL ORDER BY finished_ms DESC, "
                                       "id DESC LIMIT 1"));
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return std::nullopt;
  return s.Int(0);
}

Result<std::vector<std::int64_t>> Outbox::BatchesWithBaseline(std::int64_t batch_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT id FROM batches WHERE baseline_batch_id = ? "
                                       "ORDER BY id"));
  s.Bind(1, batch_id);
  std::vector<std::int64_t> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(s.Int(0));
  }
  return out;
}

}  // namespace trainq
