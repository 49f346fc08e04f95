// A thin RAII layer over the SQLite C API: a connection and prepared statements.
// Not thread-safe: one Db per thread (SQLite's own locking covers processes).
//
// The same Db and Stmt also speak to PostgreSQL through libpq when opened on a
// postgres:// URL (queue/postgres.cc, docs/design/postgres.md): callers write
// SQLite's dialect with `?` placeholders and the layer translates it once per
// statement text. This is the store's one seam between the two dialects.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace trainq::sql {

// SQLite virtual-machine steps run by this thread's statements so far (read
// from sqlite3_stmt_status(SQLITE_STMTSTATUS_VM_STEP) whenever a statement is
// reset or finalized). A query that visits every row of a table runs a step
// per row, so tests compare this count at two history sizes to catch a read
// path that grows with history (not a timing).
std::int64_t VmSteps();

// A connection's prepared statements kept for reuse (Db::Prepare): preparing
// is most of a small query's cost (half of the dashboard's experiment page
// was sqlite3_prepare_v2). Defined in sqlite.cc.
struct StmtCache;
// The libpq side (queue/postgres.cc): a connection and a statement's state.
struct PgConn;
struct PgStmt;
struct PgStmtDeleter {
  void operator()(PgStmt* s) const;  // queue/postgres.cc
};
using PgStmtPtr = std::unique_ptr<PgStmt, PgStmtDeleter>;

// True when `location` names a PostgreSQL database (postgres:// or
// postgresql://) rather than a SQLite file.
bool IsPostgresUrl(std::string_view location);
// `location` with any password in it replaced by "***", for messages.
std::string RedactUrl(std::string_view location);

class Stmt {
 public:
  Stmt() = default;
  Stmt(sqlite3* db, sqlite3_stmt* stmt, std::shared_ptr<StmtCache> cache = nullptr)
      : db_(db), stmt_(stmt), cache_(std::move(cache)) {}
  explicit Stmt(PgStmtPtr pg);
  Stmt(Stmt&& o) noexcept
      : db_(o.db_), stmt_(o.stmt_), cache_(std::move(o.cache_)), pg_(std::move(o.pg_)) {
    o.stmt_ = nullptr;
  }
  Stmt& operator=(Stmt&& o) noexcept;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt();

  // Binds by 1-based index.
  Stmt& Bind(int i, std::int64_t v);
  Stmt& Bind(int i, int v) { return Bind(i, static_cast<std::int64_t>(v)); }
  Stmt& Bind(int i, double v);
  Stmt& Bind(int i, std::string_view v);
  Stmt& Bind(int i, const char* v) { return Bind(i, std::string_view(v)); }
  Stmt& Bind(int i, const std::string& v) { return Bind(i, std::string_view(v)); }
  Stmt& BindNull(int i);
  template <typename T>
  Stmt& Bind(int i, const std::optional<T>& v) {
    return v ? Bind(i, *v) : BindNull(i);
  }

  // Returns true while a row is available, false when done.
  Result<bool> Step();
  // Steps to completion, for statements that return no rows.
  Status Run();
  void Reset();

  std::int64_t Int(int col) const {
    return pg_ ? PgInt(col) : sqlite3_column_int64(stmt_, col);
  }
  double Double(int col) const { return pg_ ? PgDouble(col) : sqlite3_column_double(stmt_, col); }
  std::string Text(int col) const;
  bool IsNull(int col) const {
    return pg_ ? PgIsNull(col) : sqlite3_column_type(stmt_, col) == SQLITE_NULL;
  }
  std::optional<std::int64_t> OptInt(int col) const;
  std::optional<double> OptDouble(int col) const;

 private:
  void CountSteps();
  void Release();  // back to the cache, reset, or finalized
  std::int64_t PgInt(int col) const;
  double PgDouble(int col) const;
  bool PgIsNull(int col) const;

  sqlite3* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
  std::shared_ptr<StmtCache> cache_;
  PgStmtPtr pg_;  // set for a PostgreSQL statement
};

class Db {
 public:
  Db() = default;
  Db(Db&& o) noexcept;
  Db& operator=(Db&& o) noexcept;
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;
  ~Db();

  // Opens (creating when `create`) the database file and sets the busy timeout.
  // A postgres:// URL connects to that PostgreSQL database instead (which
  // must exist: `create` does not create it).
  static Result<Db> Open(const std::string& path, bool create, int busy_timeout_ms);

  bool is_postgres() const { return pg_ != nullptr; }
  // True inside BEGIN ... COMMIT.
  bool InTransaction() const;
  // Starts a write transaction: BEGIN IMMEDIATE on SQLite, BEGIN on PostgreSQL.
  Status BeginWrite();

  // A statement for `sql`: one this connection prepared before and got back
  // (reset, bindings cleared), or a new one. A Stmt returns to its
  // connection's cache when destroyed (at most kCachedStatements are kept;
  // the oldest returned goes first).
  Result<Stmt> Prepare(std::string_view sql);
  static constexpr size_t kCachedStatements = 128;
  Status Exec(std::string_view sql);  // one or more statements, no results
  // A number that changes when another connection commits a write (SQLite's
  // PRAGMA data_version; PostgreSQL's WAL position, which also moves on the
  // server's own housekeeping: a change may be spurious, never missed).
  Result<std::int64_t> DataVersion();
  std::int64_t LastInsertId() const;
  int Changes() const;
  // The file, or the URL without its password.
  const std::string& path() const { return path_; }
  sqlite3* raw() { return db_; }  // null on PostgreSQL

  // Turns the connection's last error into an Error naming the database file.
  Error LastError(std::string_view what) const;

 private:
  void Close();
  static Result<Db> OpenPostgres(const std::string& url);
  Result<Stmt> PreparePostgres(std::string_view sql);
  Status ExecPostgres(std::string_view sql);

  sqlite3* db_ = nullptr;
  std::string path_;
  std::shared_ptr<StmtCache> cache_;
  std::unique_ptr<PgConn, void (*)(PgConn*)> pg_{nullptr, nullptr};
};

// Runs `fn` inside BEGIN IMMEDIATE ... COMMIT (BEGIN on PostgreSQL); rolls
// back when fn fails.
// Called inside such a transaction already, `fn` joins it: the outer one
// commits (one commit for both) or rolls back.
template <typename Fn>
auto WithWriteTransaction(Db& db, Fn&& fn) -> decltype(fn()) {
  if (db.InTransaction()) return fn();
  if (auto st = db.BeginWrite(); !st) return std::unexpected(st.error());
  auto result = fn();
  if (!result) {
    (void)db.Exec("ROLLBACK");
    return result;
  }
  if (auto st = db.Exec("COMMIT"); !st) {
    (void)db.Exec("ROLLBACK");
    return std::unexpected(st.error());
  }
  return result;
}

}  // namespace trainq::sql
