// Sweeps (queue/sweeps.h): hyperparameter searches and their points.
#include <cstdint>

#include "queue/store_parts.h"

namespace trainq {

namespace {

const char* kSweepColumns =
    "id, repo_url, commit_json, experiment, spec_json, batch_json, state, created_ms, updated_ms";

Sweeps::SweepRow ReadSweep(const sql::Stmt& s) {
  Sweeps::SweepRow r;
  r.id = s.Int(0);
  r.repo_url = s.Text(1);
  r.commit_json = s.Text(2);
  r.experiment = s.Text(3);
  r.spec_json = s.Text(4);
  r.batch_json = s.Text(5);
  r.state = s.Text(6);
  r.created_ms = s.Int(7);
  r.updated_ms = s.Int(8);
  return r;
}

Sweeps::SweepPointRow ReadPoint(const sql::Stmt& s) {
  Sweeps::SweepPointRow p;
  p.sweep_id = s.Int(0);
  p.idx = static_cast<int>(s.Int(1));
  p.params_json = s.Text(2);
  p.batch_id = s.OptInt(3);
  p.created_ms = s.Int(4);
  p.role = s.Text(5);
  return p;
}

}  // namespace

Sweeps::Sweeps(StoreParts& parts) : parts_(parts), db_(parts.db) {}

Result<std::int64_t> Sweeps::AddSweep(const SweepRow& r, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    ASSIGN_OR_RETURN(auto st, db_.Prepare(
                                  "INSERT INTO sweeps (repo_url, commit_json, experiment, "
                                  "spec_json, batch_json, state, created_ms, updated_ms) "
                                  "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"));
    st.Bind(1, r.repo_url).Bind(2, r.commit_json).Bind(3, r.experiment).Bind(4, r.spec_json);
    st.Bind(5, r.batch_json).Bind(6, r.state).Bind(7, now).Bind(8, now);
    TRY(st.Run());
    return db_.LastInsertId();
  });
}

Result<std::optional<Sweeps::SweepRow>> Sweeps::GetSweep(std::int64_t id) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(std::string("SELECT ") + kSweepColumns +
                                        " FROM sweeps WHERE id = ?"));
  st.Bind(1, id);
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::optional<SweepRow>();
  return std::optional<SweepRow>(ReadSweep(st));
}

Result<std::vector<Sweeps::SweepRow>> Sweeps::List(const std::string& state) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(std::string("SELECT ") + kSweepColumns +
                                        " FROM sweeps WHERE ? = '' OR state = ? ORDER BY id DESC"));
  st.Bind(1, state).Bind(2, state);
  std::vector<SweepRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(ReadSweep(st));
  }
  return out;
}

Status Sweeps::SetSweepState(std::int64_t id, const std::string& state, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto st,
                     db_.Prepare("UPDATE sweeps SET state = ?, updated_ms = ? WHERE id = ?"));
    st.Bind(1, state).Bind(2, now).Bind(3, id);
    TRY(st.Run());
    if (db_.Changes() == 0) {
      return Fail(ErrorKind::kNotFound, "no sweep " + std::to_string(id));
    }
    return {};
  });
}

Result<Sweeps::SweepPointRow> Sweeps::AddSweepPoint(const SweepPointRow& p, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<SweepPointRow> {
    ASSIGN_OR_RETURN(auto ins, db_.Prepare(
                                   "INSERT OR IGNORE INTO sweep_points (sweep_id, idx, "
                                   "params_json, batch_id, created_ms) VALUES (?, ?, ?, ?, ?)"));
    ins.Bind(1, p.sweep_id).Bind(2, p.idx).Bind(3, p.params_json).Bind(4, p.batch_id).Bind(5, now);
    TRY(ins.Run());
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT sweep_id, idx, params_json, batch_id, "
                                           "created_ms, role FROM sweep_points "
                                           "WHERE sweep_id = ? AND idx = ?"));
    sel.Bind(1, p.sweep_id).Bind(2, p.idx);
    ASSIGN_OR_RETURN(bool row, sel.Step());
    if (!row) return Fail(ErrorKind::kInternal, "sweep point vanished");
    return ReadPoint(sel);
  });
}

Status Sweeps::SetSweepPointBatch(std::int64_t sweep_id, int idx, std::int64_t batch_id) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("UPDATE sweep_points SET batch_id = ? "
                                          "WHERE sweep_id = ? AND idx = ?"));
    st.Bind(1, batch_id).Bind(2, sweep_id).Bind(3, idx);
    return st.Run();
  });
}

Status Sweeps::SetConfirmRoles(std::int64_t sweep_id, int pick, std::optional<int> baseline) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto st, db_.Prepare("UPDATE sweep_points SET role = ? "
                                          "WHERE sweep_id = ? AND idx = ?"));
    TRY(st.Bind(1, std::string("confirm")).Bind(2, sweep_id).Bind(3, pick).Run());
    if (!baseline) return Status{};
    st.Reset();
    return st.Bind(1, std::string("confirm_baseline")).Bind(2, sweep_id).Bind(3, *baseline).Run();
  });
}

Result<std::vector<Sweeps::SweepPointRow>> Sweeps::SweepPoints(std::int64_t sweep_id) {
  ASSIGN_OR_RETURN(auto st, db_.Prepare("SELECT sweep_id, idx, params_json, batch_id, created_ms, "
                                        "role FROM sweep_points WHERE sweep_id = ? ORDER BY idx"));
  st.Bind(1, sweep_id);
  std::vector<SweepPointRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, st.Step());
    if (!row) break;
    out.push_back(ReadPoint(st));
  }
  return out;
}

Result<std::string> Sweeps::SweepActivity() {
  ASSIGN_OR_RETURN(auto st, db_.Prepare(
      "SELECT (SELECT COUNT(*) || ':' || COALESCE(MAX(updated_ms), 0) FROM sweeps "
      "        WHERE state = 'running') || '/' || "
      "       (SELECT COUNT(*) FROM sweeps s JOIN sweep_points p ON p.sweep_id = s.id "
      "        WHERE s.state = 'running' AND p.batch_id IS NULL) || '/' || "
      "       (SELECT COUNT(*) FROM sweeps s JOIN sweep_points p ON p.sweep_id = s.id "
      "        JOIN runs r ON r.batch_id = p.batch_id "
      "        WHERE s.state = 'running' AND r.state IN ('succeeded', 'dead', 'cancelled'))"));
  ASSIGN_OR_RETURN(bool row, st.Step());
  if (!row) return std::string();
  return st.Text(0);
}

}  // namespace trainq
