// `trainq db copy` and `trainq db check` (queue/store_copy.h): moving a
// SQLite store to PostgreSQL whole, and a check that answers for both
// stores (docs/deployment.md, "PostgreSQL").
#include "agent/cli/cmd_db.h"

#include <CLI/CLI.hpp>
#include <iostream>
#include <memory>

#include "queue/sqlite.h"
#include "queue/store_copy.h"

namespace trainq {

namespace {

struct DbCopyOptions {
  std::string from;
  std::string to;
};

Status CmdDbCopy(const DbCopyOptions& o, std::ostream& out) {
  if (o.to.empty()) {
    return Fail(ErrorKind::kInvalidArgument,
                "--to: the PostgreSQL database to copy into (postgres://USER@HOST:PORT/DB) is "
                "required");
  }
  ASSIGN_OR_RETURN(auto report, CopyStore(o.from, o.to));
  out << "copied " << o.from << " to " << sql::RedactUrl(o.to) << " (schema version "
      << report.schema_version << "): " << report.total_rows() << " rows in "
      << report.tables.size() << " tables, each table's count the same on both sides\n";
  for (const auto& t : report.tables) {
    if (t.rows > 0) out << "  " << t.table << " " << t.rows << "\n";
  }
  return {};
}

Status CmdDbCheck(const std::string& db, std::ostream& out, int* exit_code) {
  ASSIGN_OR_RETURN(auto r, CheckStore(db));
  out << r.location << ": " << (r.ok() ? "ok" : "PROBLEMS") << "\n"
      << "  store: " << (r.postgres ? "PostgreSQL" : "SQLite") << ", schema version "
      << r.schema_version << "\n"
      << "  integrity: " << r.integrity << "\n";
  std::int64_t total = 0;
  for (const auto& t : r.tables) total += t.rows;
  out << "  tables: " << r.tables.size() << ", " << total << " rows";
  for (const auto& name : {"runs", "batches", "metrics", "pushes", "machines"}) {
    for (const auto& t : r.tables) {
      if (t.table == name) out << "; " << name << " " << t.rows;
    }
  }
  out << "\n";
  for (const auto& p : r.problems) out << "  problem: " << p << "\n";
  if (!r.ok()) *exit_code = 1;
  return {};
}

}  // namespace

void AddDbCommands(CLI::App& app, const CliContext& ctx) {
  auto* db = app.add_subcommand("db", "Copy a store to PostgreSQL, check a store");
  db->require_subcommand(1);

  auto copy = std::make_shared<DbCopyOptions>();
  auto* c_copy = db->add_subcommand(
      "copy",
      "Copy a SQLite store whole into an empty PostgreSQL database: every table with its "
      "ids, then each table's rows counted on both sides (stop serve first)");
  c_copy->add_option("--from", copy->from, "The SQLite store (default: --db)");
  c_copy->add_option("--to", copy->to,
                     "The PostgreSQL database, postgres://USER@HOST:PORT/DB (empty, or "
                     "holding only an empty trainq schema); its password from PGPASSFILE");
  c_copy->callback([=] {
    DbCopyOptions o = *copy;
    if (o.from.empty()) o.from = *ctx.db;
    *ctx.exit_code = ReportStatus(CmdDbCopy(o, std::cout));
  });

  auto* c_check = db->add_subcommand(
      "check",
      "Check the store (--db: SQLite file or postgres:// URL): reachable, this trainq's "
      "schema with every table and column, SQLite's quick_check, rows per table");
  c_check->callback([=] {
    int code = 0;
    auto st = CmdDbCheck(*ctx.db, std::cout, &code);
    *ctx.exit_code = st ? code : ReportStatus(st);
  });
}

}  // namespace trainq
