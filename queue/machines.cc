// Machines (queue/machines.h), a part of the Store: machine rows and their
// event history, leasing to a machine, the drain transaction, provider health,
// pool tokens and cost.
#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <set>

#include "queue/store_parts.h"

namespace trainq {

namespace {

constexpr std::array<std::string_view, 7> kMachineStates = {
    "requested", "booting", "ready", "draining", "stopping", "stopped", "failed"};

bool ValidMachineState(std::string_view s) {
  return std::find(kMachineStates.begin(), kMachineStates.end(), s) != kMachineStates.end();
}

std::optional<cloud::MachineState> ParseMachineState(std::string_view s) {
  for (size_t i = 0; i < kMachineStates.size(); ++i) {
    if (kMachineStates[i] == s) return static_cast<cloud::MachineState>(i);
  }
  return std::nullopt;
}

// Runs that can be leased now: queued, or failed with the backoff passed.
constexpr const char* kRunnable =
    "(r.state = 'queued' OR (r.state = 'failed' AND r.not_before_ms <= ?))";

// The pool of run r's batch, as a correlated lookup: a join would let the
// planner scan batches (or build a Bloom filter over them) before the runs,
// which costs the whole history; this keeps runs_by_state's order and stops at
// the LIMIT.
constexpr const char* kPoolOfR = "(SELECT pb.pool FROM batches pb WHERE pb.id = r.batch_id)";

// Runnable runs counted per batch, ?1 = now: queued ones from batch_counts
// (kept by triggers, a row per batch), failed ones past their backoff from
// runs_by_state. Reads the live batches, never the whole queue or history.
constexpr const char* kRunnableByBatch =
    "(SELECT batch_id, n FROM batch_counts WHERE state = 'queued' "
    "UNION ALL SELECT batch_id, 1 AS n FROM runs WHERE state = 'failed' AND not_before_ms <= ?1)";

// Live gang members of nodes 1.. on machine m.id (node 0's machine is the
// run's machine_id, counted with the run itself).
constexpr const char* kLiveGangMembersOnM =
    "(SELECT count(*) FROM gang_members g JOIN runs gr ON gr.id = g.run_id WHERE "
    "g.machine_id = m.id AND g.node_rank > 0 AND g.token = gr.lease_token AND gr.state IN "
    "('leased', 'running'))";

// Run time of a run: started..finished, a running one up to `now` (when given)
// or its last update (heartbeat). Parameter: now (nullable).
constexpr const char* kRunTime =
    "CASE WHEN r.started_ms IS NULL THEN 0 ELSE "
    "max(0, COALESCE(r.finished_ms, CASE WHEN r.state = 'running' THEN CAST(?1 AS INTEGER) END, "
    "r.updated_ms) "
    "- r.started_ms) END";

// The part of kRunTime that moves with `now`, summed over the runs running
// now on machine m.id (machine_runs holds the rest). Parameter: now (nullable).
constexpr const char* kRunningTimeOnM =
    "(SELECT COALESCE(sum(max(0, COALESCE(?1, r.updated_ms) - r.started_ms)), 0) FROM runs r "
    "WHERE r.machine_id = m.id AND r.state = 'running' AND r.finished_ms IS NULL "
    "AND r.started_ms IS NOT NULL)";

double GpuCost(int gpus, int runs_per_gpu) {
  if (gpus <= 0) return 0;
  if (gpus == 1) return 1.0 / std::max(1, runs_per_gpu);
  return gpus;
}

std::string MachineColumns() {
  return std::string(
             "m.id, m.pool, m.provider, m.provider_id, m.state, m.slots, m.gpus, m.created_ms, "
             "m.last_seen_ms, m.last_error, m.name, m.hostname, m.resources_json, m.hourly_cost, "
             "m.ready_ms, m.last_busy_ms, m.stopped_ms, "
             "(SELECT count(*) FROM runs r WHERE r.machine_id = m.id AND r.state IN "
             "('leased', 'running')) + ") + kLiveGangMembersOnM + ", " + std::string(
             "COALESCE((SELECT done FROM machine_runs WHERE machine_id = m.id), 0), "
             "COALESCE((SELECT busy_ms FROM machine_runs WHERE machine_id = m.id), 0) + ") +
         kRunningTimeOnM + " ";
}

MachineRow ReadMachine(const sql::Stmt& s) {
  MachineRow m;
  m.id = s.Int(0);
  m.pool = s.Text(1);
  m.provider = s.Text(2);
  m.provider_id = s.Text(3);
  m.state = s.Text(4);
  m.slots = static_cast<int>(s.Int(5));
  m.gpus = static_cast<int>(s.Int(6));
  m.created_ms = s.Int(7);
  m.last_seen_ms = s.Int(8);
  m.last_error = s.Text(9);
  m.name = s.Text(10);
  m.hostname = s.Text(11);
  m.resources_json = s.Text(12);
  m.hourly_cost = s.Double(13);
  m.ready_ms = s.OptInt(14);
  m.last_busy_ms = s.OptInt(15);
  m.stopped_ms = s.OptInt(16);
  m.live_leases = static_cast<int>(s.Int(17));
  m.runs_done = static_cast<int>(s.Int(18));
  m.busy_ms = s.Int(19);
  return m;
}

std::string MachineLabel(std::int64_t id) { return "machine " + std::to_string(id); }

}  // namespace

Machines::Machines(StoreParts& parts) : parts_(parts), db_(parts.db) {}

// ---- rows -------------------------------------------------------------------

Result<std::vector<MachineRow>> Machines::SelectMachines(const std::string& where,
                                                      const std::vector<std::string>& args,
                                                      std::optional<TimeMs> now) {
  // ?1 is `now` (kRunTime); the caller's arguments are ?2 ...
  std::string q = "SELECT " + MachineColumns() + "FROM machines m " + where + " ORDER BY m.id";
  ASSIGN_OR_RETURN(auto s, db_.Prepare(q));
  s.Bind(1, now);
  for (size_t i = 0; i < args.size(); ++i) s.Bind(static_cast<int>(i + 2), args[i]);
  std::vector<MachineRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back(ReadMachine(s));
  }
  return out;
}

Result<std::vector<MachineRow>> Machines::List(bool include_stopped, std::optional<TimeMs> now) {
  // The live states by name, through machines_by_state, so that this does not
  // visit every machine the fleet ever had (left to itself the planner walks
  // the table in id order to skip the sort).
  return SelectMachines(include_stopped ? ""
                                        : "INDEXED BY machines_by_state WHERE m.state IN "
                                          "('requested', 'booting', 'ready', 'draining', "
                                          "'stopping')",
                        {},
                        now);
}

Result<std::optional<MachineRow>> Machines::Machine(std::int64_t row, std::optional<TimeMs> now) {
  ASSIGN_OR_RETURN(auto found, SelectMachines("WHERE m.id = ?2", {std::to_string(row)}, now));
  if (found.empty()) return std::optional<MachineRow>();
  return std::optional<MachineRow>(std::move(found.front()));
}

Result<std::vector<MachineRow>> Machines::LostMachines(TimeMs since) {
  ASSIGN_OR_RETURN(auto lost,
                   SelectMachines("INDEXED BY machines_by_state WHERE m.state = 'failed' AND "
                                  "m.last_error LIKE 'lost: %' AND "
                                  "m.stopped_ms >= CAST(?2 AS INTEGER)",
                                  {std::to_string(since)}, std::nullopt));
  std::stable_sort(lost.begin(), lost.end(), [](const MachineRow& a, const MachineRow& b) {
    return a.stopped_ms.value_or(0) > b.stopped_ms.value_or(0);
  });
  return lost;
}

Result<std::optional<MachineRow>> Machines::MachineByName(const std::string& name) {
  if (name.empty()) return std::optional<MachineRow>();
  ASSIGN_OR_RETURN(auto found, SelectMachines("WHERE m.name = ?2", {name}, std::nullopt));
  if (found.empty()) return std::optional<MachineRow>();
  return std::optional<MachineRow>(std::move(found.front()));
}

Result<int> Machines::LiveLeases(std::int64_t machine) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT (SELECT count(*) FROM runs WHERE "
                                                   "machine_id = m.id AND state IN ('leased', "
                                                   "'running')) + ") +
                                       kLiveGangMembersOnM + " FROM machines m WHERE m.id = ?"));
  s.Bind(1, machine);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return row ? static_cast<int>(s.Int(0)) : 0;
}

Status Machines::RecordMachineEvent(std::int64_t machine, std::string_view state, TimeMs now,
                                 const std::string& note) {
  ASSIGN_OR_RETURN(int live, LiveLeases(machine));
  ASSIGN_OR_RETURN(auto ins, db_.Prepare("INSERT INTO machine_events (machine_id, at_ms, state, "
                                         "live_leases, note) VALUES (?, ?, ?, ?, ?)"));
  return ins.Bind(1, machine).Bind(2, now).Bind(3, state).Bind(4, live).Bind(5, note).Run();
}

Result<std::int64_t> Machines::UpsertMachine(const MachineRow& m, TimeMs now) {
  if (!ValidMachineState(m.state)) {
    return Fail(ErrorKind::kInvalidArgument, "unknown machine state '" + m.state + "'");
  }
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    // A provider id is unique among live machines only (a warm EC2 pool
    // restarts a stopped instance): the live row, else the newest.
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT id, state FROM machines WHERE pool = ? AND "
                                           "provider_id = ? AND provider_id != '' ORDER BY "
                                           "state IN ('stopped', 'failed'), id DESC LIMIT 1"));
    sel.Bind(1, m.pool).Bind(2, m.provider_id);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (found) {
      std::int64_t id = sel.Int(0);
      std::string old = sel.Text(1);
      sel.Reset();
      ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET state = ?, slots = ?, gpus = ?, "
                                           "last_seen_ms = ?, stopped_ms = CASE WHEN ? IN "
                                           "('stopped', 'failed') THEN CAST(? AS INTEGER) END, "
                                           "ready_ms = CASE "
                                           "WHEN ? = 'ready' THEN COALESCE(ready_ms, ?) ELSE "
                                           "ready_ms END WHERE id = ?"));
      TRY(u.Bind(1, m.state)
              .Bind(2, m.slots)
              .Bind(3, m.gpus)
              .Bind(4, now)
              .Bind(5, m.state)
              .Bind(6, now)
              .Bind(7, m.state)
              .Bind(8, now)
              .Bind(9, id)
              .Run());
      if (old != m.state) TRY(RecordMachineEvent(id, m.state, now, "upsert"));
      return id;
    }
    sel.Reset();
    ASSIGN_OR_RETURN(auto ins,
                     db_.Prepare("INSERT INTO machines (pool, provider, provider_id, name, "
                                 "hostname, state, slots, gpus, resources_json, hourly_cost, "
                                 "created_ms, booted_ms, ready_ms, last_seen_ms) VALUES (?, ?, ?, "
                                 "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    TRY(ins.Bind(1, m.pool)
            .Bind(2, m.provider)
            .Bind(3, m.provider_id)
            .Bind(4, m.name)
            .Bind(5, m.hostname)
            .Bind(6, m.state)
            .Bind(7, m.slots)
            .Bind(8, m.gpus)
            .Bind(9, m.resources_json)
            .Bind(10, m.hourly_cost)
            .Bind(11, now)
            .Bind(12, now)
            .Bind(13, m.state == "ready" ? std::optional<TimeMs>(now) : std::nullopt)
            .Bind(14, now)
            .Run());
    std::int64_t id = db_.LastInsertId();
    TRY(RecordMachineEvent(id, m.state, now, "upsert"));
    return id;
  });
}

Status Machines::TouchMachine(std::int64_t id, TimeMs now, const std::string& state) {
  if (!ValidMachineState(state)) {
    return Fail(ErrorKind::kInvalidArgument, "unknown machine state '" + state + "'");
  }
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT state FROM machines WHERE id = ?"));
    sel.Bind(1, id);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return {};
    std::string old = sel.Text(0);
    sel.Reset();
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET last_seen_ms = ?, state = ?, "
                                         "stopped_ms = CASE WHEN ? IN ('stopped', 'failed') "
                                         "THEN COALESCE(stopped_ms, ?) END WHERE id = ?"));
    TRY(u.Bind(1, now).Bind(2, state).Bind(3, state).Bind(4, now).Bind(5, id).Run());
    if (old != state) TRY(RecordMachineEvent(id, state, now, ""));
    return {};
  });
}

Result<std::int64_t> Machines::AddMachine(const MachineRow& m, TimeMs now) {
  std::string state = m.state.empty() ? "requested" : m.state;
  if (state != "requested" && state != "booting") {
    return Fail(ErrorKind::kInvalidArgument,
                "a new machine is requested or booting, not '" + state + "'");
  }
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    ASSIGN_OR_RETURN(auto ins,
                     db_.Prepare("INSERT INTO machines (pool, provider, provider_id, name, "
                                 "hostname, state, slots, gpus, resources_json, hourly_cost, "
                                 "created_ms, booted_ms, last_seen_ms) VALUES (?, ?, ?, ?, ?, ?, "
                                 "?, ?, ?, ?, ?, ?, ?)"));
    auto st = ins.Bind(1, m.pool)
                  .Bind(2, m.provider)
                  .Bind(3, m.provider_id)
                  .Bind(4, m.name)
                  .Bind(5, m.hostname)
                  .Bind(6, state)
                  .Bind(7, m.slots)
                  .Bind(8, m.gpus)
                  .Bind(9, m.resources_json.empty() ? std::string("{}") : m.resources_json)
                  .Bind(10, m.hourly_cost)
                  .Bind(11, now)
                  .Bind(12, now)
                  .Bind(13, now)
                  .Run();
    if (!st) {
      Error e = st.error();
      if (e.message.find("UNIQUE") != std::string::npos) {
        return Fail(ErrorKind::kConflict, "machine '" + m.name + "' (" + m.provider_id +
                                              ") of pool " + m.pool + " exists already");
      }
      return std::unexpected(e);
    }
    std::int64_t id = db_.LastInsertId();
    TRY(RecordMachineEvent(id, state, now, m.provider_id.empty() ? "" : m.provider_id));
    return id;
  });
}

Status Machines::SetMachineProviderId(std::int64_t row, const std::string& provider_id, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT state FROM machines WHERE id = ?"));
    sel.Bind(1, row);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return Fail(ErrorKind::kNotFound, MachineLabel(row) + " does not exist");
    std::string old = sel.Text(0);
    sel.Reset();
    // A worker that registered before Boot answered keeps its machine ready.
    std::string next = old == "requested" ? "booting" : old;
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET provider_id = ?, state = ? "
                                         "WHERE id = ?"));
    // Unique per pool among live machines: a stopped machine's id may come
    // back (a warm EC2 pool starts a stopped instance again), a live one's not.
    auto st = u.Bind(1, provider_id).Bind(2, next).Bind(3, row).Run();
    if (!st) {
      if (st.error().message.find("UNIQUE") != std::string::npos) {
        return Fail(ErrorKind::kConflict, MachineLabel(row) + ": provider id " + provider_id +
                                              " belongs to another live machine of its pool");
      }
      return st;
    }
    return RecordMachineEvent(row, next, now, "provider id " + provider_id);
  });
}

Status Machines::SetMachineState(std::int64_t row, std::string_view state, TimeMs now,
                              const std::string& note) {
  if (!ValidMachineState(state)) {
    return Fail(ErrorKind::kInvalidArgument, "unknown machine state '" + std::string(state) + "'");
  }
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("UPDATE machines SET state = ?1, "
                                 "stopped_ms = CASE WHEN ?1 IN ('stopped', 'failed') THEN "
                                 "COALESCE(stopped_ms, ?2) ELSE stopped_ms END, "
                                 "last_error = CASE WHEN ?1 = 'failed' THEN ?3 ELSE last_error END "
                                 "WHERE id = ?4"));
    TRY(u.Bind(1, state).Bind(2, now).Bind(3, note).Bind(4, row).Run());
    if (db_.Changes() == 0) return Fail(ErrorKind::kNotFound, MachineLabel(row) + " does not exist");
    return RecordMachineEvent(row, state, now, note);
  });
}

Status Machines::NoteMachine(std::int64_t row, const std::string& note, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET last_error = ? WHERE id = ?"));
    TRY(u.Bind(1, note).Bind(2, row).Run());
    if (db_.Changes() == 0) return Fail(ErrorKind::kNotFound, MachineLabel(row) + " does not exist");
    ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT state FROM machines WHERE id = ?"));
    s.Bind(1, row);
    ASSIGN_OR_RETURN(bool found, s.Step());
    return RecordMachineEvent(row, found ? s.Text(0) : "", now, note);
  });
}

// ---- the drain transaction and forgetting -------------------------------------

Result<bool> Machines::DrainMachine(const cloud::Action& drain, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<bool> {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT state, last_busy_ms, pool, gpus FROM machines "
                                           "WHERE id = ?"));
    sel.Bind(1, drain.row);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return false;
    auto state = ParseMachineState(sel.Text(0));
    cloud::DrainCheck check;
    check.state = state.value_or(cloud::MachineState::kFailed);
    check.last_busy_at = sel.OptInt(1);
    std::string pool = sel.Text(2);
    int gpus = static_cast<int>(sel.Int(3));
    sel.Reset();
    ASSIGN_OR_RETURN(check.live_leases, LiveLeases(drain.row));
    // The runs this machine could take right now (LeaseForMachine's rule),
    // less gangs of more machines than its pool can ever have.
    ASSIGN_OR_RETURN(auto q, db_.Prepare(std::string("SELECT count(*) FROM runs r JOIN batches b "
                                                     "ON b.id = r.batch_id WHERE ") +
                                         kRunnable + " AND (b.pool = '' OR b.pool = ?) AND "
                                                     "b.gpus <= ? AND (?4 <= 0 OR COALESCE("
                                                     "CAST(json_extract(b.spec_json, "
                                                     "'$.resources.nodes') AS INTEGER), 0) "
                                                     "<= ?4)"));
    q.Bind(1, now).Bind(2, pool).Bind(3, gpus).Bind(4, drain.guard.max_nodes);
    ASSIGN_OR_RETURN(bool row, q.Step());
    check.runnable_queued = row ? static_cast<int>(q.Int(0)) : 0;
    q.Reset();
    if (!cloud::DrainAllowed(drain, check)) return false;
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET state = 'draining' WHERE id = ?"));
    TRY(u.Bind(1, drain.row).Run());
    TRY(RecordMachineEvent(drain.row, "draining", now, drain.reason));
    return true;
  });
}

Result<int> Machines::ForgetMachine(std::int64_t row, TimeMs now, const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT 1 FROM machines WHERE id = ?"));
    sel.Bind(1, row);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return Fail(ErrorKind::kNotFound, MachineLabel(row) + " does not exist");
    sel.Reset();
    // Like Interrupt(): back to the queue at once, the attempt refunded.
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = max(0, attempts - 1), "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE machine_id = ? AND state IN "
                                 "('leased', 'running')"));
    TRY(u.Bind(1, "interrupted: machine lost: " + reason).Bind(2, now).Bind(3, row).Run());
    int returned = db_.Changes();
    // A gang run with a member on it stops as a whole (its other members'
    // next calls are refused); it goes back to the queue the same way.
    ASSIGN_OR_RETURN(auto g,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = max(0, attempts - 1), "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE state IN ('leased', 'running') "
                                 "AND EXISTS (SELECT 1 FROM gang_members gm WHERE gm.run_id = "
                                 "runs.id AND gm.machine_id = ? AND gm.token = runs.lease_token)"));
    TRY(g.Bind(1, "interrupted: a machine of the gang was lost: " + reason)
            .Bind(2, now)
            .Bind(3, row)
            .Run());
    returned += db_.Changes();
    ASSIGN_OR_RETURN(auto m, db_.Prepare("UPDATE machines SET state = 'stopped', stopped_ms = "
                                         "COALESCE(stopped_ms, ?), last_error = ? WHERE id = ?"));
    TRY(m.Bind(1, now).Bind(2, reason).Bind(3, row).Run());
    TRY(RecordMachineEvent(row, "stopped", now,
                           "forgotten (" + std::to_string(returned) + " runs back to the queue): " +
                               reason));
    return returned;
  });
}

Result<int> Machines::LoseMachine(std::int64_t row, TimeMs now, const std::string& reason) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<int> {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT last_seen_ms FROM machines WHERE id = ?"));
    sel.Bind(1, row);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return Fail(ErrorKind::kNotFound, MachineLabel(row) + " does not exist");
    const TimeMs last_seen = sel.Int(0);
    sel.Reset();
    // Its live leases, and the runs whose lease expired on it after it last
    // called (ExpireLeases charged them an attempt for the machine's silence).
    ASSIGN_OR_RETURN(auto runs,
                     db_.Prepare("SELECT r.id, r.state, r.attempts, r.interruptions, "
                                 "b.max_attempts FROM runs r JOIN batches b ON b.id = r.batch_id "
                                 "WHERE r.machine_id = ?1 AND (r.state IN ('leased', 'running') OR "
                                 "(r.state IN ('failed', 'dead') AND r.last_error LIKE "
                                 "'lease expired:%' AND r.finished_ms >= ?2))"));
    runs.Bind(1, row).Bind(2, last_seen);
    struct Held {
      std::int64_t id;
      bool live;
      int attempts, interruptions, max_attempts;
    };
    std::vector<Held> held;
    while (true) {
      ASSIGN_OR_RETURN(bool more, runs.Step());
      if (!more) break;
      const std::string state = runs.Text(1);
      held.push_back({runs.Int(0), state == "leased" || state == "running",
                      static_cast<int>(runs.Int(2)), static_cast<int>(runs.Int(3)),
                      static_cast<int>(runs.Int(4))});
    }
    ASSIGN_OR_RETURN(auto refund,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = max(0, attempts - 1), "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "finished_ms = NULL, worker = '', updated_ms = ? WHERE id = ?"));
    ASSIGN_OR_RETURN(auto charge,
                     db_.Prepare("UPDATE runs SET state = ?, not_before_ms = ?, last_error = ?, "
                                 "lease_expires_ms = NULL, finished_ms = ?, updated_ms = ? "
                                 "WHERE id = ?"));
    int returned = 0;
    for (const auto& h : held) {
      if (h.interruptions < h.max_attempts) {
        TRY(refund.Bind(1, "interrupted: machine lost: " + reason).Bind(2, now).Bind(3, h.id).Run());
        ++returned;
        continue;
      }
      // It lost a machine on every attempt it was given: the run is the
      // likelier cause (it crashes or hangs its host), so this one counts.
      if (!h.live) continue;  // already charged by its expiry
      const bool dead = h.attempts >= h.max_attempts;
      TRY(charge.Bind(1, dead ? "dead" : "failed")
              .Bind(2, dead ? 0 : now + parts_.BackoffMs(h.attempts))
              .Bind(3, "machine lost: " + reason + " (the run has now lost " +
                           std::to_string(h.interruptions + 1) +
                           " machines: this attempt counts)")
              .Bind(4, now)
              .Bind(5, now)
              .Bind(6, h.id)
              .Run());
    }
    // A gang run with a member on it (a node > 0: node 0's machine holds the
    // run itself, above) stops as a whole, as in ForgetMachine.
    ASSIGN_OR_RETURN(auto g,
                     db_.Prepare("UPDATE runs SET state = 'queued', attempts = max(0, attempts - 1), "
                                 "interruptions = interruptions + 1, not_before_ms = 0, "
                                 "last_error = ?, lease_expires_ms = NULL, started_ms = NULL, "
                                 "worker = '', updated_ms = ? WHERE state IN ('leased', 'running') "
                                 "AND EXISTS (SELECT 1 FROM gang_members gm WHERE gm.run_id = "
                                 "runs.id AND gm.machine_id = ? AND gm.token = runs.lease_token)"));
    TRY(g.Bind(1, "interrupted: a machine of the gang was lost: " + reason)
            .Bind(2, now)
            .Bind(3, row)
            .Run());
    returned += db_.Changes();
    ASSIGN_OR_RETURN(auto m, db_.Prepare("UPDATE machines SET state = 'failed', stopped_ms = "
                                         "COALESCE(stopped_ms, ?), last_error = ? WHERE id = ?"));
    TRY(m.Bind(1, now).Bind(2, std::string(kLostPrefix) + reason).Bind(3, row).Run());
    TRY(RecordMachineEvent(row, "failed", now,
                           "lost (" + std::to_string(returned) + " runs back to the queue): " +
                               reason));
    return returned;
  });
}

// ---- workers ------------------------------------------------------------------

Result<MachineRow> Machines::RegisterWorker(const WorkerRegistration& r, TimeMs now) {
  ASSIGN_OR_RETURN(std::int64_t id, sql::WithWriteTransaction(db_, [&]() -> Result<std::int64_t> {
    std::string resources = r.resources_json.empty() ? "{}" : r.resources_json;
    if (!r.name.empty()) {
      ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT id, pool, state FROM machines WHERE name = ?"));
      sel.Bind(1, r.name);
      ASSIGN_OR_RETURN(bool found, sel.Step());
      if (found) {
        std::int64_t id = sel.Int(0);
        std::string pool = sel.Text(1);
        std::string state = sel.Text(2);
        sel.Reset();
        if (pool != r.pool) {
          return Fail(ErrorKind::kInvalidArgument,
                      "machine '" + r.name + "' belongs to pool " + pool + ", not " + r.pool);
        }
        if (state != "requested" && state != "booting" && state != "ready") {
          return Fail(ErrorKind::kConflict,
                      "machine '" + r.name + "' is " + state + ": it takes no more runs");
        }
        ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET state = 'ready', ready_ms = ?, "
                                             "hostname = ?, resources_json = ?, slots = ?, "
                                             "gpus = ?, last_seen_ms = ? WHERE id = ?"));
        TRY(u.Bind(1, now)
                .Bind(2, r.hostname)
                .Bind(3, resources)
                .Bind(4, r.slots)
                .Bind(5, r.gpus)
                .Bind(6, now)
                .Bind(7, id)
                .Run());
        TRY(RecordMachineEvent(id, "ready", now, "worker registered from " + r.hostname));
        return id;
      }
    }
    std::string name = r.name.empty() ? r.hostname + "-" + std::to_string(r.pid) : r.name;
    // A second hand-started worker with the same host and pid (a restart
    // after a reboot): the old row is taken over when it is not live.
    ASSIGN_OR_RETURN(auto ins,
                     db_.Prepare("INSERT INTO machines (pool, provider, name, hostname, state, "
                                 "slots, gpus, resources_json, created_ms, booted_ms, ready_ms, "
                                 "last_seen_ms) VALUES (?, 'manual', ?, ?, 'ready', ?, ?, ?, ?, ?, "
                                 "?, ?)"));
    auto st = ins.Bind(1, r.pool)
                  .Bind(2, name)
                  .Bind(3, r.hostname)
                  .Bind(4, r.slots)
                  .Bind(5, r.gpus)
                  .Bind(6, resources)
                  .Bind(7, now)
                  .Bind(8, now)
                  .Bind(9, now)
                  .Bind(10, now)
                  .Run();
    if (!st) {
      if (st.error().message.find("UNIQUE") != std::string::npos) {
        return Fail(ErrorKind::kConflict, "a machine named '" + name + "' exists already");
      }
      return std::unexpected(st.error());
    }
    std::int64_t id = db_.LastInsertId();
    TRY(RecordMachineEvent(id, "ready", now, "manual worker registered from " + r.hostname));
    return id;
  }));
  ASSIGN_OR_RETURN(auto m, Machine(id, now));
  if (!m) return Fail(ErrorKind::kInternal, "registered machine vanished");
  return *m;
}

Result<std::vector<LeasedRun>> Machines::LeaseForMachine(std::int64_t machine,
                                                      const LeaseLimits& limits, TimeMs now,
                                                      TimeMs lease_ms) {
  return sql::WithWriteTransaction(db_, [&]() -> Result<std::vector<LeasedRun>> {
    ASSIGN_OR_RETURN(auto sel, db_.Prepare("SELECT state, pool, name FROM machines WHERE id = ?"));
    sel.Bind(1, machine);
    ASSIGN_OR_RETURN(bool found, sel.Step());
    if (!found) return Fail(ErrorKind::kNotFound, MachineLabel(machine) + " does not exist");
    std::string state = sel.Text(0);
    std::string pool = sel.Text(1);
    std::string worker = sel.Text(2).empty() ? MachineLabel(machine) : sel.Text(2);
    sel.Reset();
    if (state != "ready") {
      return Fail(ErrorKind::kConflict, MachineLabel(machine) + " is " + state);
    }
    ASSIGN_OR_RETURN(auto touch, db_.Prepare("UPDATE machines SET last_seen_ms = ? WHERE id = ?"));
    TRY(touch.Bind(1, now).Bind(2, machine).Run());
    // A machine in a gang runs only its member (delivered on its next poll).
    ASSIGN_OR_RETURN(auto gang, parts_.gangs.DeliverGangMembers(machine, now));
    if (gang.second) return std::move(gang.first);
    std::vector<LeasedRun> out;
    if (limits.max_runs <= 0) return out;

    // Candidates, oldest first, read a page at a time: the scan stops once
    // the slots are filled, so a lease costs the same with a million runs
    // queued as with ten. A slot's fused companions come from the same batch
    // by seed.
    struct Candidate {
      std::int64_t id, batch_id, seed;
      int gpus;
      bool trainer;
      bool gang;
    };
    // Queued runs and failed ones past their backoff, each walked in id
    // order through runs_by_state (a plain OR would walk every run).
    ASSIGN_OR_RETURN(
        auto pick,
        db_.Prepare(std::string("SELECT r.id, r.batch_id, r.seed, b.gpus, ") +
                    "COALESCE(json_extract(b.spec_json, '$.trainer'), '') != '', "
                    "CAST(json_extract(b.spec_json, '$.resources.nodes') AS INTEGER) IS NOT NULL "
                    "FROM (SELECT id FROM (SELECT r.id FROM runs r WHERE r.state = 'queued' "
                    "AND r.id > ?3 AND " + std::string(kPoolOfR) + " IN ('', ?2) "
                    "ORDER BY r.id LIMIT ?4) UNION ALL SELECT id FROM (SELECT r.id "
                    "FROM runs r WHERE r.state = 'failed' AND r.not_before_ms <= ?1 AND "
                    "r.id > ?3 AND " + std::string(kPoolOfR) + " IN ('', ?2) "
                    "ORDER BY r.id LIMIT ?4) ORDER BY id LIMIT ?4) p "
                    "JOIN runs r ON r.id = p.id JOIN batches b ON b.id = r.batch_id ORDER BY r.id"));
    ASSIGN_OR_RETURN(auto companions,
                     db_.Prepare("SELECT r.id FROM runs r WHERE r.batch_id = ?2 AND "
                                 "(r.state = 'queued' OR (r.state = 'failed' AND "
                                 "r.not_before_ms <= ?1)) ORDER BY r.seed"));
    // The first page fits the slots asked for (a lease of 1 reads a few
    // rows, not 256); each further page doubles, up to 256.
    std::int64_t page_size = std::max(8, 2 * limits.max_runs * std::max(1, limits.fuse_max));
    double free_gpus = limits.free_gpus;
    int slots = limits.max_runs;
    std::vector<std::pair<std::int64_t, std::int64_t>> chosen;  // (run, group)
    std::set<std::int64_t> taken;
    bool leading_gangs = true;  // gangs before the first other run may form
    std::int64_t after = 0;
    while (slots > 0) {
      std::vector<Candidate> page;
      pick.Bind(1, now).Bind(2, pool).Bind(3, after).Bind(4, page_size);
      while (true) {
        ASSIGN_OR_RETURN(bool row, pick.Step());
        if (!row) break;
        page.push_back({pick.Int(0), pick.Int(1), pick.Int(2), static_cast<int>(pick.Int(3)),
                        pick.Int(4) != 0, pick.Int(5) != 0});
      }
      pick.Reset();
      if (page.empty()) break;
      after = page.back().id;
      for (size_t i = 0; i < page.size() && slots > 0; ++i) {
        const auto& c = page[i];
        // The oldest gang that can form on this machine, when nothing is
        // picked before it: it takes the whole machine (and its partners) or
        // nothing.
        if (c.gang) {
          if (leading_gangs) {
            ASSIGN_OR_RETURN(auto formed, parts_.gangs.FormGang(c.id, machine, pool, worker, now, lease_ms));
            if (!formed.empty()) return formed;
          }
          continue;
        }
        leading_gangs = false;
        if (taken.count(c.id)) continue;
        double cost = GpuCost(c.gpus, limits.runs_per_gpu);
        if (cost > free_gpus + 1e-9) continue;  // does not fit: a later, smaller run may
        free_gpus -= cost;
        --slots;
        taken.insert(c.id);
        chosen.emplace_back(c.id, limits.fuse_max > 1 && c.trainer ? c.id : 0);
        if (limits.fuse_max > 1 && c.trainer) {
          // Runnable runs of the same batch by seed (a batch is a gang or not
          // as a whole, so none of them is a gang).
          companions.Bind(1, now).Bind(2, c.batch_id);
          int fused = 1;
          while (fused < limits.fuse_max) {
            ASSIGN_OR_RETURN(bool row, companions.Step());
            if (!row) break;
            std::int64_t id = companions.Int(0);
            if (!taken.insert(id).second) continue;
            chosen.emplace_back(id, c.id);
            ++fused;
          }
          companions.Reset();
        }
      }
      if (static_cast<std::int64_t>(page.size()) < page_size) break;
      page_size = std::min<std::int64_t>(256, page_size * 2);
    }
    if (chosen.empty()) return out;

    ASSIGN_OR_RETURN(auto upd,
                     db_.Prepare("UPDATE runs SET state = 'leased', lease_token = " + std::string(kNextLeaseToken) + ", "
                                 "lease_expires_ms = ?, worker = ?, attempts = attempts + 1, "
                                 "machine_id = ?, started_ms = NULL, finished_ms = NULL, "
                                 "updated_ms = ? WHERE id = ?"));
    ASSIGN_OR_RETURN(auto info, db_.Prepare(RunQueue::kLeasedRunSelect));
    for (const auto& [id, group] : chosen) {
      TRY(upd.Bind(1, now + lease_ms).Bind(2, worker).Bind(3, machine).Bind(4, now).Bind(5, id)
              .Run());
      ASSIGN_OR_RETURN(auto l, RunQueue::ReadLeasedRun(info, id, now + lease_ms));
      l.group = group;
      out.push_back(std::move(l));
    }
    ASSIGN_OR_RETURN(auto busy, db_.Prepare("UPDATE machines SET last_busy_ms = ? WHERE id = ?"));
    TRY(busy.Bind(1, now).Bind(2, machine).Run());
    return out;
  });
}

Result<bool> Machines::MayLease(std::int64_t machine, TimeMs now) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT m.state != 'ready' OR EXISTS ("
                                       "SELECT 1 FROM batch_counts x WHERE x.state = 'queued' "
                                       "AND (SELECT b.pool FROM batches b WHERE b.id = "
                                       "x.batch_id) IN ('', m.pool)) OR EXISTS (SELECT 1 FROM "
                                       "runs r WHERE r.state = 'failed' AND r.not_before_ms <= "
                                       "?1 AND ") + kPoolOfR + " IN ('', m.pool)) "
                                                   "OR EXISTS (SELECT 1 FROM gang_members g "
                                                   "WHERE g.machine_id = m.id AND g.delivered "
                                                   "= 0) FROM machines m WHERE m.id = ?"));
  s.Bind(1, now).Bind(2, machine);
  ASSIGN_OR_RETURN(bool row, s.Step());
  return !row || s.Int(0) != 0;  // an unknown machine: LeaseForMachine says so
}

Result<std::vector<Machines::DemandRow>> Machines::RunnableDemand(TimeMs now) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT b.pool, b.gpus, sum(x.n), "
                                                   "COALESCE(CAST(json_extract(b.spec_json, "
                                                   "'$.resources.nodes') AS INTEGER), 0) AS "
                                                   "nodes FROM ") +
                                       kRunnableByBatch +
                                       " x JOIN batches b ON b.id = x.batch_id "
                                       "GROUP BY b.pool, b.gpus, nodes ORDER BY "
                                       "b.pool, b.gpus, nodes"));
  s.Bind(1, now);
  std::vector<DemandRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), static_cast<int>(s.Int(1)), static_cast<int>(s.Int(3)), s.Int(2)});
  }
  return out;
}

Result<std::optional<std::int64_t>> Machines::RunMachine(std::int64_t run_id) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT machine_id FROM runs WHERE id = ?"));
  s.Bind(1, run_id);
  ASSIGN_OR_RETURN(bool row, s.Step());
  if (!row) return Fail(ErrorKind::kNotFound, "run " + std::to_string(run_id) + " does not exist");
  return s.OptInt(0);
}

Status Machines::CheckRunLease(std::int64_t run_id, std::int64_t token) {
  return parts_.runs.CheckLease(run_id, token, "write to");
}

Status Machines::TouchWorker(std::int64_t machine, TimeMs now, bool busy) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE machines SET last_seen_ms = ?1, last_busy_ms = "
                                         "CASE WHEN ?2 THEN ?1 ELSE last_busy_ms END WHERE id = ?3"));
    return u.Bind(1, now).Bind(2, busy ? 1 : 0).Bind(3, machine).Run();
  });
}

Result<std::vector<Machines::MachineEvent>> Machines::MachineHistory(
    std::optional<std::int64_t> machine) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT machine_id, at_ms, state, live_leases, note FROM "
                                       "machine_events WHERE machine_id = ?1 OR ?1 IS NULL "
                                       "ORDER BY id"));
  s.Bind(1, machine);
  std::vector<MachineEvent> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Int(0), s.Int(1), s.Text(2), static_cast<int>(s.Int(3)), s.Text(4)});
  }
  return out;
}

// ---- pools ----------------------------------------------------------------------

Status Machines::SetWaitingNotes(const std::vector<WaitingNote>& notes, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    TRY(db_.Exec("DELETE FROM waiting_notes"));
    for (const auto& n : notes) {
      ASSIGN_OR_RETURN(auto u, db_.Prepare("INSERT INTO waiting_notes (pool, gpus, nodes, note, "
                                           "updated_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT (pool, "
                                           "gpus, nodes) DO UPDATE SET note = excluded.note, "
                                           "updated_ms = excluded.updated_ms"));
      TRY(u.Bind(1, n.pool).Bind(2, n.gpus).Bind(3, n.nodes).Bind(4, n.note).Bind(5, now).Run());
    }
    return {};
  });
}

Result<std::vector<Machines::WaitingBatch>> Machines::WaitingBatches(TimeMs now) {
  // Usually there is no note (every pool can serve its runs): then nothing
  // to join, however many batches are queued.
  {
    ASSIGN_OR_RETURN(auto any, db_.Prepare("SELECT EXISTS (SELECT 1 FROM waiting_notes)"));
    ASSIGN_OR_RETURN(bool row, any.Step());
    if (!row || any.Int(0) == 0) return std::vector<WaitingBatch>{};
  }
  ASSIGN_OR_RETURN(auto s, db_.Prepare(std::string("SELECT b.id, sum(x.n), w.note FROM ") +
                                       kRunnableByBatch +
                                       " x JOIN batches b ON b.id = x.batch_id "
                                       "JOIN waiting_notes w ON w.pool = b.pool AND "
                                       "w.gpus = b.gpus AND w.nodes = COALESCE("
                                       "CAST(json_extract(b.spec_json, "
                                       "'$.resources.nodes') AS INTEGER), 0) "
                                       "GROUP BY b.id, w.note ORDER BY b.id"));
  s.Bind(1, now);
  std::vector<WaitingBatch> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Int(0), s.Int(1), s.Text(2)});
  }
  return out;
}

Status Machines::SetPoolHealth(const PoolHealthRow& h, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO pool_health (pool, consecutive_failures, "
                                 "next_retry_ms, last_error, updated_ms) VALUES (?, ?, ?, ?, ?) "
                                 "ON CONFLICT (pool) DO UPDATE SET consecutive_failures = "
                                 "excluded.consecutive_failures, next_retry_ms = "
                                 "excluded.next_retry_ms, last_error = excluded.last_error, "
                                 "updated_ms = excluded.updated_ms"));
    return u.Bind(1, h.pool)
        .Bind(2, h.consecutive_failures)
        .Bind(3, h.next_retry_ms)
        .Bind(4, h.last_error)
        .Bind(5, now)
        .Run();
  });
}

Result<std::vector<Machines::PoolHealthRow>> Machines::PoolHealth() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT pool, consecutive_failures, next_retry_ms, "
                                       "last_error FROM pool_health ORDER BY pool"));
  std::vector<PoolHealthRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    out.push_back({s.Text(0), static_cast<int>(s.Int(1)), s.Int(2), s.Text(3)});
  }
  return out;
}

Result<std::vector<Machines::PoolStateRow>> Machines::PoolStates() {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT pool, failed_boots, next_boot_ms, failing, "
                                       "boot_error, log_tail, config_hash, spent_day, "
                                       "spent_month, budget_per_day, budget_per_month, cap, "
                                       "updated_ms FROM pool_state ORDER BY pool"));
  std::vector<PoolStateRow> out;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    PoolStateRow r;
    r.pool = s.Text(0);
    r.failed_boots = static_cast<int>(s.Int(1));
    r.next_boot_ms = s.Int(2);
    r.failing = s.Int(3) != 0;
    r.boot_error = s.Text(4);
    r.log_tail = s.Text(5);
    r.config_hash = s.Text(6);
    r.spent_day = s.Double(7);
    r.spent_month = s.Double(8);
    r.budget_per_day = s.Double(9);
    r.budget_per_month = s.Double(10);
    r.cap = s.Text(11);
    r.updated_ms = s.Int(12);
    out.push_back(std::move(r));
  }
  return out;
}

Status Machines::SetPoolBoots(const PoolStateRow& r, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO pool_state (pool, failed_boots, next_boot_ms, "
                                 "failing, boot_error, log_tail, config_hash, updated_ms) VALUES "
                                 "(?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pool) DO UPDATE SET "
                                 "failed_boots = excluded.failed_boots, next_boot_ms = "
                                 "excluded.next_boot_ms, failing = excluded.failing, boot_error = "
                                 "excluded.boot_error, log_tail = excluded.log_tail, config_hash "
                                 "= excluded.config_hash, updated_ms = excluded.updated_ms"));
    return u.Bind(1, r.pool)
        .Bind(2, r.failed_boots)
        .Bind(3, r.next_boot_ms)
        .Bind(4, r.failing ? 1 : 0)
        .Bind(5, r.boot_error)
        .Bind(6, r.log_tail)
        .Bind(7, r.config_hash)
        .Bind(8, now)
        .Run();
  });
}

Status Machines::SetPoolBudget(const PoolStateRow& r, TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO pool_state (pool, spent_day, spent_month, "
                                 "budget_per_day, budget_per_month, cap, updated_ms) VALUES "
                                 "(?, ?, ?, ?, ?, ?, ?) ON CONFLICT (pool) DO UPDATE SET "
                                 "spent_day = excluded.spent_day, spent_month = "
                                 "excluded.spent_month, budget_per_day = excluded.budget_per_day, "
                                 "budget_per_month = excluded.budget_per_month, cap = "
                                 "excluded.cap, updated_ms = excluded.updated_ms"));
    return u.Bind(1, r.pool)
        .Bind(2, r.spent_day)
        .Bind(3, r.spent_month)
        .Bind(4, r.budget_per_day)
        .Bind(5, r.budget_per_month)
        .Bind(6, r.cap)
        .Bind(7, now)
        .Run();
  });
}

Result<bool> Machines::ResetPoolBoots(const std::string& pool, TimeMs now) {
  bool changed = false;
  TRY(sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u, db_.Prepare("UPDATE pool_state SET failed_boots = 0, next_boot_ms "
                                         "= 0, failing = 0, updated_ms = ? WHERE pool = ? AND "
                                         "(failed_boots > 0 OR failing != 0)"));
    TRY(u.Bind(1, now).Bind(2, pool).Run());
    changed = db_.Changes() > 0;
    return Status{};
  }));
  return changed;
}

Status Machines::SetPoolTokenHash(const std::string& pool, const std::string& sha256_hex,
                               TimeMs now) {
  return sql::WithWriteTransaction(db_, [&]() -> Status {
    ASSIGN_OR_RETURN(auto u,
                     db_.Prepare("INSERT INTO pool_tokens (pool, sha256, created_ms) VALUES "
                                 "(?, ?, ?) ON CONFLICT (pool) DO UPDATE SET sha256 = "
                                 "excluded.sha256, created_ms = CASE WHEN pool_tokens.sha256 = "
                                 "excluded.sha256 THEN pool_tokens.created_ms ELSE "
                                 "excluded.created_ms END"));
    return u.Bind(1, pool).Bind(2, sha256_hex).Bind(3, now).Run();
  });
}

Result<std::optional<std::string>> Machines::PoolForTokenHash(const std::string& sha256_hex) {
  ASSIGN_OR_RETURN(auto s, db_.Prepare("SELECT pool, sha256 FROM pool_tokens ORDER BY pool"));
  std::optional<std::string> match;
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    std::string stored = s.Text(1);
    // Constant time in the hash's content: every byte of every row is compared.
    unsigned diff = stored.size() != sha256_hex.size() ? 1u : 0u;
    for (size_t i = 0; i < stored.size(); ++i) {
      unsigned char a = static_cast<unsigned char>(stored[i]);
      unsigned char b = i < sha256_hex.size() ? static_cast<unsigned char>(sha256_hex[i]) : 0;
      diff |= static_cast<unsigned>(a ^ b);
    }
    if (diff == 0 && !stored.empty() && !match) match = s.Text(0);
  }
  return match;
}

// ---- cost -----------------------------------------------------------------------

Result<std::vector<Machines::CostRow>> Machines::Costs(TimeMs now, bool per_batch,
                                                     int batch_limit) {
  std::vector<CostRow> out;
  if (!per_batch) {
    // Billed: boot to stop (or now); busy: run time on the pool's machines.
    // Stopped machines' billing comes summed per pool (pool_ended) and run
    // time that no longer moves per pool (pool_runs), both kept by triggers:
    // this reads the live machines and the running runs only.
    ASSIGN_OR_RETURN(
        auto s,
        db_.Prepare("SELECT p.pool, sum(p.machines), sum(p.billed_ms), sum(p.cost_ms), "
                    "COALESCE((SELECT busy_ms FROM pool_runs WHERE pool = p.pool), 0) + "
                    "(SELECT COALESCE(sum(max(0, ?1 - r.started_ms)), 0) FROM runs r "
                    "WHERE r.state = 'running' AND r.finished_ms IS NULL AND r.started_ms IS "
                    "NOT NULL AND (SELECT rm.pool FROM machines rm WHERE rm.id = r.machine_id) "
                    "= p.pool) "
                    "FROM (SELECT pool, machines, billed_ms, cost_ms FROM pool_ended UNION ALL "
                    "SELECT pool, 1, max(0, ?1 - booted_ms), max(0, ?1 - booted_ms) * hourly_cost "
                    "FROM machines WHERE stopped_ms IS NULL) p "
                    "GROUP BY p.pool HAVING sum(p.machines) > 0 ORDER BY p.pool"));
    s.Bind(1, now);
    while (true) {
      ASSIGN_OR_RETURN(bool row, s.Step());
      if (!row) break;
      CostRow c;
      c.pool = s.Text(0);
      c.machines = static_cast<int>(s.Int(1));
      c.billed_ms = s.Int(2);
      c.cost = s.Double(3) / 3'600'000.0;
      c.busy_ms = s.Int(4);
      out.push_back(std::move(c));
    }
    return out;
  }
  // Per batch: the run time on machines, each run charged its machine's
  // hourly cost divided by the machine's slots (runs share a machine).
  ASSIGN_OR_RETURN(
      auto s, db_.Prepare(std::string("SELECT r.batch_id, count(DISTINCT m.id), sum(") + kRunTime +
                          "), sum((" + kRunTime +
                          ") * 1.0 / max(1, m.slots)), sum((" + kRunTime +
                          ") * m.hourly_cost / max(1, m.slots)) FROM runs r JOIN machines m ON "
                          "m.id = r.machine_id " +
                          // The newest batches' runs through runs_by_batch.
                          (batch_limit > 0 ? "WHERE r.batch_id IN (SELECT id FROM batches ORDER "
                                             "BY id DESC LIMIT ?2) "
                                           : "") +
                          "GROUP BY r.batch_id ORDER BY r.batch_id"));
  s.Bind(1, now);
  if (batch_limit > 0) s.Bind(2, static_cast<std::int64_t>(batch_limit));
  while (true) {
    ASSIGN_OR_RETURN(bool row, s.Step());
    if (!row) break;
    CostRow c;
    c.batch_id = s.Int(0);
    c.machines = static_cast<int>(s.Int(1));
    c.busy_ms = s.Int(2);
    c.billed_ms = static_cast<TimeMs>(std::llround(s.Double(3)));
    c.cost = s.Double(4) / 3'600'000.0;
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace trainq
