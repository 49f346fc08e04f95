// The PostgreSQL side of the store's seam (queue/postgres.h,
// docs/design/postgres.md): the translation of the store's SQL, URLs in
// messages, and the baseline schema against SQLite's.
#include "queue/postgres.h"

#include <catch2/catch.hpp>
#include <map>
#include <string>
#include <vector>

#include "queue/duty_lock.h"
#include "queue/run_queue.h"
#include "queue/sqlite.h"
#include "queue/store.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace trainq {
namespace {

std::string Pg(std::string_view sql, int* params = nullptr) {
  return sql::TranslateForPostgres(sql, params);
}

TEST_CASE("The store's SQL is translated for PostgreSQL once, leaving literals alone",
          "[postgres]") {
  int n = 0;
  CHECK(Pg("SELECT a FROM t WHERE b = ? AND c = ?", &n) ==
        "SELECT a FROM t WHERE b = $1 AND c = $2");
  CHECK(n == 2);
  CHECK(Pg("UPDATE t SET a = ?2 WHERE id = ?1 OR ref IS NOT ?2", &n) ==
        "UPDATE t SET a = $2 WHERE id = $1 OR ref IS DISTINCT FROM $2");
  CHECK(n == 2);
  CHECK(Pg("SELECT '?', \"a?\" FROM t -- what?\nWHERE x = ?", &n) ==
        "SELECT '?', \"a?\" FROM t -- what?\nWHERE x = $1");
  CHECK(n == 1);
  CHECK(Pg("SELECT max(a, b), min(x, 1), max(c) FROM t") ==
        "SELECT GREATEST(a, b), LEAST(x, 1), max(c) FROM t");
  CHECK(Pg("SELECT max(0, COALESCE(f(a, b), 0) - c)") ==
        "SELECT GREATEST(0, COALESCE(f(a, b), 0) - c)");
  CHECK(Pg("x IS NULL AND y IS NOT NULL AND z IS ? AND w IS NOT TRUE") ==
        "x IS NULL AND y IS NOT NULL AND z IS NOT DISTINCT FROM $1 AND w IS NOT TRUE");
  CHECK(Pg("INSERT OR IGNORE INTO t (a) VALUES (?);") ==
        "INSERT INTO t (a) VALUES ($1) ON CONFLICT DO NOTHING");
  CHECK(Pg("SELECT name FROM t WHERE name LIKE ? ESCAPE '\\'") ==
        "SELECT name FROM t WHERE name ILIKE $1 ESCAPE '\\'");
  CHECK(Pg("SELECT CAST(x AS INTEGER), CAST(y AS REAL), random() & 7, t.max") ==
        "SELECT CAST(x AS BIGINT), CAST(y AS DOUBLE PRECISION), trainq_random() & 7, t.max");
  CHECK(Pg("SELECT id FROM (SELECT id FROM runs) ORDER BY id") ==
        "SELECT id FROM (SELECT id FROM runs) AS trainq_sub1 ORDER BY id");
  CHECK(Pg("SELECT x FROM (SELECT 1 AS x) y JOIN (SELECT 2) WHERE z IN (SELECT 3)") ==
        "SELECT x FROM (SELECT 1 AS x) y JOIN (SELECT 2) AS trainq_sub1 WHERE z IN (SELECT 3)");
  CHECK(Pg("SELECT a FROM t INDEXED BY t_by_a WHERE a = ?") == "SELECT a FROM t  WHERE a = $1");
  CHECK(Pg("SELECT a FROM t WHERE +t.state = ? AND b = a + 1") ==
        "SELECT a FROM t WHERE t.state = $1 AND b = a + 1");
  CHECK(Pg("SELECT 1e5, 'it''s ? here', ?", &n) == "SELECT 1e5, 'it''s ? here', $1");
}

TEST_CASE("A PostgreSQL URL is printed without its password", "[postgres]") {
  CHECK(sql::IsPostgresUrl("postgres://u@h/db"));
  CHECK(sql::IsPostgresUrl("postgresql://u@h/db"));
  CHECK_FALSE(sql::IsPostgresUrl("/var/lib/trainq/q.db"));
  CHECK(sql::RedactUrl("postgres://ci:s3cret@db.example:5432/trainq?sslmode=verify-full") ==
        "postgres://ci:***@db.example:5432/trainq?sslmode=verify-full");
  CHECK(sql::RedactUrl("postgresql://ci@db/trainq?password=s3cret&sslmode=require") ==
        "postgresql://ci@db/trainq?password=***&sslmode=require");
  CHECK(sql::RedactUrl("postgresql://ci@db/trainq?sslmode=require") ==
        "postgresql://ci@db/trainq?sslmode=require");
  CHECK(sql::RedactUrl("q.db") == "q.db");
}

// The columns of every table: name -> "type null?". A key column counts as
// NOT NULL on SQLite too (PostgreSQL makes every key column NOT NULL; SQLite
// only says so of a column declared NOT NULL).
std::map<std::string, std::string> SqliteColumns(sql::Db& db) {
  std::map<std::string, std::string> out;
  auto t = db.Prepare(
                 "SELECT m.name, p.name, p.type, p.\"notnull\" OR p.pk > 0 FROM sqlite_master m, "
                 "pragma_table_info(m.name) p WHERE m.type = 'table' ORDER BY 1, 2")
               .value();
  while (t.Step().value()) {
    std::string type = t.Text(2);
    type = type == "INTEGER" ? "bigint" : type == "REAL" ? "double precision" : "text";
    out[t.Text(0) + "." + t.Text(1)] = type + (t.Int(3) ? " not null" : "");
  }
  return out;
}

std::map<std::string, std::string> PostgresColumns(sql::Db& db) {
  std::map<std::string, std::string> out;
  auto t = db.Prepare(
                 "SELECT table_name, column_name, data_type, is_nullable FROM "
                 "information_schema.columns WHERE table_schema = current_schema() "
                 "AND table_name != 'trainq_schema_version' "
                 "AND NOT (table_name = 'metrics' AND column_name = 'rowid') ORDER BY 1, 2")
               .value();
  while (t.Step().value()) {
    out[t.Text(0) + "." + t.Text(1)] = t.Text(2) + (t.Text(3) == "NO" ? " not null" : "");
  }
  return out;
}

TEST_CASE("postgres schema has the columns of the SQLite schema", "[postgres]") {
  if (!testing::TestingPostgres()) {
    WARN("runs with TRAINQ_TEST_DB=postgres (ctest -R queue_tests_postgres)");
    return;
  }
  testing::TempDir dir;
  auto lite_path = (dir.path() / "lite.db").string();
  REQUIRE(Store::Open(lite_path));
  auto pg_url = testing::StoreLocation(dir, "pg.db");
  auto pg_store = Store::Open(pg_url);
  REQUIRE(pg_store);
  CHECK(pg_store->schema_version() == Store::kSchemaVersion);
  auto lite = sql::Db::Open(lite_path, false, 1000).value();
  auto pg = sql::Db::Open(pg_url, false, 1000).value();
  auto lite_columns = SqliteColumns(lite);
  auto pg_columns = PostgresColumns(pg);
  CHECK(lite_columns.size() > 100);
  std::vector<std::string> differences;
  for (const auto& [column, type] : lite_columns) {
    auto it = pg_columns.find(column);
    if (it == pg_columns.end()) {
      differences.push_back(column + ": missing on PostgreSQL");
    } else if (it->second != type) {
      differences.push_back(column + ": " + type + " on SQLite, " + it->second + " on PostgreSQL");
    }
  }
  for (const auto& [column, type] : pg_columns) {
    if (!lite_columns.contains(column)) differences.push_back(column + ": only on PostgreSQL");
  }
  CHECK(differences == std::vector<std::string>{});
}

TEST_CASE("A PostgreSQL connection error names the database without its password",
          "[postgres]") {
  if (!testing::TestingPostgres()) {
    WARN("runs with TRAINQ_TEST_DB=postgres (ctest -R queue_tests_postgres)");
    return;
  }
  testing::TempDir dir;
  std::string url = testing::StoreLocation(dir, "q.db");
  // Another database on the same server, which does not exist.
  auto slash = url.rfind('/');
  auto query = url.find('?');
  std::string missing = url.substr(0, url.find("@")) + ":hunter2" +
                        url.substr(url.find("@"), slash + 1 - url.find("@")) + "nosuchdb" +
                        url.substr(query);
  auto store = Store::Open(missing);
  REQUIRE_FALSE(store);
  CHECK(store.error().message.find("nosuchdb") != std::string::npos);
  CHECK(store.error().message.find("hunter2") == std::string::npos);
  CHECK(store.error().message.find(":***@") != std::string::npos);
  // The same database opened twice is one store (a second process).
  auto a = Store::Open(url);
  REQUIRE(a);
  auto b = Store::Open(url);
  REQUIRE(b);
  CHECK(b->schema_version() == Store::kSchemaVersion);
}

TEST_CASE("The data version moves when another connection commits, on either store",
          "[postgres]") {
  testing::TempDir dir;
  std::string where = testing::StoreLocation(dir, "q.db");
  auto store = Store::Open(where).value();
  auto watcher = sql::Db::Open(where, false, 1000).value();
  auto before = watcher.DataVersion();
  REQUIRE(before);
  CommitInfo commit;
  commit.sha = std::string(40, 'a');
  BatchSpec spec;
  spec.experiment = "mlp";
  spec.command = "true";
  spec.repeats = 1;
  spec.timeout_s = 60;
  spec.max_attempts = 1;
  REQUIRE(store.runs().Submit("/repos/demo", commit, {spec}, 1000));
  auto after = watcher.DataVersion();
  REQUIRE(after);
  CHECK(*after != *before);
}

TEST_CASE("A PostgreSQL database written by a newer trainq, or holding other tables, is refused",
          "[postgres]") {
  if (!testing::TestingPostgres()) {
    WARN("runs with TRAINQ_TEST_DB=postgres (ctest -R queue_tests_postgres)");
    return;
  }
  testing::TempDir dir;
  std::string newer = testing::StoreLocation(dir, "newer.db");
  REQUIRE(Store::Open(newer));
  {
    auto db = sql::Db::Open(newer, false, 1000).value();
    REQUIRE(db.Exec("UPDATE trainq_schema_version SET version = 99"));
  }
  auto store = Store::Open(newer);
  REQUIRE_FALSE(store);
  CHECK(store.error().message.find("newer trainq") != std::string::npos);

  std::string other = testing::StoreLocation(dir, "other.db");
  {
    auto db = sql::Db::Open(other, false, 1000).value();
    REQUIRE(db.Exec("CREATE TABLE notes (x TEXT)"));
  }
  store = Store::Open(other);
  REQUIRE_FALSE(store);
  CHECK(store.error().message.find("not a trainq database") != std::string::npos);
  auto db = sql::Db::Open(other, false, 1000).value();
  auto tables = db.Prepare("SELECT count(*) FROM information_schema.tables "
                           "WHERE table_schema = current_schema()").value();
  REQUIRE(tables.Step().value());
  CHECK(tables.Int(0) == 1);  // nothing written
}

TEST_CASE(
    "The duties go to one process per store, and to another when the holder's "
    "connection ends",
    "[postgres]") {
  testing::TempDir dir;
  std::string where = testing::StoreLocation(dir, "duties.db");
  REQUIRE(Store::Open(where));
  DutyLock a(where), b(where);
  if (!testing::TestingPostgres()) {
    // SQLite: one serve owns the file, and always holds them.
    CHECK_FALSE(a.shared());
    CHECK(a.Hold().value());
    CHECK(b.Hold().value());
    return;
  }
  CHECK(a.shared());
  CHECK(a.Hold().value());
  CHECK_FALSE(b.Hold().value());
  CHECK(a.Hold().value());  // the holder's check: still held, not taken twice
  CHECK_FALSE(b.Hold().value());
  // Another store (schema) of the same database has duties of its own.
  std::string other = testing::StoreLocation(dir, "other.db");
  REQUIRE(Store::Open(other));
  DutyLock c(other);
  CHECK(c.Hold().value());
  // The holder's session ends (as when its process dies): the next try of
  // another process takes them.
  a.Release();
  CHECK(b.Hold().value());
  CHECK_FALSE(a.Hold().value());
  // The holder's backend ended by the server (a host that vanished, found by
  // the keepalives): the holder learns at its next check, another takes them.
  {
    auto admin = sql::Db::Open(where, false, 1000).value();
    REQUIRE(
        admin.Exec("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                   "WHERE application_name = 'trainq serve (duties)' AND pid IN "
                   "(SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND "
                   "classid = 1953588341 AND objid = hashtext(current_schema())::oid "
                   "AND granted)"));
  }
  auto lost = b.Hold();
  CHECK_FALSE(lost);
  if (!lost)
    CHECK(lost.error().message.find("the connection holding the duties lock failed") !=
          std::string::npos);
  CHECK(a.Hold().value());
}

}  // namespace
}  // namespace trainq
