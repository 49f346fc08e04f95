// Gang runs: one run leased to several machines at once (queue/gangs.h, a part of
// the Store). Everything here runs inside one write transaction, so a
// gang either has all its machines or none.
#include <algorithm>
#include <string>
#include <vector>

#include "queue/store_parts.h"

namespace trainq {

namespace {

// A member of the run's current attempt (its token is the run's) of a run
// that is leased or running.
constexpr const char* kLiveMember =
    "g.token = r.lease_token AND r.state IN ('leased', 'running')";

Result<std::vector<Gangs::GangMember>> ReadMembers(sql::Stmt& s) {
  std::vector<Gangs::GangMember> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    Gangs::GangMember g;
    g.run_id = s.Int(0);
    g.node_rank = static_cast<int>(s.Int(1));
    g.token = s.Int(2);
    g.machine_id = s.Int(3);
    g.state = s.Text(4);
    g.expires_ms = s.Int(5);
    g.master_addr = s.Text(6);
    g.master_port = static_cast<int>(s.Int(7));
    out.push_back(std::move(g));
  }
  return out;
}

constexpr const char* kMemberColumns =
    "g.run_id, g.node_rank, g.token, g.machine_id, g.state, g.expires_ms, g.master_addr, "
    "g.master_port";

}  // namespace

Gangs::Gangs(StoreParts& parts) : parts_(parts), db_(parts.db) {}

Result<std::vector<Gangs::GangMember>> Gangs::GangMembers(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kMemberColumns +
                                       " FROM gang_members g JOIN runs r ON r.id = g.run_id "
                                       "WHERE g.run_id = ? AND " + kLiveMember +
                                       " ORDER BY g.node_rank"));
  s.Bind(1, run_id);
  return ReadMembers(s);
}

Result<std::optional<Gangs::GangMember>> Gangs::GangMemberOf(std::int64_t run_id, int node_rank) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kMemberColumns +
                                       " FROM gang_members g WHERE g.run_id = ? AND "
                                       "g.node_rank = ?"));
  s.Bind(1, run_id).Bind(2, node_rank);
  ASSIGN_OR_RETURN(auto rows, ReadMembers(s));
  if (rows.empty()) return std::optional<GangMember>();
  return std::optional<GangMember>(rows.front());
}

Result<std::vector<Gangs::GangMember>> Gangs::LiveGangMembers() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT ") + kMemberColumns +
                                       " FROM gang_members g JOIN runs r ON r.id = g.run_id "
                                       "WHERE " + kLiveMember +
                                       " ORDER BY g.run_id, g.node_rank"));
  return ReadMembers(s);
}

Result<std::pair<std::vector<LeasedRun>, bool>> Gangs::DeliverGangMembers(std::int64_t machine,
                                                                          TimeMs now) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT g.run_id, g.node_rank, g.delivered, "
                                                   "g.expires_ms FROM gang_members g JOIN runs r "
                                                   "ON r.id = g.run_id WHERE g.machine_id = ? "
                                                   "AND ") +
                                       kLiveMember + " ORDER BY g.run_id, g.node_rank"));
  s.Bind(1, machine);
  struct Row {
    std::int64_t run_id;
    int node_rank;
    bool delivered;
    TimeMs expires_ms;
  };
  std::vector<Row> rows;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    rows.push_back({s.Int(0), static_cast<int>(s.Int(1)), s.Int(2) != 0, s.Int(3)});
  }
  s.Reset();
  std::vector<LeasedRun> out;
  if (rows.empty()) return std::make_pair(std::move(out), false);
  ASSIGN_OR_RETURN(auto info, db_.Prepare(RunQueue::kLeasedRunSelect));
  ASSIGN_OR_RETURN(auto mark, db_.Prepare("UPDATE gang_members SET delivered = 1, updated_ms = ? "
                                          "WHERE run_id = ? AND node_rank = ?"));
  for (const auto& r : rows) {
    if (r.delivered) continue;
    TRY(mark.Bind(1, now).Bind(2, r.run_id).Bind(3, r.node_rank).Run());
    ASSIGN_OR_RETURN(auto l, RunQueue::ReadLeasedRun(info, r.run_id, r.expires_ms));
    l.node_rank = r.node_rank;
    out.push_back(std::move(l));
  }
  return std::make_pair(std::move(out), true);
}

Result<std::vector<LeasedRun>> Gangs::FormGang(std::int64_t run_id, std::int64_t machine,
                                               const std::string& pool, const std::string& worker,
                                               TimeMs now, TimeMs lease_ms) {
  std::vector<LeasedRun> out;
  ASSIGN_OR_RETURN(auto spec, db_.Prepare("SELECT COALESCE(CAST(json_extract(b.spec_json, "
                                          "'$.resources.nodes') AS INTEGER), 1), "
                                          "COALESCE(CAST(json_extract(b.spec_json, "
                                          "'$.resources.processes_per_node') AS INTEGER), 1), "
                                          "b.gpus "
                                          "FROM runs r JOIN batches b ON b.id = r.batch_id "
                                          "WHERE r.id = ?"));
  spec.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool found, spec.Step());
  if (!found) return out;
  const int nodes = std::max<int>(1, static_cast<int>(spec.Int(0)));
  const int procs = std::max<int>(1, static_cast<int>(spec.Int(1)));
  const int gpus_needed = static_cast<int>(spec.Int(2)) * procs;
  spec.Reset();

  // Idle machines of the pool: ready, heard from within a lease, enough GPUs,
  // no live lease and no live gang member. The asking machine first.
  ASSIGN_OR_RETURN(
      auto idle,
      db_.Prepare("SELECT m.id FROM machines m WHERE m.state = 'ready' AND m.pool = ?1 AND "
                  "(m.id = ?2 OR m.last_seen_ms >= ?3) AND m.gpus >= ?4 AND NOT EXISTS (SELECT "
                  "1 FROM runs r WHERE r.machine_id = m.id AND r.state IN ('leased', "
                  "'running')) AND NOT EXISTS (SELECT 1 FROM gang_members g JOIN runs r ON r.id "
                  "= g.run_id WHERE g.machine_id = m.id AND g.token = r.lease_token AND r.state "
                  "IN ('leased', 'running')) ORDER BY m.id != ?2, m.id"));
  idle.Bind(1, pool).Bind(2, machine).Bind(3, now - lease_ms).Bind(4, gpus_needed);
  std::vector<std::int64_t> machines;
  while (static_cast<int>(machines.size()) < nodes) {
    ASSIGN_OR_RETURN(bool row, idle.Step());
    if (!row) break;
    machines.push_back(idle.Int(0));
  }
  idle.Reset();
  if (static_cast<int>(machines.size()) < nodes || machines.front() != machine) return out;

  const TimeMs expires = now + lease_ms;
  ASSIGN_OR_RETURN(auto upd,
                   db_.Prepare("UPDATE runs SET state = 'leased', lease_token = " + std::string(kNextLeaseToken) + ", "
                               "lease_expires_ms = ?, worker = ?, attempts = attempts + 1, "
                               "machine_id = ?, started_ms = NULL, finished_ms = NULL, "
                               "updated_ms = ? WHERE id = ?"));
  TRY(upd.Bind(1, expires).Bind(2, worker).Bind(3, machine).Bind(4, now).Bind(5, run_id).Run());
  ASSIGN_OR_RETURN(auto info, db_.Prepare(RunQueue::kLeasedRunSelect));
  ASSIGN_OR_RETURN(auto lease, RunQueue::ReadLeasedRun(info, run_id, expires));
  ASSIGN_OR_RETURN(auto clear, db_.Prepare("DELETE FROM gang_members WHERE run_id = ?"));
  TRY(clear.Bind(1, run_id).Run());
  ASSIGN_OR_RETURN(auto ins, db_.Prepare("INSERT INTO gang_members (run_id, node_rank, token, "
                                         "machine_id, state, delivered, expires_ms, updated_ms) "
                                         "VALUES (?, ?, ?, ?, 'assigned', ?, ?, ?)"));
  ASSIGN_OR_RETURN(auto busy, db_.Prepare("UPDATE machines SET last_busy_ms = ? WHERE id = ?"));
  for (size_t rank = 0; rank < machines.size(); ++rank) {
    TRY(ins.Bind(1, run_id)
            .Bind(2, static_cast<int>(rank))
            .Bind(3, lease.token)
            .Bind(4, machines[rank])
            .Bind(5, rank == 0 ? 1 : 0)
            .Bind(6, expires)
            .Bind(7, now)
            .Run());
    TRY(busy.Bind(1, now).Bind(2, machines[rank]).Run());
  }
  lease.node_rank = 0;
  out.push_back(std::move(lease));
  return out;
}

Result<Gangs::GangView> Gangs::GangBeat(std::int64_t run_id, std::int64_t token, int node_rank,
                                        std::int64_t machine, TimeMs now, TimeMs lease_ms,
                                        bool started, const std::string& master_addr,
                                        int master_port) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<GangView> {
    TRY(parts_.runs.CheckLease(run_id, token, "heartbeat"));
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT machine_id FROM gang_members WHERE run_id = ? "
                                           "AND node_rank = ? AND token = ?"));
    sel.Bind(1, run_id).Bind(2, node_rank).Bind(3, token);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found || sel.Int(0) != machine) {
      return Fail(ErrorKind::kConflict, "run " + std::to_string(run_id) + " has no node " +
                                            std::to_string(node_rank) + " on machine " +
                                            std::to_string(machine));
    }
    sel.Reset();
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE gang_members SET expires_ms = ?, updated_ms = ?, "
                                         "state = CASE WHEN ? AND state = 'assigned' THEN "
                                         "'running' ELSE state END WHERE run_id = ? AND "
                                         "node_rank = ?"));
    TRY(u.Bind(1, now + lease_ms)
            .Bind(2, now)
            .Bind(3, started ? 1 : 0)
            .Bind(4, run_id)
            .Bind(5, node_rank)
            .Run());
    if (node_rank == 0 && master_port > 0) {
      ASSIGN_OR_RETURN(auto m, db_.Prepare("UPDATE gang_members SET master_addr = ?, master_port "
                                           "= ? WHERE run_id = ? AND node_rank = 0"));
      TRY(m.Bind(1, master_addr).Bind(2, master_port).Bind(3, run_id).Run());
    }
    // The run lives as long as its most silent member.
    ASSIGN_OR_RETURN(auto r, db_.Prepare("UPDATE runs SET lease_expires_ms = (SELECT "
                                         "min(expires_ms) FROM gang_members WHERE run_id = ?1 "
                                         "AND token = ?2 AND state != 'done'), updated_ms = ?3 "
                                         "WHERE id = ?1 AND (SELECT count(*) FROM gang_members "
                                         "WHERE run_id = ?1 AND token = ?2 AND state != 'done') "
                                         "> 0"));
    TRY(r.Bind(1, run_id).Bind(2, token).Bind(3, now).Run());
    ASSIGN_OR_RETURN(auto v, db_.Prepare("SELECT g.master_addr, g.master_port, r.lease_expires_ms "
                                         "FROM gang_members g JOIN runs r ON r.id = g.run_id "
                                         "WHERE g.run_id = ? AND g.node_rank = 0"));
    v.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool row, v.Step());
    GangView view;
    if (row) {
      view.master_addr = v.Text(0);
      view.master_port = static_cast<int>(v.Int(1));
      view.expires_ms = v.OptInt(2).value_or(now + lease_ms);
    }
    return view;
  });
}

Result<bool> Gangs::GangMemberSucceeded(std::int64_t run_id, std::int64_t token, int node_rank,
                                        std::int64_t machine, TimeMs now,
                                        std::optional<double> metric_value) {
  ASSIGN_OR_RETURN(auto done, sql::WithWriteTransaction(db_, [&]() -> Result<std::optional<double>> {
    TRY(parts_.runs.CheckLease(run_id, token, "complete"));
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE gang_members SET state = 'done', metric_value = "
                                         "?, updated_ms = ? WHERE run_id = ? AND node_rank = ? "
                                         "AND token = ? AND machine_id = ?"));
    TRY(u.Bind(1, metric_value)
            .Bind(2, now)
            .Bind(3, run_id)
            .Bind(4, node_rank)
            .Bind(5, token)
            .Bind(6, machine)
            .Run());
    if (db_.Changes() == 0) {
      return Fail(ErrorKind::kConflict, "run " + std::to_string(run_id) + " has no node " +
                                            std::to_string(node_rank) + " on machine " +
                                            std::to_string(machine));
    }
    ASSIGN_OR_RETURN(auto left, db_.Prepare("SELECT count(*) FROM gang_members WHERE run_id = ? "
                                            "AND token = ? AND state != 'done'"));
    left.Bind(1, run_id).Bind(2, token);
    ASSIGN_OR_RETURN(bool row, left.Step());
    if (row && left.Int(0) > 0) {
      left.Reset();
      // The rest keep the run alive by their own beats.
      ASSIGN_OR_RETURN(auto r, db_.Prepare("UPDATE runs SET lease_expires_ms = (SELECT "
                                           "min(expires_ms) FROM gang_members WHERE run_id = ?1 "
                                           "AND token = ?2 AND state != 'done') WHERE id = ?1"));
      TRY(r.Bind(1, run_id).Bind(2, token).Run());
      return std::optional<double>();
    }
    left.Reset();
    ASSIGN_OR_RETURN(auto m, db_.Prepare("SELECT metric_value FROM gang_members WHERE run_id = ? "
                                         "AND node_rank = 0"));
    m.Bind(1, run_id);
    ASSIGN_OR_RETURN(bool mrow, m.Step());
    std::optional<double> value = mrow ? m.OptDouble(0) : std::nullopt;
    if (!value) {
      return Fail(ErrorKind::kInvalidArgument,
                  "run " + std::to_string(run_id) + ": node 0 reported no metric");
    }
    return value;
  }));
  if (!done) return false;
  TRY(parts_.runs.Complete(run_id, token, now, *done));
  return true;
}

}  // namespace trainq
