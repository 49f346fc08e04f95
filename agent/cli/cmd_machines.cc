// `trainq machines`: every machine the fleet booted (or a worker registered),
// its state, age, idle time, runs done and cost; then per-pool totals of
// billed machine time (boot to stop) against busy time (runs on it).
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/cli/credentials.h"
#include "agent/results/status.h"
#include "agent/results/table.h"
#include "core/strings.h"
#include "queue/machines.h"
#include "queue/store.h"

using nlohmann::json;

namespace trainq {


Status CmdMachines(const MachinesOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  TimeMs now = clock.Now();
  ASSIGN_OR_RETURN(auto machines, store.machines().List(o.all));
  ASSIGN_OR_RETURN(auto costs, store.machines().Costs(now, false));
  ASSIGN_OR_RETURN(auto health, store.machines().PoolHealth());
  std::vector<Machines::CostRow> batch_costs;
  if (o.batches) {
    ASSIGN_OR_RETURN(batch_costs, store.machines().Costs(now, true, o.batch_limit));
  }

  if (o.json) {
    json j;
    j["now_ms"] = now;
    j["machines"] = json::array();
    for (const auto& m : machines) j["machines"].push_back(MachineJson(m, now));
    j["pools"] = json::array();
    for (const auto& c : costs) {
      json p = {{"pool", c.pool},         {"machines", c.machines}, {"billed_ms", c.billed_ms},
                {"busy_ms", c.busy_ms},   {"cost", c.cost}};
      for (const auto& h : health) {
        if (h.pool == c.pool) {
          p["provider_failures"] = h.consecutive_failures;
          p["provider_error"] = h.last_error;
        }
      }
      j["pools"].push_back(p);
    }
    if (o.batches) {
      j["batches"] = json::array();
      for (const auto& c : batch_costs) {
        j["batches"].push_back({{"batch", c.batch_id}, {"busy_ms", c.busy_ms}, {"cost", c.cost}});
      }
    }
    out << j.dump(2) << "\n";
    return Status{};
  }

  if (machines.empty()) {
    out << "no machines" << (o.all ? "" : " running (trainq machines --all shows stopped ones)")
        << "\n";
  } else {
    Table t({"ID", "POOL", "NAME", "STATE", "AGE", "IDLE", "RUNS", "BUSY", "BILLED", "COST",
             "SANDBOX"});
    std::vector<std::string> sandbox_notes;  // the machines whose runs are not fully sandboxed
    for (const auto& m : machines) {
      TimeMs billed = Billed(m, now);
      const json mj = MachineJson(m, now);
      const std::string sandbox =
          mj["sandbox"].is_string() ? mj["sandbox"].get<std::string>() : "-";
      const std::string name = m.name.empty() ? m.provider_id : m.name;
      if (mj["sandbox_note"].is_string() && sandbox != "bwrap" && sandbox != "-") {
        sandbox_notes.push_back("sandbox " + sandbox + " on " + name + ": " +
                                mj["sandbox_note"].get<std::string>());
      }
      t.Add({std::to_string(m.id), m.pool, name,
             m.lost()
                 ? "lost (" + m.last_error.substr(kLostPrefix.size()) + ")"
                 : m.state + (m.last_error.empty() || (m.state != "failed" && m.state != "booting")
                                  ? ""
                                  : " (" + m.last_error + ")"),
             FormatDuration(billed), Idle(m, now), std::to_string(m.runs_done),
             FormatDuration(m.busy_ms), FormatDuration(billed),
             Money(static_cast<double>(billed) / 3.6e6 * m.hourly_cost), sandbox});
    }
    out << t.Render();
    for (const auto& n : sandbox_notes) out << n << "\n";
  }
  for (const auto& c : costs) {
    // Busy is run time: a machine with several slots can be busy longer than billed.
    out << "pool " << c.pool << ": " << c.machines << " machine(s) booted; billed "
        << FormatDuration(c.billed_ms) << ", run time " << FormatDuration(c.busy_ms) << ", cost "
        << Money(c.cost) << "\n";
  }
  for (const auto& h : health) {
    if (h.consecutive_failures > 0) {
      out << "pool " << h.pool << ": provider failing (" << h.consecutive_failures
          << " call(s) in a row): " << h.last_error << "\n";
    }
  }
  if (o.batches && !batch_costs.empty()) {
    Table t({"BATCH", "RUN TIME", "COST"});
    for (const auto& c : batch_costs) {
      t.Add({std::to_string(c.batch_id), FormatDuration(c.busy_ms), Money(c.cost)});
    }
    out << "per batch (run time on machines x hourly cost / slots"
        << (o.batch_limit > 0 ? ", of the newest " + std::to_string(o.batch_limit) +
                                    " batches; --batch-limit 0 for all"
                              : "")
        << "):\n"
        << t.Render("  ");
  }
  return Status{};
}

Status CmdPoolsReset(const PoolsResetOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  ASSIGN_OR_RETURN(auto states, store.machines().PoolStates());
  const Machines::PoolStateRow* row = nullptr;
  for (const auto& s : states) {
    if (s.pool == o.pool) row = &s;
  }
  if (!row || (row->failed_boots == 0 && !row->failing)) {
    out << "pool " << o.pool << ": no failed boots on record; nothing to reset\n";
    return Status{};
  }
  const int failed = row->failed_boots;
  const bool failing = row->failing;
  ASSIGN_OR_RETURN(bool changed, store.machines().ResetPoolBoots(o.pool, clock.Now()));
  if (!changed) {
    out << "pool " << o.pool << ": no failed boots on record; nothing to reset\n";
    return Status{};
  }
  AuditLocal(store, "pool_reset", "pool " + o.pool, std::to_string(failed) + " failed boot(s)",
             clock.Now());
  out << "pool " << o.pool << ": " << failed << " failed boot(s) forgotten"
      << (failing ? "; it was failing and boots again" : "")
      << " (a running `trainq serve` sees this at its next pass)\n";
  return Status{};
}

// `trainq machines` and `trainq pools reset`.
void AddMachinesCommands(CLI::App& app, const CliContext& ctx) {
  // machines
  auto machines = std::make_shared<MachinesOptions>();
  auto* c_machines = app.add_subcommand(
      "machines", "Machines of the pools: state, age, idle time, runs done, billed time and cost");
  c_machines->add_flag("--all", machines->all, "Stopped machines too");
  c_machines->add_flag("--batches", machines->batches, "Cost per batch");
  c_machines->add_option("--batch-limit", machines->batch_limit,
                         "With --batches: the newest this many batches (0: all)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  c_machines->add_flag("--json", machines->json, "Print as JSON");
  c_machines->callback([=] {
    machines->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdMachines(*machines, *ctx.clock, std::cout));
  });

  // pools reset
  auto pools_reset = std::make_shared<PoolsResetOptions>();
  auto* c_pools = app.add_subcommand("pools", "Pools of machines: `trainq pools reset NAME`");
  c_pools->require_subcommand(1);
  auto* c_pools_reset = c_pools->add_subcommand(
      "reset", "Forget a pool's failed boots, so that a failing pool boots machines again");
  c_pools_reset->add_option("pool", pools_reset->pool, "The pool's name")->required();
  c_pools_reset->callback([=] {
    pools_reset->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdPoolsReset(*pools_reset, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
