// Access (queue/access.h): personal API tokens and the audit trail.
#include "queue/access.h"

#include "queue/store_parts.h"

namespace trainq {

namespace {

const char* kTokenColumns =
    "id, hash, name, owner, role, created_by, created_ms, expires_ms, last_used_ms, "
    "last_used_from, revoked_ms";

Access::TokenRow ReadToken(const sql::Stmt& s) {
  Access::TokenRow t;
  t.id = s.Int(0);
  t.hash = s.Text(1);
  t.name = s.Text(2);
  t.owner = s.Text(3);
  t.role = s.Text(4);
  t.created_by = s.Text(5);
  t.created_ms = s.Int(6);
  t.expires_ms = s.OptInt(7);
  t.last_used_ms = s.OptInt(8);
  t.last_used_from = s.Text(9);
  t.revoked_ms = s.OptInt(10);
  return t;
}

}  // namespace

Access::Access(StoreParts& parts) : parts_(parts), db_(parts.db) {}

Result<std::int64_t> Access::AddToken(const TokenRow& t) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("INSERT INTO api_tokens (hash, name, owner, role, "
                                          "created_by, created_ms, expires_ms) "
                                          "VALUES (?, ?, ?, ?, ?, ?, ?)"));
    st.Bind(1, t.hash).Bind(2, t.name).Bind(3, t.owner).Bind(4, t.role).Bind(5, t.created_by);
    st.Bind(6, t.created_ms).Bind(7, t.expires_ms);
    TRY(st.Run());
    return db_.LastInsertId();
  });
}

Result<std::optional<Access::TokenRow>> Access::FindToken(const std::string& hash) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                        " FROM api_tokens WHERE hash = ?"));
  st.Bind(1, hash);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<TokenRow>();
  return std::optional<TokenRow>(ReadToken(st));
}

Result<std::optional<Access::TokenRow>> Access::GetToken(std::int64_t id) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                        " FROM api_tokens WHERE id = ?"));
  st.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<TokenRow>();
  return std::optional<TokenRow>(ReadToken(st));
}

Result<std::vector<Access::TokenRow>> Access::ListTokens(const std::string& owner) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(std::string("SELECT ") + kTokenColumns +
                                        " FROM api_tokens WHERE ? = '' OR owner = ? "
                                        "ORDER BY id DESC"));
  st.Bind(1, owner).Bind(2, owner);
  std::vector<TokenRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(ReadToken(st));
  }
  return out;
}

Status Access::TouchToken(std::int64_t id, TimeMs now, const std::string& from, TimeMs every_ms) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("UPDATE api_tokens SET last_used_ms = ?, "
                                          "last_used_from = ? WHERE id = ? AND "
                                          "(last_used_ms IS NULL OR last_used_ms <= ? OR "
                                          "last_used_from != ?)"));
    st.Bind(1, now).Bind(2, from).Bind(3, id).Bind(4, now - every_ms).Bind(5, from);
    return st.Run();
  });
}

Result<bool> Access::RevokeToken(std::int64_t id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("UPDATE api_tokens SET revoked_ms = ? "
                                          "WHERE id = ? AND revoked_ms IS NULL"));
    st.Bind(1, now).Bind(2, id);
    TRY(st.Run());
    return db_.Changes() > 0;
  });
}

Result<std::int64_t> Access::AddAudit(const AuditRow& a) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("INSERT INTO audit (at_ms, who, action, target, "
                                          "detail, address) VALUES (?, ?, ?, ?, ?, ?)"));
    st.Bind(1, a.at_ms).Bind(2, a.who).Bind(3, a.action).Bind(4, a.target).Bind(5, a.detail);
    st.Bind(6, a.address);
    TRY(st.Run());
    return db_.LastInsertId();
  });
}

Result<int> Access::PruneAudit(TimeMs before, int max_rows) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    // By the audit_by_time index, oldest first: a step's work is bounded
    // whatever the trail's length.
    ASSIGN_OR_RETURN(auto st, db_.Prepare("DELETE FROM audit WHERE id IN (SELECT id FROM audit "
                                          "WHERE at_ms < ? ORDER BY at_ms, id LIMIT ?)"));
    st.Bind(1, before).Bind(2, static_cast<std::int64_t>(max_rows));
    TRY(st.Run());
    return static_cast<int>(db_.Changes());
  });
}

Result<std::vector<Access::AuditRow>> Access::AuditSince(TimeMs since_ms, int limit,
                                                         const std::vector<std::string>& targets) {
  std::string sql =
      "SELECT id, at_ms, who, action, target, detail, address FROM audit WHERE at_ms >= ?";
  if (!targets.empty()) {
    sql += " AND target IN (";
    for (size_t i = 0; i < targets.size(); ++i) sql += i ? ", ?" : "?";
    sql += ")";
  }
  sql += " ORDER BY at_ms DESC, id DESC LIMIT ?";
  ASSIGN_OR_RETURN(auto st, db_.Prepare(sql));
  int i = 1;
  st.Bind(i++, since_ms);
  for (const auto& t : targets) st.Bind(i++, t);
  st.Bind(i++, limit);
  std::vector<AuditRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    AuditRow a;
    a.id = st.Int(0);
    a.at_ms = st.Int(1);
    a.who = st.Text(2);
    a.action = st.Text(3);
    a.target = st.Text(4);
    a.detail = st.Text(5);
    a.address = st.Text(6);
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace trainq
