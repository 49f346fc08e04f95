// `trainq mlflow export --since 30d` (issue 43; agent/triggers/mlflow.h,
// docs/mlflow.md): back-fills the MLflow tracking server with the batches
// that finished before the export was set up.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <iostream>
#include <memory>

#include "agent/cli/cli.h"
#include "agent/triggers/mlflow.h"
#include "agent/triggers/server_config.h"
#include "core/http_client.h"
#include "core/strings.h"
#include "queue/outbox.h"
#include "queue/sqlite.h"
#include "queue/store.h"

namespace trainq {

namespace {

struct MlflowExportOptions {
  std::string config;
  std::string db;
  std::string since = "30d";
  std::string data_dir;  // serve's --data-dir ("": beside the store)
};

Status CmdMlflowExport(const MlflowExportOptions& o, const Clock& clock, std::ostream& out) {
  ASSIGN_OR_RETURN(auto config, LoadServerConfig(o.config));
  if (!config.MlflowAny()) {
    return Fail(ErrorKind::kInvalidArgument,
                o.config + ": no `mlflow:` section, global or in a repository (docs/mlflow.md)");
  }
  auto secs = ParseDurationSeconds(o.since);
  if (!secs) return Fail(ErrorKind::kInvalidArgument, "--since: " + secs.error().message);
  StoreOptions so;
  so.create = false;
  ASSIGN_OR_RETURN(auto store, Store::Open(o.db, so));
  CurlHttpClient http;
  MlflowOptions mo;
  // serve's default data dir (beside the store): it maps a watched
  // repository's mirror to its entry and so to its own `mlflow:`.
  // With a PostgreSQL store (no file), serve's default is ./trainq-data.
  std::filesystem::path data = o.data_dir;
  if (data.empty()) {
    data = sql::IsPostgresUrl(o.db) ? std::filesystem::path("trainq-data")
                                    : std::filesystem::absolute(o.db).parent_path() / "trainq-data";
  }
  mo.data_dir = std::filesystem::absolute(data).string();
  MlflowExporter ex(store, config, http, clock, mo);
  const TimeMs now = clock.Now();
  ASSIGN_OR_RETURN(int queued, ex.EnqueueSince(now - *secs * 1000));
  out << "queued " << queued << " finished batch(es) since " << FormatTimestamp(now - *secs * 1000)
      << " UTC for " << (config.mlflow.enabled() ? UrlForLog(config.mlflow.tracking_uri)
                                                 : std::string("the repositories' servers"))
      << "\n";
  // Export what is due now; one that fails waits for its backoff (serve's
  // exporter, or this command run again, takes it up then).
  int exported = 0;
  while (true) {
    ASSIGN_OR_RETURN(auto due, store.outbox().Due(std::string(kMlflowTarget), clock.Now(), 1));
    if (due.empty()) break;
    TRY(ex.Send(1));
    ASSIGN_OR_RETURN(auto row, store.outbox().Find(due[0].target, due[0].event_key));
    if (row && row->state == "delivered") {
      ++exported;
      continue;
    }
    if (row) out << due[0].event_key << ": " << row->last_error << "\n";
    if (row && row->state == "pending") break;  // the server fails: stop here
  }
  ASSIGN_OR_RETURN(auto sums, store.outbox().Summaries(std::string(kMlflowTarget)));
  out << "exported " << exported << " now";
  for (const auto& s : sums) {
    out << "; in all " << s.delivered << " exported, " << s.pending << " pending, " << s.gave_up
        << " given up";
  }
  out << "\n";
  for (const auto& s : sums) {
    if (s.pending > 0) {
      return Fail(ErrorKind::kUnavailable,
                  std::to_string(s.pending) + " batch(es) not exported yet (serve's exporter "
                  "retries them with backoff; or run this again)");
    }
  }
  return {};
}

}  // namespace

void AddMlflowCommands(CLI::App& app, const CliContext& ctx) {
  auto* c = app.add_subcommand("mlflow", "Export to an MLflow tracking server (server.yaml `mlflow:`)");
  c->require_subcommand(1);
  auto o = std::make_shared<MlflowExportOptions>();
  auto* e = c->add_subcommand("export", "Export the batches that finished in a window (a back-fill)");
  e->add_option("--config", o->config, "The server config (server.yaml)")->required();
  e->add_option("--since", o->since, "Batches queued in this window, e.g. 30d (default 30d)");
  e->add_option("--data-dir", o->data_dir,
                "serve's --data-dir, if not the default beside the database (maps repositories "
                "to their own mlflow:)");
  e->callback([=] {
    o->db = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdMlflowExport(*o, *ctx.clock, std::cout));
  });
}

}  // namespace trainq
