// The PostgreSQL side of sql::Db and sql::Stmt (queue/sqlite.h), for
// queue/sqlite.cc and queue/postgres.cc only: a libpq connection, its
// prepared statements, and the translation of the store's SQL
// (docs/design/postgres.md).
#pragma once

#include <libpq-fe.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/result.h"

namespace trainq::sql {

struct PgPrepared {
  std::string name;  // the server-side prepared statement
  int params = 0;
};

struct PgConn {
  PGconn* conn = nullptr;
  std::string location;  // the URL without its password, for messages
  // By the statement's text as the caller wrote it (SQLite dialect).
  std::unordered_map<std::string, PgPrepared> prepared;
  int changes = 0;  // rows changed by the last INSERT, UPDATE or DELETE
  ~PgConn();
};

struct PgStmt {
  PgConn* conn = nullptr;
  PgPrepared prepared;
  std::vector<std::string> values;
  std::vector<bool> null;
  PGresult* result = nullptr;
  int row = -1;
  ~PgStmt();
  void Clear();  // back to unexecuted, bindings kept
};

// The SQLite-dialect `sql` in PostgreSQL's: `?` and `?NNN` become `$n` (the
// number of parameters in *params), and the constructs in the table of
// docs/design/postgres.md are rewritten. Literals, quoted names and comments
// are left alone. `used`, when given, says which of the parameters the text
// names.
std::string TranslateForPostgres(std::string_view sql, int* params,
                                 std::vector<bool>* used = nullptr);

// Binds a value (text format) or NULL to 1-based parameter `i`.
void PgBind(PgStmt& s, int i, std::string value);
void PgBindNull(PgStmt& s, int i);
Result<bool> PgStep(PgStmt& s);
const char* PgValue(const PgStmt& s, int col);  // null for NULL

}  // namespace trainq::sql
