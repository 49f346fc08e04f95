// The store's SQLite schema: the list of migrations, one per schema version,
// and applying them. Store::Open (queue/store.h) brings every file it opens to
// kStoreSchemaVersion; a file written by a newer trainq is refused.
#pragma once

#include "core/result.h"
#include "queue/sqlite.h"

namespace trainq {

inline constexpr int kStoreSchemaVersion = 22;

// A PostgreSQL database starts at this version from kPostgresBaseline
// (queue/schema_postgres.cc): the tables of a SQLite store at that version.
// Migrations after it are shared (docs/design/postgres.md).
inline constexpr int kPostgresBaselineVersion = 21;
extern const char* const kPostgresBaseline;

// Applies migrations [from, to) to a raw connection, each in its own write
// transaction. Exposed for the migration tests.
Status ApplyMigrations(sql::Db& db, int from, int to);

// PRAGMA user_version (on PostgreSQL: trainq_schema_version, 0 in a
// database without trainq's tables), or -1 when it cannot be read.
int SchemaVersion(sql::Db& db);

// Brings `db` to kStoreSchemaVersion; kInvalidArgument for a newer schema.
Status MigrateToCurrent(sql::Db& db);

}  // namespace trainq
