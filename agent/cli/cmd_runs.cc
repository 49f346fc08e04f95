// `trainq runs`, `cancel`, `retry` and `init`: a look at runs and what
// changes them by hand.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "agent/cli/cli.h"
#include "agent/cli/credentials.h"
#include "agent/cli/read_client.h"
#include "agent/results/retry.h"
#include "agent/results/status.h"
#include "agent/results/table.h"
#include "core/strings.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace trainq {

namespace {

// `trainq init`: the one command that writes a schema into a file that exists
// but holds none (Store::Open refuses such a file everywhere else); a trainq
// database is left as it is.
Status CmdInit(const std::string& db, std::ostream& out) {
  std::error_code ec;
  const bool postgres = sql::IsPostgresUrl(db);
  const std::string shown = sql::RedactUrl(db);
  if (postgres) {
    // A PostgreSQL database exists (the operator made it); trainq's schema
    // is there already, or written now into the empty database.
    ASSIGN_OR_RETURN(auto probe, sql::Db::Open(db, false, 5000));
    ASSIGN_OR_RETURN(auto count, probe.Prepare("SELECT count(*) FROM information_schema.tables "
                                               "WHERE table_schema = current_schema()"));
    ASSIGN_OR_RETURN(bool row, count.Step());
    const bool before = row && count.Int(0) > 0;
    ASSIGN_OR_RETURN(auto store, Store::Open(db));
    out << shown << ": "
        << (before ? "already a trainq database" : "wrote a new trainq schema into the database")
        << " (schema version " << store.schema_version() << ")\n";
    return {};
  }
  const bool existed = fs::exists(db, ec);
  StoreOptions so;
  so.initialize_existing = true;
  // A trainq database opens as it is; anything else that is not an empty
  // file fails the same way below.
  const bool before = existed && Store::Open(db, {.create = false}).has_value();
  ASSIGN_OR_RETURN(auto store, Store::Open(db, so));
  if (before) {
    out << db << ": already a trainq database (schema version " << store.schema_version()
        << "); nothing changed\n";
  } else {
    out << db << ": " << (existed ? "initialised a new trainq database in the empty file"
                                  : "created a new trainq database")
        << " (schema version " << store.schema_version() << ")\n";
  }
  return {};
}


}  // namespace

Status CmdRuns(const RunsOptions& o, std::ostream& out) {
  std::optional<RunState> state;
  if (!o.state.empty()) {
    state = ParseRunState(o.state);
    if (!state) {
      return Fail(ErrorKind::kInvalidArgument,
                  "--state: unknown state '" + o.state +
                      "' (queued, leased, running, succeeded, failed, dead, cancelled)");
    }
  }
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  if (o.batch) {
    ASSIGN_OR_RETURN(auto b, store.runs().Batch(*o.batch));
    if (!b) return Fail(ErrorKind::kNotFound, "batch " + std::to_string(*o.batch) +
                                                  " does not exist");
  }
  ASSIGN_OR_RETURN(auto runs, store.runs().Runs(o.batch, state, o.limit));
  if (o.json) {
    json j = json::array();
    for (const auto& r : runs) j.push_back(RunJson(r));
    out << j.dump(2) << "\n";
    return {};
  }
  if (runs.empty()) {
    out << "no runs\n";
    return {};
  }
  Table t({"RUN", "BATCH", "EXPERIMENT", "SEED", "STATE", "ATTEMPTS", "METRIC", "NOTE"});
  for (const auto& r : runs) {
    std::string note = r.last_error;
    if (r.state == RunState::kFailed && r.not_before_ms) {
      note = "retry at " + FormatTimestamp(*r.not_before_ms) + " UTC: " + note;
    }
    t.Add({std::to_string(r.id), std::to_string(r.batch_id), r.experiment,
           std::to_string(r.seed), std::string(RunStateName(r.state)),
           std::to_string(r.attempts) + "/" + std::to_string(r.max_attempts),
           r.metric_value ? FormatDouble(*r.metric_value, 4) : "-", OneLine(note, 120)});
  }
  out << t.Render();
  return {};
}

Status CmdCancel(const CancelOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
  if (o.run) {
    ASSIGN_OR_RETURN(int n, store.runs().CancelRun(o.id, clock.Now()));
    if (n) AuditLocal(store, "cancel_run", "run " + std::to_string(o.id), "1 run(s)", clock.Now());
    if (o.json) {
      out << json{{"run", o.id}, {"cancelled", n}}.dump(2) << "\n";
      return {};
    }
    out << (n ? "run " + std::to_string(o.id) + " cancelled\n"
              : "run " + std::to_string(o.id) + " had already ended; nothing to cancel\n");
    return {};
  }
  ASSIGN_OR_RETURN(auto batch, store.runs().Batch(o.id));
  if (batch && batch->reuses_batch_id) {
    // Its runs are another batch's: cancelling them here would take them
    // from every commit that reuses them, so that is said, not done.
    std::int64_t source = *batch->reuses_batch_id;
    if (o.json) {
      out << json{{"batch", o.id}, {"cancelled", 0}, {"reuses_batch", source}}.dump(2) << "\n";
      return {};
    }
    out << "batch " << o.id << ": nothing to cancel: it has no runs of its own, it reuses batch "
        << source << "'s (at " << ShortSha(batch->reused_from_sha) << "); `trainq cancel "
        << source << "` cancels those, for every commit that reuses them\n";
    return {};
  }
  ASSIGN_OR_RETURN(int n, store.runs().CancelBatch(o.id, clock.Now()));
  if (n) {
    AuditLocal(store, "cancel_batch", "batch " + std::to_string(o.id),
               std::to_string(n) + " run(s)", clock.Now());
  }
  if (o.json) {
    out << json{{"batch", o.id}, {"cancelled", n}}.dump(2) << "\n";
    return {};
  }
  out << "batch " << o.id << ": " << n << " run(s) cancelled\n";
  return {};
}

Status CmdRetry(const RetryOptions& o, const Clock& clock, std::ostream& out) {
  json retried;
  if (!o.server.empty()) {
    ASSIGN_OR_RETURN(auto token, ReadAdminToken(o.token_file, o.server));
    ReadClient client(o.server, token);
    ASSIGN_OR_RETURN(retried, client.Retry(o.id, o.batch));
  } else {
    ASSIGN_OR_RETURN(auto store, OpenExisting(o.db));
    ASSIGN_OR_RETURN(retried, RetryRuns(store, o.id, o.batch, clock.Now(), LocalWho()));
    if (!retried["retried"].empty()) {
      AuditLocal(store, o.batch ? "retry_batch" : "retry_run",
                 std::string(o.batch ? "batch " : "run ") + std::to_string(o.id),
                 std::to_string(retried["retried"].size()) + " run(s)", clock.Now());
    }
  }
  if (o.json) {
    out << retried.dump(2) << "\n";
  } else {
    PrintRetried(retried, o.id, o.batch, out);
  }
  return {};
}

void AddRunsCommand(CLI::App& app, const CliContext& ctx) {
  auto runs = std::make_shared<RunsOptions>();
  auto* c_runs = app.add_subcommand("runs", "List runs with their state, metric and last error");
  c_runs->add_option("--batch,-b", runs->batch, "Only this batch");
  c_runs->add_option("--state", runs->state, "Only runs in this state");
  c_runs->add_option("--limit", runs->limit, "At most this many, the newest (0: all)");
  c_runs->add_flag("--json", runs->json, "Print as JSON");
  c_runs->callback([=] {
    runs->db = *ctx.db;
    // An unknown --state is a usage error: exit 2, as documented.
    bool bad_state = !runs->state.empty() && !ParseRunState(runs->state);
    *ctx.exit_code = ReportStatus(CmdRuns(*runs, std::cout)) + (bad_state ? 1 : 0);
  });
}

void AddCancelCommand(CLI::App& app, const CliContext& ctx) {
  auto cancel = std::make_shared<CancelOptions>();
  auto* c_cancel = app.add_subcommand("cancel", "Cancel a batch (or one run with --run)");
  c_cancel->add_option("ID", cancel->id, "Batch id (run id with --run)")->required();
  c_cancel->add_flag("--run", cancel->run, "ID names a run");
  c_cancel->add_flag("--json", cancel->json, "Print what was cancelled as JSON");
  c_cancel->callback([=] {
    cancel->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdCancel(*cancel, *ctx.clock, std::cout));
  });
}

void AddRetryCommand(CLI::App& app, const CliContext& ctx) {
  auto retry = std::make_shared<RetryOptions>();
  auto* c_retry = app.add_subcommand(
      "retry", "Put a dead or cancelled run back in the queue (every dead run of a batch with "
               "--batch)");
  c_retry->add_option("ID", retry->id, "Run id (batch id with --batch)")->required();
  c_retry->add_flag("--batch", retry->batch, "ID names a batch: retry each of its dead runs");
  c_retry->add_flag("--json", retry->json, "Print what was retried as JSON");
  AddServerOptions(c_retry, &retry->server, &retry->token_file, ServerRole::kAdmin);
  c_retry->callback([=] {
    retry->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdRetry(*retry, *ctx.clock, std::cout));
  });
}

void AddInitCommand(CLI::App& app, const CliContext& ctx) {
  auto* c_init = app.add_subcommand(
      "init", "Create the database (--db), or write the schema into an existing empty file");
  c_init->callback([=] { *ctx.exit_code = ReportStatus(CmdInit(*ctx.db, std::cout)); });
}

}  // namespace trainq
